//! `lockscope record` on fixtures that print their own ground truth: the
//! trace must hold exactly the operations each thread counted.

use crate::record_util;
use record_util::*;

use lockscope_format::{phase, Op, Record};

fn run_fixture(name: &str, opts: &[&str]) -> (TempDir, std::path::PathBuf, Run, Index) {
    let dir = temp(name);
    let bin = build_c(name, &dir);
    let run = record(&dir, opts, &bin, &[], b"");
    let ix = Index::new(run.trace());
    check_integrity(&ix);
    // Exact counts need every event: a loss would show up as a confusing
    // mismatch below, so say it first.
    assert_eq!(
        ix.trace.footer.as_ref().unwrap().lost,
        0,
        "events were lost; stderr:\n{}",
        run.stderr
    );
    (dir, bin, run, ix)
}

fn pid_of(truth: &[Truth]) -> u32 {
    truth[0].pid
}

#[test]
fn record_mutex_counts_sites_trylock_and_exit_status() {
    let (_dir, bin, run, ix) = run_fixture("mutex", &["--buffer-kb", "16384"]);
    assert_eq!(
        run.code, 3,
        "exit status passed on; stderr:\n{}",
        run.stderr
    );
    let truth = truths(&run.stdout);
    check_truth(&ix, &truth, Some(&bin));
    let footer = ix.trace.footer.as_ref().unwrap();
    assert_eq!(footer.exit_status, 3);
    assert_eq!(footer.lost, 0, "{}", run.stderr);
    assert_eq!(process_end(&ix, pid_of(&truth), 0).status, 3);
    // 4 workers + main.
    assert_eq!(ix.threads.len(), 5);
    assert!(run.stderr.contains("lockscope: trace:"), "{}", run.stderr);
    // Contended acquisitions (if any) are BEGIN + DONE|CONTENDED pairs.
    contended_acquisitions(&ix.trace, Op::MutexLock);
}

#[test]
fn record_rwlock_readers_writers_exact() {
    let (_dir, _, run, ix) = run_fixture("rwlock", &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    check_truth(&ix, &truths(&run.stdout), None);
    assert_eq!(ix.trace.footer.as_ref().unwrap().lost, 0);
}

#[test]
fn record_condvar_producer_consumer_exact() {
    let (_dir, _, run, ix) = run_fixture("condvar", &["--buffer-kb", "16384"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let truth = truths(&run.stdout);
    check_truth(&ix, &truth, None);
    // CondWait carries the mutex in arg.
    let m = truth.iter().find(|t| t.op == "MutexLock").unwrap().addr;
    for evs in ix.trace.events.values() {
        for e in evs.iter().filter(|e| e.op == Op::CondWait as u8) {
            assert_eq!(e.arg, m, "cond wait names its mutex");
        }
    }
}

#[test]
fn record_barrier_semaphore_spinlock_exact() {
    let (_dir, _, run, ix) = run_fixture("barrier_sem_spin", &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    check_truth(&ix, &truths(&run.stdout), None);
}

#[test]
fn record_512_threads_no_loss_no_deadlock() {
    let (_dir, _, run, ix) = run_fixture("many_threads", &["--buffer-kb", "1024"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let truth = truths(&run.stdout);
    assert_eq!(truth.len(), 512 * 4);
    check_truth(&ix, &truth, None);
    let footer = ix.trace.footer.as_ref().unwrap();
    assert_eq!(footer.lost, 0, "no event may be lost:\n{}", run.stderr);
    assert_eq!(ix.threads.len(), 513);
    let ends = ix
        .trace
        .records
        .iter()
        .filter(|r| matches!(r, Record::ThreadEnd(_)))
        .count();
    assert_eq!(ends, 513);
}

#[test]
fn record_rust_std_mutex_through_futex() {
    let dir = temp("rust_std_mutex");
    let bin = build_rust("rust_std_mutex", &dir);
    let run = record(&dir, &[], &bin, &[], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let ix = Index::new(run.trace());
    check_integrity(&ix);
    let truth = truths(&run.stdout);
    check_truth(&ix, &truth, None);
    let pid = pid_of(&truth);
    // Each thread that queued on the std Mutex slept in the kernel on a
    // futex word inside the Mutex at least once, and the wait completed.
    for l in run.stdout.lines().filter(|l| l.starts_with("truth-std ")) {
        let m = kv(l);
        let (addr, size) = (hex(&m["addr"]), m["size"].parse::<u64>().unwrap());
        let th = ix.thread(pid, 0, m["tid"].parse().unwrap());
        let evs = ix.events(th);
        let inside = |e: &&lockscope_format::Event| e.addr >= addr && e.addr < addr + size;
        let begins = evs
            .iter()
            .filter(inside)
            .filter(|e| e.op == Op::FutexWait as u8 && phase::of(e.flags) == phase::BEGIN)
            .count();
        let ends = evs
            .iter()
            .filter(inside)
            .filter(|e| e.op == Op::FutexWait as u8 && phase::of(e.flags) != phase::BEGIN)
            .count();
        assert!(
            begins >= 1,
            "thread {} never waited on the std Mutex",
            m["tid"]
        );
        assert_eq!(begins, ends, "every futex wait returns");
    }
    // main released the mutex with waiters: a FutexWake on it.
    let main = ix.thread(pid, 0, pid);
    assert!(ix.events(main).iter().any(|e| e.op == Op::FutexWake as u8));
}
