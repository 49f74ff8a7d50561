//! `lockscope critical-path` on fixtures whose critical path is known by
//! construction.

#[path = "record_util/mod.rs"]
mod record_util;

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
