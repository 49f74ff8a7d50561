//! `lockscope export --format speedscope`, checked against
//! speedscope's file format as published in its JSON schema
//! (`https://www.speedscope.app/file-format-schema.json`, `FileFormat.File`
//! in speedscope's `file-format-spec.ts`), written here in Rust so that
//! a failure names the key. (speedscope's app itself opens the file in
//! `export_viewers.rs`.) It covers the schema (required keys, types, enums, no unknown keys) and
//! what speedscope's importer of evented profiles enforces: events sorted
//! by `at`, within the profile's range, each close matching the frame on
//! top of the stack, every frame index valid, nothing left open.

use crate::export_util;

use std::collections::BTreeMap;

use export_util::{lockscope, record_fixture, report_json, require_tool, require_viewer};
use serde_json::Value;

fn keys(v: &Value, required: &[&str], optional: &[&str]) {
    let o = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"));
    for k in required {
        assert!(o.contains_key(*k), "missing {k} in {v}");
    }
    for k in o.keys() {
        assert!(
            required.contains(&k.as_str()) || optional.contains(&k.as_str()),
            "key {k:?} is not in the schema: {v}"
        );
    }
}

/// Opens per frame name, over all profiles.
fn check(doc: &Value) -> BTreeMap<String, u64> {
    keys(
        doc,
        &["$schema", "shared", "profiles"],
        &["name", "activeProfileIndex", "exporter"],
    );
    assert_eq!(
        doc["$schema"],
        "https://www.speedscope.app/file-format-schema.json"
    );
    assert!(doc["name"].is_string() && doc["exporter"].is_string());
    keys(&doc["shared"], &["frames"], &[]);
    let frames = doc["shared"]["frames"].as_array().unwrap();
    for f in frames {
        keys(f, &["name"], &["file", "line", "col"]);
        assert!(f["name"].is_string(), "{f}");
        if let Some(x) = f.get("file") {
            assert!(x.is_string(), "{f}");
        }
        if let Some(x) = f.get("line") {
            assert!(x.is_u64(), "{f}");
        }
    }
    let profiles = doc["profiles"].as_array().unwrap();
    assert!(!profiles.is_empty());
    let active = doc["activeProfileIndex"].as_u64().unwrap() as usize;
    assert!(active < profiles.len());
    let mut opens: BTreeMap<String, u64> = BTreeMap::new();
    for p in profiles {
        keys(
            p,
            &["type", "name", "unit", "startValue", "endValue", "events"],
            &[],
        );
        assert_eq!(p["type"], "evented");
        assert!(p["name"].is_string());
        assert!([
            "none",
            "nanoseconds",
            "microseconds",
            "milliseconds",
            "seconds",
            "bytes"
        ]
        .contains(&p["unit"].as_str().unwrap()));
        let (start, end) = (
            p["startValue"].as_f64().unwrap(),
            p["endValue"].as_f64().unwrap(),
        );
        assert!(start <= end, "{}", p["name"]);
        let mut stack: Vec<u64> = Vec::new();
        let mut last = start;
        for e in p["events"].as_array().unwrap() {
            keys(e, &["type", "at", "frame"], &[]);
            let at = e["at"].as_f64().unwrap();
            assert!(at >= last && at <= end, "event out of order or range: {e}");
            last = at;
            let frame = e["frame"].as_u64().unwrap();
            assert!((frame as usize) < frames.len(), "{e}");
            match e["type"].as_str().unwrap() {
                "O" => {
                    stack.push(frame);
                    *opens
                        .entry(frames[frame as usize]["name"].as_str().unwrap().into())
                        .or_default() += 1;
                }
                "C" => assert_eq!(stack.pop(), Some(frame), "close of a frame not on top: {e}"),
                t => panic!("event type {t:?}"),
            }
        }
        assert!(stack.is_empty(), "frames left open in {}", p["name"]);
    }
    opens
}

fn export(trace: &std::path::Path) -> Value {
    let out = lockscope(&[
        "export".as_ref(),
        "--format".as_ref(),
        "speedscope".as_ref(),
        trace.as_os_str(),
    ]);
    serde_json::from_slice(&out).expect("valid JSON")
}

