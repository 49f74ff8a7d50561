//! A program deadlocked on two mutexes and interrupted with Ctrl-C: the
//! recorder's closing summary and the report's LOCKS table count the two
//! waits still open at the end (not 0, not "no contended lock
//! acquisition"), and the DEADLOCK section names the call paths of the
//! stuck waits under the default `--stacks contended`.

use crate::record_util;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use record_util::*;
use serde_json::Value;

fn report_json(trace: &std::path::Path, extra: &[&str]) -> Value {
    let mut args = vec!["report", trace.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    serde_json::from_str(&ok(&lockscope(&args, None))).unwrap()
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// Records deadlock_sigint with `opts` and ends it with Ctrl-C once both
/// threads are stuck: (scratch dir, trace, lock_a and lock_b addresses,
/// the recorder's stderr).
fn record_deadlock(name: &str, opts: &[&str]) -> (TempDir, std::path::PathBuf, u64, u64, String) {
    let dir = temp(name);
    let bin = build_c("deadlock_sigint", &dir);
    let trace = dir.join("t.lstrace");
    // The recorder leads a process group of its own, as a shell job does:
    // Ctrl-C reaches the recorder and the program.
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["record", "-o"])
        .arg(&trace)
        .args(opts)
        .arg("--")
        .arg(&bin)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let pgid = child.id() as i32;
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = lines.next().unwrap().unwrap();
    let truth = kv(ready.strip_prefix("ready ").expect("ready line"));
    let (a, b) = (hex(&truth["a"]), hex(&truth["b"]));
    // Both threads hold their first lock; give them time to block on
    // their second.
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) on the process group we just created.
    assert_eq!(unsafe { libc_kill(-pgid, 2) }, 0);
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let st = child.wait().unwrap();
    assert!(!st.success(), "{stderr}");
    (dir, trace, a, b, stderr)
}

#[test]
fn a_deadlock_ended_by_ctrl_c_shows_its_locks_waits_and_call_paths() {
    let (_dir, trace, a, b, stderr) = record_deadlock("deadlock-sigint", &[]);

    // The summary: both locks, with their wait so far.
    assert!(
        !stderr.contains("no contended lock acquisition"),
        "{stderr}"
    );
    for name in ["lock_a", "lock_b"] {
        let line = stderr
            .lines()
            .find(|l| l.contains(&format!(" {name} (mutex")))
            .unwrap_or_else(|| panic!("no {name} in the summary:\n{stderr}"));
        assert!(
            line.contains("1 still waiting when the program ended"),
            "{line}"
        );
        assert!(
            !line.contains(": 0 ns waiting") && !line.contains(": 0.000 s waiting"),
            "{line}"
        );
    }

    let p = trace.to_str().unwrap();
    let r: Value = serde_json::from_str(&ok(&lockscope(&["report", p, "--json"], None))).unwrap();
    let duration = r["duration_ns"].as_u64().unwrap();
    for addr in [a, b] {
        let l = r["locks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["address"] == format!("{addr:#x}"))
            .unwrap_or_else(|| panic!("no lock {addr:#x}: {:#}", r["locks"]));
        assert_eq!(l["acquisitions"], 1, "{l:#}");
        assert_eq!(l["still_waiting"], 1, "{l:#}");
        // Blocked from before the 300 ms sleep to the end.
        let waited = l["wait_ns"]["total"].as_u64().unwrap();
        assert!(
            waited >= 200_000_000 && waited <= duration,
            "{waited} of {duration}: {l:#}"
        );
        // The stuck wait's call path is kept under `--stacks contended`.
        let paths = l["call_paths"].as_array().unwrap();
        assert_eq!(paths.len(), 1, "{l:#}");
        assert!(!paths[0]["frames"].as_array().unwrap().is_empty());
    }
    let d = r["deadlocks"].as_array().unwrap();
    assert_eq!(d.len(), 1, "{d:?}");
    let steps = d[0]["threads"].as_array().unwrap();
    assert_eq!(steps.len(), 2);
    for s in steps {
        let path: Vec<&str> = s["wait_path"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        assert!(
            path.iter().any(|f| f.contains("deadlock_sigint.c")),
            "{s:#}"
        );
    }
}

// See issue 28.
#[test]
fn the_locks_table_counts_a_deadlocked_wait_as_still_waiting() {
    let (_dir, trace, _, _, _) = record_deadlock("deadlock-table", &[]);
    let text = ok(&lockscope(&["report", trace.to_str().unwrap()], None));
    let sec = text.split("\nLOCKS").nth(1).expect("a LOCKS section");
    for name in ["lock_a", "lock_b"] {
        let row = sec
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("no row {name}:\n{text}"));
        // One acquisition (its first lock), none completed after a wait,
        // one still waiting.
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(&cells[3..6], ["1", "0+1", "waiting"], "{row}");
    }
    assert!(
        sec.contains("+N waiting: acquisitions still blocked"),
        "{text}"
    );
}

// See issue 28.
#[test]
fn advice_for_a_deadlocked_lock_points_to_the_deadlock() {
    let (_dir, trace, a, b, _) = record_deadlock("deadlock-advice", &[]);
    let r = report_json(&trace, &[]);
    let recs = r["recommendations"].as_array().unwrap();
    for addr in [a, b] {
        let mine: Vec<&Value> = recs
            .iter()
            .filter(|x| x["address"] == format!("{addr:#x}"))
            .collect();
        assert_eq!(mine.len(), 1, "{mine:#?}");
        assert_eq!(mine[0]["kind"], "break_deadlock", "{:#}", mine[0]);
        let advice = mine[0]["advice"].as_str().unwrap();
        assert!(advice.contains("lock_a and lock_b") || advice.contains("lock_b and lock_a"));
        assert_eq!(mine[0]["evidence"]["still_waiting"], 1);
    }
}

// See issue 28.
#[test]
fn a_deadlock_recorded_without_stacks_says_why_it_has_no_call_paths() {
    let (_dir, trace, _, _, _) = record_deadlock("deadlock-nostacks", &["--stacks", "none"]);
    let r = report_json(&trace, &[]);
    let d = r["deadlocks"].as_array().unwrap();
    assert_eq!(d.len(), 1, "{d:?}");
    for s in d[0]["threads"].as_array().unwrap() {
        assert!(s["wait_path"].as_array().unwrap().is_empty(), "{s:#}");
    }
    let why = d[0]["no_paths"].as_str().expect("no_paths");
    assert!(why.contains("--stacks none"), "{why}");
    let text = ok(&lockscope(
        &["report", trace.to_str().unwrap(), "--paths"],
        None,
    ));
    let sec = text.split("\nDEADLOCK").nth(1).expect("a DEADLOCK section");
    assert!(sec.contains(why), "{text}");
    // Recorded with call paths, the deadlock has none of that note.
    let (_dir2, trace2, _, _, _) = record_deadlock("deadlock-stacks", &[]);
    let r2 = report_json(&trace2, &[]);
    assert!(
        r2["deadlocks"][0].get("no_paths").is_none(),
        "{:#}",
        r2["deadlocks"]
    );
}
