//! Slowdown of detailed mode on the fixtures (`cargo bench -p
//! lockscope-tsan --bench slowdown`; build the workspace in release mode
//! first). For each fixture and compiler it prints the median wall time of
//! five runs of:
//! - `plain`: the uninstrumented build, not recorded;
//! - `timing`: the uninstrumented build under `lockscope record` (timing
//!   mode, for reference);
//! - `detailed`: the `lockscope cc` build under `lockscope record`
//!   (accesses inside critical sections, atomics, heap blocks), with
//!   coalescing off (`LOCKSCOPE_COALESCE=0`; it is on by default);
//! - `lockset`: the same with `LOCKSCOPE_ALL_ACCESSES=1` (every access),
//!   coalescing off too;
//! - `unrecorded`: the `lockscope cc` build run outside `lockscope record`;
//! - `libtsan`: the compiler's own ThreadSanitizer build, for comparison;
//! - `coalesced`: lockset mode with `LOCKSCOPE_COALESCE=1` (runs of
//!   identical accesses recorded once with a count);
//! - `default`: detailed mode as a user gets it (coalescing on), the
//!   figure detailed mode's cost targets are about (at most 5x, at most
//!   3x on access-light fixtures, nothing lost);
//! - `floor`, for fixtures that have one (`spin/spinlocks.c` built with
//!   `-DRECORD_FLOOR`): the plain build doing, after each atomic, only
//!   what detailed mode cannot avoid (a fenced clock read and a 64-byte
//!   event into a pre-faulted ring, no recorder threads): how far below
//!   the design's own cost a target lies on this machine;
//!
//! - with `SLOWDOWN_BASELINE_LIB=path/to/liblockscope_tsan.a` (an older
//!   build of this runtime), the same fixture linked with it and recorded
//!   in detailed, lockset, coalesced lockset and default mode in the same runs, so that a
//!   change to the access path is measured before/after under the same
//!   machine load (printed as a `baseline` line);
//!
//! - with `SLOWDOWN_CALLGRIND=1`, instead of wall times: the instructions
//!   the recorded program itself executes (valgrind's callgrind, which
//!   counts the same on a loaded machine), once per mode, at
//!   `CALLGRIND_SCALE` (default 2) times the test workload. Fixtures
//!   whose threads spin until a timer or another thread lets them go
//!   (`stream.c`'s start flag, the spinlock fixture) vary with
//!   scheduling; the others are exact.
//!
//! The fixtures run with `FIXTURE_SCALE` (default 20) times their test
//! workload (those that read it). `SLOWDOWN_FIXTURES=a.c,b.c` picks
//! fixtures by file name, `SLOWDOWN_RUNS=N` the number of runs. After the
//! times, the events lost and the trace size of the last detailed and
//! lockset recordings are printed (a target: no loss in default mode).
//! Under `lockscope record` the time shown is the program's own
//! lifetime as the trace records it (process start to exit): the
//! recorder's own start-up and final drain (~40 ms, the same in timing
//! mode) are not detailed mode's cost. The ratio columns compare detailed
//! and lockset recording with the uninstrumented build recorded the same
//! way (timing mode), and detailed with the plain run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const RUNS: usize = 5;
/// Paths under `tests/programs/`: the detailed fixtures, the hand-written
/// spinlock fixture (nothing but atomics), a test-and-set lock spinning
/// on its exchange with a pause (most atomics are failed exchanges) and a
/// streaming fixture (repeated reads of a few locations).
/// Fixtures with a `-DRECORD_FLOOR` variant (see the module doc).
const WITH_FLOOR: &[&str] = &["spinlocks.c"];
const FIXTURES: &[&str] = &[
    "detailed/ulcp_kinds.c",
    "detailed/pincs_fig1.c",
    "detailed/racy_counter.c",
    "detailed/cxx_inventory.cpp",
    "spin/spinlocks.c",
    "spin/tas_pause.c",
    "detailed/stream.c",
];

/// Events lost and trace size (MB) of a trace.
fn loss_and_size(trace: &Path) -> (u64, f64) {
    let t = lockscope_format::Trace::open(trace).unwrap();
    let lost = t.footer.as_ref().map_or(0, |f| f.lost);
    let mb = std::fs::metadata(trace).map_or(0, |m| m.len()) as f64 / 1e6;
    (lost, mb)
}

