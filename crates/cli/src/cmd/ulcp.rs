//! `lockscope ulcp TRACE`: unnecessary lock contention pairs (PerfPlay
//! Alg. 1) of a detailed-mode trace.

use std::io::Write;
use std::path::PathBuf;

use lockscope_analysis::{detailed::Detailed, ulcp};

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
    // Flattened into one message: the error's own text already names its
    // cause, and a context chain would repeat it.
    let mut d = Detailed::open(&args.trace, !args.no_symbols)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", args.trace.display()))?;
    let r = ulcp::analyze(&mut d);
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &r)?;
        writeln!(out)?;
    } else {
        ulcp::render_text(&r, &mut out)?;
    }
    out.flush()?;
    Ok(0)
}
