//! The hot path: the recorder calls the real function the program
//! called (no trylock substitution another interposer could see), and a
//! hooked call from a signal handler that runs while its thread is blocked
//! inside an interposed call is recorded, not silently dropped.

use crate::record_util;

use std::path::PathBuf;
use std::process::Command;

use lockscope_format::{phase, Op};
use record_util::*;

/// The two tests whose outcome depends on the other's load (the
/// preempted-call test runs a CPU hog, and a slow call recorded beside it
/// can be judged preempted instead of waiting: 19 of 20 contended, now
/// and then, when the two ran at once) hold the binary's CPU guard.
fn cpu_sensitive() -> std::sync::MutexGuard<'static, ()> {
    crate::cpus()
}

/// Builds the user's shim `tests/programs/preload/NAME.c` (a shared
/// library to put in `LD_PRELOAD` after ours) and the one-thread
/// `uncontended` benchmark program into `dir`.
fn shim_and_uncontended(dir: &std::path::Path, name: &str) -> (PathBuf, PathBuf) {
    let shim = dir.join(format!("lib{name}.so"));
    let st = Command::new("gcc")
        .args(["-O2", "-shared", "-fPIC", "-o"])
        .arg(&shim)
        .arg(workspace().join(format!("tests/programs/preload/{name}.c")))
        .args(["-ldl", "-lpthread"])
        .status()
        .expect("gcc must be installed to build the fixtures");
    assert!(st.success());
    (shim, build_c("bench/uncontended", dir))
}

