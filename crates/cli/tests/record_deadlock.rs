//! A program deadlocked on two mutexes and interrupted with Ctrl-C: the
//! recorder's closing summary and the report's LOCKS table count the two
//! waits still open at the end (not 0, not "no contended lock
//! acquisition"), and the DEADLOCK section names the call paths of the
//! stuck waits under the default `--stacks contended`.

mod record_util;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use record_util::*;
use serde_json::Value;

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

#[test]
fn a_deadlock_ended_by_ctrl_c_shows_its_locks_waits_and_call_paths() {
    let dir = temp("deadlock-sigint");
    let bin = build_c("deadlock_sigint", &dir);
    let trace = dir.join("t.lstrace");
    // The recorder leads a process group of its own, as a shell job does:
    // Ctrl-C reaches the recorder and the program.
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["record", "-o"])
        .arg(&trace)
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
