//! `lockscope report`: which locks make threads wait, where, for how long,
//! and whose fault it is. Glue only: the whole report is built by
//! `lockscope_analysis::full::build` and printed by its printers.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Context;
use lockscope_analysis::full;
use lockscope_report::render::{self, CsvTable, TextOptions};
use lockscope_report::ReportConfig;
use lockscope_report::SortKey;

/// Arguments of `lockscope report`.
#[derive(clap::Args)]
#[command(about = "Report lock contention from a recorded trace")]
pub struct Args {
    /// Trace file written by `lockscope record` (default: the newest
    /// `*.lstrace` in the current directory; its name is printed).
    /// Several traces, or a directory of them, give one report over all:
    /// each lock (by name and first call site) with its wait summed over
    /// the traces and its spread between them.
    traces: Vec<PathBuf>,
    /// With several traces: one table per value of this label
    /// (`record --label KEY=VALUE`; `host` and `command` are always there).
    #[arg(long, value_name = "KEY")]
    group_by: Option<String>,
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
pub fn run(mut a: Args) -> anyhow::Result<i32> {
    if a.no_debuginfod {
        lockscope_debuginfod::set_enabled(false);
    }
    if a.traces.len() > 1 || a.group_by.is_some() || a.traces.iter().any(|t| t.is_dir()) {
        return many(&a);
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
            .map(|s| crate::cmd::util::parse_duration("--min-wait", s))
            .transpose()?
            .unwrap_or(0),
        lock_filter: a.lock.clone(),
        thread_filter: a.thread.clone(),
        frames_all: a.frames == "all",
        skip_corrupt: super::util::skip_corrupt(),
    };
    let trace = match a.traces.pop() {
        Some(t) => t,
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
    // The in-memory sections (spinlocks, barrier instances, dead writes)
    // read the whole trace, once, and only when it is small: detailed-mode
    // and imported traces are; the library asks only when the trace has
    // such events at all.
    let mut open_whole = |events| crate::cmd::util::open_small_trace(&trace, events);
    let width = if a.wide { None } else { text_width() };
    let out = if let Some(t) = csv {
        // One table of the lock report: the other sections have no CSV
        // form (docs/report.md), so they are not computed.
        let mut report = lockscope_report::analyze(&trace, &cfg, &mut progress)
            .with_context(|| format!("cannot report on {}", trace.display()))?;
        // The warning every command gives (the text report says it too).
        super::util::warn_cut_short_report(&trace, &report);
        if a.no_advice {
            report.recommendations.clear();
        }
        render::csv(&report, t)
    } else {
        let mut full =
            lockscope_analysis::full::build(&trace, &cfg, &mut progress, &mut open_whole)
                .with_context(|| format!("cannot report on {}", trace.display()))?;
        super::util::warn_cut_short_report(&trace, &full.report);
        if a.no_advice {
            full.report.recommendations.clear();
        }
        if a.json {
            let mut s = serde_json::to_string_pretty(&full)?;
            s.push('\n');
            s
        } else {
            let out = render::text(
                &full.report,
                &TextOptions {
                    sites_per_lock: a.sites,
                    lock_threads: a.per_thread,
                    advice: !a.no_advice,
                    paths: a.paths.unwrap_or(0),
                    width,
                },
            );
            let extra = full::sections_text(&full.sections, &trace);
            let gain = full::gains_text(&full.sections, &trace);
            match width {
                Some(w) => {
                    out + &lockscope_text::text::fit_lines(&extra, w)
                        + &lockscope_text::text::fit_lines(&gain, w)
                }
                None => out + &extra + &gain,
            }
        }
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(0)
}

/// `report A B C ...` (or a directory, or `--group-by`): one report over
/// the traces, each analysed in turn as `report --json` would (the
/// totals are the sums of theirs).
fn many(a: &Args) -> anyhow::Result<i32> {
    if a.csv.is_some() {
        anyhow::bail!("--csv reports one trace; over several traces use --json (or `lockscope export --format parquet`)");
    }
    let mut traces = crate::cmd::util::expand_traces(&a.traces)?;
    if traces.is_empty() {
        traces.push(newest_trace(std::path::Path::new("."))?.0);
    }
    let mut reports = Vec::with_capacity(traces.len());
    for t in &traces {
        let r = crate::cmd::export_formats::report(t)?;
        reports.push((t.display().to_string(), r));
    }
    let f = lockscope_report::fleet::aggregate(&reports, a.group_by.as_deref());
    let out = if a.json {
        let mut s = serde_json::to_string_pretty(&f)?;
        s.push('\n');
        s
    } else {
        let t = lockscope_report::fleet::text(&f, a.top.unwrap_or(20));
        match text_width() {
            Some(w) if !a.wide => lockscope_text::text::fit_lines(&t, w),
            _ => t,
        }
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(0)
}
