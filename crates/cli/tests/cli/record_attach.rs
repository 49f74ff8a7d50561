//! Attach mode (`lockscope record -p PID`): a running program's blocking
//! waits through eBPF, checked against the program's own log of every
//! FUTEX_WAIT that slept and every FUTEX_WAKE that woke a thread
//! (`tests/programs/attach_futex.c`), inside the window the recorder was
//! attached; the program's output and exit are unchanged.
//!
//! Needs root and a build with the BPF program (clang): where either is
//! missing, the tests skip with a notice, except under CI's
//! LOCKSCOPE_REQUIRE_TOOLS, where they fail.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::record_util::*;
use lockscope_format::{phase, Op, Trace};
use serde_json::Value;

/// Whether attach mode can run here: `None` (and a notice, or a failure
/// under LOCKSCOPE_REQUIRE_TOOLS) when not.
fn attach_available(dir: &std::path::Path) -> Option<()> {
    let me = std::process::id().to_string();
    let t = dir.join("probe.lstrace");
    let o = lockscope(
        &[
            "record",
            "-q",
            "-o",
            t.to_str().unwrap(),
            "-p",
            &me,
            "--duration",
            "10ms",
        ],
        None,
    );
    if o.status.success() {
        return Some(());
    }
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        std::env::var_os(lockscope_test_support::REQUIRE_TOOLS_ENV).is_none(),
        "attach mode must work here (root, clang at build time, BPF): {err}"
    );
    eprintln!("NOTICE: attach mode unavailable here, test skipped: {err}");
    None
}

/// One line of the fixture's log: kind (`W` wait that slept, `K` wake
/// that woke), start and end, CLOCK_MONOTONIC ns.
type LogLine = (char, u64, u64);

