//! `lockscope barriers TRACE`: barrier waiting blamed on the last
//! arriver, and redundant barrier instances (no dependence across them).

use std::path::PathBuf;

use lockscope_detailed::barriers;
use lockscope_detailed::detailed::Detailed;

use crate::cmd::util;

/// Barrier imbalance and redundant barriers.
///
/// Per pthread barrier and per instance (round): each thread's wait,
/// blamed on the last arriver; whether the instance was redundant (no
/// thread wrote before it anything another reads or writes after it, nor
/// read anything another writes after it), with the fraction of redundant
/// instances per calling context of the barrier call. Redundancy needs a
/// trace of a program built with `lockscope cc` and recorded with
/// `lockscope record --all-accesses`.
#[derive(clap::Args)]
pub struct Args {
    /// Trace recorded from a program built with `lockscope cc`/`c++`
    /// with `lockscope record --all-accesses`.
    pub trace: PathBuf,
    /// Print JSON (schema `lockscope.barriers/1`) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Do not read binaries for symbols (names stay addresses).
    #[arg(long)]
    pub no_symbols: bool,
}

/// Runs the subcommand; returns the exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let t = util::open_trace(&args.trace)?;
    let mut d = Detailed::from_trace(&t, !args.no_symbols);
    let r = barriers::analyze(&t, &mut d);
    util::print_result(&r, args.json, barriers::render_text)
}
