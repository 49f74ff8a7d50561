//! Output into a pipe whose reader has gone (`lockscope replay --json T |
//! head -c 5`): the command stops quietly, as Unix filters do, instead of
//! printing an error. JSON output used to say "lockscope: error: Broken
//! pipe (os error 32)": serde_json wraps the write error in its own type,
//! which the quiet exit did not recognise.

use std::process::{Command, Stdio};

use lockscope_test_support::workspace_root;

/// Runs `lockscope ARGS` with its standard output a pipe closed before
/// the command writes: exit status and standard error.
fn into_closed_pipe(args: &[&str]) -> (Option<i32>, String) {
    // The reader is closed before the command starts, so that every write
    // fails. Closing it after `spawn` (the first version) raced with the
    // command: a report that finished before the test's thread ran again
    // fit in the pipe's buffer and exited 0 (seen once in a full run).
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let child = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(args)
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn json_and_text_into_a_closed_pipe_exit_quietly() {
    let trace = workspace_root().join("tests/golden/sleep_hold.lstrace");
    let t = trace.to_str().unwrap();
    for args in [
        &["replay", "--json", t][..],
        &["critical-path", "--json", t],
        &["report", "--json", t],
        &["report", t],
        &["replay", t],
    ] {
        let (code, stderr) = into_closed_pipe(args);
        assert_eq!(stderr, "", "{args:?} printed to stderr");
        // 141: 128 + SIGPIPE, what a shell reports for a filter stopped
        // by a closed pipe.
        assert_eq!(code, Some(141), "{args:?}");
    }
}
