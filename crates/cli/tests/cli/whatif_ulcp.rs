//! `lockscope whatif --ulcp-free` (PerfPlay §4) on a fixture
//! whose every critical section is unnecessary: lookups of a read-only
//! table and per-thread counters under one global mutex.

use crate::detailed_support;

use std::process::Command;

use detailed_support::*;

#[test]
fn ulcp_free_predicts_a_gain_and_ranks_the_fixture_regions() {
    for c in compilers() {
        let dir = Scratch::new("whatif_ulcp");
        let bin = dir.path("ulcp_table");
        build_instrumented(c, &fixture("ulcp_table.c"), &bin);
        let trace = dir.path("t.lstrace");
        let args = ["2", "3000", "locked"].map(std::path::Path::new);
        // The lock makes a thread wait in the replay only if the two
        // threads overlapped while recorded. On a loaded 2-CPU machine a
        // recording can run them nearly one after the other (2 contended
        // acquisitions of 7,500 once in CI; 75 overlapping pairs of 7,500
        // sections in a full test run beside other builds), and removing
        // a lock then rightly gains nothing, since its gain is bounded by
        // the recorded wait: such a recording is taken again, up to five
        // in all. A model that never predicts a gain still fails below.
        let mut o = None;
        for _ in 0..5 {
            record(&bin, &args, &trace, &[]);
            let out = Command::new(lockscope())
                .args(["whatif", "--ulcp-free", "--json"])
                .arg(&trace)
                .output()
                .unwrap();
            // A gain counts only if some pair of sections gained: a
            // speedup above 1 with no pair that gained (seen in CI: "P
            // sums to 0") is a recording whose threads never waited for
            // each other, and the shares of the gain are then undefined.
            let gain = serde_json::from_slice::<serde_json::Value>(&out.stdout)
                .ok()
                .is_some_and(|j| {
                    let u = &j["ulcp_free"];
                    let pair_gain: u64 = u["regions"]
                        .as_array()
                        .map(|r| r.iter().filter_map(|r| r["gain_ns"].as_u64()).sum())
                        .unwrap_or(0);
                    u["speedup"].as_f64().is_some_and(|x| x > 1.0) && pair_gain > 0
                });
            o = Some(out);
            if gain {
                break;
            }
        }
        let o = o.unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(j["schema"], "lockscope.whatif/1");
        let u = &j["ulcp_free"];
        // Nothing done under the lock conflicts: every pair is a ULCP.
        assert_eq!(u["conflicts"], 0, "{}: {u:#}", c.label);
        assert!(u["ulcps"].as_u64().unwrap() > 0, "{}: {u:#}", c.label);
        assert!(
            u["speedup"].as_f64().unwrap() > 1.0,
            "{}: no gain predicted: {u:#}",
            c.label
        );
        let regions = u["regions"].as_array().unwrap();
        let names: Vec<String> = regions
            .iter()
            .map(|r| format!("{} <-> {}", r["first"], r["second"]))
            .collect();
        assert!(
            names.iter().any(|n| n.matches("lookup").count() == 2),
            "{}: no lookup/lookup region: {names:?}",
            c.label
        );
        assert!(
            regions.iter().all(|r| r["lock"] == "table_lock"),
            "{}: {names:?}",
            c.label
        );
        let p: f64 = regions.iter().map(|r| r["p"].as_f64().unwrap()).sum();
        assert!((p - 1.0).abs() < 1e-6, "{}: P sums to {p}", c.label);
        // Nothing conflicts, so the safe transformation frees the lock
        // as much as removing it does.
        let o = Command::new(lockscope())
            .args(["whatif", "--json", "--remove-lock", "table_lock"])
            .arg(&trace)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let rm: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let (a, b) = (
            u["speedup"].as_f64().unwrap(),
            rm["scenarios"][0]["speedup"].as_f64().unwrap(),
        );
        assert!(
            (a / b - 1.0).abs() < 0.02,
            "{}: ulcp-free {a} vs remove-lock {b}",
            c.label
        );
        // The report's gain line for the lock, with the
        // command that reproduces it.
        let report = analysis_text("report", &trace);
        let rm_range = &rm["scenarios"][0]["range"];
        let (lo, hi) = (rm_range[0].as_f64().unwrap(), rm_range[1].as_f64().unwrap());
        match report
            .lines()
            .find(|l| l.trim_start().starts_with("table_lock (waited"))
        {
            Some(line) => {
                assert!(
                    line.contains("(lockscope whatif t.lstrace --remove-lock table_lock)"),
                    "{line}"
                );
                let x: f64 = line
                    .split("without it ")
                    .nth(1)
                    .and_then(|r| r.split('x').next())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("{line}"));
                assert!((x / b - 1.0).abs() < 0.02, "{}: {line} vs {b}", c.label);
            }
            // A lock whose predicted gains (without it, with its sections
            // halved) are not larger than their range is left out, and the
            // report says so.
            None => {
                assert!(
                    b - 1.0 <= hi - lo,
                    "{}: gain {b} range {lo}-{hi}: {report}",
                    c.label
                );
                assert!(
                    report.contains("nor halving their critical sections gains more than"),
                    "{}: {report}",
                    c.label
                );
            }
        }
        let text = analysis_text("whatif", &trace);
        assert!(!text.contains("ULCP-free"), "only on request: {text}");
    }
}

