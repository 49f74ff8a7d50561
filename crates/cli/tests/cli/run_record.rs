//! `lockscope run` composes with `lockscope record`: a run with a swapped
//! lock can be recorded (record's preload library sees each call first and
//! forwards it to the swapped lock), and the program's output stays the
//! same.

use crate::run_support;
use run_support::*;
use std::process::{Command, Stdio};

#[test]
fn record_of_a_swapped_run_keeps_output_and_sees_the_mutex() {
    let dir = temp("record");
    let Some(prog) = build("condvar_pc.c", &dir) else {
        return;
    };
    let preload = build_lib("lockscope-preload", "liblockscope_preload.so");
    let base = lockscope_run(&["--lock", "pthread"], &prog, &["1500"]);
    for lock in ["mcs", "hmcs"] {
        let trace = dir.join(format!("{lock}.lstrace"));
        let o = Command::new(env!("CARGO_BIN_EXE_lockscope"))
            .arg("record")
            .arg("-o")
            .arg(&trace)
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_lockscope"))
            .args(["run", "--lock", lock, "--verbose", "--"])
            .arg(&prog)
            .arg("1500")
            .env("LOCKSCOPE_SWAP_LIB", swap_lib())
            .env("LOCKSCOPE_PRELOAD_LIB", &preload)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(shell_code(&o), 0, "{lock}: {err}");
        assert_eq!(o.stdout, base.stdout, "{lock}: output changed under record");
        // The swapped lock really was in use under the recorder...
        let (n, m) = verbose_counts(&err).unwrap_or_else(|| panic!("no summary: {err}"));
        assert!(n >= 1 && m >= 9_000, "{lock}: {err}");
        // ...and the recorder saw the program's acquisitions.
        let report = Command::new(env!("CARGO_BIN_EXE_lockscope"))
            .arg("report")
            .arg(&trace)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&report.stdout);
        assert!(
            report.status.success(),
            "report failed: {}",
            String::from_utf8_lossy(&report.stderr)
        );
        assert!(
            text.contains("mutex"),
            "{lock}: no mutex in the report:\n{text}"
        );
    }
}

/// Compiles tests/programs/mutex.c (its `truth` lines give the exact
/// acquisitions of each lock) into `dir`, or None without gcc.
fn build_mutex_fixture(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    let out = dir.join("mutex");
    lockscope_test_support::tool_or_skip("gcc", "gcc")?;
    let st = Command::new("gcc")
        .args(["-O2", "-g", "-Wall", "-pthread", "-o"])
        .arg(&out)
        .arg(workspace().join("tests/programs/mutex.c"))
        .status();
    match st {
        Ok(st) => {
            assert!(st.success(), "gcc failed on mutex.c");
            Some(out)
        }
        Err(_) => {
            eprintln!("NOTICE: gcc not found, skipping");
            None
        }
    }
}

/// Successful acquisitions of the lock at `addr` by the fixture's own
/// count (lock, trylock and timed calls that returned 0).
fn truth_acquisitions(stdout: &str, addr: &str) -> u64 {
    stdout
        .lines()
        .filter(|l| l.starts_with("truth ") && l.contains(&format!(" addr={addr} ")))
        .filter(|l| l.contains(" phase=done "))
        .filter(|l| {
            ["MutexLock", "MutexTrylock", "MutexTimedlock"]
                .iter()
                .any(|op| l.contains(&format!(" op={op} ")))
        })
        .map(|l| {
            l.rsplit("count=")
                .next()
                .and_then(|n| n.trim().parse::<u64>().ok())
                .unwrap_or_else(|| panic!("bad truth line {l}"))
        })
        .sum()
}

/// The address of static lock `hot`, from the truth line written by the
/// first site (`site=lock_from_a`).
fn hot_address(stdout: &str) -> String {
    let l = stdout
        .lines()
        .find(|l| l.contains(" site=lock_from_a "))
        .unwrap_or_else(|| panic!("no truth line of the hot lock in:\n{stdout}"));
    l.split_whitespace()
        .find_map(|w| w.strip_prefix("addr="))
        .unwrap()
        .to_string()
}

/// `lockscope record [-- lockscope run --lock ALG] -- mutex`: the trace and
/// the program's stdout.
fn record_mutex(
    dir: &std::path::Path,
    prog: &std::path::Path,
    lock: Option<&str>,
) -> (std::path::PathBuf, String) {
    let trace = dir.join(format!("{}.lstrace", lock.unwrap_or("plain")));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockscope"));
    cmd.arg("record").arg("-o").arg(&trace).arg("--");
    if let Some(alg) = lock {
        cmd.arg(env!("CARGO_BIN_EXE_lockscope"))
            .args(["run", "--lock", alg, "--"]);
    }
    let o = cmd
        .arg(prog)
        .env("LOCKSCOPE_SWAP_LIB", swap_lib())
        .env(
            "LOCKSCOPE_PRELOAD_LIB",
            build_lib("lockscope-preload", "liblockscope_preload.so"),
        )
        .stdin(Stdio::null())
        .output()
        .unwrap();
    // mutex.c exits with status 3 on purpose (passed on by record).
    assert_eq!(
        shell_code(&o),
        3,
        "{lock:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    (trace, String::from_utf8_lossy(&o.stdout).into_owned())
}

fn report_json(trace: &std::path::Path) -> serde_json::Value {
    let o = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .arg("report")
        .arg("--json")
        .arg(trace)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "report failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("report --json prints JSON")
}

/// The rows of the lock at `addr`.
fn rows<'a>(r: &'a serde_json::Value, addr: &str) -> Vec<&'a serde_json::Value> {
    let want = u64::from_str_radix(addr.trim_start_matches("0x"), 16).unwrap();
    r["locks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| {
            u64::from_str_radix(l["address"].as_str().unwrap().trim_start_matches("0x"), 16)
                .unwrap()
                == want
        })
        .collect()
}

