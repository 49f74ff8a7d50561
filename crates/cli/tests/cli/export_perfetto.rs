//! `lockscope export --format perfetto`: a strict check of the
//! Chrome trace-event JSON it writes (the keys and types each event kind
//! must have and nothing else, slices nested per track, every flow bound
//! to the slices it joins, names declared for every track), and counts
//! that match the report: one hold slice per critical section, one wait
//! slice per contended acquisition.

use crate::export_util;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::process::Command;

use export_util::{
    lockscope, record_fixture, report_json, require_tool, require_viewer, workspace,
};
use serde_json::Value;

fn num(e: &Value, k: &str) -> f64 {
    e[k].as_f64()
        .unwrap_or_else(|| panic!("{k} must be a number: {e}"))
}

fn int(e: &Value, k: &str) -> u64 {
    e[k].as_u64()
        .unwrap_or_else(|| panic!("{k} must be an unsigned integer: {e}"))
}

fn string<'a>(e: &'a Value, k: &str) -> &'a str {
    e[k].as_str()
        .unwrap_or_else(|| panic!("{k} must be a string: {e}"))
}

fn keys(e: &Value, allowed: &[&str]) {
    for k in e.as_object().unwrap().keys() {
        assert!(allowed.contains(&k.as_str()), "unexpected key {k:?} in {e}");
    }
}

/// Slices of one track: (start, end, category).
type Track = Vec<(f64, f64, String)>;

#[derive(Default, Debug)]
struct Checked {
    /// (cat, name) -> slices.
    slices: BTreeMap<(String, String), u64>,
    flows: u64,
    max_waiters: u64,
}

/// The strict check; panics naming the event that breaks a rule.
fn check(doc: &Value) -> Checked {
    // `otherData`: the trace-event format's free-form dictionary, here
    // the trace's labels (strings only).
    keys(doc, &["displayTimeUnit", "traceEvents", "otherData"]);
    assert_eq!(string(doc, "displayTimeUnit"), "ns");
    keys(&doc["otherData"], &["labels"]);
    let labels = doc["otherData"]["labels"].as_object().expect("labels");
    assert!(labels.contains_key("host") && labels.contains_key("command"));
    assert!(labels.values().all(Value::is_string), "{labels:?}");
    let evs = doc["traceEvents"].as_array().expect("traceEvents array");
    let mut named: HashSet<(u64, u64)> = HashSet::new();
    let mut procs: HashSet<u64> = HashSet::new();
    let mut tracks: HashMap<(u64, u64), Track> = HashMap::new();
    let mut flows: HashMap<u64, Vec<&Value>> = HashMap::new();
    let mut out = Checked::default();
    for e in evs {
        match string(e, "ph") {
            "M" => {
                keys(e, &["ph", "name", "pid", "tid", "args"]);
                let (pid, tid) = (int(e, "pid"), int(e, "tid"));
                match string(e, "name") {
                    "process_name" => {
                        string(&e["args"], "name");
                        procs.insert(pid);
                    }
                    "thread_name" => {
                        string(&e["args"], "name");
                        named.insert((pid, tid));
                    }
                    "thread_sort_index" => {
                        int(&e["args"], "sort_index");
                    }
                    n => panic!("unknown metadata {n}"),
                }
            }
            "X" => {
                keys(e, &["ph", "cat", "name", "pid", "tid", "ts", "dur", "args"]);
                let (ts, dur) = (num(e, "ts"), num(e, "dur"));
                assert!(ts >= 0.0 && dur >= 0.0, "{e}");
                let cat = string(e, "cat");
                assert!(
                    [
                        "wait",
                        "hold",
                        "unlock",
                        "cond wait",
                        "barrier",
                        "sem wait",
                        "join"
                    ]
                    .contains(&cat),
                    "{e}"
                );
                let name = string(e, "name");
                assert!(name.starts_with(cat), "{e}");
                let args = &e["args"];
                keys(args, &["object", "site", "path"]);
                string(args, "site");
                if let Some(p) = args.get("path") {
                    assert!(p.as_array().unwrap().iter().all(Value::is_string), "{e}");
                }
                tracks
                    .entry((int(e, "pid"), int(e, "tid")))
                    .or_default()
                    .push((ts, ts + dur, cat.to_string()));
                *out.slices
                    .entry((cat.to_string(), name.to_string()))
                    .or_default() += 1;
            }
            "C" => {
                keys(e, &["ph", "name", "pid", "tid", "ts", "args"]);
                assert!(string(e, "name").starts_with("waiters "));
                num(e, "ts");
                assert!(
                    procs.contains(&int(e, "pid")),
                    "counter of an undeclared process: {e}"
                );
                keys(&e["args"], &["waiters"]);
                out.max_waiters = out.max_waiters.max(int(&e["args"], "waiters"));
            }
            "s" | "f" => {
                let mut allowed = vec!["ph", "cat", "name", "id", "pid", "tid", "ts"];
                if string(e, "ph") == "f" {
                    allowed.push("bp");
                    assert_eq!(string(e, "bp"), "e", "{e}");
                }
                keys(e, &allowed);
                assert_eq!(string(e, "cat"), "handoff");
                num(e, "ts");
                flows.entry(int(e, "id")).or_default().push(e);
            }
            p => panic!("unexpected phase {p:?}: {e}"),
        }
    }
    // Every slice's track is named; slices on one track nest.
    for (track, v) in &mut tracks {
        assert!(named.contains(track), "track {track:?} has no thread_name");
        v.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut stack: Vec<f64> = Vec::new();
        // Rounding to 1 ns in µs units.
        let eps = 0.0005;
        for &(s, e, _) in v.iter() {
            while stack.last().is_some_and(|&end| end <= s + eps) {
                stack.pop();
            }
            if let Some(&end) = stack.last() {
                assert!(
                    e <= end + eps,
                    "slices overlap without nesting on {track:?}"
                );
            }
            stack.push(e);
        }
    }
    // Each flow: one start inside a hold, one end inside a wait, in order.
    let inside = |e: &Value, cat: &str| {
        let t = (int(e, "pid"), int(e, "tid"));
        let ts = num(e, "ts");
        tracks[&t]
            .iter()
            .any(|(s, x, c)| c == cat && *s <= ts && ts <= *x)
    };
    for (id, v) in &flows {
        assert_eq!(v.len(), 2, "flow {id}: {v:?}");
        let (s, f) = (v[0], v[1]);
        assert_eq!((string(s, "ph"), string(f, "ph")), ("s", "f"), "flow {id}");
        assert!(num(s, "ts") <= num(f, "ts"), "flow {id} goes back in time");
        assert!(inside(s, "hold"), "flow {id} starts outside a hold: {s}");
        assert!(inside(f, "wait"), "flow {id} ends outside a wait: {f}");
        assert_eq!(string(s, "name"), string(f, "name"));
    }
    out.flows = flows.len() as u64;
    out
}