fn lockscope() -> PathBuf {
    // target/release/deps/slowdown-HASH -> target/release/lockscope
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let p = dir.join("lockscope");
    assert!(
        p.is_file(),
        "{} not found: run `cargo build --release --workspace` first",
        p.display()
    );
    p
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn time(mut cmd: Command) -> f64 {
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    let t = Instant::now();
    let st = cmd.status().unwrap();
    assert!(st.success(), "{cmd:?} failed");
    t.elapsed().as_secs_f64() * 1e3
}

/// Program lifetime (ms) recorded in a trace: process start to end.
fn traced_ms(trace: &Path) -> f64 {
    use lockscope_format::{Record, Trace};
    let t = Trace::open(trace).unwrap();
    let (mut start, mut end) = (u64::MAX, 0u64);
    for r in &t.records {
        match r {
            Record::Process(p) => start = start.min(p.start_ns),
            Record::ProcessEnd(p) => end = end.max(p.end_ns),
            _ => {}
        }
    }
    if end == 0 {
        end = t.footer.as_ref().map_or(0, |f| f.duration_ns);
    }
    end.saturating_sub(start.min(end)) as f64 / 1e6
}

/// Instructions executed by `bin` (not by the recorder) under
/// `lockscope record`, counted by callgrind; `env` is added to the
/// environment. None if valgrind is missing or the count is not found.
fn instructions(
    ls: &Path,
    bin: &Path,
    env: &[(&str, &str)],
    scale: &str,
    dir: &Path,
) -> Option<u64> {
    let out = dir.join("cg");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).ok()?;
    let mut c = Command::new("valgrind");
    c.args(["--tool=callgrind", "--trace-children=yes"])
        .arg(format!("--callgrind-out-file={}/cg.%p", out.display()))
        .arg(ls)
        .arg("record")
        .arg("-o")
        .arg(dir.join("cg.lstrace"))
        .arg("--")
        .arg(bin)
        .env("FIXTURE_SCALE", scale)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if !c.status().ok()?.success() {
        return None;
    }
    let want = bin.display().to_string();
    for e in std::fs::read_dir(&out).ok()?.flatten() {
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        if !text
            .lines()
            .any(|l| l.strip_prefix("cmd:").map(str::trim) == Some(want.as_str()))
        {
            continue;
        }
        return text
            .lines()
            .find_map(|l| l.strip_prefix("summary:"))
            .and_then(|v| v.trim().parse().ok());
    }
    None
}

/// A measured variant: name, binary, extra environment.
type Variant<'a> = (&'a str, &'a Path, &'a [(&'a str, &'a str)]);

/// The `SLOWDOWN_CALLGRIND=1` line of one fixture: instructions of the
/// recorded program per mode, and their ratio to the uninstrumented build
/// recorded in timing mode.
fn callgrind_line(ls: &Path, label: &str, bins: &[Variant], dir: &Path) {
    let scale = std::env::var("CALLGRIND_SCALE").unwrap_or_else(|_| "2".into());
    let counts: Vec<(&str, Option<u64>)> = bins
        .iter()
        .map(|(name, bin, env)| (*name, instructions(ls, bin, env, &scale, dir)))
        .collect();
    let Some(timing) = counts.first().and_then(|c| c.1) else {
        println!("{label:<27} callgrind: no count (is valgrind installed?)");
        return;
    };
    let mut line = format!("{label:<27} instructions (M) at scale {scale}:");
    for (name, n) in &counts {
        match n {
            Some(n) => line.push_str(&format!(
                " {name} {:.1} ({:.2}x)",
                *n as f64 / 1e6,
                *n as f64 / timing as f64
            )),
            None => line.push_str(&format!(" {name} -")),
        }
    }
    println!("{line}");
}

