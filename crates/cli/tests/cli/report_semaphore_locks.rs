//! Semaphores used as locks (CPython's `threading.Lock`, a `sem_t` mutex
//! in C) are reported as locks of kind `semaphore-lock` in every output;
//! semaphores used to signal or count stay semaphores. Ground truth: the
//! fixtures' own counts.

use crate::record_util;

use std::collections::BTreeMap;
use std::path::Path;

use record_util::{build_c, hex, kv, lockscope, ok, record, temp};
use serde_json::Value;

fn report_json(trace: &Path) -> Value {
    let t = trace.to_str().unwrap();
    serde_json::from_str(&ok(&lockscope(&["report", t, "--json"], None))).expect("JSON")
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

fn sem_locks(r: &Value) -> Vec<&Value> {
    r["locks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["kind"] == "semaphore-lock")
        .collect()
}

/// Every output names the lock: text, CSV, HTML and folded stacks.
fn check_every_output(trace: &Path, dir: &Path, addr: &str, site_fn: &str) {
    let t = trace.to_str().unwrap();
    let text = ok(&lockscope(&["report", t], None));
    assert!(text.contains("semaphore-lock"), "{text}");
    assert!(text.contains(site_fn), "{text}");
    let v = text
        .lines()
        .find(|l| l.starts_with("verdict:"))
        .unwrap_or_default();
    assert!(
        v.contains("threads waited for locks") && !v.contains("for locks 0.0%"),
        "verdict: {v}"
    );
    let csv = ok(&lockscope(&["report", t, "--csv"], None));
    assert!(
        csv.lines()
            .any(|l| l.contains("semaphore-lock") && l.contains(addr)),
        "{csv}"
    );
    let html = dir.join("r.html");
    ok(&lockscope(&["html", t, "-o", html.to_str().unwrap()], None));
    let h = std::fs::read_to_string(&html).unwrap();
    assert!(h.contains("semaphore-lock") && h.contains(site_fn));
    // pprof is written from the same stacks as the folded ones.
    let folded = ok(&lockscope(&["export", "--format", "folded", t], None));
    assert!(folded.contains(site_fn), "{folded}");
}

// A sem_t initialised to 1 and posted by its taker is a mutex.
#[test]
fn a_sem_t_used_as_a_mutex_is_reported_as_a_lock() {
    let dir = temp("semlock-mutex");
    let bin = build_c("report/sem_mutex", &dir);
    let run = record(&dir, &[], &bin, &[], b"");
    let truth = kv(run
        .stdout
        .lines()
        .find(|l| l.starts_with("semlock "))
        .expect("semlock line"));
    let (addr, total) = (
        hex(&truth["addr"]),
        truth["acquisitions"].parse::<u64>().unwrap(),
    );
    let r = report_json(&run.trace_path);
    let locks = sem_locks(&r);
    assert_eq!(locks.len(), 1, "{:#}", r["locks"]);
    let l = locks[0];
    assert_eq!(hex(l["address"].as_str().unwrap()), addr);
    assert_eq!(u(&l["acquisitions"]), total);
    // Main held it while the 4 threads started: each waited once.
    assert!(u(&l["contended"]) >= 4, "{l}");
    assert!(u(&l["wait_ns"]["total"]) > 0, "{l}");
    // Main's 50 ms hold.
    assert!(u(&l["hold_ns"]["max"]) >= 50_000_000, "{l}");
    // Per thread: acquisitions and failed trywaits exactly.
    let mut want: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for line in run.stdout.lines().filter(|l| l.starts_with("truth ")) {
        let m = kv(line);
        let e = want.entry(m["tid"].parse().unwrap()).or_default();
        let n: u64 = m["count"].parse().unwrap();
        match m["op"].as_str() {
            "MutexLock" => e.0 += n,
            _ => e.1 += n,
        }
    }
    let got: BTreeMap<u64, (u64, u64)> = l["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                u(&t["tid"]),
                (u(&t["acquisitions"]), u(&t["trylock_failures"])),
            )
        })
        .collect();
    assert_eq!(got, want);
    // The site is the user's function, and the blame names the lock.
    assert!(
        l["sites"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["function"] == "worker_loop"),
        "{l}"
    );
    assert!(r["blame"]
        .as_array()
        .unwrap()
        .iter()
        .any(|b| hex(b["lock"].as_str().unwrap()) == addr && u(&b["wait_ns"]) > 0));
    // Not also a semaphore row.
    assert!(r["semaphores"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| hex(s["address"].as_str().unwrap()) != addr));
    assert!(u(&r["verdict"]["lock_wait_ns"]) > 0);
    assert_eq!(u(&r["verdict"]["sem_wait_ns"]), 0, "{:#}", r["verdict"]);
    check_every_output(&run.trace_path, &dir, &format!("{addr:#x}"), "worker_loop");
}

