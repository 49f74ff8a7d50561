//! `lockscope critical-path` on fixtures whose critical path is known by
//! construction.

use crate::record_util;

use std::path::Path;
use std::process::Command;

use record_util::{build_c, record, temp};
use serde_json::Value;

fn critical_path(trace: &Path) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["critical-path", "--json"])
        .arg(trace)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "critical-path failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn replayed_wall(trace: &Path) -> u64 {
    let out = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["replay", "--json"])
        .arg(trace)
        .output()
        .unwrap();
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    j["unrecorded_wall_ns"].as_u64().unwrap()
}

/// Main sleeps far longer than two helpers fight over `side`: the path
/// is main's alone, and `side`, though contended, is off it.
#[test]
fn a_contended_lock_off_the_critical_path_is_shown_as_such() {
    let dir = temp("critical-offpath");
    let prog = build_c("offpath", &dir);
    let run = record(&dir, &[], &prog, &[], b"");
    assert!(run.trace_path.exists(), "{}", run.stderr);
    let j = critical_path(&run.trace_path);
    assert_eq!(j["schema"], "lockscope.critical_path/1");
    assert_eq!(
        j["length_ns"].as_u64().unwrap(),
        replayed_wall(&run.trace_path)
    );
    let threads = j["threads"].as_array().unwrap();
    // The main thread (first recorded) carries (almost) the whole path.
    let main = &threads[0];
    assert!(
        main["ns"].as_u64().unwrap() * 10 >= j["length_ns"].as_u64().unwrap() * 9,
        "{j:#}"
    );
    for l in j["locks"].as_array().unwrap() {
        if l["lock"] == "side" {
            assert_eq!(l["held_on_path_ns"], 0, "{j:#}");
            assert_eq!(l["off_path"], true, "{j:#}");
        }
    }
}

/// Two threads serialized by one lock over disjoint data: the lock is on
/// the path for most of it.
#[test]
fn a_serializing_lock_is_on_the_critical_path() {
    let dir = temp("critical-disjoint");
    let prog = build_c("whatif_disjoint", &dir);
    let run = record(&dir, &[], &prog, &[], b"");
    assert!(run.trace_path.exists(), "{}", run.stderr);
    let j = critical_path(&run.trace_path);
    let len = j["length_ns"].as_u64().unwrap();
    assert_eq!(len, replayed_wall(&run.trace_path));
    let big = j["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["lock"] == "big")
        .unwrap_or_else(|| panic!("{j:#}"));
    assert_eq!(big["off_path"], false, "{j:#}");
    // Each worker spends most of its CPU time in `big`, so the path goes
    // through it (how much of the path depends on how the recorded run
    // was scheduled on a shared machine: 25-90 % was seen).
    assert!(big["held_on_path_ns"].as_u64().unwrap() * 10 > len, "{j:#}");
    // Deterministic.
    assert_eq!(critical_path(&run.trace_path), j);
}

/// Compiles tests/programs/report/cxx_sites.cpp with g++ at `opt`.
fn build_cxx_sites(dir: &Path, opt: &str) -> std::path::PathBuf {
    record_util::build_cxx(
        "report/cxx_sites",
        dir,
        &format!("cxx_sites{opt}"),
        &[opt, "-g"],
    )
}

/// The critical path names each section as `report` does: the user's
/// function (by_lock, by_guard, by_unique, main), never libstdc++'s
/// `__gthread_mutex_lock` alone, at -O2 (the lock call inlined) and at
/// -O0 (`std::mutex::lock()` out of line: one return address for every
/// caller, named by the callers its call paths show); one row per site,
/// and the text fits 100 columns.
// See issue 27, item 6.
#[test]
fn critical_path_sites_are_the_users_frames_in_one_row_each_within_100_columns() {
    let dir = temp("critical-cxx-sites");
    for opt in ["-O2", "-O0"] {
        let bin = build_cxx_sites(&dir, opt);
        let run = record(&dir, &[], &bin, &[], b"");
        assert_eq!(run.code, 0, "{}", run.stderr);
        let j = critical_path(&run.trace_path);
        let m = j["locks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["lock"] == "m")
            .unwrap_or_else(|| panic!("{opt}: no lock m: {j:#}"));
        let sites: Vec<&str> = m["sites"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["site"].as_str().unwrap())
            .collect();
        assert!(!sites.is_empty(), "{opt}: m is on the path: {j:#}");
        let users = ["by_lock", "by_guard", "by_unique", "main"];
        for s in &sites {
            // At -O2 the lock call is inlined into the user's function.
            // At -O0 main's one acquisition never waited: it has no call
            // path of its own, the other threads' paths name three
            // different callers, and the runtime frame stays.
            assert!(
                users.iter().any(|u| s.starts_with(&format!("{u} (")))
                    || (opt == "-O0" && s.starts_with("__gthread_mutex_lock (")),
                "{opt}: site {s:?} names no user function"
            );
        }
        assert!(
            sites
                .iter()
                .any(|s| users.iter().any(|u| s.starts_with(&format!("{u} (")))),
            "{opt}: no site is a user function: {sites:?}"
        );
        let mut uniq = sites.clone();
        uniq.sort();
        uniq.dedup();
        assert_eq!(uniq.len(), sites.len(), "{opt}: a site twice: {sites:?}");
        let out = Command::new(env!("CARGO_BIN_EXE_lockscope"))
            .arg("critical-path")
            .arg(&run.trace_path)
            .output()
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        for line in text.lines() {
            assert!(line.chars().count() <= 100, "{opt}: too wide: {line:?}");
        }
    }
}

/// When the replay without the recorder differs from the recorded run,
/// the output says that its figures are the replay's, naming both.
#[test]
fn critical_path_says_its_figures_are_the_replays_when_they_differ() {
    let dir = temp("critical-differs");
    let prog = build_c("whatif_disjoint", &dir);
    let run = record(&dir, &[], &prog, &[], b"");
    assert!(run.trace_path.exists(), "{}", run.stderr);
    let j = critical_path(&run.trace_path);
    let len = j["length_ns"].as_u64().unwrap() as f64;
    let rec = j["recorded_wall_ns"].as_u64().unwrap() as f64;
    assert!(rec > 0.0, "{j:#}");
    let far = (len / rec - 1.0).abs() > 0.05;
    assert_eq!(j["differs"].is_string(), far, "{j:#}");
    // Two CPUs asked for where the recording had another count: always
    // said, whatever the lengths.
    let out = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["critical-path", "--json", "--cpus", "7"])
        .arg(&run.trace_path)
        .output()
        .unwrap();
    let j7: Value = serde_json::from_slice(&out.stdout).unwrap();
    let d = j7["differs"].as_str().unwrap_or_else(|| panic!("{j7:#}"));
    assert!(d.contains("on 7 CPUs"), "{d}");
}
