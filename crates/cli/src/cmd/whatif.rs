//! `lockscope whatif TRACE`: predicted speedups from replaying the
//! recorded run with a lock removed or critical sections shortened.

use std::path::PathBuf;

use anyhow::Context;
use lockscope_detailed::detailed::Detailed;
use lockscope_replay::whatif;

use crate::cmd::util;

/// Predict how much faster the program would run without a contention.
///
/// Replays the recorded run (see `lockscope replay`) with one change and
/// compares the wall time with the unchanged replay: `--remove-lock`
/// drops a lock (the work inside its sections stays), `--shrink
/// SITE=PCT` makes the critical sections entered at SITE take PCT % of
/// their recorded time. In both replays the locks that remain are
/// granted in the order the threads reach them, with the waiting policy
/// of the real lock (a glibc mutex lets a running thread barge in ahead
/// of a waiter that is still waking up), not in the recorded order.
/// Every prediction comes with a range (the same prediction under
/// other waiting policies and wake-up latencies, and against the run in
/// its recorded order) and says why it is uncertain when it is; removing
/// a lock never gains more than the waiting for it on the critical path.
/// Always prints, per top lock, the predicted speedup if its hold times
/// shrank by 0, 25, 50, 75 and 100 % (a Coz-style curve: where the gain
/// saturates).
#[derive(clap::Args)]
pub struct Args {
    /// Trace recorded by `lockscope record`.
    pub trace: PathBuf,
    /// Remove this lock (symbol name or hex address); repeatable.
    #[arg(long, value_name = "LOCK")]
    pub remove_lock: Vec<String>,
    /// Critical sections entered at SITE take PCT % of their time
    /// (SITE: hex call site, function name or `function (file:line)`);
    /// repeatable.
    #[arg(long, value_name = "SITE=PCT")]
    pub shrink: Vec<String>,
    /// The critical sections entered at SITE only read: their lock
    /// becomes a reader-writer lock and they its readers (all
    /// `--readers` together form one scenario); repeatable.
    #[arg(long, value_name = "SITE")]
    pub readers: Vec<String>,
    /// LOCK becomes a reader-writer lock whose readers are its critical
    /// sections that only read (from the read/write sets of a
    /// detailed-mode trace: a program built with `lockscope cc`/`c++`;
    /// otherwise name them with --readers SITE); repeatable, one scenario
    /// per lock.
    #[arg(long, value_name = "LOCK")]
    pub rwlock: Vec<String>,
    /// PerfPlay's ULCP-free transformation: critical sections that do not
    /// truly conflict (read/write sets of a detailed-mode trace, see
    /// `lockscope ulcp`) no longer exclude each other; prints the gain per
    /// pair of code regions, ranked. Needs a trace of a program built
    /// with `lockscope cc`/`c++`.
    #[arg(long)]
    pub ulcp_free: bool,
    /// Reader-writer locks of the scenarios prefer writers (glibc's
    /// PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP: readers wait while a
    /// writer waits) instead of readers (glibc's default, under which
    /// writers can starve).
    #[arg(long)]
    pub prefer_writers: bool,
    /// Curves for this many locks (most waited for first).
    #[arg(long, default_value_t = 3)]
    pub top: usize,
    /// CPUs of the replayed machine (default: the recording machine's).
    #[arg(long, default_value_t = 0)]
    pub cpus: u32,
    /// Print JSON (schema `lockscope.whatif/1`) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Do not read binaries for symbols (names stay addresses).
    #[arg(long)]
    pub no_symbols: bool,
}

/// Runs the subcommand; returns the exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let mut shrink = Vec::new();
    for s in &args.shrink {
        let (site, pct) = s
            .rsplit_once('=')
            .with_context(|| format!("--shrink {s:?}: expected SITE=PCT"))?;
        let pct: u32 = pct
            .trim_end_matches('%')
            .parse()
            .ok()
            .filter(|p| *p <= 100)
            .with_context(|| format!("--shrink {s:?}: PCT must be a whole number from 0 to 100"))?;
        shrink.push((site.to_string(), pct));
    }
    let (p, meta) = crate::cmd::replay::program_with_meta(&args.trace)?;
    let cfg = whatif::WhatifConfig {
        cpus: args.cpus,
        remove_locks: args.remove_lock.clone(),
        shrink,
        readers: args.readers.clone(),
        rwlock: args.rwlock.clone(),
        ulcp_free: args.ulcp_free,
        prefer_writers: args.prefer_writers,
        curve_top: args.top,
        symbolize: !args.no_symbols,
    };
    let mut detailed = None;
    if args.ulcp_free || !args.rwlock.is_empty() {
        let t = util::open_trace(&args.trace).map_err(|e| {
            if args.ulcp_free {
                e
            } else {
                anyhow::anyhow!(
                    "--rwlock: {e}; or name the sections that only read with --readers SITE"
                )
            }
        })?;
        let d = Detailed::from_trace(&t, !args.no_symbols);
        if d.sections.iter().all(|s| s.is_empty()) {
            anyhow::bail!(
                "{}: {} needs a detailed-mode trace (memory accesses inside critical \
                 sections), and this one has none: build the program with `lockscope cc` (or \
                 `lockscope c++`) and record it with `lockscope record -- ./PROGRAM`{}",
                args.trace.display(),
                if args.ulcp_free {
                    "--ulcp-free"
                } else {
                    "--rwlock"
                },
                if args.ulcp_free {
                    ""
                } else {
                    " (or name the sections that only read with --readers SITE)"
                }
            );
        }
        detailed = Some(d);
    }
    let r = whatif::analyze_with(&p, &meta, &cfg, detailed.as_mut())?;
    util::print_result(&r, args.json, whatif::render_text)
}
