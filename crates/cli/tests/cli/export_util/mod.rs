//! Helpers of the `export_*` tests: record a fixture, read the
//! report's JSON, run `lockscope export` and the viewers' own tools.
// Each test file uses a part of these helpers (and of the re-exports).
#![allow(dead_code, unused_imports)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

pub(crate) use crate::record_util;

pub use record_util::{build_c, record, temp, workspace, TempDir};

/// Records fixture `rel` (with `opts`) in a fresh directory named `test`.
pub fn record_fixture(test: &str, rel: &str, opts: &[&str]) -> (TempDir, PathBuf) {
    let dir = temp(test);
    let bin = build_c(rel, &dir);
    let run = record(&dir, opts, &bin, &[], b"");
    assert!(
        run.trace_path.exists(),
        "no trace written; stderr:\n{}",
        run.stderr
    );
    let p = run.trace_path.clone();
    (dir, p)
}

/// Runs `lockscope ARGS...`; returns stdout (bytes); fails the test on a
/// non-zero exit.
pub fn lockscope(args: &[&std::ffi::OsStr]) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "lockscope {:?} failed: {}",
        args,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `lockscope report TRACE --json`.
pub fn report_json(trace: &Path) -> Value {
    let out = lockscope(&["report".as_ref(), trace.as_os_str(), "--json".as_ref()]);
    serde_json::from_slice(&out).expect("report --json prints JSON")
}

/// Sum over the report's locks of wait_ns.total, and of contended.
pub fn report_totals(r: &Value) -> (u64, u64) {
    let locks = r["locks"].as_array().unwrap();
    (
        locks
            .iter()
            .map(|l| l["wait_ns"]["total"].as_u64().unwrap())
            .sum(),
        locks.iter().map(|l| l["contended"].as_u64().unwrap()).sum(),
    )
}

/// The path of a tool the test needs, or a failure that names the Debian
/// package to install (CI installs it from scripts/test-packages.txt).
pub fn require_tool(tool: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for d in std::env::split_paths(&path) {
        let p = d.join(tool);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "`{tool}` is not installed: this test needs the Debian package `{package}` \
         (listed in scripts/test-packages.txt; `scripts/test.sh` installs it as root)"
    );
}

/// Where `scripts/test-viewers.sh` installs the viewers (speedscope's app,
/// Perfetto's Python protos): `$LOCKSCOPE_VIEWERS`, else `target/viewers`.
pub fn viewers() -> PathBuf {
    std::env::var_os("LOCKSCOPE_VIEWERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/viewers"))
}

/// `dir/rel` under [`viewers`], or a failure naming the script that
/// installs it.
pub fn require_viewer(rel: &str, what: &str) -> PathBuf {
    let p = viewers().join(rel);
    assert!(
        p.exists(),
        "{what} is not installed ({} is missing): run scripts/test-viewers.sh \
         (scripts/test.sh runs it; it needs npm, pip and their registries)",
        p.display()
    );
    p
}
