//! `lockscope lockset TRACE`: which lock protects which data, and shared
//! data written with no common lock (Eraser).

use std::path::PathBuf;

use lockscope_detailed::detailed::Detailed;
use lockscope_detailed::lockset;

use crate::cmd::util;

/// Which lock protects which data; shared data with no common lock.
///
/// The Eraser state machine per memory location. Needs a trace of a program
/// built with `lockscope cc` and recorded with `lockscope record --all-accesses`
/// to see accesses outside critical sections.
#[derive(clap::Args)]
pub struct Args {
    /// Trace recorded from a program built with `lockscope cc`/`c++`
    /// (with `lockscope record --all-accesses` to see unprotected accesses).
    pub trace: PathBuf,
    /// Print JSON (schema `lockscope.lockset/1`) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Do not read binaries for symbols (names stay addresses).
    #[arg(long)]
    pub no_symbols: bool,
}

/// Runs the subcommand; returns the exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let t = util::open_trace(&args.trace)?;
    let r = lockset::analyze(&mut Detailed::from_trace(&t, !args.no_symbols));
    util::print_result(&r, args.json, lockset::render_text)
}
