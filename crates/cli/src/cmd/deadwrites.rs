//! `lockscope deadwrites TRACE`: writes overwritten before any read
//! (DeadSpy), by pair of dead and killing contexts.

use std::path::PathBuf;

use lockscope_detailed::deadwrites;
use lockscope_detailed::detailed::Detailed;

use crate::cmd::util;

/// Writes overwritten before anything read them (dead writes).
///
/// Per byte: a write followed by another write to the same byte, by the
/// same or another thread, with no read in between. Reported by pair of
/// (dead, killing) code contexts, with bytes, counts and the fraction of
/// all bytes written that were dead. Needs a trace of a program built with
/// `lockscope cc` and recorded with `lockscope record --all-accesses`
/// (`--outside-frames N` adds call paths).
#[derive(clap::Args)]
pub struct Args {
    /// Trace recorded from a program built with `lockscope cc`/`c++`
    /// with `lockscope record --all-accesses`.
    pub trace: PathBuf,
    /// Print JSON (schema `lockscope.deadwrites/1`) instead of text.
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
    let r = deadwrites::analyze(&t, &mut d);
    util::print_result(&r, args.json, deadwrites::render_text)
}