#[test]
fn ulcp_free_refuses_a_timing_mode_trace() {
    let c = compilers()[0];
    let dir = Scratch::new("whatif_ulcp_timing");
    let bin = dir.path("ulcp_table_plain");
    build_plain(c, &fixture("ulcp_table.c"), &bin);
    let trace = dir.path("t.lstrace");
    let args = ["2", "200", "locked"].map(std::path::Path::new);
    record(&bin, &args, &trace, &[]);
    let o = Command::new(lockscope())
        .args(["whatif", "--ulcp-free"])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("detailed-mode trace") && err.contains("lockscope cc"),
        "{err}"
    );
    let o = Command::new(lockscope())
        .args(["whatif", "--rwlock", "table_lock"])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("detailed-mode trace") && err.contains("--readers SITE"),
        "{err}"
    );
}

/// `--rwlock LOCK` takes its readers from the read/write sets: in the
/// fixture, exactly the lookups only read (2 threads x 3000 rounds), the
/// bumps (one round in four) write. Making those readers is what
/// `--readers lookup` does by naming the site, so both predict the same.
///
/// The counts and the equality are exact in every recording. Whether
/// sharing the lookups gains is not asserted: with one write in four, a
/// glibc rwlock's waiters sleep at every hand-off, which the replay
/// charges since the recorder measures the machine's wake-up latency
/// (`tests/programs/whatif/rw_table.c` at 20 % updates ran 0.2-1.06x
/// as fast as the mutex); the prediction must use that latency (not be
/// flagged for missing it) and lie within its range. A recording whose latency
/// measurement failed under load is made again, up to three times.
#[test]
fn rwlock_from_read_sets_shares_exactly_the_read_only_sections() {
    let c = compilers()[0];
    let dir = Scratch::new("whatif_rwlock");
    let bin = dir.path("ulcp_table");
    build_instrumented(c, &fixture("ulcp_table.c"), &bin);
    let mut speedups = Vec::new();
    for _ in 0..3 {
        let trace = dir.path("t.lstrace");
        let args = ["2", "3000", "locked"].map(std::path::Path::new);
        record(&bin, &args, &trace, &[]);
        let o = Command::new(lockscope())
            .args([
                "whatif",
                "--json",
                "--top",
                "0",
                "--rwlock",
                "table_lock",
                "--readers",
                "lookup",
            ])
            .arg(&trace)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let sc = j["scenarios"].as_array().unwrap();
        let rw = sc
            .iter()
            .find(|s| {
                s["scenario"]
                    .as_str()
                    .unwrap()
                    .contains("reader-writer lock table_lock")
            })
            .unwrap_or_else(|| panic!("no --rwlock scenario: {j:#}"));
        let named = sc
            .iter()
            .find(|s| {
                s["scenario"]
                    .as_str()
                    .unwrap()
                    .contains("entered at lookup")
            })
            .unwrap_or_else(|| panic!("no --readers scenario: {j:#}"));
        assert!(
            rw["scenario"]
                .as_str()
                .unwrap()
                .contains("the 6000 of its 7500 critical sections that only read"),
            "{rw:#}"
        );
        assert_eq!(rw["predicted_wall_ns"], named["predicted_wall_ns"], "{j:#}");
        let speedup = rw["speedup"].as_f64().unwrap();
        let range = [
            rw["range"][0].as_f64().unwrap(),
            rw["range"][1].as_f64().unwrap(),
        ];
        assert!(range[0] <= speedup && speedup <= range[1], "{rw:#}");
        let why = rw["uncertain"].as_str().unwrap_or("");
        if !why.contains("format 1.2") {
            return;
        }
        speedups.push(speedup);
    }
    panic!("no recording carried the sleeping wake-up latency: {speedups:?}");
}

/// On a fixture with every kind of pair, `--ulcp-free` counts exactly the
/// conflicting consecutive pairs `lockscope ulcp` reports (they keep
/// their order) and the unnecessary ones as ULCPs.
#[test]
fn ulcp_free_keeps_the_conflicts_ulcp_reports() {
    let c = compilers()[0];
    let dir = Scratch::new("whatif_ulcp_kinds");
    let bin = dir.path("ulcp_kinds");
    build_instrumented(c, &fixture("ulcp_kinds.c"), &bin);
    let (trace, tf) = (dir.path("t.lstrace"), dir.path("truth.txt"));
    // Pairs exist only where threads took turns: a loaded 2-CPU machine
    // can run the four threads in long streaks (15 pairs of 2,400
    // sections and none conflicting, once in CI, with the other tests of
    // this file recording at the same time). Such a recording is taken
    // again, up to three in all.
    let (mut u, mut conflict, mut unnecessary) = (serde_json::Value::Null, 0, 0);
    for _ in 0..3 {
        record(&bin, &[&tf], &trace, &[]);
        u = analysis_json("ulcp", &trace);
        (conflict, unnecessary) = (0, 0);
        for l in u["locks"].as_array().unwrap() {
            for (k, v) in l["pairs"].as_object().unwrap() {
                let n = v.as_u64().unwrap_or(0);
                if k == "conflict" {
                    conflict += n;
                } else {
                    unnecessary += n;
                }
            }
        }
        if conflict > 0 {
            break;
        }
    }
    assert!(conflict > 0, "the fixture must conflict: {u:#}");
    let o = Command::new(lockscope())
        .args(["whatif", "--ulcp-free", "--json", "--top", "0"])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let w = &j["ulcp_free"];
    assert_eq!(w["locks_kept"], 0, "{w:#}");
    assert_eq!(w["conflicts"].as_u64().unwrap(), conflict, "{w:#}");
    assert_eq!(w["ulcps"].as_u64().unwrap(), unnecessary, "{w:#}");
}
