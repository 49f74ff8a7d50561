//! Processes under `lockscope record`: fork and exec, a program killed by
//! SIGKILL, signals sent to the recorder.

use crate::record_util;
use record_util::*;

use lockscope_format::{phase, LossReason, Op, Record};
use lockscope_test_support::{poll_until, DEFAULT_DEADLINE};

#[test]
fn record_fork_exec_gives_each_image_its_stream() {
    let dir = temp("fork_exec");
    let bin = build_c("fork_exec", &dir);
    let run = record(&dir, &[], &bin, &[], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let ix = Index::new(run.trace());
    check_integrity(&ix);
    let truth = truths(&run.stdout);
    check_truth(&ix, &truth, None);
    let child: u32 = run
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("fork child="))
        .and_then(|r| r.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    let parent_pid = truth.iter().find(|t| t.pid != child).unwrap().pid;
    let p = &ix.procs[&(parent_pid, 0)];
    let c0 = &ix.procs[&(child, 0)];
    let c1 = &ix.procs[&(child, 1)];
    assert_eq!(ix.procs.len(), 3);
    assert_eq!(p.parent, 0);
    assert_eq!(c0.parent, p.id, "fork child's parent is the forking image");
    assert_eq!(
        c1.parent, c0.id,
        "exec'd image's parent is the image it replaced"
    );
    assert_eq!(c1.argv.last().map(String::as_str), Some("--image2"));
    // The parent's stream has the Fork event naming the child.
    let main = ix.thread(parent_pid, 0, parent_pid);
    assert!(ix
        .events(main)
        .iter()
        .any(|e| e.op == Op::Fork as u8 && e.arg == u64::from(child)));
    // Exit statuses: replaced image unknown (-1), new image 7, parent 0.
    assert_eq!(process_end(&ix, child, 0).status, -1);
    assert_eq!(process_end(&ix, child, 1).status, 7);
    assert_eq!(process_end(&ix, parent_pid, 0).status, 0);
    assert!(process_end(&ix, child, 0).end_ns <= c1.start_ns);
}

#[test]
fn record_sigkill_keeps_everything_published() {
    let dir = temp("sigkill");
    let bin = build_c("sigkill", &dir);
    let run = record(&dir, &[], &bin, &[], b"");
    assert_eq!(run.code, 137, "128 + SIGKILL; stderr:\n{}", run.stderr);
    assert!(
        run.stderr.contains("killed by signal 9"),
        "the summary says so:\n{}",
        run.stderr
    );
    let ix = Index::new(run.trace());
    check_integrity(&ix);
    let truth = truths(&run.stdout);
    check_truth(&ix, &truth, None);
    let pid = truth[0].pid;
    let footer = ix.trace.footer.as_ref().unwrap();
    assert_eq!(footer.exit_status, 137);
    assert_eq!(process_end(&ix, pid, 0).status, 137);
    // Phase 2 was cut anywhere: per thread, locks and unlocks of m2 differ
    // by at most one (the one held at the kill), and there were some.
    // (A thread whose buffer overflowed has a Lost annotation and a hole:
    // the pairing cannot hold there, the loss is checked below instead.)
    let m2 = run
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("truth-m2 addr="))
        .map(hex)
        .unwrap();
    let mut total = 0;
    for evs in ix.trace.events.values() {
        if evs.iter().any(|e| e.op == Op::Lost as u8) {
            continue;
        }
        let n = |op: Op| {
            evs.iter()
                .filter(|e| e.addr == m2 && e.op == op as u8 && phase::of(e.flags) == phase::DONE)
                .count() as i64
        };
        let (l, u) = (n(Op::MutexLock), n(Op::MutexUnlock));
        assert!(l - u == 0 || l - u == 1, "locks {l} unlocks {u}");
        total += l;
    }
    assert!(
        total > 0,
        "phase 2 events published before the kill are kept"
    );
    // Loss is reported (possibly zero), never hidden.
    let loss: u64 = ix
        .trace
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Loss(l) if l.reason == LossReason::BufferFull => Some(l.events),
            _ => None,
        })
        .sum();
    assert_eq!(footer.lost, loss);
    if loss > 0 {
        assert!(run.stderr.contains("LOST"), "{}", run.stderr);
    }
}

#[test]
fn record_forwards_sigterm_and_finishes_the_trace() {
    let dir = temp("sigterm");
    let trace = dir.join("t.lstrace");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["record", "-o"])
        .arg(&trace)
        .args(["--", "sleep", "30"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The recorder installs its forwarding before it starts the program:
    // once `sleep` runs as its child, SIGTERM is forwarded.
    let recorder = child.id();
    poll_until("the program to run under record", DEFAULT_DEADLINE, || {
        child_named(recorder, "sleep")
    });
    // SAFETY: kill on the pid of our own child.
    unsafe { libc_kill(child.id() as i32, 15) };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        shell_code(out.status),
        143,
        "program killed by SIGTERM: {stderr}"
    );
    assert!(stderr.contains("forwarded"), "{stderr}");
    let t = lockscope_format::Trace::open(&trace).unwrap();
    assert_eq!(t.footer.unwrap().exit_status, 143);
}

/// Whether process `parent` has a child process whose command is `comm`
/// (read from /proc: `PPid` in each process's status).
fn child_named(parent: u32, comm: &str) -> bool {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return false;
    };
    rd.filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .any(|e| {
            let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
            let field = |k: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(k))
                    .map(|v| v.trim().to_string())
            };
            field("PPid:").is_some_and(|p| p == parent.to_string())
                && field("Name:").is_some_and(|n| n == comm)
        })
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}
