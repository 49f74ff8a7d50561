//! A session left behind by a recorder killed with SIGKILL is kept for
//! `lockscope recover` by the next recorder that starts in the same place
//! (for a day, then removed), and the killed recorder's trace holds what
//! it had drained.

use crate::record_util;

use std::process::{Command, Stdio};
use std::time::Duration;

use lockscope_test_support::poll_until;
use record_util::*;

/// A recorder starting its program on a loaded machine.
const SESSION_DEADLINE: Duration = Duration::from_secs(20);

/// Starts `lockscope record --session-dir PARENT -o TRACE -- BIN`, waits
/// until its session holds the program's files, and kills the recorder
/// with SIGKILL. Returns the session directory it left.
fn kill_a_recorder(
    parent: &std::path::Path,
    trace: &std::path::Path,
    bin: &std::path::Path,
) -> std::path::PathBuf {
    let mut rec = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["record", "--session-dir"])
        .arg(parent)
        .arg("-o")
        .arg(trace)
        .arg("--")
        .arg(bin)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait for its session to hold the program's files.
    let mut session = None;
    poll_until(
        "a session holding the program's files",
        SESSION_DEADLINE,
        || {
            session = std::fs::read_dir(parent)
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .find(|p| {
                    std::fs::read_dir(p)
                        .map(|d| {
                            d.flatten()
                                .any(|f| f.file_name().to_string_lossy().ends_with(".ring"))
                        })
                        .unwrap_or(false)
                });
            session.is_some()
        },
    );
    rec.kill().unwrap(); // SIGKILL: no clean-up of its own
    rec.wait().unwrap();
    let session = session.unwrap();
    assert!(session.exists(), "the killed recorder left its session");
    session
}

/// `lockscope record --session-dir PARENT -- /bin/true` (it must succeed):
/// a recorder starting where others left sessions.
fn record_true(dir: &std::path::Path, parent: &std::path::Path) -> Run {
    let run = record(
        dir,
        &["--session-dir", parent.to_str().unwrap()],
        std::path::Path::new("/bin/true"),
        &[],
        b"",
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    run
}

/// Fails unless `parent` holds no session directory.
fn assert_no_session(parent: &std::path::Path) {
    let left: Vec<_> = std::fs::read_dir(parent).unwrap().flatten().collect();
    assert!(left.is_empty(), "sessions left: {left:?}");
}

#[test]
fn the_session_of_a_sigkilled_recorder_is_kept_named_and_removed_by_recover() {
    let dir = temp("stale-session");
    let parent = dir.join("shm");
    std::fs::create_dir_all(&parent).unwrap();
    let bin = build_c("sigint_count", &dir);
    let session = kill_a_recorder(&parent, &dir.join("a.lstrace"), &bin);
    // The next recording in the same place keeps it and says so, with
    // the command and how to recover it.
    let run = record_true(&dir, &parent);
    let named = run
        .stderr
        .lines()
        .find(|l| l.contains("kept the session of a recorder that died"))
        .unwrap_or_else(|| panic!("no message about the kept session:\n{}", run.stderr));
    assert!(named.contains(&session.display().to_string()), "{named}");
    assert!(named.contains("sigint_count"), "{named}");
    assert!(named.contains("lockscope recover"), "{named}");
    assert!(session.exists());
    // `recover` without a directory lists it.
    let o = lockscope(
        &["recover", "--session-dir", parent.to_str().unwrap()],
        None,
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains(&session.display().to_string()));
    // Recovered, it is gone, and the next recording finds nothing.
    let out = dir.join("recovered.lstrace");
    recover(&session, &out);
    assert!(!session.exists());
    ok(&lockscope(&["report", out.to_str().unwrap()], None));
    assert_no_session(&parent);
}

#[test]
fn an_orphaned_session_older_than_a_day_is_removed_at_the_next_start() {
    let dir = temp("old-session");
    let parent = dir.join("shm");
    std::fs::create_dir_all(&parent).unwrap();
    let bin = build_c("sigint_count", &dir);
    let session = kill_a_recorder(&parent, &dir.join("a.lstrace"), &bin);
    // Two days old: every file and the directory itself.
    let mut paths: Vec<_> = std::fs::read_dir(&session)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    paths.push(session.clone());
    let st = Command::new("touch")
        .args(["-d", "2 days ago"])
        .args(&paths)
        .status()
        .unwrap();
    assert!(st.success());
    let run = record_true(&dir, &parent);
    assert!(!run.stderr.contains("kept the session"), "{}", run.stderr);
    assert_no_session(&parent);
}

#[test]
fn the_session_of_a_live_recorder_is_not_swept() {
    let dir = temp("live-session");
    let parent = dir.join("shm");
    std::fs::create_dir_all(&parent).unwrap();
    let bin = build_c("sigint_count", &dir);
    let mut rec = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["record", "--session-dir"])
        .arg(&parent)
        .arg("-o")
        .arg(dir.join("a.lstrace"))
        .arg("--")
        .arg(&bin)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    poll_until("a session to appear", SESSION_DEADLINE, || {
        std::fs::read_dir(&parent).unwrap().count() > 0
    });
    record_true(&dir, &parent);
    assert_eq!(
        std::fs::read_dir(&parent).unwrap().count(),
        1,
        "the live recorder's session is still there"
    );
    // The program says "ready" once its SIGINT handler is in place: a
    // signal before that would kill it (seen once on a loaded machine).
    let mut out = std::io::BufReader::new(rec.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line, "ready\n");
    // SAFETY: SIGINT to our own child; the program ends gracefully.
    unsafe { libc_kill(rec.id() as i32, 2) };
    let status = rec.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(std::fs::read_dir(&parent).unwrap().count(), 0);
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

// See issue 32: a recorder killed with SIGKILL left a 0-byte trace; its
// idle program's events sat in the converter's and the writer's buffers.
#[test]
fn a_sigkilled_recorder_leaves_a_trace_with_what_its_idle_program_did() {
    let dir = temp("killed-trace");
    let bin = build_c("burst_then_pause", &dir);
    let trace = dir.join("a.lstrace");
    // Its own session parent: the session it leaves is kept for a day,
    // and other tests' recordings would name it.
    let parent = dir.join("shm");
    std::fs::create_dir_all(&parent).unwrap();
    let mut rec = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["record", "-q", "--session-dir"])
        .arg(&parent)
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(&bin)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(rec.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "truth-burst acquisitions=10000");
    // The program is idle now; within a few flush periods the file holds
    // its 10,000 acquisitions, before anything ends.
    let acquisitions = || -> u64 {
        let o = lockscope(&["report", "--json", trace.to_str().unwrap()], None);
        serde_json::from_slice::<serde_json::Value>(&o.stdout)
            .ok()
            .and_then(|r| {
                r["locks"]
                    .as_array()?
                    .iter()
                    .map(|l| l["acquisitions"].as_u64())
                    .sum::<Option<u64>>()
            })
            .unwrap_or(0)
    };
    poll_until(
        "the running recorder's trace to hold the burst",
        SESSION_DEADLINE,
        || acquisitions() == 10_000,
    );
    rec.kill().unwrap(); // SIGKILL: no footer, no clean-up
    rec.wait().unwrap();
    assert_eq!(acquisitions(), 10_000, "the killed recorder's trace");
}
