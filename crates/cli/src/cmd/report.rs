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
    /// Trace file written by `lockscope record` (default: the newest
    /// `*.lstrace` in the current directory; its name is printed).
    trace: Option<PathBuf>,
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
    /// Print call paths as indented stacks: the N paths with most wait
    /// under each lock, and the holders' paths of the N largest blame rows
    /// (default N: 3). Contended acquisitions carry a path; record with
    /// `--stacks all` for every acquisition.
    #[arg(long, num_args = 0..=1, default_missing_value = "3", value_name = "N")]
    paths: Option<usize>,
    /// Show each lock's per-thread rows in the text output.
    #[arg(long)]
    per_thread: bool,
    /// Text as wide as its content (every column, names in full) instead
    /// of fitting the terminal ($COLUMNS, else the terminal's width; output
    /// that is not a terminal is never narrowed).
    #[arg(long)]
    wide: bool,
    /// Do not subtract the recorder's measured overhead.
    #[arg(long)]
    no_overhead_correction: bool,
    /// Which frame names a site: `user` (default), the innermost frame of
    /// the program's own code, skipping libc, libstdc++/libc++ headers,
    /// Rust std/core/alloc and lockscope (see docs/report.md); `all`, the
    /// innermost frame whatever it is, and call paths in full.
    #[arg(long, default_value = "user", value_parser = ["user", "all"])]
    frames: String,
    /// Do not read binaries for symbols (addresses stay module+offset).
    #[arg(long)]
    no_symbols: bool,
    /// Never ask debuginfod servers for missing debug files (they are
    /// asked only when DEBUGINFOD_URLS is set; LOCKSCOPE_DEBUGINFOD=0 does
    /// the same).
    #[arg(long)]
    no_debuginfod: bool,
    /// Never draw a progress bar (it is drawn on a terminal for large traces).
    #[arg(long)]
    no_progress: bool,
    /// No recommendations (text section and JSON `recommendations`, left empty).
    #[arg(long)]
    no_advice: bool,
}

/// Parses `300ns`, `1.5us`, `2ms`, `1s` or a plain number of ns.
///
/// Hand-written on purpose, not humantime (the crate one would reach for):
/// humantime rejects fractions (`1.5us`) and bare numbers, both of which
/// this option has always accepted and its tests check.
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

/// The most recently modified `*.lstrace` file in `dir` (ties broken by
/// name), and how many there are.
fn newest_trace(dir: &std::path::Path) -> anyhow::Result<(PathBuf, usize)> {
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = Vec::new();
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {} to find a trace", dir.display()))?;
    for e in entries.flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "lstrace") && p.is_file() {
            let t = e
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH);
            found.push((t, p.strip_prefix(dir).map_or(p.clone(), PathBuf::from)));
        }
    }
    let n = found.len();
    let newest = found.into_iter().max().map(|(_, p)| p).with_context(|| {
        "no trace given and no *.lstrace file in the current directory \
         (record one with `lockscope record -- PROGRAM`)"
    })?;
    Ok((newest, n))
}

/// The width to fit text into: `$COLUMNS` when set to a number (at least
/// 40 columns are used), else the width of the terminal on stdout, else
/// none (a pipe or file gets the wide layout: scripts keep whole names).
fn text_width() -> Option<usize> {
    if let Some(n) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
    {
        return Some(n.max(40));
    }
    let out = std::io::stdout();
    if !out.is_terminal() {
        return None;
    }
    terminal_size::terminal_size_of(&out).map(|(w, _)| usize::from(w.0).max(40))
}

