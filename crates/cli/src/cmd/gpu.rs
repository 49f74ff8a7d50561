//! `lockscope gpu TRACE`: CPU-GPU idleness by blame shifting (Chabbi's
//! thesis ch. 2): who makes the GPU wait, and what the CPU waits for.

use std::path::PathBuf;

use lockscope_analysis::gpu;

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
    let r = gpu::analyze(&args.trace, !args.no_symbols)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", args.trace.display()))?;
    util::print_result(&r, args.json, gpu::render_text)
}

/// The GPU section of `lockscope report` (text): the blame-shifting
/// tables, when some thread waited for the GPU. Programs without CUDA pay
/// nothing (the report already knows each thread's GPU wait); a CUDA
/// program's trace is read once more, streaming, in bounded memory.
pub fn report_section(
    trace: &std::path::Path,
    report: &lockscope_analysis::Report,
    symbolize: bool,
) -> String {
    if !report.threads.iter().any(|t| t.gpu_wait_ns > 0) {
        return String::new();
    }
    let Ok(r) = gpu::analyze(trace, symbolize) else {
        return String::new();
    };
    if !r.has_gpu {
        return String::new();
    }
    let mut out = format!(
        "\nGPU (CPU-GPU blame shifting; details: lockscope gpu {})\n",
        trace.display()
    );
    let mut buf = Vec::new();
    if gpu::render_text(&r, &mut buf).is_ok() {
        out += &String::from_utf8_lossy(&buf);
    }
    out
}
