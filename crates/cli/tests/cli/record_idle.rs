//! The recorder costs nothing while the program is idle: its drain sleeps
//! until the program wakes it (a ring past its mark, a thread's end), and
//! nothing is lost by sleeping.

use crate::record_util;
use record_util::*;

use std::process::{Command, Stdio};

use lockscope_format::{phase, Op};

/// CPU time (user + system, ms) of `lockscope record -q -o ... -- prog
/// args` and of the processes it waited for, from the kernel's
/// accounting at its exit: CPU time, not wall time, so that the bound
/// holds on a loaded machine. (`-q`: no closing summary, whose symbol
/// look-ups are a fixed cost that varies with the page cache.)
fn record_cpu_ms(dir: &std::path::Path, prog: &std::path::Path, args: &[&str]) -> (i32, f64) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lockscope"));
    c.arg("record")
        .arg("-q")
        .arg("-o")
        .arg(dir.join("trace.lstrace"))
        .arg("--")
        .arg(prog)
        .args(args);
    let (status, ms, _) = run_with_cpu(c);
    (status, ms)
}

/// Runs `c` (stdin and stdout null, stderr captured) and returns its
/// wait status, the CPU time (ms) of it and of the processes it waited
/// for, and its stderr.
// The child is reaped by wait4 (which gives its CPU time), not by
// `Child::wait`, which clippy cannot see.
#[allow(clippy::zombie_processes)]
fn run_with_cpu(mut c: Command) -> (i32, f64, String) {
    let child = c
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: all-zero is a valid rusage; wait4 fills it for our child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child, with valid out-pointers. Its few
    // lines of stderr fit in the pipe until read below.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut ru) };
    assert_eq!(pid, child.id() as libc::pid_t);
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    let mut stderr = String::new();
    use std::io::Read;
    child.stderr.unwrap().read_to_string(&mut stderr).unwrap();
    (status, ms(ru.ru_utime) + ms(ru.ru_stime), stderr)
}

// See issue 30: the drain polled every 0.5 ms, 3-6 % of a vCPU (110-130 ms
// over a 2 s sleep on the development VM); sleeping until woken, ~2.5 ms
// per second. The same program without the sleep is recorded too, and
// only the difference is bounded: the recorder's start-up and end (a few
// ms, tens under heavy I/O load) are not what this checks.
#[test]
fn an_idle_program_costs_the_recorder_almost_no_cpu() {
    let dir = temp("idle_cpu");
    let bin = build_c("idle_then_thread", &dir);
    let (status, quick) = record_cpu_ms(&dir, &bin, &["0", "0"]);
    assert_eq!(status, 0);
    // 2 s without a lock call, then one short thread, then exit.
    let (status, idle) = record_cpu_ms(&dir, &bin, &["2000", "0"]);
    assert_eq!(status, 0);
    assert!(
        idle - quick < 40.0,
        "recording a program asleep for 2 s took {idle:.1} ms of CPU, {quick:.1} ms \
         without the sleep (polling: 110-130 ms more)"
    );
}

#[test]
fn a_thread_that_ends_while_the_drain_sleeps_loses_nothing() {
    let dir = temp("idle_thread");
    let bin = build_c("idle_then_thread", &dir);
    let run = record(&dir, &[], &bin, &["300", "300"], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let line = run
        .stdout
        .lines()
        .next()
        .expect("the fixture prints a line");
    let mut w = line.split_whitespace();
    let addr = hex(w.nth(1).unwrap());
    let pairs: usize = w.nth(1).unwrap().parse().unwrap();
    assert_eq!(pairs, 100);
    let t = run.trace();
    assert_eq!(t.footer.as_ref().unwrap().lost, 0, "{}", run.stderr);
    let acquired = t
        .events
        .values()
        .flatten()
        .filter(|e| e.op == Op::MutexLock as u8 && e.addr == addr && e.phase() == phase::DONE)
        .count();
    assert_eq!(acquired, pairs, "every acquisition of the short thread");
    // Two threads, both ended: the short thread's end was written.
    let exits = t
        .events
        .values()
        .flatten()
        .filter(|e| e.op == Op::ThreadExit as u8)
        .count();
    assert_eq!(exits, 2);
}

/// Parses a duration as the summary prints it (`12.5 ms`, `1.02 s`,
/// `850.0 us`) into ms.
fn summary_ms(v: &str, unit: &str) -> f64 {
    let v: f64 = v.parse().unwrap();
    match unit {
        "s" => v * 1e3,
        "ms" => v,
        "us" => v / 1e3,
        u => panic!("unit {u}"),
    }
}

// See issue 30: the recorder's cost per event is printed so that nobody
// has to estimate it; it must be the recorder's own CPU, never the
// program's (which is the recorder process's children's).
#[test]
fn the_recorder_reports_its_own_cpu_apart_from_the_programs() {
    let dir = temp("own_cpu");
    let bin = build_c("mutex", &dir);
    // A shell loop (a few hundred ms of CPU in the program, no lock
    // call), then the mutex fixture in the same process (exit status 3).
    let mut c = Command::new(env!("CARGO_BIN_EXE_lockscope"));
    c.arg("record")
        .arg("-o")
        .arg(dir.join("trace.lstrace"))
        .args(["--", "sh", "-c"])
        .arg("i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done; exec \"$0\"")
        .arg(&bin);
    let (status, total, stderr) = run_with_cpu(c);
    assert_eq!(libc::WEXITSTATUS(status), 3, "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("lockscope: the recorder used "))
        .unwrap_or_else(|| panic!("no cost line: {stderr}"));
    let w: Vec<&str> = line.split_whitespace().collect();
    // lockscope: the recorder used V UNIT of CPU (N ns per event) and M MB ...
    let recorder = summary_ms(w[4], w[5]);
    let per_event: f64 = w[8].trim_start_matches('(').parse().unwrap();
    let events: f64 = stderr
        .lines()
        .find(|l| l.starts_with("lockscope: recorded "))
        .and_then(|l| l.split(", ").find(|p| p.ends_with("bytes/event)")))
        .and_then(|p| p.split_whitespace().next())
        .map(|n| n.replace(',', "").parse().unwrap())
        .unwrap_or_else(|| panic!("no event count: {stderr}"));
    assert!(recorder > 0.0, "{line}");
    assert!(
        recorder <= total,
        "the recorder's {recorder} ms is part of the command's {total} ms: {line}"
    );
    // The loop's CPU is the program's: the recorder, idle but for its
    // start and end, used a small part of the whole.
    assert!(
        recorder < total / 2.0,
        "the recorder reports {recorder} ms of the command's {total} ms: the program's \
         loop counted as the recorder's? {line}"
    );
    let want = recorder * 1e6 / events.max(1.0);
    assert!(
        (per_event - want).abs() <= 0.05 * want + 0.1,
        "{per_event} ns per event for {recorder} ms and {events} events: {line}"
    );
}
