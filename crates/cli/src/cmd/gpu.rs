//! `lockscope gpu TRACE`: CPU-GPU idleness by blame shifting (Chabbi's
//! thesis ch. 2): who makes the GPU wait, and what the CPU waits for.

use std::path::PathBuf;

use lockscope_report::gpu;

use crate::cmd::util;

/// Who makes the GPU wait, and what the CPU waits for (CUDA programs).
///
/// GPU idle time is charged to the CPU code that was not feeding it (the
/// launch that ended each idle gap, or a synchronize that had not yet
/// returned); CPU time in synchronizing calls is charged to the kernels
/// and copies it waited for, shared between work running at the same
/// moment. Needs a trace recorded with GPU capture (`lockscope record`
/// of a CUDA program with CUPTI available); other traces say so.
#[derive(clap::Args)]
pub struct Args {
    /// Trace file.
    pub trace: PathBuf,
    /// Print JSON (schema `lockscope.gpu/1`) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Do not read binaries for symbols (names stay module+offset).
    #[arg(long)]
    pub no_symbols: bool,
}

/// Runs the subcommand; returns the exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let meta = util::index_trace(&args.trace)?;
    let r = gpu::analyze_indexed(&args.trace, &meta, !args.no_symbols)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", args.trace.display()))?;
    util::print_result(&r, args.json, gpu::render_text)
}
