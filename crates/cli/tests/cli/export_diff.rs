//! `lockscope diff`: locks matched by symbol across two
//! recordings (never by address), the change per lock and the verdict.

use crate::export_util;

use std::path::Path;

use export_util::{build_c, lockscope, record, temp};
use serde_json::Value;

fn diff_json(a: &Path, b: &Path) -> Value {
    let out = lockscope(&[
        "diff".as_ref(),
        a.as_os_str(),
        b.as_os_str(),
        "--json".as_ref(),
    ]);
    serde_json::from_slice(&out).expect("diff --json prints JSON")
}

fn lock<'a>(d: &'a Value, name: &str) -> &'a Value {
    d["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["lock"] == name)
        .unwrap_or_else(|| panic!("no {name} in {d}"))
}

/// Records `bin args` into `dir/name.lstrace`.
fn rec(dir: &Path, name: &str, bin: &Path, args: &[&str]) -> std::path::PathBuf {
    let run = record(dir, &[], bin, args, b"");
    assert!(run.trace_path.exists(), "{}", run.stderr);
    let p = dir.join(format!("{name}.lstrace"));
    std::fs::rename(&run.trace_path, &p).unwrap();
    p
}

#[test]
fn diff_same_program_twice_matches_every_lock() {
    let dir = temp("i11-diff-same");
    let bin = build_c("report/sleep_hold", &dir);
    let a = rec(&dir, "a", &bin, &[]);
    let b = rec(&dir, "b", &bin, &[]);
    let d = diff_json(&a, &b);
    assert_eq!(d["schema"], "lockscope.diff/1");
    // Same program: the same two locks, found in both runs although ASLR
    // put them at other addresses, with the same acquisition counts.
    let locks = d["locks"].as_array().unwrap();
    assert_eq!(locks.len(), 2, "{d}");
    for (name, n) in [("held_lock", 2.0), ("solo_lock", 1000.0)] {
        let l = lock(&d, name);
        assert_eq!(l["in_a"], true);
        assert_eq!(l["in_b"], true);
        assert_eq!(l["acquisitions"]["before"], n);
        assert_eq!(l["acquisitions"]["after"], n);
        assert_eq!(l["acquisitions"]["percent"], 0.0);
    }
    // held_lock waited about as long (a sleep in the holder) both times.
    let w = &lock(&d, "held_lock")["wait_ns"];
    assert!(w["before"].as_f64().unwrap() > 1e8, "{w}");
    assert!(w["percent"].as_f64().unwrap().abs() < 50.0, "{w}");
    assert!(d["verdict"]
        .as_str()
        .unwrap()
        .starts_with("held_lock wait "));
}

#[test]
fn diff_fixed_variant_shows_the_wait_gone() {
    let dir = temp("i11-diff-fixed");
    let bin = build_c("export/queue_lock", &dir);
    let a = rec(&dir, "before", &bin, &[]);
    let b = rec(&dir, "after", &bin, &["fixed"]);
    let d = diff_json(&a, &b);
    let l = lock(&d, "queue_lock");
    // 4 threads x 25 items, both runs.
    assert_eq!(l["acquisitions"]["before"], 100.0);
    assert_eq!(l["acquisitions"]["after"], 100.0);
    let (wb, wa) = (
        l["wait_ns"]["before"].as_f64().unwrap(),
        l["wait_ns"]["after"].as_f64().unwrap(),
    );
    // Before: three threads queue behind 1 ms of work, 100 times.
    assert!(wb > 50e6, "{l}");
    assert!(wa < wb / 5.0, "{l}");
    assert!(
        l["contended_fraction"]["after"].as_f64().unwrap()
            < l["contended_fraction"]["before"].as_f64().unwrap()
    );
    let wall = &d["wall_ns"];
    assert!(
        wall["after"].as_f64().unwrap() < wall["before"].as_f64().unwrap(),
        "{wall}"
    );
    // The verdict names the lock and both changes.
    let v = d["verdict"].as_str().unwrap();
    assert!(v.starts_with("queue_lock wait -"), "{v}");
    assert!(v.contains(", program -"), "{v}");
    // The text form starts with the same line.
    let text =
        String::from_utf8(lockscope(&["diff".as_ref(), a.as_os_str(), b.as_os_str()])).unwrap();
    assert_eq!(text.lines().next(), Some(v));
    assert!(text.contains("worker (queue_lock.c:"), "{text}");
}

// See issue 32: diff compared two different programs without a word, and
// its table was 122 columns wide.
#[test]
fn diff_of_two_different_programs_says_so_and_fits_100_columns() {
    let dir = temp("diff-other");
    let a_bin = build_c("report/sleep_hold", &dir);
    let b_bin = build_c("export/queue_lock", &dir);
    let a = rec(&dir, "a", &a_bin, &[]);
    let b = rec(&dir, "b", &b_bin, &[]);
    let d = diff_json(&a, &b);
    let w = d["warnings"].as_array().unwrap();
    assert_eq!(w.len(), 1, "{d}");
    let w = w[0].as_str().unwrap();
    assert!(
        w.contains("different programs (`sleep_hold` and `queue_lock`)"),
        "{w}"
    );
    let text =
        String::from_utf8(lockscope(&["diff".as_ref(), a.as_os_str(), b.as_os_str()])).unwrap();
    assert!(text
        .lines()
        .nth(1)
        .unwrap()
        .starts_with("WARNING: A and B are different programs"));
    for line in text
        .lines()
        .filter(|l| !l.starts_with("WARNING") && !l.starts_with("A: ") && !l.starts_with("B: "))
    {
        assert!(
            line.chars().count() <= 100,
            "{} columns: {line}",
            line.chars().count()
        );
    }
    // The same program twice: no warning.
    let a2 = rec(&dir, "a2", &a_bin, &[]);
    assert_eq!(diff_json(&a, &a2)["warnings"], serde_json::json!([]));
}

// Two runs of the same program: the held lock's wait comes with the
// spread estimated from its waiting threads, and the verdict calls a
// change within twice that spread what it may be, noise.
#[test]
fn diff_estimates_the_spread_of_a_locks_wait_from_its_threads() {
    let dir = temp("diff-spread");
    let bin = build_c("export/queue_lock", &dir);
    let a = rec(&dir, "a", &bin, &[]);
    let b = rec(&dir, "b", &bin, &[]);
    let d = diff_json(&a, &b);
    let l = lock(&d, "queue_lock");
    let sp = l["wait_spread_percent"]
        .as_f64()
        .expect("several waiting threads");
    assert!(sp > 0.0, "{l}");
    let p = l["wait_ns"]["percent"].as_f64().unwrap();
    assert_eq!(l["wait_change_exceeds_spread"], p.abs() > 2.0 * sp, "{l}");
    let v = d["verdict"].as_str().unwrap();
    assert_eq!(
        v.contains("within the run-to-run spread"),
        p.abs() <= 2.0 * sp,
        "{v}"
    );
}
