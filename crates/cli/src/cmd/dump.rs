//! `lockscope dump`: print a trace's records and events as text, one per
//! line, for inspection and for scripts (like `perf script`).

use std::io::Write;

use anyhow::Context;
use lockscope_format::{Op, Record, TraceReader};

/// Print the records and events of a trace as text.
///
/// Each event line is: time (ns since trace start), trace thread id, op,
/// phase flags, object address, call site, and the op's arguments. Table
/// records (processes, threads, maps, call paths, losses) are printed as
/// they occur. Use it to check what was recorded before trusting a report.
#[derive(clap::Args)]
pub struct Args {
    /// The trace file.
    #[arg(default_value = "lockscope.lstrace")]
    trace: std::path::PathBuf,
    /// Only events of this trace thread id (see the `thread` lines).
    #[arg(long)]
    thread: Option<u32>,
    /// Only events with this op name (e.g. MutexLock, FutexWait); repeatable.
    #[arg(long = "op")]
    ops: Vec<String>,
    /// Stop after this many event lines.
    #[arg(long)]
    limit: Option<u64>,
    /// Print only the table records (no events), then a count of events per op.
    #[arg(long)]
    summary: bool,
}

/// Runs the subcommand; returns the exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    crate::cmd::util::check_trace_file(&args.trace)?;
    let file = std::fs::File::open(&args.trace)
        .with_context(|| format!("cannot open {}", args.trace.display()))?;
    let mut r = TraceReader::new(std::io::BufReader::new(file))
        .with_context(|| format!("cannot read {}", args.trace.display()))?;
    if crate::cmd::util::skip_corrupt() {
        r = r
            .skipping_corrupt()
            .with_context(|| format!("cannot read {}", args.trace.display()))?;
    }
    for op in &args.ops {
        if !(0..=255u8).any(|v| Op::from_u8(v).is_some_and(|o| o.name() == op)) {
            let names: Vec<&str> = (0..=255u8).filter_map(Op::from_u8).map(Op::name).collect();
            anyhow::bail!("unknown op `{op}`; known ops: {}", names.join(", "));
        }
    }
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    let h = r.header().clone();
    writeln!(
        out,
        "header command={:?} host={} cpus={} tsc_hz={:.0} version={} extra={:?} \
         sleeping_wake_ns={} monotonic_ns_at_start={} unix_ns_at_start={}",
        h.command,
        h.host,
        h.cpus,
        h.tsc_hz,
        h.recorder_version,
        h.extra,
        h.sleeping_wake_ns,
        // Time 0 on the machine's clocks: event times plus these are
        // CLOCK_MONOTONIC and wall-clock instants, to line a trace up
        // with the program's own logs.
        h.monotonic_ns_at_start,
        h.unix_ns_at_start
    )?;
    let mut printed = 0u64;
    let mut per_op: std::collections::BTreeMap<&'static str, u64> = Default::default();
    let limit = args.limit.unwrap_or(u64::MAX);
    loop {
        let rec = match r.next() {
            Ok(Some(rec)) => rec,
            Ok(None) => {
                out.flush()?;
                crate::cmd::util::warn_skipped(&args.trace, r.skipped());
                break;
            }
            // Cut short: what was read is printed, and the warning every
            // command gives (util::warn_cut_short).
            Err(e @ lockscope_format::FormatError::Truncated { .. }) => {
                out.flush()?;
                crate::cmd::util::warn_skipped(&args.trace, r.skipped());
                crate::cmd::util::warn_cut_short(&args.trace, &e);
                break;
            }
            Err(e) => {
                return Err(e).with_context(|| format!("while reading {}", args.trace.display()))
            }
        };
        match rec {
            Record::Events(chunk) => {
                if args.thread.is_some_and(|t| t != chunk.thread) {
                    continue;
                }
                let mut err = Ok(());
                chunk.for_each(|e| {
                    let name = e.op().map_or("?", Op::name);
                    if !args.ops.is_empty() && !args.ops.iter().any(|o| o == name) {
                        return;
                    }
                    *per_op.entry(name).or_default() += 1;
                    if args.summary || printed >= limit || err.is_err() {
                        return;
                    }
                    printed += 1;
                    err = writeln!(
                        out,
                        "{:>15} t{:<4} {:<16} flags={:#04x} addr={:#x} site={:#x} stack={} arg={} arg2={}",
                        e.time, chunk.thread, name, e.flags, e.addr, e.site, e.stack, e.arg, e.arg2
                    );
                })?;
                err?;
            }
            Record::Stack(s) if args.summary => {
                let _ = s;
            }
            other => writeln!(out, "{other:?}")?,
        }
    }
    if args.summary {
        for (op, n) in &per_op {
            writeln!(out, "events {op}: {n}")?;
        }
    }
    if r.footer().is_none() {
        writeln!(
            out,
            "note: the trace has no footer: the recording was cut short"
        )?;
    }
    out.flush()?;
    Ok(0)
}