/// Records `uncontended PAIRS` (`opts` to `record`) with `shim`, if any,
/// in `LD_PRELOAD`; the run must succeed and lose nothing.
fn record_uncontended(
    dir: &std::path::Path,
    shim: Option<&std::path::Path>,
    opts: &[&str],
    bin: &std::path::Path,
    pairs: &str,
) -> (Run, lockscope_format::Trace) {
    let env: Vec<_> = shim
        .map(|s| ("LD_PRELOAD", s.as_os_str()))
        .into_iter()
        .collect();
    let run = record_env(dir, &env, opts, bin, &[pairs], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let trace = run.trace();
    assert_eq!(trace.footer.as_ref().unwrap().lost, 0);
    (run, trace)
}

#[test]
fn a_users_own_lock_shim_sees_every_pthread_mutex_lock_call() {
    let dir = temp("user-shim");
    let (shim, bin) = shim_and_uncontended(&dir, "lock_count_shim");
    // The user's preload comes after ours (the recorder prepends its own):
    // 5 rounds of 25,600 pairs = 128,000 calls must all reach it.
    let (run, trace) = record_uncontended(&dir, Some(&shim), &[], &bin, "25600");
    assert!(
        run.stderr.contains("lock_count_shim calls=128000"),
        "the shim must see all 128,000 calls: {}",
        run.stderr
    );
    let locks = trace
        .events
        .values()
        .flatten()
        .filter(|e| e.op() == Some(Op::MutexLock) && phase::of(e.flags) == phase::DONE)
        .count();
    assert_eq!(locks, 128_000);
}

#[test]
fn sem_post_from_a_signal_handler_inside_a_blocked_lock_is_recorded() {
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

/// A lock call that waits although the lock looked free just before it
/// (another thread took it in between) is a contended acquisition, from
/// the start of the call: before, it was recorded as uncontended and its
/// wait as the caller's own work (on `ulcp_table`, 7,322 waits, a third
/// of all waiting). The slow shim has a helper thread take the mutex
/// after our look and hold it 2 ms, deterministically.
#[test]
fn a_lock_call_that_waited_although_the_lock_looked_free_is_contended() {
    let _serial = cpu_sensitive();
    let dir = temp("slow-call");
    let (shim, bin) = shim_and_uncontended(&dir, "slow_lock_shim");
    for (slow, path) in [(true, "slow"), (false, "plain")] {
        let (_, trace) = record_uncontended(&dir, slow.then_some(&*shim), &["-q"], &bin, "4");
        // 5 rounds of 4 pairs, one thread: 20 acquisitions.
        let locks: Vec<_> = trace
            .events
            .values()
            .flatten()
            .filter(|e| e.op() == Some(Op::MutexLock))
            .collect();
        let done: Vec<_> = locks
            .iter()
            .filter(|e| phase::of(e.flags) == phase::DONE)
            .collect();
        assert_eq!(done.len(), 20, "{path}");
        let contended = done
            .iter()
            .filter(|e| e.flags & phase::CONTENDED != 0)
            .count();
        if !slow {
            assert_eq!(contended, 0, "nothing waits in the plain run");
            continue;
        }
        // Every slow call is a contended acquisition, except (on CPUs kept
        // busy by other processes) one the recorder can show was mostly
        // preempted: right after a run-queue sample that grew by more
        // than a millisecond. The caller's futex sleep can be cut short
        // by a wake-up that then waits milliseconds for a CPU, and such a
        // call is then what a preemption inside a call looks like (see
        // `a_thread_preempted_in_a_lock_call_is_not_recorded_as_waiting`).
        let mut explained = 0;
        for events in trace.events.values() {
            let mut delays: Vec<u64> = Vec::new();
            let mut prev: Option<&lockscope_format::Event> = None;
            for e in events {
                if e.op() == Some(Op::RunDelay) {
                    delays.push(e.arg);
                }
                if e.op() == Some(Op::MutexLock)
                    && phase::of(e.flags) == phase::DONE
                    && e.flags & phase::CONTENDED == 0
                {
                    let grew = match delays.as_slice() {
                        [.., a, b] => b - a,
                        _ => 0,
                    };
                    assert!(
                        prev.is_some_and(|p| p.op() == Some(Op::RunDelay)) && grew >= 1_000_000,
                        "an uncontended slow call with no preemption to show for it"
                    );
                    explained += 1;
                }
                prev = Some(e);
            }
        }
        assert_eq!(contended + explained, 20);
        assert!(
            contended >= 19,
            "every slow call is a contended acquisition: {contended} of 20"
        );
        // Each DONE|CONTENDED follows its BEGIN, stamped before the call:
        // the wait is the whole 2 ms (at least 1.9 ms, whatever the clock).
        for w in locks.windows(2) {
            if phase::of(w[1].flags) == phase::DONE && w[1].flags & phase::CONTENDED != 0 {
                assert_eq!(phase::of(w[0].flags), phase::BEGIN, "{:?}", w);
                let wait = w[1].time - w[0].time;
                assert!(wait >= 1_900_000, "wait {wait} ns, expected 2 ms");
            }
        }
    }
}

/// Found by the replay of the mutex fixture on a loaded machine: a lock
/// call that took long although the lock looked free, after which
/// glibc's word says "waiters", is a hidden wait only if the
/// thread slept in it. The preempted shim takes the lock at once, has a
/// helper queue for it, then keeps the caller runnable but off its CPU
/// for 2 ms (pinned with a CPU hog, yielding to it). Before, each such
/// call was recorded as a 2 ms wait for a lock nobody else held, which
/// the replay granted at once and so lost. Now it is the uncontended
/// acquisition it was, right after a run-queue delay sample that shows
/// the time it was preempted.
#[test]
fn a_thread_preempted_in_a_lock_call_is_not_recorded_as_waiting() {
    let _serial = cpu_sensitive();
    let dir = temp("preempted-call");
    let (shim, bin) = shim_and_uncontended(&dir, "preempted_lock_shim");
    let (_, trace) = record_uncontended(&dir, Some(&shim), &["-q"], &bin, "4");
    let mut done = 0;
    let mut preempted = 0;
    // Each thread's events in order (the shim's helper and hog threads
    // are recorded too: their few events are not the program's).
    for events in trace.events.values() {
        let mut last_delay = None;
        let mut prev: Option<&lockscope_format::Event> = None;
        for e in events {
            if e.op() == Some(Op::MutexLock) && phase::of(e.flags) == phase::DONE {
                done += 1;
                // Preceded by a sample that grew by at least 1 ms: the 2 ms
                // the caller spent runnable without its CPU.
                if let (Some(p), Some((before, after))) = (prev, last_delay) {
                    if p.op() == Some(Op::RunDelay)
                        && e.flags & phase::CONTENDED == 0
                        && after - before >= 1_000_000
                    {
                        preempted += 1;
                    }
                }
            }
            if e.op() == Some(Op::RunDelay) {
                last_delay = Some((last_delay.map_or(e.arg, |(_, a)| a), e.arg));
            }
            prev = Some(e);
        }
    }
    // 5 rounds of 4 pairs, one thread: 20 acquisitions.
    assert_eq!(done, 20);
    assert!(
        preempted >= 18,
        "{preempted} of 20 acquisitions recorded as preempted, uncontended"
    );
}
