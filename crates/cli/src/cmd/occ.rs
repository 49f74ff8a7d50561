//! `lockscope occ TRACE`: optimistic-concurrency potential per critical
//! section (PinCS §2.3), printed like the paper's Fig. 1.

use std::path::PathBuf;

use lockscope_detailed::detailed::Detailed;
use lockscope_detailed::occ;
use lockscope_format::Record;

use crate::cmd::util;

/// What optimistic concurrency could gain (PinCS §2.3, detailed mode).
///
/// Per critical section: read and write sets, conflict probability, waits;
/// per thread: frac_wait, frac_cs, OCC speedup; for the program: maximum
/// OCC efficiency and best-case speedup, printed like PinCS Fig. 1.
#[derive(clap::Args)]
pub struct Args {
    /// Trace recorded from a program built with `lockscope cc`/`c++`.
    pub trace: PathBuf,
    /// Print JSON (schema `lockscope.occ/1`) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Do not read binaries for symbols (names stay addresses).
    #[arg(long)]
    pub no_symbols: bool,
}

/// Runs the subcommand; returns the exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let t = util::open_trace(&args.trace)?;
    // PinCS §2.2: the recorder's own cost per acquire/release, if measured.
    let overhead = t.records.iter().find_map(|r| match r {
        Record::Overhead(o) => Some((o.acquire_ns, o.release_ns)),
        _ => None,
    });
    let mut d = Detailed::from_trace(&t, !args.no_symbols);
    drop(t);
    let r = occ::analyze(&mut d, overhead);
    util::print_result(&r, args.json, occ::render_text)
}
