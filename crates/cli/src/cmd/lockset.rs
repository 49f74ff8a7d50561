//! `lockscope lockset TRACE`: which lock protects which data, and shared
//! data written with no common lock (Eraser).

use std::io::Write;
use std::path::PathBuf;

use lockscope_analysis::{detailed::Detailed, lockset};

/// Which lock protects which data; shared data with no common lock.
///
/// The Eraser state machine per memory location. Needs a trace of a program
/// built with `lockscope cc` and recorded with LOCKSCOPE_ALL_ACCESSES=1 to
/// see accesses outside critical sections.
#[derive(clap::Args)]
pub struct Args {
    /// Trace recorded from a program built with `lockscope cc`/`c++`
    /// (with `LOCKSCOPE_ALL_ACCESSES=1` to see unprotected accesses).
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
    // Flattened into one message: the error's own text already names its
    // cause, and a context chain would repeat it.
    let mut d = Detailed::open(&args.trace, !args.no_symbols)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", args.trace.display()))?;
    let r = lockset::analyze(&mut d);
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &r)?;
        writeln!(out)?;
    } else {
        lockset::render_text(&r, &mut out)?;
    }
    out.flush()?;
    Ok(0)
}
