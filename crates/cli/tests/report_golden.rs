//! Snapshot tests: `lockscope report` on traces recorded once and kept in
//! tests/golden/ must print exactly the stored text and JSON. Symbols are
//! off (`--no-symbols`): the recorded binaries are not kept, and a file at
//! the same path on another machine must not change the output.
//!
//! After an intended change of the output, regenerate with
//! `UPDATE_GOLDEN=1 cargo test -p lockscope --test report_golden` and
//! review the diff.

use std::path::PathBuf;
use std::process::Command;

fn golden() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden")
}

fn check(trace: &str, args: &[&str], expected: &str) {
    check_at(trace, args, None, expected)
}

/// `columns`: the $COLUMNS the report is fitted to (None: unset, the wide
/// layout of a pipe).
fn check_at(trace: &str, args: &[&str], columns: Option<&str>, expected: &str) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockscope"));
    match columns {
        Some(c) => cmd.env("COLUMNS", c),
        None => cmd.env_remove("COLUMNS"),
    };
    let out = cmd
        .arg("report")
        .arg(golden().join(trace))
        .arg("--no-symbols")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = String::from_utf8(out.stdout).unwrap();
    let path = golden().join(expected);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    if got != want {
        let first = got
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(got.lines().count().min(want.lines().count()));
        panic!(
            "{expected} differs from the output, first at line {}:\n  got:  {:?}\n  want: {:?}\n\
             (UPDATE_GOLDEN=1 regenerates after an intended change)",
            first + 1,
            got.lines().nth(first),
            want.lines().nth(first)
        );
    }
}

#[test]
fn golden_sleep_hold_text() {
    check("sleep_hold.lstrace", &[], "sleep_hold.report.txt");
}

#[test]
fn golden_sleep_hold_json() {
    check("sleep_hold.lstrace", &["--json"], "sleep_hold.report.json");
}

#[test]
fn golden_sleep_hold_csv_threads() {
    check(
        "sleep_hold.lstrace",
        &["--csv", "threads"],
        "sleep_hold.threads.csv",
    );
}

#[test]
fn golden_rust_std_mutex_text() {
    check(
        "rust_std_mutex.lstrace",
        &["--per-thread"],
        "rust_std_mutex.report.txt",
    );
}

#[test]
fn golden_rust_std_mutex_json() {
    check(
        "rust_std_mutex.lstrace",
        &["--json"],
        "rust_std_mutex.report.json",
    );
}

/// Issue 10 item 4: the layout fitted to a 100-column terminal.
#[test]
fn golden_rust_std_mutex_text_100_columns() {
    check_at(
        "rust_std_mutex.lstrace",
        &["--per-thread"],
        Some("100"),
        "rust_std_mutex.report.100col.txt",
    );
}