/// The lines of the fixture's log.
fn log_lines(text: &str) -> Vec<LogLine> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let k = f.next()?.chars().next()?;
            Some((k, f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect()
}

/// The waits of a trace: those that slept (DONE), and wakes that woke
/// a thread.
fn slept_and_woke(t: &Trace) -> (u64, u64) {
    let (mut slept, mut woke) = (0u64, 0u64);
    for e in t.events.values().flatten() {
        if e.op == Op::FutexWait as u8 && phase::of(e.flags) == phase::DONE {
            slept += 1;
        }
        if e.op == Op::FutexWake as u8 && e.arg > 0 {
            woke += 1;
        }
    }
    (slept, woke)
}

#[test]
fn attach_counts_every_blocking_wait_of_a_running_program_in_its_window() {
    let Some((_dir, trace, lines, out, err)) =
        attach_futex("attach-window", ["3", "4"], &["--duration", "1500ms"])
    else {
        return;
    };
    assert!(err.contains("detached (time was up)"), "{err}");
    assert_excluded(&out);

    let t = Trace::open(&trace).unwrap();
    let (t0, end) = window(&t);
    assert_eq!(t.header.get("capture"), Some("attach"));
    let (slept, woke) = slept_and_woke(&t);
    let inside = |k: char| {
        lines
            .iter()
            .filter(|&&(kind, s, e)| kind == k && s >= t0 && e <= end)
            .count() as u64
    };
    let (truth_w, truth_k) = (inside('W'), inside('K'));
    eprintln!("waits: trace {slept}, program {truth_w}; wakes: trace {woke}, program {truth_k}");
    assert!(
        truth_w >= 50,
        "too little contention to judge: {truth_w} waits"
    );
    // Within 5 %: the program's log and the kernel see the same calls;
    // only those at the edges of the window (attach and detach take a few
    // milliseconds) may fall on either side.
    let close = |got: u64, want: u64| got.abs_diff(want) as f64 <= 0.05 * want as f64 + 3.0;
    assert!(
        close(slept, truth_w),
        "waits: trace {slept}, program {truth_w}"
    );
    assert!(
        close(woke, truth_k),
        "wakes: trace {woke}, program {truth_k}"
    );

    // The report names the user's code for both sides: the waiter's
    // lock() and the releasing holder's unlock().
    let r = report_json(&trace);
    let notes = r["notes"].to_string();
    assert!(notes.contains("attach mode (eBPF, record -p)"), "{notes}");
    let lock = &r["locks"][0];
    assert_eq!(lock["name"], "word", "{lock}");
    assert!(lock["acquisitions"].is_null(), "{lock}");
    assert_eq!(lock["contended"].as_u64().unwrap(), slept, "{lock}");
    assert_blame(&r, "lock (attach_futex.c:", "unlock (attach_futex.c:");
}

#[test]
fn record_names_a_missing_process_and_refuses_attach_options_for_a_program() {
    for (args, want) in [
        (
            &["record", "-p", "999999999", "--duration", "1s"][..],
            "no process 999999999",
        ),
        (
            &["record", "--min-wait", "1ms", "--", "/bin/true"][..],
            "--min-wait applies to attach mode",
        ),
        (&["record", "-a"][..], "give --duration"),
    ] {
        let o = lockscope(args, None);
        assert!(!o.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// Starts `cmd` (which runs for a few seconds), attaches to it after 1 s
/// with `opts` (a `--duration` among them), waits for it to end, and
/// returns the trace, the program's standard output and the recorder's
/// standard error. The program must succeed: detaching leaves it
/// running, unchanged.
fn attach_trace(dir: &Path, cmd: &mut Command, opts: &[&str]) -> (PathBuf, String, String) {
    // The fixtures keep both CPUs busy for seconds.
    let _cpus = crate::cpus();
    let trace = dir.join("t.lstrace");
    let prog = cmd.stdout(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let pid = prog.id().to_string();
    let mut args = vec!["record", "-o", trace.to_str().unwrap(), "-p", &pid];
    args.extend_from_slice(opts);
    let out = lockscope(&args, None);
    assert!(
        out.status.success(),
        "record -p: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done = prog.wait_with_output().unwrap();
    assert!(done.status.success(), "the program failed after detach");
    (
        trace,
        String::from_utf8_lossy(&done.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `attach_futex THREADS SECONDS waits.log` attached to after 1 s with
/// `opts`: the scratch directory (kept alive), the trace, the lines of
/// the program's log, the program's output and the recorder's standard
/// error. `None` where attach mode cannot run here.
fn attach_futex(
    test: &str,
    args: [&str; 2],
    opts: &[&str],
) -> Option<(TempDir, PathBuf, Vec<LogLine>, String, String)> {
    let dir = temp(test);
    attach_available(&dir)?;
    let bin = build_c("attach_futex", &dir);
    let log = dir.join("waits.log");
    let (trace, out, err) = attach_trace(&dir, Command::new(&bin).args(args).arg(&log), opts);
    let lines = log_lines(&std::fs::read_to_string(&log).unwrap());
    Some((dir, trace, lines, out, err))
}

/// The trace's window on CLOCK_MONOTONIC: time 0 and its end.
fn window(t: &Trace) -> (u64, u64) {
    let t0 = t.header.monotonic_ns_at_start;
    (
        t0,
        t0 + t.footer.as_ref().expect("a complete trace").duration_ns,
    )
}

/// The JSON report of a trace.
fn report_json(trace: &Path) -> Value {
    serde_json::from_str(&ok(&lockscope(
        &["report", "--json", trace.to_str().unwrap()],
        None,
    )))
    .unwrap()
}

/// [`attach_trace`], then the trace's JSON report.
fn attach_to(dir: &Path, cmd: &mut Command, opts: &[&str]) -> (Value, String) {
    let (trace, out, _) = attach_trace(dir, cmd, opts);
    (report_json(&trace), out)
}

/// attach_futex's own check, `iterations N counter N`: the lock excluded.
fn assert_excluded(out: &str) {
    let f: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(f.len(), 4, "{out}");
    assert_eq!(f[1], f[3], "the lock did not exclude: {out}");
}

/// The top blame row's waiter and holder sites contain these.
fn assert_blame(r: &Value, waiter: &str, holder: &str) {
    let b = &r["blame"][0];
    let site = |k: &str| b[k].as_str().unwrap_or_default().to_string();
    assert!(site("waiter_site").contains(waiter), "{b}");
    assert!(site("holder_site").contains(holder), "{b}");
}

#[test]
fn attach_names_the_user_code_of_a_static_binary() {
    let dir = temp("attach-static");
    if attach_available(&dir).is_none() {
        return;
    }
    let src = workspace().join("tests/programs/attach_futex.c");
    let bin = dir.join("attach_futex_static");
    let st = Command::new("gcc")
        .args(["-O2", "-g", "-static", "-pthread", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success(), "gcc -static (libc.a from libc6-dev)");
    let log = dir.join("waits.log");
    let (r, out) = attach_to(
        &dir,
        Command::new(&bin).args(["3", "3"]).arg(&log),
        &["--duration", "1s"],
    );
    assert_excluded(&out);
    assert_blame(&r, "lock (attach_futex.c:", "unlock (attach_futex.c:");
}

#[test]
fn attach_tells_a_rust_std_mutex_and_names_its_line() {
    let dir = temp("attach-rust");
    if attach_available(&dir).is_none() {
        return;
    }
    let bin = build_rust_with("attach_rust_mutex", &dir, &["-O", "-g"]);
    let (r, out) = attach_to(&dir, Command::new(&bin).arg("3"), &["--duration", "1s"]);
    assert_excluded(&out);
    let lock = &r["locks"][0];
    assert_eq!(lock["kind"], "futex-mutex", "{lock}");
    assert!(lock["acquisitions"].is_null(), "{lock}");
    assert_blame(&r, "attach_rust_mutex.rs:", "attach_rust_mutex.rs:");
}

#[test]
fn attach_sees_a_python_threading_lock_wait_at_its_interpreter_sites() {
    let dir = temp("attach-python");
    if attach_available(&dir).is_none() {
        return;
    }
    let Some(py) = lockscope_test_support::tool_or_skip("python3", "python3") else {
        return;
    };
    let script = workspace().join("tests/programs/attach_python_lock.py");
    let (r, out) = attach_to(
        &dir,
        Command::new(py).arg(&script).arg("3"),
        &["--duration", "1s"],
    );
    assert!(out.starts_with("iterations "), "{out}");
    // The script's lock is the most waited-for word: its waits are in
    // CPython's lock acquisition, and the wakes that ended them in its
    // release.
    assert_blame(&r, "PyThread_acquire_lock", "PyThread_release_lock");
}

#[test]
fn attach_all_keeps_each_process_apart_and_filters_by_command_name() {
    let dir = temp("attach-all");
    if attach_available(&dir).is_none() {
        return;
    }
    let bin = build_c("attach_futex", &dir);
    let (a, b) = (dir.join("af_one"), dir.join("af_two"));
    std::fs::copy(&bin, &a).unwrap();
    std::fs::copy(&bin, &b).unwrap();
    let spawn = |p: &Path, log: &str| {
        Command::new(p)
            .args(["2", "3"])
            .arg(dir.join(log))
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    };
    let _cpus = crate::cpus();
    let procs = [spawn(&a, "a.log"), spawn(&b, "b.log")];
    std::thread::sleep(Duration::from_secs(1));
    let trace = dir.join("t.lstrace");
    let out = lockscope(
        &[
            "record",
            "-q",
            "-o",
            trace.to_str().unwrap(),
            "-a",
            "--duration",
            "1s",
            "--comm",
            "af_one",
            "--comm",
            "af_two",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for mut p in procs {
        assert!(p.wait().unwrap().success());
    }
    let r = report_json(&trace);
    let mut pids: Vec<u64> = r["locks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["name"] == "word")
        .map(|l| l["pid"].as_u64().unwrap())
        .collect();
    pids.sort_unstable();
    pids.dedup();
    let t = Trace::open(&trace).unwrap();
    let mut want: Vec<u64> = t
        .records
        .iter()
        .filter_map(|r| match r {
            lockscope_format::Record::Process(p) => Some(u64::from(p.pid)),
            _ => None,
        })
        .collect();
    want.sort_unstable();
    // Only the two named programs, each with its own lock.
    assert_eq!(want.len(), 2, "processes in the trace: {want:?}");
    assert_eq!(pids, want, "{r}");
}

#[test]
fn min_wait_keeps_only_the_waits_at_least_that_long() {
    let Some((_dir, trace, lines, _, _)) = attach_futex(
        "attach-min-wait",
        ["3", "3"],
        &["--duration", "1s", "--min-wait", "1ms"],
    ) else {
        return;
    };
    let t = Trace::open(&trace).unwrap();
    let (t0, end) = window(&t);
    let mut kept = 0;
    for evs in t.events.values() {
        let mut begin = None;
        for e in evs.iter().filter(|e| e.op == Op::FutexWait as u8) {
            match phase::of(e.flags) {
                phase::BEGIN => begin = Some(e.time),
                _ => {
                    let b = begin.take().expect("a wait's BEGIN before its end");
                    assert!(
                        e.time - b >= 1_000_000,
                        "a wait of {} ns was kept",
                        e.time - b
                    );
                    kept += 1;
                }
            }
        }
    }
    // Every wait of at least 1 ms inside the window, by the program's log.
    let long = lines
        .iter()
        .filter(|&&(k, s, e)| k == 'W' && s >= t0 && e <= end && e - s >= 1_000_000)
        .count();
    assert!(long > 0, "no wait of 1 ms or more in the window");
    // The program's clock reads surround the system call: its waits look
    // a little longer than the kernel's, so a few near 1 ms are its only.
    assert!(
        kept <= long && kept as f64 >= 0.9 * long as f64,
        "kept {kept}, program {long}"
    );
}

#[test]
fn a_pthread_mutex_seen_by_attach_is_a_mutex_named_by_its_variable() {
    let dir = temp("attach-pthread");
    if attach_available(&dir).is_none() {
        return;
    }
    let bin = build_c("attach_futex", &dir);
    let (r, out) = attach_to(
        &dir,
        Command::new(&bin)
            .args(["3", "3"])
            .arg(dir.join("unused.log"))
            .arg("pthread"),
        &["--duration", "1s"],
    );
    assert_excluded(&out);
    // glibc's __lll_lock_wait is the innermost frame of the waits; the
    // pthread_mutex_lock above it says what the word is.
    let lock = &r["locks"][0];
    assert_eq!(lock["name"], "pm", "{lock}");
    assert_eq!(lock["kind"], "futex-mutex", "{lock}");
    assert_blame(&r, "lock (attach_futex.c:", "unlock (attach_futex.c:");
}

#[test]
fn a_lock_filter_keeps_no_wait_of_other_words() {
    let Some((_dir, trace, lines, _, _)) = attach_futex(
        "attach-lock-filter",
        ["3", "3"],
        &["--duration", "500ms", "--lock", "0x1"],
    ) else {
        return;
    };
    // The program contended all along (its log says so); no word is at 0x1.
    assert!(lines.len() > 100, "the fixture did not contend");
    let t = Trace::open(&trace).unwrap();
    let n = t.events.values().flatten().count();
    assert_eq!(n, 0, "events of other words were kept");
}

#[test]
fn attach_ends_with_the_process_or_at_ctrl_c_and_leaves_it_running() {
    let dir = temp("attach-end");
    if attach_available(&dir).is_none() {
        return;
    }
    let _cpus = crate::cpus();
    let bin = build_c("attach_futex", &dir);
    // No --duration: the recording ends when the process exits.
    let prog = Command::new(&bin)
        .args(["2", "2"])
        .arg(dir.join("a.log"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let t1 = dir.join("exit.lstrace");
    let out = lockscope(
        &[
            "record",
            "-o",
            t1.to_str().unwrap(),
            "-p",
            &prog.id().to_string(),
        ],
        None,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("detached (the process exited)"), "{err}");
    assert_excluded(&String::from_utf8_lossy(
        &prog.wait_with_output().unwrap().stdout,
    ));
    assert!(slept_and_woke(&Trace::open(&t1).unwrap()).0 > 0);

    // Ctrl-C (SIGINT to the recorder): the trace is written, the process
    // goes on to its own end.
    let prog = Command::new(&bin)
        .args(["2", "3"])
        .arg(dir.join("b.log"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let t2 = dir.join("int.lstrace");
    let rec = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args([
            "record",
            "-o",
            t2.to_str().unwrap(),
            "-p",
            &prog.id().to_string(),
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: kill(2) on the recorder this test started, still running.
    assert_eq!(unsafe { libc::kill(rec.id() as i32, libc::SIGINT) }, 0);
    let r = rec.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{err}");
    assert!(err.contains("detached (stopped)"), "{err}");
    let done = prog.wait_with_output().unwrap();
    assert!(done.status.success(), "the program failed after detach");
    assert_excluded(&String::from_utf8_lossy(&done.stdout));
    let t = Trace::open(&t2).unwrap();
    assert!(
        t.footer.is_some(),
        "the trace of a stopped recording is complete"
    );
    assert!(slept_and_woke(&t).0 > 0);
}

#[test]
fn attach_tells_an_rwlock_a_mutex_and_a_condition_variable_apart() {
    let dir = temp("attach-roles");
    if attach_available(&dir).is_none() {
        return;
    }
    let bin = build_c("attach_roles", &dir);
    let (r, out) = attach_to(&dir, &mut Command::new(&bin), &["--duration", "1500ms"]);
    assert_eq!(out.trim(), "done");
    let kind_of = |name: &str| {
        r["locks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"].as_str().unwrap_or_default().starts_with(name))
            .map(|l| l["kind"].as_str().unwrap_or_default().to_string())
    };
    // The rwlock's futex words are fields inside it (`rw+0x8`): named by
    // the variable that holds them.
    assert_eq!(
        kind_of("rw").as_deref(),
        Some("futex-rwlock"),
        "{}",
        r["locks"]
    );
    assert_eq!(
        kind_of("qm").as_deref(),
        Some("futex-mutex"),
        "{}",
        r["locks"]
    );
    // The condition variable's words are condition waits, not locks.
    assert_eq!(kind_of("qc"), None, "{}", r["locks"]);
    let conds = r["conds"].to_string();
    assert!(conds.contains("qc"), "{conds}");
}
