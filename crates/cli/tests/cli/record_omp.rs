//! OpenMP programs (GCC's libgomp): their critical sections and
//! `omp_lock_t` locks are libgomp's own futex words, which no pthread
//! hook sees; the OpenMP hooks record them as mutexes. The fixture
//! (`tests/programs/omp_locks.c`) counts every call itself.

use crate::record_util;
use record_util::*;

use std::path::{Path, PathBuf};
use std::process::Command;

use lockscope_format::{barrier, phase, Op};

/// Runs gcc with `args` then `-o out src` and `tail` (libraries), and
/// returns `out`.
fn gcc(src: &str, args: &[&str], out: &Path, tail: &[&str]) -> PathBuf {
    let src = lockscope_test_support::workspace_root()
        .join("tests/programs")
        .join(src);
    let st = Command::new("gcc")
        .args(["-O2", "-g", "-Wall"])
        .args(args)
        .arg("-o")
        .arg(out)
        .arg(&src)
        .args(tail)
        .status()
        .expect("gcc must be installed to build the fixtures");
    assert!(
        st.success(),
        "gcc {args:?} failed on {} (libgomp comes with gcc)",
        src.display()
    );
    out.to_path_buf()
}

/// Compiles the fixture with `gcc -fopenmp`.
fn build_omp(dir: &Path) -> PathBuf {
    gcc(
        "omp_locks.c",
        &["-fopenmp", "-pthread"],
        &dir.join("omp_locks"),
        &["-ldl"],
    )
}

/// Every BarrierWait event of the trace, with the OS tid of its thread.
fn barrier_events(ix: &Index) -> Vec<(u64, lockscope_format::Event)> {
    let tid: std::collections::HashMap<u32, u64> = ix
        .threads
        .iter()
        .map(|(&(_, tid), &id)| (id, u64::from(tid)))
        .collect();
    ix.trace
        .events
        .iter()
        .flat_map(|(th, evs)| {
            let t = tid[th];
            evs.iter()
                .filter(|e| e.op == Op::BarrierWait as u8)
                .map(move |e| (t, *e))
        })
        .collect()
}