fn export(trace: &Path) -> Value {
    let out = lockscope(&[
        "export".as_ref(),
        "--format".as_ref(),
        "perfetto".as_ref(),
        trace.as_os_str(),
    ]);
    serde_json::from_slice(&out).expect("valid JSON")
}

#[test]
fn perfetto_sleep_hold_has_the_wait_the_hold_and_the_hand_off() {
    let (_dir, trace) = record_fixture("i11-perfetto-sleep", "report/sleep_hold", &[]);
    let c = check(&export(&trace));
    let n = |cat: &str, name: &str| {
        c.slices
            .get(&(cat.to_string(), name.to_string()))
            .copied()
            .unwrap_or(0)
    };
    // The fixture: one thread holds held_lock across a sleep while the
    // other waits once; solo_lock is taken SOLO = 1000 times.
    assert_eq!(n("wait", "wait held_lock"), 1, "{c:?}");
    assert_eq!(n("hold", "hold held_lock"), 2, "{c:?}");
    assert_eq!(n("hold", "hold solo_lock"), 1000, "{c:?}");
    assert_eq!(c.flows, 1, "the release after the sleep let the waiter in");
    assert_eq!(c.max_waiters, 1);
}

#[test]
fn perfetto_counts_equal_the_reports() {
    let (_dir, trace) = record_fixture("i11-perfetto-hot", "report/hot_short", &[]);
    let r = report_json(&trace);
    let c = check(&export(&trace));
    let per_cat = |cat: &str| -> u64 {
        c.slices
            .iter()
            .filter(|((k, _), _)| k == cat)
            .map(|(_, n)| n)
            .sum()
    };
    let locks = r["locks"].as_array().unwrap();
    let holds: u64 = locks
        .iter()
        .map(|l| l["hold_ns"]["count"].as_u64().unwrap())
        .sum();
    // One wait slice per contended acquisition (and per timed call that
    // timed out after waiting; none here). Not `wait_ns.count`: that
    // counts waits whose corrected length is above 0.
    let waits: u64 = locks
        .iter()
        .map(|l| l["contended"].as_u64().unwrap() + l["timeouts"].as_u64().unwrap())
        .sum();
    assert_eq!(per_cat("hold"), holds);
    assert_eq!(per_cat("wait"), waits);
    assert!(c.flows > 0 && c.flows <= waits, "{c:?}");
    let threads = r["threads"].as_array().unwrap().len() as u64;
    assert!(c.max_waiters >= 1 && c.max_waiters < threads, "{c:?}");
}

