//! `lockscope ulcp` on fixtures whose ground truth is the logged order of
//! their critical sections: every pair classification must match exactly,
//! with gcc and with clang.

use crate::detailed_support;

use std::collections::BTreeMap;

use detailed_support::*;

/// Compares the ULCP JSON of the lock named `name` with the fixture's
/// truth file (`pairs KIND N` and `site FIRST SECOND KIND N` lines).
/// Locks taken inside the C/C++ runtime libraries may appear too; they are
/// not the fixture's business.
fn check_against_truth<'a>(
    label: &str,
    json: &'a serde_json::Value,
    name: &str,
    truth: &BTreeMap<String, String>,
) -> &'a serde_json::Value {
    assert_eq!(json["schema"], "lockscope.ulcp/1");
    let locks = json["locks"].as_array().unwrap();
    let l = locks
        .iter()
        .find(|l| l["name"] == name)
        .unwrap_or_else(|| panic!("{label}: no lock named {name}: {json:#}"));
    assert_eq!(
        l["sections"].as_u64().unwrap().to_string(),
        truth["sections"],
        "{label}: sections"
    );
    for kind in [
        "null_lock",
        "read_read",
        "disjoint_write",
        "benign",
        "conflict",
    ] {
        let want: u64 = truth[&format!("pairs {kind}")].parse().unwrap();
        assert_eq!(
            l["pairs"][kind].as_u64().unwrap(),
            want,
            "{label}: {kind} pairs"
        );
    }
    let want_sites: BTreeMap<String, u64> = truth
        .iter()
        .filter(|(k, _)| k.starts_with("site "))
        .map(|(k, v)| (k["site ".len()..].to_string(), v.parse().unwrap()))
        .collect();
    if want_sites.is_empty() {
        return l;
    }
    let got_sites: BTreeMap<String, u64> = l["site_pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                format!(
                    "{} {} {}",
                    s["first"].as_str().unwrap(),
                    s["second"].as_str().unwrap(),
                    s["kind"].as_str().unwrap()
                ),
                s["count"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got_sites, want_sites, "{label}: site pairs");
    l
}

#[test]
fn ulcp_kinds_match_ground_truth_exactly() {
    for c in compilers() {
        let dir = Scratch::new("ulcp");
        let bin = dir.path("ulcp_kinds");
        build_instrumented(c, &fixture("ulcp_kinds.c"), &bin);
        let (trace, tf) = (dir.path("t.lstrace"), dir.path("truth.txt"));
        // The workload must exercise every kind, or the test proves little.
        // Which pairs occur depends on how the scheduler interleaves the
        // threads: a run where one kind happens not to occur is recorded
        // again (the truth is whatever order the run logged, so every
        // attempt is checked exactly).
        let kinds = [
            "null_lock",
            "read_read",
            "disjoint_write",
            "benign",
            "conflict",
        ];
        let mut attempts = 0;
        let truth = loop {
            attempts += 1;
            record(&bin, &[&tf], &trace, &[]);
            let truth = truth(&tf);
            let missing: Vec<&str> = kinds
                .iter()
                .copied()
                .filter(|k| truth[&format!("pairs {k}")] == "0")
                .collect();
            if missing.is_empty() {
                break truth;
            }
            assert!(
                attempts < 5,
                "{}: no {missing:?} pair in {attempts} runs",
                c.label
            );
        };
        let json = analysis_json("ulcp", &trace);
        // The mutex is the static `lock`.
        let l = check_against_truth(c.label, &json, "lock", &truth);
        // Data objects: the conflicts are on `counter`, the benign pairs on
        // `flag`.
        for s in l["site_pairs"].as_array().unwrap() {
            let objs: Vec<&str> = s["objects"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o.as_str().unwrap())
                .collect();
            match s["kind"].as_str().unwrap() {
                "conflict" => assert_eq!(objs, ["counter"], "{}", c.label),
                "benign" => assert_eq!(objs, ["flag"], "{}", c.label),
                "read_read" => assert_eq!(objs, ["config"], "{}", c.label),
                "null_lock" => assert!(objs.is_empty()),
                _ => {}
            }
        }
        // Text output names the same totals.
        let text = analysis_text("ulcp", &trace);
        assert!(text.contains("lock ("), "{text}");
    }
}

#[test]
fn cxx_lock_guard_and_vector_match_ground_truth() {
    for c in compilers() {
        let dir = Scratch::new("ulcp-cxx");
        let bin = dir.path("cxx_inventory");
        build_instrumented(c, &fixture("cxx_inventory.cpp"), &bin);
        let (trace, tf) = (dir.path("t.lstrace"), dir.path("truth.txt"));
        record(&bin, &[&tf], &trace, &[]);
        let json = analysis_json("ulcp", &trace);
        // The std::mutex is inside the global `inv`.
        check_against_truth(c.label, &json, "inv", &truth(&tf));
    }
}

#[test]
fn make_project_built_with_lockscope_cc_matches_ground_truth() {
    for c in compilers() {
        let dir = Scratch::new("make");
        // The project includes ../truth.h: copy both.
        let proj = dir.path("multi");
        std::fs::create_dir_all(&proj).unwrap();
        for f in ["Makefile", "main.c", "worker.c", "shared.h"] {
            std::fs::copy(fixture("multi").join(f), proj.join(f)).unwrap();
        }
        std::fs::copy(fixture("truth.h"), dir.path("truth.h")).unwrap();
        let cc = format!("{} cc", lockscope().display());
        let o = std::process::Command::new("make")
            .arg("-C")
            .arg(&proj)
            .arg(format!("CC={cc}"))
            .env("LOCKSCOPE_CC", c.cc)
            .output()
            .expect("make is installed");
        assert!(
            o.status.success(),
            "make failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let (trace, tf) = (dir.path("t.lstrace"), dir.path("truth.txt"));
        record(&proj.join("prog"), &[&tf], &trace, &[]);
        let json = analysis_json("ulcp", &trace);
        check_against_truth(c.label, &json, "table_lock", &truth(&tf));
    }
}
