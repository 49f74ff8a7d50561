//! `lockscope dump` prints exactly the events a trace holds.

use std::path::Path;
use std::process::Command;

fn golden(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/golden")
        .join(name)
}

fn dump(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .arg("dump")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn dump_prints_one_line_per_event_of_the_trace() {
    let path = golden("sleep_hold.lstrace");
    let trace = lockscope_format::Trace::open(&path).unwrap();
    let out = dump(&[path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let event_lines = text.lines().filter(|l| l.contains(" addr=0x")).count();
    assert_eq!(event_lines, trace.event_count());
    // Per-op counts in --summary agree with the decoded trace.
    let locks = trace
        .events
        .values()
        .flatten()
        .filter(|e| e.op() == Some(lockscope_format::Op::MutexLock))
        .count();
    let out = dump(&["--summary", path.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(&format!("events MutexLock: {locks}\n")),
        "{text}"
    );
}

#[test]
fn dump_filters_by_op_and_rejects_unknown_ops() {
    let path = golden("sleep_hold.lstrace");
    let out = dump(&[
        "--op",
        "MutexUnlock",
        "--limit",
        "3",
        path.to_str().unwrap(),
    ]);
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(" addr=0x")).collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines.iter().all(|l| l.contains("MutexUnlock")));
    let out = dump(&["--op", "Bogus", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("unknown op `Bogus`") && err.contains("MutexLock"),
        "{err}"
    );
}

#[test]
fn dump_of_a_non_trace_names_the_problem() {
    let this = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli/dump.rs");
    let out = dump(&[this.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("not a lockscope trace"), "{err}");
}