// A producer-consumer pair, a hand-off to another thread and a pool held
// by two threads at once are semaphores, whatever their counts.
#[test]
fn a_counting_semaphore_stays_a_semaphore() {
    let dir = temp("semlock-counting");
    let bin = build_c("report/sem_counting", &dir);
    let run = record(&dir, &[], &bin, &[], b"");
    let r = report_json(&run.trace_path);
    assert!(sem_locks(&r).is_empty(), "{:#}", r["locks"]);
    let sems: BTreeMap<u64, (u64, u64)> = r["semaphores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                hex(s["address"].as_str().unwrap()),
                (u(&s["waits"]), u(&s["posts"])),
            )
        })
        .collect();
    let lines: Vec<_> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("sem "))
        .collect();
    assert_eq!(lines.len(), 4);
    for line in lines {
        let m = kv(line);
        let want = (m["waits"].parse().unwrap(), m["posts"].parse().unwrap());
        assert_eq!(sems.get(&hex(&m["addr"])), Some(&want), "{line}");
    }
}

// CPython 3.11's threading.Lock is a sem_t: sem_trywait, sem_wait,
// sem_clockwait (timed acquires), sem_post.
#[test]
fn a_python_threading_lock_is_reported_as_a_lock() {
    let Some(py) = lockscope_test_support::tool_or_skip("/usr/bin/python3", "python3") else {
        return;
    };
    let dir = temp("semlock-python");
    let script = record_util::workspace().join("tests/programs/report/python_lock.py");
    let run = record(&dir, &[], &py, &[script.to_str().unwrap()], b"");
    let want: BTreeMap<u64, u64> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("python-lock "))
        .map(|l| {
            let m = kv(l);
            (
                m["tid"].parse().unwrap(),
                m["acquisitions"].parse().unwrap(),
            )
        })
        .collect();
    assert_eq!(want.len(), 4, "{}", run.stdout);
    let r = report_json(&run.trace_path);
    // The user's lock: the one the worker threads took. Its address may
    // have been another lock's before (CPython frees and reuses them: the
    // main thread's imports), so only the workers' acquisitions are
    // exact; the interpreter's own semaphore-locks (each thread's start
    // and exit handshakes) are separate objects.
    let per_worker = |l: &Value| -> BTreeMap<u64, u64> {
        l["threads"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| want.contains_key(&u(&t["tid"])))
            .map(|t| (u(&t["tid"]), u(&t["acquisitions"])))
            .collect()
    };
    let locks = sem_locks(&r);
    let user: Vec<_> = locks.iter().filter(|l| per_worker(l) == want).collect();
    assert_eq!(user.len(), 1, "{:#}", r["locks"]);
    let l = user[0];
    // Main held it while the workers started.
    assert!(u(&l["contended"]) >= 4, "{l}");
    assert!(u(&l["wait_ns"]["total"]) > 0, "{l}");
    // The timed acquire that timed out (sem_clockwait), on its thread.
    let timeout = kv(run
        .stdout
        .lines()
        .find(|l| l.starts_with("python-lock-timeout "))
        .expect("timeout line"));
    let tt: u64 = timeout["tid"].parse().unwrap();
    let timeouts: Vec<(u64, u64)> = l["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| u(&t["timeouts"]) > 0)
        .map(|t| (u(&t["tid"]), u(&t["timeouts"])))
        .collect();
    assert_eq!(timeouts, vec![(tt, 1)], "{l}");
    let addr = l["address"].as_str().unwrap();
    assert!(!l["sites"].as_array().unwrap().is_empty());
    assert!(r["blame"]
        .as_array()
        .unwrap()
        .iter()
        .any(|b| b["lock"] == addr && u(&b["wait_ns"]) > 0));
    assert!(u(&r["verdict"]["lock_wait_ns"]) > 0, "{:#}", r["verdict"]);
    let text = ok(&lockscope(
        &["report", run.trace_path.to_str().unwrap()],
        None,
    ));
    let v = text
        .lines()
        .find(|l| l.starts_with("verdict:"))
        .unwrap_or_default();
    assert!(
        v.contains("threads waited for locks") && !v.contains("for locks 0.0%"),
        "verdict: {v}"
    );
}