#[test]
fn openmp_critical_sections_and_locks_are_recorded_exactly() {
    let dir = temp("omp");
    let bin = build_omp(&dir);
    let run = record(&dir, &[], &bin, &["20000", "wait"], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    // What the program computes is unchanged: every section ran.
    // 3 threads x 20,000 sections x (0 + 1 + ... + 19) per lock.
    assert!(
        run.stdout
            .contains("threads 3 sums 11400000 11400000 11400000 11400000"),
        "{}",
        run.stdout
    );
    let ix = Index::new(run.trace());
    check_integrity(&ix);
    assert_eq!(ix.trace.footer.as_ref().unwrap().lost, 0, "{}", run.stderr);
    let truth = truths(&run.stdout);
    // Three threads, nine lines each.
    assert_eq!(truth.len(), 27, "{}", run.stdout);
    check_truth(&ix, &truth, None);

    // A call that waited is BEGIN then DONE|CONTENDED on the same lock,
    // as for a pthread mutex; with `wait` thread 1 waited at least once
    // on set_lk (a handshake, not luck: on two busy CPUs the threads
    // could go through 60,000 short sections with 3 waits, none on the
    // lock words the hooks can read, the named section's and
    // omp_set_lock's).
    let tally = truth
        .iter()
        .find(|t| t.op == "MutexLock" && t.addr != truth[0].addr)
        .unwrap()
        .addr;
    let set = truth
        .iter()
        .filter(|t| t.op == "MutexLock")
        .map(|t| t.addr)
        .find(|&a| a != truth[0].addr && a != tally)
        .unwrap();
    let per_lock = contended_acquisitions(&ix.trace, Op::MutexLock);
    let contended = per_lock.get(&tally).unwrap_or(&0) + per_lock.get(&set).unwrap_or(&0);
    assert!(
        contended > 0,
        "no contended acquisition seen; {}",
        run.stderr
    );

    // The report names the locks after what the program wrote.
    let text = ok(&lockscope(
        &["report", run.trace_path.to_str().unwrap()],
        None,
    ));
    assert!(text.contains(".gomp_critical_user_tally"), "{text}");
    assert!(text.contains("set_lk"), "{text}");
    assert!(text.contains("GOMP_critical_start"), "{text}");
}

/// The trace's mutex lock and unlock events on `addr`.
fn mutex_events_at(ix: &Index, addr: u64) -> usize {
    ix.trace
        .events
        .values()
        .flatten()
        .filter(|e| {
            e.addr == addr && (e.op == Op::MutexLock as u8 || e.op == Op::MutexUnlock as u8)
        })
        .count()
}

#[test]
fn an_openmp_library_loaded_with_dlopen_is_recorded_not_aborted() {
    // libgomp is only in the dlopened library's local scope, where
    // RTLD_NEXT does not look: the hooks find it by its soname. Without
    // that the program aborted ("cannot resolve an interposed function").
    let dir = temp("omp-dlopen");
    let lib = gcc(
        "omp_dlopen.c",
        &["-DPLUGIN", "-fopenmp", "-shared", "-fPIC"],
        &dir.join("libplug.so"),
        &[],
    );
    let bin = gcc("omp_dlopen.c", &[], &dir.join("omp_dlopen"), &["-ldl"]);
    let run = record(&dir, &[], &bin, &[lib.to_str().unwrap()], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("plugin sections 10000 locks 10000"),
        "{}",
        run.stdout
    );
    let ix = Index::new(run.trace());
    check_integrity(&ix);
    // 2 threads x 5,000 x (critical + lock), each a lock and an unlock.
    let done = |op: Op| {
        ix.trace
            .events
            .values()
            .flatten()
            .filter(|e| e.op == op as u8 && phase::of(e.flags) == phase::DONE)
            .count()
    };
    assert_eq!(done(Op::MutexLock), 20_000, "{}", run.stderr);
    assert_eq!(done(Op::MutexUnlock), 20_000, "{}", run.stderr);
}

#[test]
fn another_runtime_under_libgomps_names_is_forwarded_unrecorded() {
    // Its lock word is a non-zero handle even when free: read as
    // libgomp's, every acquisition would be a wait that never happened.
    let dir = temp("omp-other");
    gcc(
        "omp_other_runtime.c",
        &["-DRUNTIME", "-shared", "-fPIC"],
        &dir.join("libfakeomp.so"),
        &[],
    );
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    let libdir = format!("-L{}", dir.display());
    let bin = gcc(
        "omp_other_runtime.c",
        &[],
        &dir.join("other"),
        &[&libdir, "-lfakeomp", &rpath],
    );
    let run = record(&dir, &[], &bin, &[], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    // Every call reached the runtime.
    assert!(run.stdout.contains("taken 1000 "), "{}", run.stdout);
    let lock = run
        .stdout
        .split_whitespace()
        .last()
        .map(hex)
        .expect("the lock's address");
    let ix = Index::new(run.trace());
    assert_eq!(mutex_events_at(&ix, lock), 0, "{}", run.stderr);
}

#[test]
fn openmp_region_ends_and_barriers_are_waits_blamed_on_the_slowest_thread() {
    // Ten regions of three threads: thread 2 reaches the explicit barrier
    // last (it waits for the others to be there first), thread 0 the end.
    let dir = temp("omp-regions");
    let bin = gcc(
        "omp_regions.c",
        &["-fopenmp"],
        &dir.join("omp_regions"),
        &[],
    );
    let run = record(&dir, &[], &bin, &[], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("regions 10"), "{}", run.stdout);
    let tid_of = |t: usize| -> u64 {
        let key = format!("omp_thread {t} tid ");
        run.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&key))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no tid for thread {t}: {}", run.stdout))
    };
    let ix = Index::new(run.trace());
    check_integrity(&ix);
    assert_eq!(ix.trace.footer.as_ref().unwrap().lost, 0, "{}", run.stderr);
    let barrier_events = barrier_events(&ix);
    // One barrier object, the region's outlined body, for both kinds.
    let addrs: std::collections::BTreeSet<u64> =
        barrier_events.iter().map(|(_, e)| e.addr).collect();
    assert_eq!(addrs.len(), 1, "{addrs:x?}");
    for t in 0..3 {
        let tid = tid_of(t);
        let done: Vec<&lockscope_format::Event> = barrier_events
            .iter()
            .filter(|(x, e)| *x == tid && phase::of(e.flags) == phase::DONE)
            .map(|(_, e)| e)
            .collect();
        // Per region: the explicit barrier, then the region's end.
        assert_eq!(done.len(), 20, "thread {t}");
        let ends = done
            .iter()
            .filter(|e| e.arg & barrier::REGION_END != 0)
            .count();
        assert_eq!(ends, 10, "thread {t}");
        // The end's last arriver (the serial one) is thread 0, every time.
        let serial = done.iter().filter(|e| e.arg & barrier::SERIAL != 0).count();
        assert_eq!(serial, if t == 0 { 10 } else { 0 }, "thread {t}");
    }

    // The report blames the explicit barrier's waits on thread 2 and the
    // region end's on thread 0, under the region's name.
    let text = ok(&lockscope(
        &["report", run.trace_path.to_str().unwrap()],
        None,
    ));
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("main._omp_fn.0"))
        .unwrap_or_else(|| panic!("no barrier line for the region:\n{text}"));
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cols[1], "20", "rounds: {line}");
    assert_eq!(cols[2], "60", "waits: {line}");
    // The last column: the last arrivers and the waiting they caused.
    let blamed = line.rsplit_once("  ").map_or("", |x| x.1);
    let names = |t: usize| blamed.contains(&format!("{}:", tid_of(t)));
    assert!(names(0) && names(2) && !names(1), "{line}");
    // The verdict names the region's barrier and the thread it waits for.
    assert!(
        text.contains("most barrier waiting at main._omp_fn.0, "),
        "{text}"
    );
    // Two thirds of the waiting is for thread 0 at the region's end: the
    // report says to balance the region's work, naming it.
    assert!(
        text.contains(&format!(
            "balance the work: main._omp_fn.0\n     balance the work before this barrier: thread {} arrives late",
            tid_of(0)
        )),
        "{text}"
    );
}

