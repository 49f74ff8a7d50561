//! `lockscope record` as a command: output, errors, file naming.

use crate::record_util;
use record_util::*;

use std::process::{Command, Stdio};

#[test]
fn record_program_output_is_unchanged() {
    let dir = temp("echo_sum");
    let bin = build_c("echo_sum", &dir);
    let input = (1..=500)
        .map(|i| format!("{}\n", i * 7))
        .collect::<String>();
    let mut plain = Command::new(&bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    plain
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let plain = plain.wait_with_output().unwrap();
    let run = record(&dir, &["--quiet"], &bin, &[], input.as_bytes());
    assert_eq!(run.stdout.as_bytes(), plain.stdout.as_slice());
    assert_eq!(
        run.stderr.as_bytes(),
        plain.stderr.as_slice(),
        "--quiet adds nothing"
    );
    assert_eq!(run.code, shell_code(plain.status));
    assert_eq!(run.code, (7 * 500 * 501 / 2) % 256);
    let ix = Index::new(run.trace());
    check_integrity(&ix);
}

#[test]
fn record_missing_program_is_a_clear_error() {
    let dir = temp("missing");
    let out = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .current_dir(&dir)
        .args(["record", "--", "lockscope-no-such-program"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot run `lockscope-no-such-program`: No such file or directory"),
        "{stderr}"
    );
    assert_eq!(out.status.code(), Some(127));
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "no trace file is left behind"
    );
}

#[test]
fn record_default_output_never_overwrites() {
    let dir = temp("default_out");
    std::fs::write(dir.join("lockscope.lstrace"), b"precious").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .current_dir(&dir)
        .args(["record", "--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        std::fs::read(dir.join("lockscope.lstrace")).unwrap(),
        b"precious"
    );
    assert!(
        stderr.contains("lockscope-2.lstrace"),
        "says where: {stderr}"
    );
    lockscope_format::Trace::open(dir.join("lockscope-2.lstrace")).unwrap();
}
