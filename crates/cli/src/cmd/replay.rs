//! `lockscope replay TRACE`: deterministic discrete-event replay of a
//! recorded run (PerfPlay §5).

use std::path::PathBuf;

use anyhow::Context;
use lockscope_replay::replay;
use lockscope_trace::input;

use crate::cmd::util;

/// Replay a recorded run and compare its wall time with the recording.
///
/// Compute segments take their recorded, overhead-corrected durations;
/// every lock is granted in the recorded order (ELSC); condition,
/// barrier, semaphore, join and futex dependencies are honoured; a model
/// of the machine's CPUs decides who runs when more threads are runnable
/// than CPUs. Prints recorded vs replayed wall time and per-thread end
/// times, and the prediction without the recorder: its measured cost per
/// event, and the time threads were preempted (runnable with no CPU,
/// measured from their run-queue delay), left out. Identical results
/// run after run.
#[derive(clap::Args)]
pub struct Args {
    /// Trace recorded by `lockscope record`.
    pub trace: PathBuf,
    /// CPUs of the replayed machine (default: the recording machine's).
    #[arg(long, default_value_t = 0)]
    pub cpus: u32,
    /// Print JSON (schema `lockscope.replay/1`) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The index of a trace (warning once when it was cut short) and its
/// replayable program, for the commands that need both.
pub fn program_with_meta(
    trace: &std::path::Path,
) -> anyhow::Result<(replay::Program, input::Meta)> {
    let meta = util::index_trace(trace)?;
    let p = replay::build(trace, &meta)
        .with_context(|| format!("cannot replay {}", trace.display()))?;
    Ok((p, meta))
}

/// Runs the subcommand; returns the exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let meta = util::index_trace(&args.trace)?;
    // Built and replayed in one go: the simulations start before the
    // build's last pass ends (`build_and_report`).
    let (_, r) = replay::build_and_report(&args.trace, &meta, args.cpus)
        .with_context(|| format!("cannot replay {}", args.trace.display()))?;
    util::print_result(&r, args.json, replay::render_text)
}