/// Slices as (track, name, start ns, duration ns, site): the track is
/// (pid, tid, extra lane) for a thread's tracks, else its name.
type SliceKey = (String, String, u64, u64, String);

/// The JSON export's slices, flows and counter samples.
fn json_slices(doc: &Value) -> (Vec<SliceKey>, u64, u64) {
    const EXTRA_TID_BASE: u64 = 1 << 30;
    const GPU_TID_BASE: u64 = 1 << 40;
    let mut track_names = std::collections::HashMap::new();
    let events = doc["traceEvents"].as_array().unwrap();
    for e in events {
        if e["ph"] == "M" && e["name"] == "thread_name" {
            track_names.insert(
                (int(e, "pid"), int(e, "tid")),
                e["args"]["name"].as_str().unwrap().to_string(),
            );
        }
    }
    let ns = |e: &Value, k: &str| (num(e, k) * 1000.0).round() as u64;
    let (mut slices, mut flows, mut counters) = (Vec::new(), 0, 0);
    for e in events {
        match e["ph"].as_str().unwrap() {
            "X" => {
                let (pid, tid) = (int(e, "pid"), int(e, "tid"));
                let track = if tid >= GPU_TID_BASE {
                    format!("{pid}/{}", track_names[&(pid, tid)])
                } else if tid >= EXTRA_TID_BASE {
                    let x = tid - EXTRA_TID_BASE;
                    format!("{pid}/{}/{}", x / 64, x % 64)
                } else {
                    format!("{pid}/{tid}/0")
                };
                let site = e["args"]["site"].as_str().unwrap_or("").to_string();
                slices.push((
                    track,
                    string(e, "name").to_string(),
                    ns(e, "ts"),
                    ns(e, "dur"),
                    site,
                ));
            }
            "s" => flows += 1,
            "C" => counters += 1,
            _ => {}
        }
    }
    slices.sort();
    (slices, flows, counters)
}

/// The protobuf export as Perfetto's compiled protos read it
/// (`export_util/perfetto_proto.py`, strict: no unknown field, interning
/// and begin/end pairing checked), in the same terms.
fn proto_slices(pftrace: &Path) -> (Vec<SliceKey>, u64, u64) {
    require_viewer(
        "py/perfetto/protos/perfetto/trace/perfetto_trace_pb2.py",
        "Perfetto's Python protos (PyPI perfetto)",
    );
    let python = require_tool("python3", "python3");
    let out = Command::new(python)
        .arg(workspace().join("crates/cli/tests/cli/export_util/perfetto_proto.py"))
        .arg(pftrace)
        .env("PYTHONPATH", export_util::viewers().join("py"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "Perfetto's protos reject the file: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tracks: std::collections::HashMap<u64, &Value> = d["tracks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["uuid"].as_u64().unwrap(), t))
        .collect();
    let mut slices = Vec::new();
    for s in d["slices"].as_array().unwrap() {
        let t = tracks[&s["track"].as_u64().unwrap()];
        let track = match t["kind"].as_str().unwrap() {
            "thread" => format!("{}/{}/0", t["pid"], t["tid"]),
            "child" => {
                let p = tracks[&t["parent"].as_u64().unwrap()];
                let name = t["name"].as_str().unwrap();
                if p["kind"] == "thread" {
                    // `NAME [k]`: lane k - 1 of the thread.
                    let k: u64 = name
                        .rsplit_once('[')
                        .unwrap()
                        .1
                        .trim_end_matches(']')
                        .parse()
                        .unwrap();
                    format!("{}/{}/{}", p["pid"], p["tid"], k - 1)
                } else {
                    format!("{}/{name}", p["pid"])
                }
            }
            k => panic!("slice on a {k} track"),
        };
        slices.push((
            track,
            s["name"].as_str().unwrap().to_string(),
            s["ts"].as_u64().unwrap(),
            s["dur"].as_u64().unwrap(),
            s["args"]["site"].as_str().unwrap_or("").to_string(),
        ));
    }
    slices.sort();
    (
        slices,
        d["flows"].as_u64().unwrap(),
        d["counters"].as_u64().unwrap(),
    )
}