/// Runs the subcommand; returns the exit code.
pub fn run(a: Args) -> anyhow::Result<i32> {
    if a.no_debuginfod {
        lockscope_analysis::debuginfod::set_enabled(false);
    }
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
        frames_all: a.frames == "all",
    };
    let trace = match &a.trace {
        Some(t) => t.clone(),
        None => {
            let (t, n) = newest_trace(std::path::Path::new("."))?;
            // Say which: `record` numbers its outputs (lockscope-2.lstrace)
            // rather than overwrite, so "the" trace is ambiguous.
            eprintln!(
                "lockscope: reading {} (the newest of {n} trace{} here)",
                t.display(),
                if n == 1 { "" } else { "s" }
            );
            t
        }
    };
    crate::cmd::util::check_trace_file(&trace)?;
    let size = std::fs::metadata(&trace).map(|m| m.len()).unwrap_or(0);
    let show = !a.no_progress && std::io::stderr().is_terminal() && size > (64 << 20);
    // indicatif draws (and rate-limits) the bar on stderr; one bar per
    // phase: indexing, then analysing.
    let bar = show.then(|| {
        let b = indicatif::ProgressBar::new(size.max(1));
        b.set_style(
            indicatif::ProgressStyle::with_template("{msg:>9} [{bar:30}] {percent:>3}%")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("#>-"),
        );
        b
    });
    let mut phase_seen = u8::MAX;
    let mut progress = |done: u64, total: u64, phase: u8| {
        let Some(b) = &bar else { return };
        if phase != phase_seen {
            phase_seen = phase;
            b.set_message(if phase == 0 { "indexing" } else { "analysing" });
            b.set_length(total.max(1));
        }
        b.set_position(done.min(total));
        if phase == 1 && done >= total {
            b.finish_and_clear();
        }
    };
    let mut report = lockscope_analysis::analyze(&trace, &cfg, &mut progress)
        .with_context(|| format!("cannot report on {}", trace.display()))?;
    // The warning every command gives (the text report says it too).
    super::util::warn_cut_short_report(&trace, &report);
    if a.no_advice {
        report.recommendations.clear();
    }
    let width = if a.wide { None } else { text_width() };
    let out = if a.json {
        // Hand-written spinlocks beside the pthread locks: the
        // `lockscope spin --json` document under `spin`, after the
        // report's own fields. Left out (not null) when the trace has no
        // atomic read-modify-write or is too large to search, so that
        // pthread-only reports keep their exact form.
        #[derive(serde::Serialize)]
        struct WithSpin<'a, R> {
            #[serde(flatten)]
            report: &'a R,
            #[serde(skip_serializing_if = "Option::is_none")]
            spin: Option<lockscope_analysis::spin::SpinReport>,
        }
        // Only a trace with atomics can have spinlocks: a pthread-only
        // one is not loaded (a 95 MB trace takes ~1 GB in memory).
        let spin = (report.detail_events > 0)
            .then(|| crate::cmd::util::open_small_trace(&trace, report.events))
            .flatten()
            .and_then(|t| super::spin::report_json(&t, !a.no_symbols));
        let v = WithSpin {
            report: &report,
            spin,
        };
        let mut s = serde_json::to_string_pretty(&v)?;
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
                paths: a.paths.unwrap_or(0),
                width,
            },
        )
    };
    // Hand-written spinlocks beside the pthread locks (text only).
    let out = if text {
        // The spinlock, barrier and dead-write sections analyse the whole
        // trace in memory: it is read once for all of them, and only when
        // small (detailed-mode and imported traces are; a long
        // pthread-only recording is skipped). They read only detailed-mode
        // and imported events: a trace without any is not loaded at all
        // (a 95 MB pthread trace took ~1 GB and ~2 s to load for nothing).
        let whole = (report.detail_events > 0)
            .then(|| crate::cmd::util::open_small_trace(&trace, report.events))
            .flatten();
        let extra = whole.as_ref().map_or_else(String::new, |t| {
            // One detailed view for the three sections: building it is
            // most of their cost (5 s and 2.4 GB for PARSEC
            // fluidanimate's 168 MB trace), and a C++ program's trace
            // with atomics (reference counts) built it twice.
            if !lockscope_analysis::spin::has_candidates(t) && !super::util::is_detailed(t) {
                return String::new();
            }
            let mut d = lockscope_analysis::detailed::Detailed::from_trace(t, !a.no_symbols);
            super::spin::report_section(&trace, t, &mut d)
                // Barriers and dead writes of a detailed trace.
                + &super::barriers::report_section(&trace, t, &mut d)
        })
            // Who made the GPU wait, and what the CPU waited for.
            + &super::gpu::report_section(&trace, &report, !a.no_symbols);
        match width {
            Some(w) => out + &render::fit_lines(&extra, w),
            None => out + &extra,
        }
    } else {
        out
    };
    // What fixing the top locks would gain, from the replay (text only).
    let out = if text {
        let gain = gain_section(&trace, !a.no_symbols);
        match width {
            Some(w) => out + &render::fit_lines(&gain, w),
            None => out + &gain,
        }
    } else {
        out
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(0)
}

/// Traces larger than this get a note instead of the what-if lines (the
/// replay runs once per scenario, seven times: on a large trace that
/// would be most of the report's time). Its memory grows ~11.5 bytes per
/// event (a 64 MB, 16M-event trace took 192 MiB): 32 MiB of trace at 3.2
/// bytes per event or more (lock events take 4-5.5) keeps the report
/// under 128 MiB. A bound on the event count would hold for any
/// encoding, but needs the index before the size check.
const GAIN_MAX_BYTES: u64 = 32 << 20;

/// Locks given a "what it would gain" line.
const GAIN_TOP: usize = 3;

/// The "what it would gain" section appended to the text report.
fn gain_section(trace: &std::path::Path, symbolize: bool) -> String {
    let size = std::fs::metadata(trace).map(|m| m.len()).unwrap_or(0);
    // The file name only: the command is meant to be run where the user
    // ran this one, and the output stays the same wherever the trace is.
    let shown = trace
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| trace.display().to_string());
    if size > GAIN_MAX_BYTES {
        return format!(
            "\nWhat it would gain: skipped (trace over {} MiB); run `lockscope whatif {shown}`\n",
            GAIN_MAX_BYTES >> 20
        );
    }
    let Ok(p) = super::replay::program(trace) else {
        return String::new();
    };
    let Ok(meta) = lockscope_analysis::input::index(trace, &mut |_, _| {}) else {
        return String::new();
    };
    let lines = lockscope_analysis::whatif::gain_lines(&p, &meta, GAIN_TOP, &shown, symbolize);
    if lines.is_empty() {
        return String::new();
    }
    let mut s = String::from("\nWhat it would gain (predicted by replaying the trace)\n");
    for l in lines {
        s.push_str(&l);
        s.push('\n');
    }
    s
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
