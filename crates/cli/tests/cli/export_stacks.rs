//! `lockscope export --format folded|pprof`: the exported
//! totals equal the report's, and `go tool pprof` reads the profile.

use crate::export_util;

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

use export_util::{lockscope, record_fixture, report_json, report_totals, require_tool};

/// `lockscope export --format FORMAT TRACE -o OUT`.
fn export(trace: &Path, format: &str, out: &Path) {
    lockscope(&[
        "export".as_ref(),
        "--format".as_ref(),
        format.as_ref(),
        trace.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
}

fn folded(trace: &Path, blame: bool) -> String {
    let mut args: Vec<&OsStr> = vec![
        "export".as_ref(),
        "--format".as_ref(),
        "folded".as_ref(),
        trace.as_os_str(),
    ];
    if blame {
        args.push("--blame".as_ref());
    }
    String::from_utf8(lockscope(&args)).unwrap()
}

/// Sum of the weights; every line is `frame;...;lock NAME weight`.
fn folded_total(text: &str) -> u64 {
    text.lines()
        .map(|l| {
            let (stack, w) = l.rsplit_once(' ').expect("a weight ends each line");
            let frames: Vec<&str> = stack.split(';').collect();
            assert!(frames.len() >= 2, "waiter or holder frame and lock: {l}");
            assert!(frames.last().unwrap().starts_with("lock "), "{l}");
            assert!(frames.iter().all(|f| !f.is_empty()), "{l}");
            w.parse::<u64>().expect("integer weight")
        })
        .sum()
}

#[test]
fn folded_totals_equal_the_report() {
    for (name, rel) in [
        ("i11-folded-sleep", "report/sleep_hold"),
        ("i11-folded-hot", "report/hot_short"),
    ] {
        let (_dir, trace) = record_fixture(name, rel, &[]);
        let r = report_json(&trace);
        let (wait, contended) = report_totals(&r);
        assert!(wait > 0 && contended > 0, "{rel} must contend");
        let w = folded(&trace, false);
        assert_eq!(folded_total(&w), wait, "waiter stacks of {rel}:\n{w}");
        let b = folded(&trace, true);
        assert_eq!(folded_total(&b), wait, "holder stacks of {rel}:\n{b}");
        if rel == "report/sleep_hold" {
            // The one contended wait, on its whole path (the fixture is
            // built without frame pointers: the CFI walk gives the
            // caller too), with the lock on top; the holder that slept
            // is blamed.
            assert!(
                w.lines().any(|l| l.starts_with("waiter (sleep_hold.c:")
                    && l.contains(";wait_for_it (sleep_hold.c:")
                    && l.contains(";lock held_lock ")),
                "{w}"
            );
            assert!(
                b.lines()
                    .any(|l| l.starts_with("hold_and_sleep (sleep_hold.c:")),
                "{b}"
            );
        }
    }
}

fn pprof(go: &Path, args: &[&str], profile: &Path) -> String {
    let out = Command::new(go)
        .args(["tool", "pprof"])
        .args(args)
        .arg(profile)
        .env("HOME", profile.parent().unwrap())
        .env("PPROF_TMPDIR", profile.parent().unwrap())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "go tool pprof {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Sums of the three values of the samples in `pprof -raw`.
fn raw_sums(raw: &str) -> [u64; 3] {
    let mut sums = [0u64; 3];
    let mut in_samples = false;
    for l in raw.lines() {
        if l.starts_with("Samples:") {
            in_samples = true;
            continue;
        }
        if l.starts_with("Locations") {
            break;
        }
        let Some((vals, _locs)) = l.split_once(':') else {
            continue;
        };
        if !in_samples {
            continue;
        }
        let v: Vec<u64> = vals
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if v.len() == 3 {
            for i in 0..3 {
                sums[i] += v[i];
            }
        }
    }
    sums
}

#[test]
fn pprof_reads_in_go_tool_pprof_with_the_reports_totals() {
    let go = require_tool("go", "golang-go");
    let (dir, trace) = record_fixture("i11-pprof", "report/sleep_hold", &[]);
    let r = report_json(&trace);
    let (wait, contended) = report_totals(&r);
    let prof = dir.join("contention.pb.gz");
    export(&trace, "pprof", &prof);
    let bytes = std::fs::read(&prof).unwrap();
    assert_eq!(&bytes[..2], &[0x1f, 0x8b], "gzipped");

    let raw = pprof(&go, &["-raw"], &prof);
    assert!(
        raw.contains("contentions/count delay/nanoseconds[dflt] blame/nanoseconds"),
        "{raw}"
    );
    assert_eq!(raw_sums(&raw), [contended, wait, wait], "{raw}");

    let top = pprof(&go, &["-top"], &prof);
    assert!(top.contains("Type: delay"), "{top}");
    assert!(top.contains("lock held_lock"), "{top}");
    assert!(top.contains("wait_for_it"), "{top}");
    let traces = pprof(&go, &["-traces", "-lines"], &prof);
    assert!(traces.contains("wait_for_it sleep_hold.c:"), "{traces}");
    assert!(traces.contains("role:  waiter"), "{traces}");
    let blame = pprof(&go, &["-top", "-sample_index=blame"], &prof);
    assert!(blame.contains("Type: blame"), "{blame}");
    assert!(blame.contains("hold_and_sleep"), "{blame}");
}

/// `export` without a trace reads the newest `*.lstrace` of the current
/// directory, as `report` and `html` do (an older file there that is not
/// even a trace is not picked).
#[test]
fn export_without_trace_reads_the_newest_here() {
    let (dir, trace) = record_fixture("i11-export-newest", "report/sleep_hold", &[]);
    let old = dir.join("old.lstrace");
    std::fs::write(&old, b"not a trace").unwrap();
    let st = Command::new("touch")
        .args(["-d", "2001-01-01 00:00"])
        .arg(&old)
        .status()
        .unwrap();
    assert!(st.success());
    let explicit = folded(&trace, false);
    let out = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["export", "--format", "folded"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), explicit);
    let name = trace.file_name().unwrap().to_string_lossy();
    assert!(
        stderr.contains(&format!("reading {name}")) || stderr.contains(&format!("/{name} ")),
        "{stderr}"
    );
    // No trace at all: a message, not a panic.
    std::fs::remove_file(&trace).unwrap();
    std::fs::remove_file(&old).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["export", "--format", "folded"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no *.lstrace file"), "{stderr}");
}

/// Labels (`record --label`) reach the JSON report, every pprof sample
/// (where a continuous profiler groups by them), Perfetto's `otherData`
/// and speedscope's profile name; `host` and
/// `command` are there by default, and a user label of the same name
/// replaces the default.
#[test]
fn labels_reach_the_json_report_and_every_pprof_sample() {
    let go = require_tool("go", "golang-go");
    let (dir, trace) = record_fixture(
        "labels",
        "report/sleep_hold",
        &["--label", "service=db", "--label", "host=web-7"],
    );
    let r = report_json(&trace);
    let program = r["command"][0]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap();
    assert_eq!(
        r["labels"],
        serde_json::json!({"command": program, "host": "web-7", "service": "db"}),
        "{}",
        r["labels"]
    );
    let prof = dir.join("labels.pb.gz");
    export(&trace, "pprof", &prof);
    // Perfetto's JSON carries them in `otherData`, speedscope's profile
    // name the user's.
    let perfetto = dir.join("labels.json");
    export(&trace, "perfetto", &perfetto);
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&perfetto).unwrap()).unwrap();
    assert_eq!(j["otherData"]["labels"], r["labels"]);
    let ss = dir.join("labels.speedscope.json");
    export(&trace, "speedscope", &ss);
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&ss).unwrap()).unwrap();
    assert!(
        j["name"].as_str().unwrap().ends_with(" [service=db]"),
        "{}",
        j["name"]
    );
    // `-tags`: per label key, its values and their share of the total;
    // one value at 100 % means every sample carries it.
    let tags = pprof(&go, &["-tags"], &prof);
    for (key, value) in [("service", "db"), ("host", "web-7"), ("command", program)] {
        let section: Vec<&str> = tags
            .split("\n\n")
            .find(|s| s.trim_start().starts_with(&format!("{key}:")))
            .unwrap_or_else(|| panic!("no {key} label: {tags}"))
            .lines()
            .skip(1)
            .filter(|l| !l.trim().is_empty())
            .collect();
        assert_eq!(section.len(), 1, "{key}: {tags}");
        assert!(
            section[0].contains("(  100%)") && section[0].trim_end().ends_with(value),
            "{key}: {tags}"
        );
    }
}
