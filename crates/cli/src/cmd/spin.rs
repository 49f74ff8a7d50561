//! `lockscope spin TRACE`: hand-written spinlocks found from the atomics
//! and memory accesses of a detailed-mode or imported hardware trace.

use std::path::PathBuf;

use lockscope_detailed::spin;

use crate::cmd::util;

/// Spinlocks nobody named: find hand-written locks from their atomics.
///
/// A location written by atomic read-modify-writes that only ever holds two
/// values, and is set free only by the thread that set it busy, is a
/// spinlock. Reports acquisitions, failed attempts, waiting and holding
/// times per lock, thread and site, what each lock protects, and warnings.
/// Works on traces of programs built with `lockscope cc`/`c++` (record with
/// `lockscope record --all-accesses` to see what the locks protect) and on hardware
/// traces brought in with `lockscope import`.
#[derive(clap::Args)]
pub struct Args {
    /// Detailed-mode or imported trace.
    pub trace: PathBuf,
    /// Print JSON (schema `lockscope.spin/1`) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Do not read binaries for symbols (names stay addresses).
    #[arg(long)]
    pub no_symbols: bool,
    /// Also write a copy of the trace in which every spinlock acquisition
    /// and release is a pthread-spinlock event, so that `report` (as
    /// `spin` locks), the replay and every other lock analysis see them.
    #[arg(long, value_name = "OUT")]
    pub annotate: Option<PathBuf>,
}

/// Runs the subcommand; returns the exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let t = util::open_trace(&args.trace)?;
    let r = spin::analyze(&t, !args.no_symbols);
    if let Some(out) = &args.annotate {
        let a = spin::annotate(&t, &r);
        let mut f = super::output::Output::create(out, Some(&args.trace))?;
        lockscope_hwtrace::write_trace(&a, &mut f)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", out.display()))?;
        f.commit()?;
    }
    util::print_result(&r, args.json, spin::render_text)
}
