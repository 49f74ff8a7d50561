//! `lockscope report`: which locks make threads wait, where, for how long,
//! and whose fault it is. Glue only: the analysis is
//! `lockscope_analysis::analyze`.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Context;
use lockscope_analysis::render::{self, CsvTable, TextOptions};
use lockscope_analysis::{ReportConfig, SortKey};

/// Arguments of `lockscope report`.
#[derive(clap::Args)]
#[command(about = "Report lock contention from a recorded trace")]
pub struct Args {
    /// Trace file written by `lockscope record`.
    #[arg(default_value = "lockscope.lstrace")]
    trace: PathBuf,
    /// Print JSON (schema lockscope.report/1) instead of tables.
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Print one table as CSV: locks, sites, threads or blame.
    #[arg(long, num_args = 0..=1, default_missing_value = "locks", value_name = "TABLE")]
    csv: Option<String>,
    /// Order of the lock table: wait, hold, acquisitions, contended,
    /// owner-changes, max-wait, name.
    #[arg(long, default_value = "wait")]
    sort: String,
    /// Show at most N locks and blame rows (text default 20; JSON and
    /// CSV default: all).
    #[arg(long, value_name = "N")]
    top: Option<usize>,
    /// Hide locks whose total wait is below this (e.g. 500us, 2ms, 1s, 300ns).
    #[arg(long, value_name = "DURATION")]
    min_wait: Option<String>,
    /// Only locks whose address or name contains this.
    #[arg(long, value_name = "ADDR|NAME")]
    lock: Option<String>,
    /// Only threads with this tid, or whose name contains this.
    #[arg(long, value_name = "TID|NAME")]
    thread: Option<String>,
    /// Sites shown under each lock in the text output.
    #[arg(long, default_value_t = 3, value_name = "N")]
    sites: usize,
    /// Show each lock's per-thread rows in the text output.
    #[arg(long)]
    per_thread: bool,
    /// Do not subtract the recorder's measured overhead.
    #[arg(long)]
    no_overhead_correction: bool,
    /// Do not read binaries for symbols (addresses stay module+offset).
    #[arg(long)]
    no_symbols: bool,
    /// Never draw a progress bar (it is drawn on a terminal for large traces).
    #[arg(long)]
    no_progress: bool,
    /// No recommendations (text section and JSON `recommendations`, left empty).
    #[arg(long)]
    no_advice: bool,
}

/// Parses `300ns`, `1.5us`, `2ms`, `1s` or a plain number of ns.
fn parse_duration(s: &str) -> anyhow::Result<u64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num
        .parse()
        .with_context(|| format!("--min-wait {s:?}: expected a number with a unit, like 2ms"))?;
    let mul = match unit.trim() {
        "" | "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        u => anyhow::bail!("--min-wait {s:?}: unknown unit {u:?} (use ns, us, ms or s)"),
    };
    Ok((v * mul).round() as u64)
}

/// Runs the subcommand; returns the exit code.
pub fn run(a: Args) -> anyhow::Result<i32> {
    let sort = SortKey::parse(&a.sort).with_context(|| {
        format!(
            "--sort {:?}: expected one of {}",
            a.sort,
            SortKey::NAMES.join(", ")
        )
    })?;
    let csv = match &a.csv {
        Some(t) => Some(
            CsvTable::parse(t)
                .with_context(|| format!("--csv {t:?}: expected locks, sites, threads or blame"))?,
        ),
        None => None,
    };
    let text = !a.json && csv.is_none();
    let cfg = ReportConfig {
        symbolize: !a.no_symbols,
        correct_overhead: !a.no_overhead_correction,
        sort,
        top: a.top.or(if text { Some(20) } else { None }),
        min_wait_ns: a
            .min_wait
            .as_deref()
            .map(parse_duration)
            .transpose()?
            .unwrap_or(0),
        lock_filter: a.lock.clone(),
        thread_filter: a.thread.clone(),
    };
    if !a.trace.exists() {
        anyhow::bail!(
            "{}: no such file (record one with `lockscope record -- PROGRAM`)",
            a.trace.display()
        );
    }
    let size = std::fs::metadata(&a.trace).map(|m| m.len()).unwrap_or(0);
    let show = !a.no_progress && std::io::stderr().is_terminal() && size > (64 << 20);
    let mut last_draw = std::time::Instant::now();
    let mut progress = |done: u64, total: u64, phase: u8| {
        if !show || (last_draw.elapsed().as_millis() < 100 && done < total) {
            return;
        }
        last_draw = std::time::Instant::now();
        let frac = if total == 0 {
            1.0
        } else {
            done as f64 / total as f64
        };
        let w = 30usize;
        let filled = ((frac * w as f64) as usize).min(w);
        let what = if phase == 0 { "indexing" } else { "analysing" };
        eprint!(
            "\r{what:>9} [{}{}] {:5.1}%",
            "#".repeat(filled),
            " ".repeat(w - filled),
            frac * 100.0
        );
        if phase == 1 && done >= total {
            eprint!("\r{}\r", " ".repeat(w + 20));
        }
    };
    let mut report = lockscope_analysis::analyze(&a.trace, &cfg, &mut progress)
        .with_context(|| format!("cannot report on {}", a.trace.display()))?;
    if a.no_advice {
        report.recommendations.clear();
    }
    let out = if a.json {
        let mut s = serde_json::to_string_pretty(&report)?;
        s.push('\n');
        s
    } else if let Some(t) = csv {
        render::csv(&report, t)
    } else {
        render::text(
            &report,
            &TextOptions {
                sites_per_lock: a.sites,
                lock_threads: a.per_thread,
                advice: !a.no_advice,
            },
        )
    };
    // Hand-written spinlocks beside the pthread locks (text only; issue 12).
    let out = if text {
        out + &super::spin::report_section(&a.trace, !a.no_symbols)
    } else {
        out
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::parse_duration;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("300").unwrap(), 300);
        assert_eq!(parse_duration("300ns").unwrap(), 300);
        assert_eq!(parse_duration("1.5us").unwrap(), 1500);
        assert_eq!(parse_duration("2ms").unwrap(), 2_000_000);
        assert_eq!(parse_duration("1s").unwrap(), 1_000_000_000);
        assert!(parse_duration("2 parsecs").is_err());
        assert!(parse_duration("ms").is_err());
    }
}