#[test]
fn speedscope_sleep_hold_follows_the_format_with_the_known_states() {
    let (_dir, trace) = record_fixture("i11-speedscope-sleep", "report/sleep_hold", &[]);
    let doc = export(&trace);
    let opens = check(&doc);
    let r = report_json(&trace);
    assert_eq!(
        doc["profiles"].as_array().unwrap().len(),
        r["threads"].as_array().unwrap().len(),
        "a profile per thread"
    );
    assert_eq!(opens["wait held_lock at wait_for_it"], 1, "{opens:?}");
    assert_eq!(opens["hold held_lock at hold_and_sleep"], 1, "{opens:?}");
    assert_eq!(opens["hold solo_lock at waiter"], 1000, "{opens:?}");
    // The profile shown first is the thread that waited (for held_lock).
    let active = doc["activeProfileIndex"].as_u64().unwrap() as usize;
    let frames = doc["shared"]["frames"].as_array().unwrap();
    let wait = frames
        .iter()
        .position(|f| f["name"] == "wait held_lock at wait_for_it")
        .unwrap();
    let events = doc["profiles"][active]["events"].as_array().unwrap();
    assert!(
        events.iter().any(|e| e["frame"] == wait),
        "profile {active} is not the waiter's"
    );
}

#[test]
fn speedscope_hot_lock_one_hold_frame_per_section() {
    let (_dir, trace) = record_fixture("i11-speedscope-hot", "report/hot_short", &[]);
    let r = report_json(&trace);
    let doc = export(&trace);
    let opens = check(&doc);
    let holds: u64 = opens
        .iter()
        .filter(|(k, _)| k.starts_with("hold "))
        .map(|(_, n)| n)
        .sum();
    let acquisitions: u64 = r["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["acquisitions"].as_u64().unwrap())
        .sum();
    // Every acquisition opens one hold frame (a lost release still closes
    // it, when another thread's section proves it).
    assert_eq!(holds, acquisitions, "{opens:?}");
    // Bounded memory: with buffers of 1000 events spilled to temporary
    // files, the file is the same.
    assert!(spilled(&trace) == doc, "spilled output differs");
}

/// Same output when the buffered events go through temporary files.
fn spilled(trace: &std::path::Path) -> Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["export", "--format", "speedscope"])
        .arg(trace)
        .env("LOCKSCOPE_SPEEDSCOPE_SPILL_EVENTS", "1000")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Errors of `doc` against the JSON schema that speedscope's npm package
/// ships (`dist/release/file-format-schema.json`, draft-07), by Python's
/// `jsonschema` (both installed by scripts/test-viewers.sh).
fn schema_errors(doc: &Value, dir: &std::path::Path) -> Vec<String> {
    let schema = require_viewer(
        "npm/node_modules/speedscope/dist/release/file-format-schema.json",
        "speedscope's published schema (npm speedscope)",
    );
    require_viewer("py/jsonschema", "Python's jsonschema (PyPI)");
    let file = dir.join("doc.speedscope.json");
    std::fs::write(&file, serde_json::to_vec(doc).unwrap()).unwrap();
    let script = "import json, sys, jsonschema\n\
        schema = json.load(open(sys.argv[1]))\n\
        doc = json.load(open(sys.argv[2]))\n\
        v = jsonschema.Draft7Validator(schema)\n\
        v.check_schema(schema)\n\
        for e in v.iter_errors(doc):\n\
        \x20   print(list(e.absolute_path), e.message)\n";
    let out = std::process::Command::new(require_tool("python3", "python3"))
        .args(["-c", script])
        .arg(&schema)
        .arg(&file)
        .env("PYTHONPATH", export_util::viewers().join("py"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "jsonschema failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The export is valid against speedscope's own published schema; the
/// validator does reject a document that breaks it (a frame without its
/// name, an event of an unknown type).
#[test]
fn speedscope_valid_against_the_schema_speedscope_ships() {
    let (dir, trace) = record_fixture("i11-speedscope-schema", "report/sleep_hold", &[]);
    let doc = export(&trace);
    let errors = schema_errors(&doc, &dir);
    assert!(errors.is_empty(), "schema errors: {errors:#?}");
    let mut bad = doc.clone();
    bad["shared"]["frames"][0]
        .as_object_mut()
        .unwrap()
        .remove("name");
    bad["profiles"][0]["events"][0]["type"] = "X".into();
    let errors = schema_errors(&bad, &dir);
    assert!(
        errors.len() >= 2,
        "the schema check caught nothing: {errors:?}"
    );
}
