//! Snapshot tests (insta) of `lockscope report`.
//!
//! - On traces recorded once and kept in tests/golden/: the text, JSON and
//!   CSV outputs must equal the stored snapshots exactly. Symbols are off
//!   (`--no-symbols`): the recorded binaries are not kept, and a file at
//!   the same path on another machine must not change the output.
//! - On a fixture recorded by the test (tests/programs/report/sleep_hold.c):
//!   the symbolized view (lock names, site functions, files and lines,
//!   acquisition counts: everything of it that does not depend on timing
//!   or addresses) must equal its snapshot.
//!
//! The snapshots live in tests/golden/snapshots/. After an intended change
//! of the output, review each changed snapshot one by one: `cargo insta
//! test --review -p lockscope --test cli -- report_golden::` with
//! cargo-insta, or without it run the test (insta writes `NAME.snap.new`
//! next to each differing snapshot), read `diff NAME.snap NAME.snap.new`,
//! and rename the new file over the old one. CI sets `INSTA_UPDATE=no`: a
//! changed output fails and writes nothing.

use std::path::{Path, PathBuf};
use std::process::Command;

use lockscope_test_support::{build_c, scratch_dir, workspace_root};
use serde_json::Value;

fn golden() -> PathBuf {
    workspace_root().join("tests/golden")
}

/// Compares `got` with the snapshot `name` in tests/golden/snapshots/.
fn assert_golden(name: &str, got: &str) {
    // insta ignores trailing newlines when it compares; the outputs end
    // with exactly one, which this keeps checked.
    assert!(
        got.ends_with('\n') && !got.ends_with("\n\n"),
        "{name}: the output must end with exactly one newline"
    );
    insta::with_settings!({
        snapshot_path => golden().join("snapshots"),
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!(name, got);
    });
}

fn check(trace: &str, args: &[&str], name: &str) {
    check_at(trace, args, None, name)
}

/// `columns`: the $COLUMNS the report is fitted to (None: unset, the wide
/// layout of a pipe).
fn check_at(trace: &str, args: &[&str], columns: Option<&str>, name: &str) {
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
    assert_golden(name, &String::from_utf8(out.stdout).unwrap());
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

/// The layout fitted to a 100-column terminal.
#[test]
fn golden_rust_std_mutex_text_100_columns() {
    check_at(
        "rust_std_mutex.lstrace",
        &["--per-thread"],
        Some("100"),
        "rust_std_mutex.report.100col.txt",
    );
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or("-")
}

/// The parts of a symbolized report that depend neither on timing nor on
/// addresses, one line each, sorted: per lock its symbol, kind and
/// acquisitions, per site its function, source file and line, and
/// acquisitions.
fn symbolized_view(report: &Value) -> String {
    let mut locks: Vec<String> = Vec::new();
    for l in report["locks"].as_array().expect("locks") {
        let mut sites: Vec<String> = l["sites"]
            .as_array()
            .expect("sites")
            .iter()
            .map(|s| {
                let file = s["file"]
                    .as_str()
                    .map(|f| {
                        Path::new(f)
                            .file_name()
                            .unwrap()
                            .to_string_lossy()
                            .into_owned()
                    })
                    .unwrap_or_else(|| "-".into());
                format!(
                    "  site {} at {file}:{}: {} acquisitions\n",
                    str_of(s, "function"),
                    s["line"],
                    s["acquisitions"]
                )
            })
            .collect();
        sites.sort();
        locks.push(format!(
            "lock {} ({}): {} acquisitions\n{}",
            str_of(l, "name"),
            str_of(l, "kind"),
            l["acquisitions"],
            sites.concat()
        ));
    }
    locks.sort();
    locks.concat()
}

/// A symbolized snapshot. sleep_hold takes `held_lock` once in
/// `hold_and_sleep` and once in `wait_for_it`, and `solo_lock` 1,000 times
/// in `waiter` (its ground truth, checked exactly by report_fixtures.rs);
/// here the report must name them by symbol, function, file and line.
#[test]
fn golden_symbolized_sleep_hold() {
    let dir = scratch_dir("golden-symbolized");
    let bin = build_c("report/sleep_hold", &dir);
    let trace = dir.path().join("trace.lstrace");
    let rec = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .arg("record")
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(&bin)
        .output()
        .unwrap();
    assert!(
        rec.status.success(),
        "record failed: {}",
        String::from_utf8_lossy(&rec.stderr)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .arg("report")
        .arg(&trace)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "report failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("report --json prints JSON");
    assert_golden("sleep_hold.symbolized.txt", &symbolized_view(&report));
}
