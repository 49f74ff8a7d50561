//! What the validation benchmarks (`ulcp_validate`, `whatif_validate`)
//! share: finding the `lockscope` binary they measure, and failing loud.

use std::path::{Path, PathBuf};

/// The `lockscope` binary: `$LOCKSCOPE`, or the one built next to the
/// example (target/<profile>/examples/NAME -> target/<profile>/lockscope).
pub fn lockscope() -> PathBuf {
    if let Some(p) = std::env::var_os("LOCKSCOPE") {
        return p.into();
    }
    let exe = std::env::current_exe().expect("own path");
    exe.parent()
        .and_then(Path::parent)
        .map(|d| d.join("lockscope"))
        .expect("target directory")
}

/// Exits with the command's output when it failed.
pub fn check(what: &str, o: &std::process::Output) {
    if !o.status.success() {
        eprintln!(
            "{what} failed ({}):\n{}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        std::process::exit(1);
    }
}

/// The median of a non-empty sample.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
