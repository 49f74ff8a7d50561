//! `lockscope ulcp TRACE`: unnecessary lock contention pairs (PerfPlay
//! Alg. 1) of a detailed-mode trace.

use std::path::PathBuf;

use lockscope_detailed::detailed::Detailed;
use lockscope_detailed::ulcp;

use crate::cmd::util;

/// Classify contended pairs of critical sections (detailed mode).
///
/// PerfPlay Alg. 1 on every pair of consecutive critical sections of one
/// lock run by different threads: null_lock, read_read, disjoint_write,
/// benign (identical values written) or conflict, per lock and per pair of
/// code sites. Needs a trace of a program built with `lockscope cc`.
#[derive(clap::Args)]
pub struct Args {
    /// Trace recorded from a program built with `lockscope cc`/`c++`.
    pub trace: PathBuf,
    /// Print JSON (schema `lockscope.ulcp/1`) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Do not read binaries for symbols (names stay addresses).
    #[arg(long)]
    pub no_symbols: bool,
}

/// Runs the subcommand; returns the exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let t = util::open_trace(&args.trace)?;
    let r = ulcp::analyze(&mut Detailed::from_trace(&t, !args.no_symbols));
    util::print_result(&r, args.json, ulcp::render_text)
}
