//! Helpers shared by subcommands.

use std::path::PathBuf;

/// Finds a shared library shipped with lockscope (e.g.
/// `liblockscope_preload.so`). Looked up, in order: the environment
/// variable `env_var`, the directory of the running executable, its
/// `deps/` subdirectory (cargo's layout) and `../lib/lockscope/` (an
/// installed layout). Returns an error naming every place tried.
pub fn find_library(file_name: &str, env_var: &str) -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os(env_var) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        anyhow::bail!("{env_var}={} does not name a file", p.display());
    }
    let exe = std::env::current_exe()?;
    let dir = exe.parent().map(|d| d.to_path_buf()).unwrap_or_default();
    let candidates = [
        dir.join(file_name),
        dir.join("deps").join(file_name),
        dir.join("../lib/lockscope").join(file_name),
    ];
    for c in &candidates {
        if c.is_file() {
            return Ok(c.canonicalize().unwrap_or_else(|_| c.clone()));
        }
    }
    let tried: Vec<String> = candidates.iter().map(|c| c.display().to_string()).collect();
    anyhow::bail!(
        "cannot find {file_name} (tried {}); build the whole workspace with \
         `cargo build --release`, or set {env_var}",
        tried.join(", ")
    )
}

/// Opens a detailed-mode trace for `ulcp`, `lockset` and `occ`. The error
/// is flattened into one message: the format error's own text already names
/// its cause and byte offset, and a context chain would repeat it.
///
/// A timing-mode trace (from a program not built with `lockscope cc`) is
/// refused: it has no memory accesses, so these analyses would see every
/// critical section as empty and print confident, meaningless figures
/// (a "best case speedup" of a program they know nothing about).
pub fn open_trace(path: &std::path::Path) -> anyhow::Result<lockscope_format::Trace> {
    let t = lockscope_format::Trace::open(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    if !is_detailed(&t) {
        anyhow::bail!(
            "{}: a timing-mode trace (no memory accesses recorded); this analysis needs a \
             detailed-mode trace: build the program with `lockscope cc` (or `lockscope c++`), \
             e.g. `lockscope cc -O2 -g -o prog prog.c`, then `lockscope record -- ./prog`",
            path.display()
        );
    }
    Ok(t)
}

/// True when the trace holds detailed-mode events: memory accesses,
/// atomics, allocations or release values (ops 40-62), which only the
/// runtime linked by `lockscope cc` records.
pub fn is_detailed(t: &lockscope_format::Trace) -> bool {
    let first = lockscope_format::Op::Read as u8;
    let last = lockscope_format::Op::ReleaseValue as u8;
    t.events
        .values()
        .any(|v| v.iter().any(|e| (first..=last).contains(&e.op)))
}

/// Prints an analysis result on stdout: pretty JSON with `json`, else the
/// analysis' own text rendering. Returns exit code 0.
pub fn print_result<T: serde::Serialize>(
    r: &T,
    json: bool,
    render_text: fn(&T, &mut dyn std::io::Write) -> std::io::Result<()>,
) -> anyhow::Result<i32> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, r)?;
        writeln!(out)?;
    } else {
        render_text(r, &mut out)?;
    }
    out.flush()?;
    Ok(0)
}
