//! What attach mode (`lockscope record -p PID`) costs the programs it
//! watches, interleaved rounds, medians:
//! - every system call of any process while attached (`syscall_loop`:
//!   ns per `getppid()`, alone and while the recorder is attached to
//!   another process);
//! - a program whose threads block all the time (`attach_futex`: a futex
//!   lock over 3 threads on a timer; throughput alone and attached for its
//!   whole run), with the cost per reported wait;
//! - pbzip2 compressing 24 MB with 2 threads (wall time), when installed.
//!
//! Run as root: `cargo build --release --workspace && cargo run --release
//! -p lockscope --example attach_overhead`. `ATTACH_ROUNDS` (5) rounds.
//! A benchmark that prints figures, not a test.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "support/mod.rs"]
mod support;
use support::{check, lockscope, median};

fn build(src: &str, dir: &Path) -> std::path::PathBuf {
    let out = dir.join(Path::new(src).file_stem().unwrap());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let o = Command::new("gcc")
        .args(["-O2", "-g", "-pthread", "-o"])
        .arg(&out)
        .arg(root.join("tests/programs").join(src))
        .output()
        .expect("gcc");
    check("gcc", &o);
    out
}

/// Starts `lockscope record -p PID` in the background.
fn attach(pid: u32, trace: &Path, duration: Option<&str>) -> std::process::Child {
    let mut c = Command::new(lockscope());
    c.args(["record", "-q", "-o"])
        .arg(trace)
        .args(["-p", &pid.to_string()]);
    if let Some(d) = duration {
        c.args(["--duration", d]);
    }
    c.stderr(Stdio::piped())
        .spawn()
        .expect("lockscope record -p")
}

fn wait_recorder(c: std::process::Child) {
    let o = c.wait_with_output().expect("recorder");
    check("lockscope record -p", &o);
}

fn number(o: &std::process::Output, field: usize) -> f64 {
    let s = String::from_utf8_lossy(&o.stdout);
    s.split_whitespace()
        .nth(field)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number {field} in {s:?}"))
}

/// Waits (slept, or returned at once) in an attach trace.
fn waits_in(trace: &Path) -> f64 {
    let t = lockscope_format::Trace::open(trace).expect("attach trace");
    t.events
        .values()
        .flatten()
        .filter(|e| {
            e.op == lockscope_format::Op::FutexWait as u8
                && lockscope_format::phase::of(e.flags) != lockscope_format::phase::BEGIN
        })
        .count() as f64
}

fn main() {
    let rounds: usize = std::env::var("ATTACH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let dir = tempfile::tempdir().expect("temp dir");
    let sys = build("syscall_loop.c", dir.path());
    let fut = build("attach_futex.c", dir.path());
    let trace = dir.path().join("t.lstrace");
    let log = dir.path().join("waits.log");

    // 1. Any process's system calls while attached to another one.
    let (mut alone, mut attached) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let o = Command::new(&sys).arg("3000000").output().unwrap();
        alone.push(number(&o, 0));
        let mut idle = Command::new("sleep").arg("30").spawn().unwrap();
        let rec = attach(idle.id(), &trace, None);
        std::thread::sleep(Duration::from_millis(500));
        let o = Command::new(&sys).arg("3000000").output().unwrap();
        attached.push(number(&o, 0));
        let _ = idle.kill();
        let _ = idle.wait();
        wait_recorder(rec);
    }
    let (a, b) = (median(alone), median(attached));
    println!("system call of any process (getppid): {a:.1} ns alone, {b:.1} ns while attached: +{:.1} ns", b - a);

    // 2. A program that blocks all the time, attached for its whole run.
    let (mut alone, mut attached, mut per_wait) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let o = Command::new(&fut)
            .args(["3", "3"])
            .arg(&log)
            .output()
            .unwrap();
        check("attach_futex", &o);
        let base = number(&o, 1);
        alone.push(base);
        let p = Command::new(&fut)
            .args(["3", "3"])
            .arg(&log)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let rec = attach(p.id(), &trace, None);
        let o = p.wait_with_output().unwrap();
        wait_recorder(rec);
        let got = number(&o, 1);
        attached.push(got);
        let w = waits_in(&trace);
        // Throughput lost, as time per reported wait: 3 s x 3 threads of
        // work, less what the attached run got done.
        if w > 0.0 {
            per_wait.push((1.0 - got / base) * 9e9 / w);
        }
    }
    let (a, b) = (median(alone), median(attached));
    println!(
        "attach_futex (3 threads, 3 s): {a:.0} iterations alone, {b:.0} attached: {:.3}x; {:.0} ns of thread time per reported wait",
        b / a,
        median(per_wait)
    );

    // 3. pbzip2, when installed.
    if Command::new("pbzip2").arg("--help").output().is_ok() {
        let input = dir.path().join("in.bin");
        let data: Vec<u8> = (0..24_000_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8 % 64)
            .collect();
        std::fs::write(&input, data).unwrap();
        let (mut alone, mut attached) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let t = Instant::now();
            let o = Command::new("pbzip2")
                .args(["-p2", "-c"])
                .arg(&input)
                .stdout(Stdio::null())
                .output()
                .unwrap();
            check("pbzip2", &o);
            alone.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            let p = Command::new("pbzip2")
                .args(["-p2", "-c"])
                .arg(&input)
                .stdout(Stdio::null())
                .spawn()
                .unwrap();
            let rec = attach(p.id(), &trace, None);
            let o = p.wait_with_output().unwrap();
            check("pbzip2", &o);
            attached.push(t.elapsed().as_secs_f64());
            wait_recorder(rec);
        }
        let (a, b) = (median(alone), median(attached));
        println!(
            "pbzip2 -p2, 24 MB: {a:.3} s alone, {b:.3} s attached: {:.3}x",
            b / a
        );
    } else {
        println!("pbzip2: not installed, skipped");
    }
}
