//! `lockscope report` on recorded fixture programs, compared with the
//! ground truth each program prints about itself (exact counts).

use crate::record_util;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use record_util::{build_c, build_rust, hex, kv, lockscope, ok, record, temp, truths, Truth};
use serde_json::Value;

const ACQ: &[&str] = &[
    "MutexLock",
    "MutexTrylock",
    "MutexTimedlock",
    "RwRdlock",
    "RwWrlock",
    "RwTryRdlock",
    "RwTryWrlock",
    "RwTimedRdlock",
    "RwTimedWrlock",
    "SpinLock",
    "SpinTrylock",
];
const TRY: &[&str] = &["MutexTrylock", "RwTryRdlock", "RwTryWrlock", "SpinTrylock"];

/// Records `prog` and returns (stdout of the program, report JSON).
fn record_and_report(dir: &Path, prog: &Path) -> (String, Value) {
    let run = record(dir, &[], prog, &[], b"");
    assert!(
        run.trace_path.exists(),
        "no trace written; stderr:\n{}",
        run.stderr
    );
    (run.stdout, report_json(&run.trace_path, &[]))
}

fn report_json(trace: &Path, extra: &[&str]) -> Value {
    let mut a = vec!["report", trace.to_str().unwrap(), "--json"];
    a.extend_from_slice(extra);
    serde_json::from_str(&ok(&lockscope(&a, None))).expect("report --json prints JSON")
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// The lock (pid, generation, address) of the report.
fn find_lock(r: &Value, pid: u32, gen: u32, addr: u64) -> Option<&Value> {
    r["locks"].as_array().unwrap().iter().find(|l| {
        u(&l["pid"]) == u64::from(pid)
            && u(&l["exec_generation"]) == u64::from(gen)
            && hex(l["address"].as_str().unwrap()) == addr
    })
}

/// Acquisitions and trylock failures per lock, per (lock, thread) and per
/// (lock, site function) equal the truth exactly.
fn check_locks(t: &[Truth], r: &Value) {
    type Key = (u32, u32, u64);
    let mut want: BTreeMap<Key, (u64, u64)> = BTreeMap::new();
    let mut per_thread: BTreeMap<(Key, u32), u64> = BTreeMap::new();
    let mut per_site: BTreeMap<(Key, String), u64> = BTreeMap::new();
    for x in t {
        if !ACQ.contains(&x.op.as_str()) {
            continue;
        }
        let k = (x.pid, x.gen, x.addr);
        if let Some((f, _)) = &x.site {
            *per_site.entry((k, f.clone())).or_default() += x.count;
            continue;
        }
        let e = want.entry(k).or_default();
        match x.phase.as_deref() {
            Some("done") => {
                e.0 += x.count;
                *per_thread.entry((k, x.tid)).or_default() += x.count;
            }
            Some("fail") if TRY.contains(&x.op.as_str()) => e.1 += x.count,
            _ => {}
        }
    }
    assert!(!want.is_empty(), "fixture printed no lock truth");
    for (&(pid, gen, addr), &(acq, fails)) in &want {
        let Some(l) = find_lock(r, pid, gen, addr) else {
            assert_eq!((acq, fails), (0, 0), "lock {addr:#x} of pid {pid} missing");
            continue;
        };
        assert_eq!(u(&l["acquisitions"]), acq, "acquisitions of {addr:#x}: {l}");
        assert_eq!(
            u(&l["trylock_failures"]),
            fails,
            "trylock failures of {addr:#x}"
        );
        assert!(u(&l["contended"]) <= acq);
    }
    for (&((pid, gen, addr), tid), &n) in &per_thread {
        let Some(l) = find_lock(r, pid, gen, addr) else {
            assert_eq!(n, 0);
            continue;
        };
        let got = l["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| u(&x["tid"]) == u64::from(tid))
            .map_or(0, |x| u(&x["acquisitions"]));
        assert_eq!(got, n, "acquisitions of {addr:#x} by thread {tid}");
    }
    for (((pid, gen, addr), f), &n) in &per_site {
        let l = find_lock(r, *pid, *gen, *addr).expect("lock with sites");
        let got: u64 = l["sites"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["function"].as_str() == Some(f.as_str()))
            .map(|s| u(&s["acquisitions"]))
            .sum();
        assert_eq!(got, n, "acquisitions of {addr:#x} from {f}");
    }
}

/// Every thread's breakdown sums to its lifetime (exactly; 1% allowed).
fn check_breakdown(r: &Value) {
    let threads = r["threads"].as_array().unwrap();
    assert!(!threads.is_empty());
    for t in threads {
        let sum: u64 = ["free_ns", "lock_ns", "unlock_ns", "hold_ns", "unknown_ns"]
            .iter()
            .map(|k| u(&t[k]))
            .sum();
        let life = u(&t["lifetime_ns"]);
        assert!(life > 0, "{t}");
        assert!(
            sum.abs_diff(life) * 100 <= life,
            "breakdown {sum} vs lifetime {life}: {t}"
        );
    }
}

#[test]
fn report_mutex_matches_ground_truth() {
    let dir = temp("report-mutex");
    let bin = build_c("mutex", &dir);
    let (out, r) = record_and_report(&dir, &bin);
    let t = truths(&out);
    check_locks(&t, &r);
    check_breakdown(&r);
    // Each worker's private mutex is used by one thread only.
    let privs: Vec<&Truth> = t
        .iter()
        .filter(|x| x.op == "MutexLock" && x.count == 20000 && x.site.is_none())
        .filter(|x| {
            t.iter()
                .filter(|y| y.addr == x.addr && y.op == "MutexLock" && y.site.is_none())
                .count()
                == 1
        })
        .collect();
    assert_eq!(privs.len(), 4, "four private locks");
    for p in privs {
        let l = find_lock(&r, p.pid, p.gen, p.addr).unwrap();
        assert_eq!(u(&l["contended"]), 0, "{l}");
        assert_eq!(u(&l["owner_changes"]), 0);
    }
    // The static lock is named by its symbol.
    let hot = r["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "hot")
        .expect("static lock `hot` named");
    assert_eq!(hot["kind"], "mutex");
}

#[test]
fn report_rwlock_matches_ground_truth() {
    let dir = temp("report-rwlock");
    let bin = build_c("rwlock", &dir);
    let (out, r) = record_and_report(&dir, &bin);
    check_locks(&truths(&out), &r);
    check_breakdown(&r);
    assert!(r["locks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l["kind"] == "rwlock"));
}

#[test]
fn report_condvar_matches_ground_truth() {
    let dir = temp("report-condvar");
    let bin = build_c("condvar", &dir);
    let (out, r) = record_and_report(&dir, &bin);
    let t = truths(&out);
    check_locks(&t, &r);
    check_breakdown(&r);
    // Condition waits and signals per condition variable.
    let mut waits: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for x in &t {
        match x.op.as_str() {
            "CondWait" => waits.entry(x.addr).or_default().0 += x.count,
            "CondSignal" => waits.entry(x.addr).or_default().1 += x.count,
            _ => {}
        }
    }
    for (addr, (w, s)) in waits {
        let c = r["conds"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| hex(c["address"].as_str().unwrap()) == addr)
            .unwrap_or_else(|| panic!("cond {addr:#x} missing"));
        assert_eq!((u(&c["waits"]), u(&c["signals"])), (w, s), "{c}");
    }
}

#[test]
fn report_barrier_sem_spin_matches_ground_truth() {
    let dir = temp("report-barrier");
    let bin = build_c("barrier_sem_spin", &dir);
    let (out, r) = record_and_report(&dir, &bin);
    let t = truths(&out);
    check_locks(&t, &r);
    check_breakdown(&r);
    let b = &r["barriers"][0];
    let per_thread: Vec<u64> = t
        .iter()
        .filter(|x| x.op == "BarrierWait" && x.phase.as_deref() == Some("done"))
        .map(|x| x.count)
        .collect();
    assert_eq!(u(&b["waits"]), per_thread.iter().sum::<u64>());
    assert_eq!(
        u(&b["rounds"]),
        per_thread[0],
        "one round per wait of each thread"
    );
    // Semaphores: posts and successful waits per semaphore.
    let mut sems: BTreeMap<u64, (u64, u64, u64)> = BTreeMap::new();
    for x in &t {
        let e = sems.entry(x.addr).or_default();
        match (x.op.as_str(), x.phase.as_deref()) {
            ("SemPost", _) => e.0 += x.count,
            ("SemWait" | "SemTimedwait" | "SemTrywait", Some("done")) => e.1 += x.count,
            ("SemTrywait", Some("fail")) => e.2 += x.count,
            _ => {}
        }
    }
    for s in r["semaphores"].as_array().unwrap() {
        let want = sems[&hex(s["address"].as_str().unwrap())];
        assert_eq!(
            (u(&s["posts"]), u(&s["waits"]), u(&s["trywait_failures"])),
            want,
            "{s}"
        );
    }
}

#[test]
fn report_futex_only_locks_from_rust_std() {
    let dir = temp("report-futex");
    let bin = build_rust("rust_std_mutex", &dir);
    let (out, r) = record_and_report(&dir, &bin);
    check_breakdown(&r);
    let locks = r["locks"].as_array().unwrap();
    // The std Mutex: every thread that printed a truth-std line waited on
    // a futex word inside the mutex's bytes at least once.
    for line in out.lines().filter(|l| l.starts_with("truth-std ")) {
        let m = kv(line);
        let (addr, size, tid) = (
            hex(&m["addr"]),
            m["size"].parse::<u64>().unwrap(),
            m["tid"].parse::<u64>().unwrap(),
        );
        let waited: u64 = locks
            .iter()
            .filter(|l| l["kind"].as_str().is_some_and(|k| k.starts_with("futex")))
            .filter(|l| (addr..addr + size).contains(&hex(l["address"].as_str().unwrap())))
            .flat_map(|l| l["threads"].as_array().unwrap())
            .filter(|x| u(&x["tid"]) == tid)
            .map(|x| u(&x["contended"]))
            .sum();
        assert!(
            waited >= 1,
            "thread {tid} never waited on the std mutex: {line}"
        );
    }
    // The hand-made futex word: exact failed waits (EAGAIN) and wakes.
    let t = truths(&out);
    let mut fails: BTreeMap<u64, u64> = BTreeMap::new();
    let mut wakes: BTreeMap<u64, u64> = BTreeMap::new();
    for x in &t {
        match x.op.as_str() {
            "FutexWait" => *fails.entry(x.addr).or_default() += x.count,
            "FutexWake" => *wakes.entry(x.addr).or_default() += x.count,
            _ => {}
        }
    }
    assert!(!fails.is_empty());
    for (addr, n) in fails {
        let l = locks
            .iter()
            .find(|l| l["kind"] == "futex" && hex(l["address"].as_str().unwrap()) == addr)
            .expect("hand-made futex word");
        assert_eq!(u(&l["trylock_failures"]), n, "{l}");
        assert!(l["acquisitions"].is_null(), "{l}");
        assert_eq!(u(&l["wakes"]), wakes[&addr]);
    }
}

#[test]
fn report_hold_across_sleep_and_blame_of_the_holder() {
    let dir = temp("report-sleep");
    let bin = build_c("report/sleep_hold", &dir);
    let (out, r) = record_and_report(&dir, &bin);
    check_locks(&truths(&out), &r);
    check_breakdown(&r);
    let hold = kv(out.lines().find(|l| l.starts_with("hold ")).unwrap());
    let (pid, addr, hold_ns) = (
        hold["pid"].parse::<u32>().unwrap(),
        hex(&hold["addr"]),
        hold["hold_ns"].parse::<u64>().unwrap(),
    );
    let l = find_lock(&r, pid, 0, addr).unwrap();
    let max_hold = u(&l["hold_ns"]["max"]);
    assert!(
        max_hold.abs_diff(hold_ns) * 20 <= hold_ns,
        "recorded hold {max_hold} ns vs {hold_ns} ns measured by the program"
    );
    let site = l["sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["function"] == "hold_and_sleep")
        .expect("holder's site symbolized");
    assert!(u(&site["hold_ns"]).abs_diff(hold_ns) * 20 <= hold_ns);
    assert_eq!(u(&l["contended"]), 1);
    // Blame: the waiter's wait goes to the holder's critical section.
    let b = kv(out.lines().find(|l| l.starts_with("blame ")).unwrap());
    let (waiter, holder) = (
        b["waiter"].parse::<u64>().unwrap(),
        b["holder"].parse::<u64>().unwrap(),
    );
    let top = &r["blame"][0];
    assert_eq!(u(&top["waiter_tid"]), waiter, "{top}");
    assert_eq!(u(&top["holder_tid"]), holder, "{top}");
    assert!(
        top["holder_site"]
            .as_str()
            .unwrap()
            .starts_with("hold_and_sleep "),
        "{top}"
    );
    assert!(
        top["waiter_site"]
            .as_str()
            .unwrap()
            .starts_with("wait_for_it "),
        "{top}"
    );
    // The holder's share is the part of its 200 ms section the waiter
    // spent waiting (it started waiting 20 ms or more into it); the rest
    // of the wait, after the release, is wake-up latency, charged to
    // nobody. Together they are the whole wait.
    let to_holder = u(&top["wait_ns"]);
    assert!(
        to_holder <= hold_ns + hold_ns / 20,
        "{top} vs hold {hold_ns}"
    );
    assert!(to_holder >= hold_ns / 2, "{top} vs hold {hold_ns}");
    let wait = u(&l["wait_ns"]["total"]);
    let blamed: u64 = r["blame"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["lock"] == l["address"])
        .map(|b| u(&b["wait_ns"]))
        .sum();
    assert_eq!(blamed, wait, "blame sums to the wait");
    for b in r["blame"].as_array().unwrap().iter().skip(1) {
        assert!(b["holder_tid"].is_null(), "only the holder and nobody: {b}");
    }
    // The solo lock is used by the waiter thread only.
    let solo = r["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "solo_lock")
        .unwrap();
    assert_eq!((u(&solo["acquisitions"]), u(&solo["contended"])), (1000, 0));
}

#[test]
fn report_text_csv_and_options_work_on_a_recording() {
    let dir = temp("report-text");
    let bin = build_c("report/sleep_hold", &dir);
    let run = record(&dir, &[], &bin, &[], b"");
    // `record`'s summary ranks locks by time waited and names
    // them by symbol, with a user-facing kind.
    assert!(
        run.stderr.contains(
            "lockscope: locks that made threads wait longest:\n  1. held_lock (mutex, pid "
        ),
        "{}",
        run.stderr
    );
    let text = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_lockscope"))
            // Text is fitted to $COLUMNS when set: these tests read the wide layout.
            .env_remove("COLUMNS")
            .arg("report")
            .arg(&run.trace_path)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let t = text(&[]);
    for needle in [
        "LOCKS",
        "held_lock",
        "BLAME",
        "hold_and_sleep",
        "THREADS",
        "recorder overhead subtracted",
    ] {
        assert!(t.contains(needle), "{needle} missing from:\n{t}");
    }
    let csv = text(&["--csv", "locks"]);
    assert!(csv.starts_with("address,pid,kind,name,"), "{csv}");
    assert_eq!(csv.lines().count(), 3, "{csv}");
    let csv = text(&["--csv", "threads"]);
    assert_eq!(csv.lines().count(), 4, "{csv}");
    let only = text(&["--lock", "solo_lock", "--csv"]);
    assert_eq!(only.lines().count(), 2, "{only}");
    let top = text(&["--top", "1", "--sort", "acquisitions", "--csv"]);
    assert!(top.lines().nth(1).unwrap().contains("solo_lock"), "{top}");
    let min = text(&["--min-wait", "1ms", "--csv"]);
    assert_eq!(min.lines().count(), 2, "{min}");
    // Bad arguments are errors that name the option.
    let out = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["report", "--sort", "bogus"])
        .arg(&run.trace_path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--sort"));
    let out = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["report", "/nonexistent/x.lstrace"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn report_fork_exec_keeps_each_process_image_apart() {
    let dir = temp("report-fork");
    let bin = build_c("fork_exec", &dir);
    let (out, r) = record_and_report(&dir, &bin);
    let t = truths(&out);
    // The same static mutex in three images (parent, forked child, the
    // child after exec): three locks, each with its own exact count.
    let images: std::collections::BTreeSet<(u32, u32)> = t.iter().map(|x| (x.pid, x.gen)).collect();
    assert!(images.len() >= 3, "{images:?}");
    check_locks(&t, &r);
    check_breakdown(&r);
}
