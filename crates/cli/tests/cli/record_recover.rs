//! `lockscope recover`: the trace of a recording whose recorder was killed
//! with SIGKILL, made of what the dead recorder had written and of what
//! its session's buffers still hold, holds every acquisition the program
//! made, once, or counts what it cannot have.

use crate::record_util;

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use record_util::*;

/// From tests/programs/recover_phases.c.
const THREADS: u64 = 2;
const PHASE1: u64 = 3000;
const PHASE2: u64 = 5000;

/// A recording of recover_phases under way: the recorder, the program's
/// standard output, the session directory and the files.
struct Running {
    rec: Child,
    out: std::io::BufReader<std::process::ChildStdout>,
    go: PathBuf,
    trace: PathBuf,
    parent: PathBuf,
}

fn start(dir: &Path) -> Running {
    let bin = build_c("recover_phases", dir);
    let parent = dir.join("shm");
    std::fs::create_dir_all(&parent).unwrap();
    let go = dir.join("go");
    let trace = dir.join("a.lstrace");
    let mut rec = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["record", "-q", "--session-dir"])
        .arg(&parent)
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(&bin)
        .arg(&go)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(rec.stdout.take().unwrap());
    Running {
        rec,
        out,
        go,
        trace,
        parent,
    }
}

impl Running {
    fn expect_line(&mut self, want: &str) {
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), want);
    }

    fn session(&self) -> PathBuf {
        let v: Vec<PathBuf> = std::fs::read_dir(&self.parent)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        assert_eq!(v.len(), 1, "{v:?}");
        v[0].clone()
    }
}

/// Acquisitions per lock label and events lost, from `report --json`.
fn counts(trace: &Path) -> (u64, u64, u64) {
    let o = lockscope(&["report", "--json", trace.to_str().unwrap()], None);
    let r: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    let acq = |name: &str| {
        r["locks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["label"] == name)
            .map(|l| l["acquisitions"].as_u64().unwrap())
            .sum::<u64>()
    };
    (
        acq("first"),
        acq("second"),
        r["lost_events"].as_u64().unwrap(),
    )
}

/// The standard output of `lockscope ARGS`, which must succeed.
fn ok_stdout(args: &[&str]) -> Vec<u8> {
    let o = lockscope(args, None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    o.stdout
}

/// The recorder's periodic mark and flush: phase 1 is in its trace once
/// this has passed with the program idle.
const SETTLE: Duration = Duration::from_secs(3);

#[test]
fn a_sigkilled_recorders_buffers_and_trace_recover_every_acquisition_once() {
    let dir = temp("recover-stopped");
    let mut r = start(&dir);
    r.expect_line("phase1");
    std::thread::sleep(SETTLE);
    // Phase 2 happens while the recorder cannot take anything out of the
    // buffers: it is all in them when the recorder dies.
    // SAFETY: signals to our own child.
    unsafe { libc_kill(r.rec.id() as i32, 19) }; // SIGSTOP
    std::fs::write(&r.go, b"").unwrap();
    r.expect_line("phase2");
    r.rec.kill().unwrap();
    r.rec.wait().unwrap();
    let session = r.session();
    let out = dir.join("recovered.lstrace");
    let msg = recover(&session, &out);
    let (first, second, lost) = counts(&out);
    assert_eq!(
        (first, second, lost),
        (THREADS * PHASE1, THREADS * PHASE2, 0),
        "{msg}"
    );
    assert!(!session.exists(), "the recovered session is removed");
    // The report says where the trace came from.
    let text = String::from_utf8(ok_stdout(&["report", out.to_str().unwrap()])).unwrap();
    assert!(
        text.contains("NOTE: this trace was recovered by `lockscope recover` after its recorder died; nothing was lost"),
        "{text}"
    );
    // The dead recorder's own trace is left as it was.
    assert!(r.trace.exists());
}

#[test]
fn a_recorder_killed_while_the_program_runs_loses_nothing_it_does_not_count() {
    let dir = temp("recover-running");
    let mut r = start(&dir);
    r.expect_line("phase1");
    std::thread::sleep(SETTLE);
    std::fs::write(&r.go, b"").unwrap();
    r.expect_line("phase2");
    // Killed with phase 2 taken out of the buffers, most likely not yet
    // written (the recorder writes every second).
    std::thread::sleep(Duration::from_millis(300));
    r.rec.kill().unwrap();
    r.rec.wait().unwrap();
    let out = dir.join("recovered.lstrace");
    let msg = recover(&r.session(), &out);
    let (first, second, lost) = counts(&out);
    assert_eq!(first, THREADS * PHASE1, "{msg}");
    // Never twice; what is missing (the program wrote over it after the
    // recorder took it) is counted: an acquisition and its release take
    // at least two buffer slots.
    assert!(second <= THREADS * PHASE2, "{second} {msg}");
    assert!(
        (THREADS * PHASE2 - second) * 2 <= lost,
        "{} acquisitions missing, {lost} slots counted lost: {msg}",
        THREADS * PHASE2 - second
    );
    if lost > 0 {
        let text = String::from_utf8(ok_stdout(&["report", out.to_str().unwrap()])).unwrap();
        assert!(text.contains("were overwritten by the program"), "{text}");
    }
}

#[test]
fn recover_names_a_live_recorders_session_as_in_use() {
    let dir = temp("recover-live");
    let mut r = start(&dir);
    r.expect_line("phase1");
    let session = r.session();
    let o = lockscope(
        &[
            "recover",
            session.to_str().unwrap(),
            "-o",
            dir.join("x.lstrace").to_str().unwrap(),
        ],
        None,
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("still running"), "{err}");
    assert!(!dir.join("x.lstrace").exists());
    r.rec.kill().unwrap();
    r.rec.wait().unwrap();
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}