#[test]
fn openmp_sections_and_combined_loop_regions_are_recorded() {
    // GOMP_parallel_sections and GOMP_parallel_loop_dynamic (called as
    // older GCCs emit it for a combined `parallel for`): each region's
    // end is one round of its own barrier, on each of its 2 threads.
    let dir = temp("omp-entry");
    let bin = gcc(
        "omp_entry_points.c",
        &["-fopenmp"],
        &dir.join("omp_entry_points"),
        &[],
    );
    let run = record(&dir, &[], &bin, &[], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.starts_with("sections 2 loop 1000 body 0x"),
        "{}",
        run.stdout
    );
    let body = run
        .stdout
        .split_whitespace()
        .last()
        .map(hex)
        .expect("the body's address");
    let ix = Index::new(run.trace());
    check_integrity(&ix);
    let mut by_addr: std::collections::BTreeMap<u64, Vec<lockscope_format::Event>> =
        Default::default();
    for (_, e) in barrier_events(&ix) {
        by_addr.entry(e.addr).or_default().push(e);
    }
    assert_eq!(by_addr.len(), 2, "{by_addr:x?}");
    let loop_events = by_addr
        .get(&body)
        .expect("the loop region's barrier is its body");
    for evs in by_addr.values() {
        let done: Vec<_> = evs
            .iter()
            .filter(|e| phase::of(e.flags) == phase::DONE)
            .collect();
        assert_eq!(done.len(), 2, "{evs:?}");
        assert!(done.iter().all(|e| e.arg & barrier::REGION_END != 0));
        assert_eq!(
            done.iter().filter(|e| e.arg & barrier::SERIAL != 0).count(),
            1
        );
    }
    // No register is left for the call site: the body stands for it.
    assert!(
        loop_events.iter().all(|e| e.site == body),
        "{loop_events:?}"
    );
}

#[test]
fn a_thread_waiting_for_a_task_is_not_hung_by_the_region_barrier() {
    // Thread 0 busy-waits for a task that only the other thread, waiting
    // at the region's end, can run: libgomp's barrier runs it, lockscope's
    // does not. Without the time limit the recording hung for good; with
    // it (300 ms here) the waiting thread gives up, runs the task in
    // libgomp's barrier, and its region-end DONE is flagged GAVE_UP.
    let dir = temp("omp-task-spin");
    let bin = gcc(
        "omp_task_spin.c",
        &["-fopenmp"],
        &dir.join("omp_task_spin"),
        &[],
    );
    let trace = dir.join("t.lstrace");
    // `timeout`: a regression must fail the test, not hang the suite.
    let out = Command::new("timeout")
        .arg("120")
        .arg(env!("CARGO_BIN_EXE_lockscope"))
        .args(["record", "-q", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&bin)
        .env("LOCKSCOPE_OMP_WAIT_MS", "300")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "status {:?} (124: hung); stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done 2\n");
    let ix = Index::new(lockscope_format::Trace::open(&trace).unwrap());
    let gave_up = barrier_events(&ix)
        .iter()
        .filter(|(_, e)| phase::of(e.flags) == phase::DONE && e.arg & barrier::GAVE_UP != 0)
        .count();
    // One per region: the thread with the empty body, each time.
    assert_eq!(gave_up, 2);
}

// See issue 30: every process of a program without OpenMP opened
// libgomp's file and the loader's cache once per libgomp entry point at
// start (19 times: a failed `dlopen(RTLD_NOLOAD)` compares file
// identities), about 1 ms of each process's start-up.
#[test]
fn a_program_without_openmp_looks_for_libgomp_once_at_start() {
    let Some(strace) = lockscope_test_support::tool_or_skip("strace", "strace") else {
        return;
    };
    let dir = temp("omp_absent");
    let log = dir.join("openat.log");
    let run = record(
        &dir,
        &["-q"],
        &strace,
        &[
            "-f",
            "-qq",
            "-e",
            "trace=openat",
            "-o",
            log.to_str().unwrap(),
            "/bin/true",
        ],
        b"",
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let text = std::fs::read_to_string(&log).unwrap();
    // The preload library is in /bin/true under strace: its own file is
    // opened by the loader, so the log shows the preload at work.
    assert!(text.contains("liblockscope_preload.so"), "{text}");
    // Files opened, not the search path's misses (LD_LIBRARY_PATH under
    // `cargo test` adds several): one search at most.
    let opens = text
        .lines()
        .filter(|l| l.contains("libgomp.so") && !l.contains("= -1"))
        .count();
    assert!(opens <= 1, "libgomp opened {opens} times at start:\n{text}");
}