// See issue 28: a swapped mutex was a `mutex` row with its spinning and a
// `futex` row with its sleeping, sited in lockscope's own futex_wait.
#[test]
fn a_swapped_lock_is_one_row_named_with_its_algorithm() {
    let dir = temp("swapped-row");
    let Some(prog) = build_mutex_fixture(&dir) else {
        return;
    };
    // ticket: its words read as glibc's say "held" at every acquisition.
    for alg in ["ttas", "ticket", "mcs"] {
        let (trace, stdout) = record_mutex(&dir, &prog, Some(alg));
        let addr = hot_address(&stdout);
        let n = truth_acquisitions(&stdout, &addr);
        assert!(n >= 80_000, "{alg}: the fixture counted {n}");
        let r = report_json(&trace);
        let hot = rows(&r, &addr);
        assert_eq!(hot.len(), 1, "{alg}: rows of hot: {hot:#?}");
        let hot = hot[0];
        assert_eq!(hot["kind"], "mutex", "{alg}");
        assert_eq!(hot["swapped_lock"], alg, "{alg}");
        assert_eq!(hot["acquisitions"].as_u64(), Some(n), "{alg}");
        // A lock only one thread takes never waits (a ticket lock's words
        // read as glibc's said "held" at every acquisition after the first).
        let mut private = 0;
        for l in r["locks"].as_array().unwrap() {
            if l["threads"].as_array().unwrap().len() == 1 {
                private += 1;
                assert_eq!(l["contended"], 0, "{alg}: a private lock waited: {l}");
            }
        }
        assert!(
            private >= 4,
            "{alg}: the threads' private locks are missing"
        );
        // No lock of lockscope's own, and every site in the program.
        for l in r["locks"].as_array().unwrap() {
            let text = l.to_string();
            assert!(
                !text.contains("lockscope_locks"),
                "{alg}: a row or site of lockscope's own lock code: {text}"
            );
        }
        for s in hot["sites"].as_array().unwrap() {
            let name = s["name"].as_str().unwrap();
            assert!(
                name.contains("lock_from_") || name.contains("run (mutex.c"),
                "{alg}: site {name} is not in the program"
            );
        }
        let text = Command::new(env!("CARGO_BIN_EXE_lockscope"))
            .arg("report")
            .arg(&trace)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(
            text.contains(&format!("mutex ({alg})")),
            "{alg}: the report does not name the algorithm:\n{text}"
        );
    }
}

// See issue 28: the swap library's futex wakes, made inside the recorder's
// unlock hook, were counted as events lost "from a signal handler".
#[test]
fn recording_a_swapped_program_loses_no_events() {
    let dir = temp("swapped-lost");
    let Some(prog) = build_mutex_fixture(&dir) else {
        return;
    };
    for alg in ["ttas", "mcs", "ticket"] {
        let (trace, _) = record_mutex(&dir, &prog, Some(alg));
        let r = report_json(&trace);
        assert_eq!(r["lost_events"].as_u64(), Some(0), "{alg}");
    }
}

// See issue 28: diff compared a plain run's `mutex` with the swapped run's
// and reported the wait of the swapped one's spinning only.
#[test]
fn diff_pairs_a_plain_and_a_swapped_lock() {
    let dir = temp("swapped-diff");
    let Some(prog) = build_mutex_fixture(&dir) else {
        return;
    };
    let (plain, out_a) = record_mutex(&dir, &prog, None);
    let (swapped, out_b) = record_mutex(&dir, &prog, Some("ttas"));
    let (ra, rb) = (report_json(&plain), report_json(&swapped));
    let (hot_a, hot_b) = (
        rows(&ra, &hot_address(&out_a))[0],
        rows(&rb, &hot_address(&out_b))[0],
    );
    let o = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .arg("diff")
        .arg(&plain)
        .arg(&swapped)
        .arg("--json")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let hot: Vec<&serde_json::Value> = d["locks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["lock"] == "hot")
        .collect();
    assert_eq!(hot.len(), 1, "hot is not one paired row: {d:#}");
    let hot = hot[0];
    assert_eq!(hot["in_a"], true);
    assert_eq!(hot["in_b"], true);
    assert_eq!(hot["kind"], "mutex");
    assert!(hot.get("swapped_lock_a").is_none());
    assert_eq!(hot["swapped_lock_b"], "ttas");
    // The change is that of the two reports' whole waits.
    let f = |v: &serde_json::Value| v.as_f64().unwrap();
    assert_eq!(f(&hot["acquisitions"]["before"]), f(&hot_a["acquisitions"]));
    assert_eq!(f(&hot["acquisitions"]["after"]), f(&hot_b["acquisitions"]));
    assert_eq!(f(&hot["wait_ns"]["before"]), f(&hot_a["wait_ns"]["total"]));
    assert_eq!(f(&hot["wait_ns"]["after"]), f(&hot_b["wait_ns"]["total"]));
    // Every lock of the program pairs: nothing only in one run.
    for l in d["locks"].as_array().unwrap() {
        assert!(l["in_a"] == true && l["in_b"] == true, "unpaired lock {l}");
    }
    let text = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .arg("diff")
        .arg(&plain)
        .arg(&swapped)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("hot [pthread -> ttas]"),
        "the text does not show the algorithms:\n{text}"
    );
}