fn build(cmd: &mut Command, what: &str) {
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn main() {
    // `cargo bench` passes --bench; nothing to parse.
    let ls = lockscope();
    let scale = std::env::var("FIXTURE_SCALE").unwrap_or_else(|_| "20".into());
    let src_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/programs");
    let runs: usize = std::env::var("SLOWDOWN_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(RUNS)
        .max(1);
    let pick: Option<Vec<String>> = std::env::var("SLOWDOWN_FIXTURES")
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
    let tmp = std::env::temp_dir().join(format!("lockscope-slowdown-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let trace = tmp.join("t.lstrace");
    println!("FIXTURE_SCALE={scale}, median of {runs} runs");
    println!(
        "{:<20} {:<6} {:>8} {:>8} {:>9} {:>8} {:>10} {:>8} {:>10} {:>11} {:>9}",
        "fixture",
        "cc",
        "plain",
        "timing",
        "detailed",
        "lockset",
        "unrecorded",
        "libtsan",
        "det/timing",
        "lkst/timing",
        "det/plain"
    );
    for (label, cc, cxx) in [("gcc", "gcc", "g++"), ("clang", "clang", "clang++")] {
        if Command::new(cc).arg("--version").output().is_err() {
            println!("({label} not installed)");
            continue;
        }
        for path in FIXTURES {
            let f = path.rsplit('/').next().unwrap_or(path);
            if pick.as_ref().is_some_and(|p| !p.iter().any(|x| x == f)) {
                continue;
            }
            let src = src_dir.join(path);
            let cpp = f.ends_with(".cpp");
            let drv = if cpp { cxx } else { cc };
            let (plain, instr, tsan) = (tmp.join("plain"), tmp.join("instr"), tmp.join("tsan"));
            build(
                Command::new(drv)
                    .args(["-O2", "-g", "-pthread"])
                    .arg(&src)
                    .arg("-o")
                    .arg(&plain),
                "plain build",
            );
            build(
                Command::new(&ls)
                    .arg(if cpp { "c++" } else { "cc" })
                    .args(["-O2", "-g", "-pthread"])
                    .arg(&src)
                    .arg("-o")
                    .arg(&instr)
                    .env(if cpp { "LOCKSCOPE_CXX" } else { "LOCKSCOPE_CC" }, drv),
                "lockscope cc",
            );
            let floor = tmp.join("floor");
            let have_floor = cfg!(target_arch = "x86_64") && WITH_FLOOR.contains(&f);
            if have_floor {
                build(
                    Command::new(drv)
                        .args(["-O2", "-g", "-pthread", "-DRECORD_FLOOR"])
                        .arg(&src)
                        .arg("-o")
                        .arg(&floor),
                    "floor build",
                );
            }
            let have_tsan = Command::new(drv)
                .args(["-O2", "-g", "-pthread", "-fsanitize=thread"])
                .arg(&src)
                .arg("-o")
                .arg(&tsan)
                .output()
                .is_ok_and(|o| o.status.success());
            let base_lib = std::env::var_os("SLOWDOWN_BASELINE_LIB");
            let base = tmp.join("base");
            if let Some(lib) = &base_lib {
                build(
                    Command::new(&ls)
                        .arg(if cpp { "c++" } else { "cc" })
                        .args(["-O2", "-g", "-pthread"])
                        .arg(&src)
                        .arg("-o")
                        .arg(&base)
                        .env(if cpp { "LOCKSCOPE_CXX" } else { "LOCKSCOPE_CC" }, drv)
                        .env("LOCKSCOPE_TSAN_LIB", lib),
                    "lockscope cc (baseline runtime)",
                );
            }
            if std::env::var_os("SLOWDOWN_CALLGRIND").is_some() {
                let off: &[(&str, &str)] = &[("LOCKSCOPE_COALESCE", "0")];
                let on: &[(&str, &str)] = &[("LOCKSCOPE_COALESCE", "1")];
                let all_off: &[(&str, &str)] =
                    &[("LOCKSCOPE_COALESCE", "0"), ("LOCKSCOPE_ALL_ACCESSES", "1")];
                let all_on: &[(&str, &str)] =
                    &[("LOCKSCOPE_COALESCE", "1"), ("LOCKSCOPE_ALL_ACCESSES", "1")];
                let mut bins: Vec<Variant> = vec![
                    ("timing", &plain, &[]),
                    ("detailed", &instr, off),
                    ("det+coalesce", &instr, on),
                    ("lockset", &instr, all_off),
                    ("lkst+coalesce", &instr, all_on),
                ];
                if base_lib.is_some() {
                    bins.push(("BASE:detailed", &base, off));
                    bins.push(("BASE:det+coalesce", &base, on));
                    bins.push(("BASE:lockset", &base, all_off));
                    bins.push(("BASE:lkst+coalesce", &base, all_on));
                }
                callgrind_line(&ls, &format!("{f} {label}"), &bins, &tmp);
                continue;
            }
            let mut losses = [(0u64, 0f64); 6];
            let mut rec = |bin: &Path, all: bool, slot: Option<usize>| -> f64 {
                let mut c = Command::new(&ls);
                // Explicit either way: the default may change again (it
                // has changed once, to coalescing on).
                let coalesce = matches!(slot, Some(2..=5));
                c.env("LOCKSCOPE_COALESCE", if coalesce { "1" } else { "0" });
                c.arg("record").arg("-o").arg(&trace).arg("--").arg(bin);
                c.env("FIXTURE_SCALE", &scale);
                if all {
                    c.env("LOCKSCOPE_ALL_ACCESSES", "1");
                }
                time(c);
                if let Some(i) = slot {
                    losses[i] = loss_and_size(&trace);
                }
                traced_ms(&trace)
            };
            let run = |bin: &Path| {
                let mut c = Command::new(bin);
                c.env("FIXTURE_SCALE", &scale);
                c
            };
            let mut cols = [const { Vec::new() }; 13];
            for _ in 0..runs {
                if base_lib.is_some() {
                    cols[7].push(rec(&base, false, None));
                    cols[8].push(rec(&base, true, None));
                }
                cols[0].push(time(run(&plain)));
                cols[1].push(rec(&plain, false, None));
                cols[2].push(rec(&instr, false, Some(0)));
                cols[3].push(rec(&instr, true, Some(1)));
                cols[4].push(time(run(&instr)));
                cols[6].push(rec(&instr, true, Some(2)));
                cols[10].push(rec(&instr, false, Some(4)));
                if have_floor {
                    cols[11].push(time(run(&floor)));
                }
                if base_lib.is_some() {
                    cols[9].push(rec(&base, true, Some(3)));
                    cols[12].push(rec(&base, false, Some(5)));
                }
                if have_tsan {
                    let mut c = run(&tsan);
                    // The fixtures have deliberate races: do not fail on them.
                    c.env("TSAN_OPTIONS", "report_bugs=0 exitcode=0");
                    cols[5].push(time(c));
                }
            }
            let m: Vec<f64> = cols
                .into_iter()
                .map(|c| if c.is_empty() { f64::NAN } else { median(c) })
                .collect();
            println!(
                "{:<20} {:<6} {:>6.1}ms {:>6.1}ms {:>7.1}ms {:>6.1}ms {:>8.1}ms {:>6.1}ms {:>9.2}x {:>10.2}x {:>8.2}x",
                f,
                label,
                m[0],
                m[1],
                m[2],
                m[3],
                m[4],
                m[5],
                m[2] / m[1],
                m[3] / m[1],
                m[2] / m[0]
            );
            println!(
                "{:<20} {:<6} lost: detailed {} ({:.1} MB), lockset {} ({:.1} MB), \
                 coalesced lockset {} ({:.1} MB) {:.1}ms = {:.2}x timing",
                "",
                "",
                losses[0].0,
                losses[0].1,
                losses[1].0,
                losses[1].1,
                losses[2].0,
                losses[2].1,
                m[6],
                m[6] / m[1]
            );
            println!(
                "{:<20} {:<6} default mode (detailed, coalescing on): {:.1}ms = {:.2}x timing, {:.2}x plain, lost {} ({:.1} MB)",
                "",
                "",
                m[10],
                m[10] / m[1],
                m[10] / m[0],
                losses[4].0,
                losses[4].1
            );
            if have_floor {
                println!(
                    "{:<20} {:<6} floor (-DRECORD_FLOOR: fenced clock read + 64-byte event per atomic, no recorder): {:.1}ms = {:.2}x plain; default mode is {:.2}x the floor",
                    "",
                    "",
                    m[11],
                    m[11] / m[0],
                    m[10] / m[11]
                );
            }
            if base_lib.is_some() {
                println!(
                    "{:<20} {:<6} baseline runtime: detailed {:.1}ms = {:.2}x, lockset {:.1}ms = {:.2}x, \
                     coalesced {:.1}ms = {:.2}x, default mode {:.1}ms = {:.2}x timing \
                     (this build: {:.2}x, {:.2}x, {:.2}x, {:.2}x)",
                    "",
                    "",
                    m[7],
                    m[7] / m[1],
                    m[8],
                    m[8] / m[1],
                    m[9],
                    m[9] / m[1],
                    m[12],
                    m[12] / m[1],
                    m[2] / m[1],
                    m[3] / m[1],
                    m[6] / m[1],
                    m[10] / m[1]
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
