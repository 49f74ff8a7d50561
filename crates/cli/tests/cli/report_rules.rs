//! Rules that hold on recorded programs whose behaviour is known: which
//! condition variables are locks, which advice comes first, and a verdict
//! that says what the recording can and cannot support. Needs the
//! preload library (build the workspace first, or set
//! `LOCKSCOPE_PRELOAD_LIB`).

use crate::record_util;

use std::path::Path;

use record_util::{build_c, lockscope, ok, record, temp};
use serde_json::Value;

fn json_report(trace: &Path) -> Value {
    let a = ["report", trace.to_str().unwrap(), "--json"];
    serde_json::from_str(&ok(&lockscope(&a, None))).unwrap()
}

fn cond<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["conds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no condition variable {name}: {}", r["conds"]))
}

// See issue 28: the rule fired on a bounded queue's `notfull`.
#[test]
fn a_bounded_queue_is_not_a_condition_variable_used_as_a_lock() {
    let dir = temp("rules-queue");
    let bin = build_c("report/bounded_queue", &dir);
    let run = record(&dir, &[], &bin, &[], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("truth-queue items=400 consumed=400"),
        "{}",
        run.stdout
    );
    let r = json_report(&run.trace_path);
    // The waits the old rule took for a lock's are there: the producer
    // waits on `notfull` for the slow consumers, far more than on qlock.
    let notfull = cond(&r, "notfull");
    let lock_wait: u64 = r["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["wait_ns"]["total"].as_u64().unwrap())
        .sum();
    let w = notfull["wait_ns"]["total"].as_u64().unwrap();
    assert!(w > lock_wait, "notfull {w} ns, locks {lock_wait} ns");
    assert_eq!(r["cond_locks"], Value::Array(vec![]), "{}", r["cond_locks"]);
    let v = r["verdict"]["text"].as_str().unwrap();
    assert!(!v.contains("used as a lock"), "{v}");
}

// See issue 28: pbzip2's one long wait for its workers was called a lock.
#[test]
fn a_single_completion_wait_is_not_a_condition_variable_used_as_a_lock() {
    let dir = temp("rules-completion");
    let bin = build_c("report/completion_wait", &dir);
    let run = record(&dir, &[], &bin, &[], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("truth-done waits=1 workers=2"),
        "{}",
        run.stdout
    );
    let r = json_report(&run.trace_path);
    let c = cond(&r, "all_done");
    assert_eq!(c["waits"], 1);
    // A third of the threads' time: a share the old rule took for a lock.
    assert!(
        c["wait_ns"]["total"].as_u64().unwrap() as f64
            >= 0.2 * r["verdict"]["thread_time_ns"].as_u64().unwrap() as f64,
        "{c}"
    );
    assert_eq!(r["cond_locks"], Value::Array(vec![]), "{}", r["cond_locks"]);
}

/// gil_like.c's three threads take turns on a flag: the rule fires, and
/// says on what evidence (hand-offs between waiters, one holder at a
/// time), in JSON and in text.
#[test]
fn a_gil_like_flag_is_a_condition_variable_used_as_a_lock() {
    let dir = temp("rules-gil");
    let bin = build_c("report/gil_like", &dir);
    // The workers take turns through the condition variable only when
    // they run at once: on a loaded 2-CPU machine one may run many rounds
    // alone. A recording whose gil_cond saw fewer than 20 waits is taken
    // again (up to four in all); one with more must fire the rule. It
    // used to stay silent in about 1 recording of 10 with hundreds of
    // waits: a worker preempted between unlocking and signalling seemed
    // to hold the flag on (1.12 holders at once); a holding now ends at
    // the section that gives it up.
    let mut attempt = 0;
    let (run, r) = loop {
        attempt += 1;
        let run = record(&dir, &[], &bin, &[], b"");
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert!(run.stdout.contains("rounds=900"), "{}", run.stdout);
        let r = json_report(&run.trace_path);
        let waits = cond(&r, "gil_cond")["waits"].as_u64().unwrap();
        if waits >= 20 || attempt == 4 {
            break (run, r);
        }
        eprintln!("recording {attempt}: the workers barely overlapped ({waits} waits)");
    };
    let cl = r["cond_locks"].as_array().unwrap();
    assert_eq!(
        cl.len(),
        1,
        "{cl:?} after {attempt} recordings: {}",
        r["conds"]
    );
    let c = &cl[0];
    assert_eq!(c["name"], "gil_cond");
    // Waits ended by a worker that waits on it too (all of them unless a
    // worker ran its 300 rounds without ever waiting).
    let signalled: u64 = c["blame"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| !b["signaller_tid"].is_null())
        .map(|b| b["waits"].as_u64().unwrap())
        .sum();
    let handoffs = c["handoffs"].as_u64().unwrap();
    assert!((4..=signalled).contains(&handoffs), "{c}");
    // The flag excludes, and the mutex orders the end of one holding
    // before the start of the next: exactly one holder at a time, however
    // the workers are scheduled (the bound leaves room for rounding).
    let h = c["holders_at_once"].as_f64().unwrap();
    assert!((1.0..=1.0 + 1e-9).contains(&h), "{c}");
    assert!(c["holdings"].as_u64().unwrap() >= 1, "{c}");
    let text = ok(&lockscope(
        &["report", run.trace_path.to_str().unwrap()],
        None,
    ));
    assert!(
        text.contains(&format!(
            "{handoffs} passed on between its waiters, held by {h:.2} threads at a time"
        )),
        "{text}"
    );
}

// See issue 28: a lock held across a 20 ms sleep got "spin then park"
// first and "reduce hold" second.
#[test]
fn a_lock_held_across_a_sleep_gets_reduce_hold_first() {
    let dir = temp("rules-sleep");
    let bin = build_c("report/hold_across_sleep", &dir);
    let run = record(&dir, &[], &bin, &[], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("truth-sleep rounds=30"),
        "{}",
        run.stdout
    );
    let r = json_report(&run.trace_path);
    let recs: Vec<&Value> = r["recommendations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["lock"] == "slow_lock")
        .collect();
    assert!(!recs.is_empty(), "{}", r["recommendations"]);
    // First: shorten the sleeping section. An algorithm may follow (on a
    // machine with fewer CPUs than waiters plus holder), never before.
    assert_eq!(recs[0]["kind"], "reduce_hold", "{recs:?}");
    assert!(
        recs[0]["evidence_text"]
            .as_str()
            .unwrap()
            .contains("hold_and_sleep (hold_across_sleep.c:18)"),
        "{}",
        recs[0]
    );
    // Each of the 30 sections lasts at least its 20 ms sleep.
    assert!(
        recs[0]["evidence"]["site_mean_hold_ns"].as_f64().unwrap() >= 20e6,
        "{}",
        recs[0]
    );
    for x in &recs[1..] {
        assert!(
            x["wait_addressed_ns"].as_u64() < recs[0]["wait_addressed_ns"].as_u64(),
            "{x}"
        );
        if x["kind"] == "spin_then_park" || x["kind"] == "queue_lock" {
            assert!(!x["evidence"]["wait_in_long_section_ns"].is_null(), "{x}");
        }
    }
}

// See issue 28: a static binary's empty recording said "no thread
// waited" instead of "nothing was recorded".
#[test]
fn a_static_binary_gets_nothing_was_recorded_not_no_thread_waited() {
    let dir = temp("rules-static");
    let src = record_util::workspace().join("tests/programs/report/completion_wait.c");
    let bin = dir.join("completion_wait_static");
    let st = std::process::Command::new("gcc")
        .args(["-static", "-O2", "-g", "-pthread", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("gcc");
    if !st.success() {
        // glibc's static archive is in libc6-dev, which gcc's C fixtures
        // need anyway: under scripts/test.sh a failure is a broken set-up.
        assert!(
            std::env::var_os(lockscope_test_support::REQUIRE_TOOLS_ENV).is_none(),
            "gcc -static failed: libc.a (Debian package libc6-dev) is missing"
        );
        eprintln!(
            "NOTICE: gcc -static failed (no libc.a: apt-get install libc6-dev): test skipped"
        );
        return;
    }
    let run = record(&dir, &[], &bin, &[], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    // The program ran and did its work (one wait, two workers)...
    assert!(
        run.stdout.contains("truth-done waits=1 workers=2"),
        "{}",
        run.stdout
    );
    // ... but the recorder saw none of it.
    let r = json_report(&run.trace_path);
    assert_eq!(
        (r["events"].as_u64(), r["lost_events"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(r["threads"], Value::Array(vec![]));
    assert_eq!(r["verdict"]["nothing_recorded"], true, "{}", r["verdict"]);
    let v = r["verdict"]["text"].as_str().unwrap();
    assert!(v.starts_with("nothing was recorded"), "{v}");
    assert!(v.contains("LD_PRELOAD does not reach it"), "{v}");
    assert!(v.contains("`lockscope cc`"), "{v}");
    assert!(!v.contains("no thread waited"), "{v}");
    let text = ok(&lockscope(
        &["report", run.trace_path.to_str().unwrap()],
        None,
    ));
    assert!(text.contains(&format!("verdict: {v}")), "{text}");

    // A dynamically linked build of the same program is recorded, and
    // its verdict is an ordinary one, without the flag.
    let dynamic = build_c("report/completion_wait", &dir);
    let run = record(&dir, &[], &dynamic, &[], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let r = json_report(&run.trace_path);
    assert_eq!(r["threads"].as_array().unwrap().len(), 3);
    assert!(
        r["verdict"].get("nothing_recorded").is_none(),
        "{}",
        r["verdict"]
    );
    assert!(r["verdict"].get("lost_share").is_none(), "{}", r["verdict"]);
}

// See issue 28: with 57 % of the events lost the verdict stated exact
// percentages without a warning.
#[test]
fn a_verdict_with_lost_events_says_its_shares_are_lower_bounds() {
    let dir = temp("rules-lost");
    let bin = build_c("report/hot_short", &dir);
    // 8 KB buffers that may not grow, and drop when full: hot_short's
    // ~1.7 million events cannot all fit.
    let run = record(
        &dir,
        &[
            "--buffer-kb",
            "8",
            "--max-buffer-kb",
            "8",
            "--on-full",
            "drop",
        ],
        &bin,
        &[],
        b"",
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let r = json_report(&run.trace_path);
    let lost = r["lost_events"].as_u64().unwrap();
    let events = r["events"].as_u64().unwrap();
    assert!(lost > 0, "nothing lost with 8 KB buffers: {events} events");
    let share = lost as f64 / (events + lost) as f64;
    let got = r["verdict"]["lost_share"].as_f64().expect("lost_share");
    assert!((got - share).abs() < 1e-12, "{got} vs {share}");
    let v = r["verdict"]["text"].as_str().unwrap();
    let fmt = |n: u64| {
        let s = n.to_string();
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        out
    };
    let head = format!(
        "{} of {} events were lost ({:.1}%), so these shares are lower bounds and the \
         ranking is uncertain: threads waited for locks",
        fmt(lost),
        fmt(events + lost),
        share * 100.0
    );
    assert!(v.starts_with(&head), "{v}\nexpected: {head}");
}