fn export_to(trace: &Path, format: &str, out: &Path) {
    lockscope(&[
        "export".as_ref(),
        "--format".as_ref(),
        format.as_ref(),
        trace.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
}

/// Records the GPU fixture (a stand-in CUPTI and a program playing the
/// CUDA driver with a known schedule, as in gpu_capture.rs: kernels
/// `kernel_one` (20 ms) and `kernel_two` and a copy on stream 7, two
/// synchronizes) into `dir`.
fn record_gpu_fixture(dir: &Path) -> std::path::PathBuf {
    let (lib, app) = export_util::record_util::build_gpu_fixture(dir);
    let trace = dir.join("gpu.lstrace");
    let out = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["record", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&app)
        .env("LOCKSCOPE_CUPTI", &lib)
        .env_remove("CUDA_INJECTION64_PATH")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    trace
}

/// `--format perfetto-proto` parses with Perfetto's own trace protos and
/// holds exactly the JSON export's slices (same tracks, names, times to
/// the nanosecond, sites), hand-off flows and counter samples; the JSON
/// is the one checked above against the report's ground truth.
#[test]
fn perfetto_proto_reads_with_perfettos_protos_and_equals_the_json() {
    for (test, fixture) in [
        ("i11-pfproto-sleep", "report/sleep_hold"),
        ("i11-pfproto-queue", "export/queue_lock"),
        ("i11-pfproto-gpu", "gpu/fake_cuda_app"),
    ] {
        let (dir, trace) = if fixture.starts_with("gpu/") {
            let dir = export_util::temp(test);
            let trace = record_gpu_fixture(&dir);
            (dir, trace)
        } else {
            record_fixture(test, fixture, &[])
        };
        let pf = dir.join("run.pftrace");
        export_to(&trace, "perfetto-proto", &pf);
        let (pslices, pflows, pcounters) = proto_slices(&pf);
        let (jslices, jflows, jcounters) = json_slices(&export(&trace));
        assert_eq!(pslices.len(), jslices.len(), "{fixture}: slice count");
        for (p, j) in pslices.iter().zip(&jslices) {
            assert_eq!(p, j, "{fixture}: first differing slice");
        }
        assert_eq!(pflows, jflows, "{fixture}: hand-off flows");
        assert_eq!(pcounters, jcounters, "{fixture}: counter samples");
        if fixture == "report/sleep_hold" {
            let n = |name: &str| pslices.iter().filter(|s| s.1 == name).count();
            assert_eq!(n("wait held_lock"), 1);
            assert_eq!(n("hold held_lock"), 2);
            assert_eq!(n("hold solo_lock"), 1000);
            assert_eq!(pflows, 1);
            // Smaller than the JSON.
            let json_len = {
                let j = dir.join("run.json");
                export_to(&trace, "perfetto", &j);
                std::fs::metadata(&j).unwrap().len()
            };
            let proto_len = std::fs::metadata(&pf).unwrap().len();
            assert!(proto_len * 2 < json_len, "{proto_len} vs {json_len} bytes");
        } else if fixture == "export/queue_lock" {
            assert!(pflows > 0, "queue_lock hands the lock off");
        } else {
            // Three GPU slices on the stream's track, two GPU waits.
            let gpu: Vec<_> = pslices
                .iter()
                .filter(|s| s.0.ends_with("/GPU 0 stream 7"))
                .collect();
            assert_eq!(gpu.len(), 3, "{gpu:?}");
            assert!(gpu.iter().any(|s| s.1.starts_with("kernel_one")), "{gpu:?}");
            assert!(gpu.iter().any(|s| s.1 == "copy device-to-host"), "{gpu:?}");
            let waits = pslices.iter().filter(|s| s.1 == "GPU wait").count();
            assert_eq!(waits, 2, "one slice per synchronize");
        }
    }
}
