//! Issue 8, the hot path: the recorder calls the real function the program
//! called (no trylock substitution another interposer could see), and a
//! hooked call from a signal handler that runs while its thread is blocked
//! inside an interposed call is recorded, not silently dropped.

mod record_util;

use std::process::Command;

use lockscope_format::{phase, Op};
use record_util::*;

#[test]
fn issue8_a_users_own_lock_shim_sees_every_pthread_mutex_lock_call() {
    let dir = temp("user-shim");
    let shim = dir.join("liblock_count_shim.so");
    let st = Command::new("gcc")
        .args(["-O2", "-shared", "-fPIC", "-o"])
        .arg(&shim)
        .arg(workspace().join("tests/programs/preload/lock_count_shim.c"))
        .arg("-ldl")
        .status()
        .expect("gcc must be installed to build the fixtures");
    assert!(st.success());
    let bin = dir.join("uncontended");
    let st = Command::new("gcc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&bin)
        .arg(workspace().join("tests/programs/bench/uncontended.c"))
        .status()
        .unwrap();
    assert!(st.success());
    // The user's preload comes after ours (the recorder prepends its own):
    // 5 rounds of 25,600 pairs = 128,000 calls must all reach it.
    let trace_path = dir.join("trace.lstrace");
    let out = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["record", "-o"])
        .arg(&trace_path)
        .arg("--")
        .arg(&bin)
        .arg("25600")
        .env("LD_PRELOAD", &shim)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("lock_count_shim calls=128000"),
        "the shim must see all 128,000 calls: {stderr}"
    );
    let trace = lockscope_format::Trace::open(&trace_path).unwrap();
    assert_eq!(trace.footer.as_ref().unwrap().lost, 0);
    let locks = trace
        .events
        .values()
        .flatten()
        .filter(|e| e.op() == Some(Op::MutexLock) && phase::of(e.flags) == phase::DONE)
        .count();
    assert_eq!(locks, 128_000);
}

#[test]
fn issue8_sem_post_from_a_signal_handler_inside_a_blocked_lock_is_recorded() {
    let dir = temp("signal-nested");
    let bin = build_c("signal_nested", &dir);
    let run = record(&dir, &[], &bin, &[], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let ix = Index::new(run.trace());
    check_integrity(&ix);
    assert_eq!(ix.trace.footer.as_ref().unwrap().lost, 0, "{}", run.stderr);
    // The worker's SemPost (made by its handler while it waited inside
    // pthread_mutex_lock) is in the trace, with every other call.
    check_truth(&ix, &truths(&run.stdout), None);
    // And its lock was seen to wait.
    let contended = ix
        .trace
        .events
        .values()
        .flatten()
        .filter(|e| {
            e.op() == Some(Op::MutexLock)
                && phase::of(e.flags) == phase::DONE
                && e.flags & phase::CONTENDED != 0
        })
        .count();
    assert_eq!(contended, 1, "the worker's lock waited");
}
