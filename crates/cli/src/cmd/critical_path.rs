//! `lockscope critical-path TRACE`: the chain of work that decided the
//! replayed run's wall time, and which locks lie on it.

use std::path::PathBuf;

use lockscope_replay::critical;

use crate::cmd::util;

/// Show the critical path of the run and the locks on it.
///
/// Replays the run (see `lockscope replay`) and walks back from the
/// thread that ends last through the happens-before edges (lock release
/// to next acquisition, signal to wake, last barrier arrival to
/// departures, create/join, futex wake to wait return). Prints its
/// length, the threads on it, and per lock the time held on it against
/// the time threads waited for it: a lock that makes threads wait but is
/// off the critical path is marked so (shortening it will not shorten the
/// run).
#[derive(clap::Args)]
pub struct Args {
    /// Trace recorded by `lockscope record`.
    pub trace: PathBuf,
    /// CPUs of the replayed machine (default: the recording machine's).
    #[arg(long, default_value_t = 0)]
    pub cpus: u32,
    /// Print JSON (schema `lockscope.critical_path/1`) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Do not read binaries for symbols (names stay addresses).
    #[arg(long)]
    pub no_symbols: bool,
}

/// Runs the subcommand; returns the exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let (p, meta) = crate::cmd::replay::program_with_meta(&args.trace)?;
    let r = critical::analyze(&p, &meta, args.cpus, !args.no_symbols);
    util::print_result(&r, args.json, critical::render_text)
}
