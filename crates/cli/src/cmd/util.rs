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
