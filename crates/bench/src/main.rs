//! `lockscope-bench-capture`: the recorder's figures, printed (not timed
//! tests: the machine is shared and noisy, so these are read by people and
//! compared as ratios).
//!
//! 1. Drain throughput: a producer thread fills a 4 MiB ring as fast as
//!    it can while the real drain pipeline ([`lockscope_record::drain_dir`])
//!    empties it into a trace; events/s delivered and the loss.
//! 2. ns added per uncontended lock+unlock pair (tests/programs/bench/
//!    uncontended.c, 10M pairs, best of 5 rounds) with and without the
//!    recorder, and the floor of the recording design on this machine
//!    (tests/programs/bench/pair_floor.c: the three clock reads and two
//!    slot writes of a pair in plain C).
//! 3. Wall-time ratio recorded/unrecorded on a contended fixture
//!    (tests/programs/bench/contended.c) with 2, 8 and 64 threads.
//! 4. Distortion: contended fraction in the trace against what the
//!    program itself saw (contended.c counts the acquisitions that found
//!    the mutex taken), alone and recorded, and against a minimal
//!    counting shim (tests/programs/bench/count_shim.c).
//! 5. Bytes per event on disk over the record fixtures.
//!
//! 6. fluid_like (fluidanimate-like) in default mode: events offered/s,
//!    drained/s, lost, back-pressure waits.
//! 7. 1000 short threads (16 alive at once, and one after another):
//!    wall-time and program-time ratios, the recorder's peak RSS (from
//!    its summary), buffers reused.
//!
//! 8. The cost of a call path per event (what a contended event adds
//!    for its stack): uncontended.c with `--stacks all` against the
//!    default, built without and with frame pointers.
//!
//! Usage: `lockscope-bench-capture [--quick] [drain|uncontended|contended|bytes|fluid|threads|paths]...`.
//! Needs gcc, and `lockscope` and `liblockscope_preload.so` next to this
//! binary (build the workspace in release mode first), or LOCKSCOPE_BIN
//! naming the lockscope binary. `LOCKSCOPE_BASE_BIN=<another build's
//! lockscope>` also measures that recorder, interleaved in the same run
//! (lines `before` / `after`): on a shared machine only ratios measured
//! together mean something. `LSBENCH_PAIRS=N`: pairs per round of the
//! uncontended loop (default 10M; 5 rounds); `LSBENCH_PATH_PAIRS=N`: the
//! same for section 8 (default 1M).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use lockscope_format::{phase, Op, Trace};
use lockscope_ring::raw::Head;
use lockscope_ring::ring::{self, Producer, RingIdentity};
use lockscope_ring::session::{proc_file_name, ring_file_name, ProcessHeader, PROC_MAGIC};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn lockscope_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("LOCKSCOPE_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("own path");
    exe.with_file_name("lockscope")
}

fn gcc(src: &Path, out: &Path, extra: &[&str]) {
    let st = Command::new("gcc")
        .args(["-O2", "-g", "-pthread"])
        .args(extra)
        .arg("-o")
        .arg(out)
        .arg(src)
        .status()
        .expect("gcc");
    assert!(st.success(), "gcc failed on {}", src.display());
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn map_file(path: &Path, len: usize) -> *mut u8 {
    use std::os::unix::io::AsRawFd;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    f.set_len(len as u64).unwrap();
    // SAFETY: fresh file of len bytes.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    p as *mut u8
}

/// Drain throughput with the real pipeline. `wait_for_room`: the producer
/// retries a full ring (measures what the consumer sustains) or drops
/// (measures loss at full producer speed).
fn drain_throughput(n: u64, wait_for_room: bool) -> (f64, u64, u64) {
    let dir = std::env::temp_dir().join(format!("lsbench-drain-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.with_extension("lstrace");
    let pid = 1;
    let base = map_file(&dir.join(proc_file_name(pid, 0)), 4096 + 8);
    // SAFETY: header page of a fresh mapping; magic last.
    unsafe {
        let h = base as *mut ProcessHeader;
        (*h).version = 1;
        (*h).pid = pid;
        (*h).start_tsc = lockscope_ring::tsc::now();
        std::sync::atomic::fence(Ordering::Release);
        std::ptr::write_volatile(&mut (*h).magic, PROC_MAGIC);
    }
    let len = ring::file_bytes(ring::capacity_for_kib(4096));
    let rb = map_file(&dir.join(ring_file_name(pid, 0, 2)), len);
    let id = RingIdentity {
        pid,
        tid: 2,
        start_tsc: lockscope_ring::tsc::now(),
        ..RingIdentity::default()
    };
    // SAFETY: fresh zeroed mapping.
    let mut p = unsafe { Producer::init(rb, len, &id) }.unwrap();
    // Waiting: the producer sleeps on the ring's futex until the drain
    // makes room, as the preload library does by default.
    p.set_wait_when_full(wait_for_room);
    let stop = AtomicBool::new(false);
    let mut elapsed = 0.0;
    let outcome = std::thread::scope(|s| {
        let h = s.spawn(|| lockscope_record::drain_dir(&dir, &out, &stop).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(50));
        let t0 = Instant::now();
        for i in 0..n {
            let head = Head {
                tsc: lockscope_ring::tsc::now(),
                addr: 0x5555_0000_1000 + (i & 1) * 64,
                site: 0x4011a0 + (i & 1) * 8,
                op: if i & 1 == 0 { 1 } else { 4 },
                ..Head::default()
            };
            p.push(head, None, &[]);
        }
        elapsed = t0.elapsed().as_secs_f64();
        stop.store(true, Ordering::Release);
        h.join().unwrap()
    });
    let _ = std::fs::remove_dir_all(&dir);
    let bytes = std::fs::metadata(&out).map_or(0, |m| m.len());
    let _ = std::fs::remove_file(&out);
    let recorded = outcome.events;
    let _ = bytes;
    (n as f64 / elapsed, recorded, outcome.lost)
}

struct Recorded {
    wall_s: f64,
    stdout: String,
    stderr: String,
    trace: PathBuf,
}

fn run_plain(bin: &Path, args: &[&str], env: &[(&str, &Path)]) -> (f64, String, String) {
    let t0 = Instant::now();
    let mut c = Command::new(bin);
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.stdin(Stdio::null()).output().expect("run");
    (
        t0.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The recorders to compare: this build, and with `LOCKSCOPE_BASE_BIN`
/// (another build's `lockscope`, its preload library next to it) also
/// that one, measured interleaved in the same run so that the ratio
/// between them survives the machine's noise.
fn recorders() -> Vec<(&'static str, PathBuf)> {
    let mut v = Vec::new();
    if let Some(b) = std::env::var_os("LOCKSCOPE_BASE_BIN") {
        v.push(("before", PathBuf::from(b)));
    }
    v.push(("after", lockscope_bin()));
    v
}

fn run_recorded(tmp: &Path, bin: &Path, args: &[&str], opts: &[&str]) -> Recorded {
    run_recorded_with(&lockscope_bin(), tmp, bin, args, opts)
}

fn run_recorded_with(
    lockscope: &Path,
    tmp: &Path,
    bin: &Path,
    args: &[&str],
    opts: &[&str],
) -> Recorded {
    let trace = tmp.join("bench.lstrace");
    let t0 = Instant::now();
    let out = Command::new(lockscope)
        .arg("record")
        .args(opts)
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(bin)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("lockscope record");
    Recorded {
        wall_s: t0.elapsed().as_secs_f64(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        trace,
    }
}

fn field(s: &str, key: &str) -> Option<f64> {
    s.split_whitespace()
        .find_map(|f| f.strip_prefix(key))
        .and_then(|v| v.trim_start_matches('=').parse().ok())
}

/// (CPU ns per event, peak MB) of the recorder, from `record`'s summary
/// line "the recorder used X of CPU (N ns per event) and M MB of memory
/// at its peak" (not printed with `--quiet`).
fn recorder_cost(stderr: &str) -> Option<(f64, f64)> {
    let line = stderr.lines().find(|l| l.contains("the recorder used"))?;
    let per = line
        .split('(')
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let mb = line
        .split(" and ")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some((per, mb))
}

/// (acquisitions, contended) of MutexLock in a trace.
fn contended_in_trace(t: &Trace) -> (u64, u64) {
    let (mut acq, mut cont) = (0, 0);
    for evs in t.events.values() {
        for e in evs {
            if e.op == Op::MutexLock as u8 && phase::of(e.flags) == phase::DONE {
                acq += 1;
                if e.flags & phase::CONTENDED != 0 {
                    cont += 1;
                }
            }
        }
    }
    (acq, cont)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let want = |s: &str| only.is_empty() || only.iter().any(|o| o == s);
    let reps = if quick { 1 } else { 5 };
    let tmp = std::env::temp_dir().join(format!("lsbench-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let progs = workspace().join("tests/programs");

    println!(
        "# lockscope-bench-capture{}",
        if quick { " (quick)" } else { "" }
    );
    if want("drain") {
        println!("\n## 1. drain throughput (one 4 MiB ring, real drain + writer pipeline)");
        let n = if quick { 20_000_000 } else { 100_000_000 };
        let (rate, got, lost) = drain_throughput(n, true);
        println!(
            "producer waits for room: {:.1} M events/s drained (sustained), {got} events written, {lost} lost",
            rate / 1e6
        );
        let (rate, got, lost) = drain_throughput(n, false);
        println!(
            "producer never waits:    {:.1} M events/s offered, {:.1} M events/s drained, {got} written, {lost} lost ({:.2}%)",
            rate / 1e6,
            rate / 1e6 * got as f64 / n as f64,
            lost as f64 * 100.0 / n as f64
        );
    }

    let unc = tmp.join("uncontended");
    gcc(&progs.join("bench/uncontended.c"), &unc, &[]);
    if want("uncontended") {
        let pairs: u64 = std::env::var("LSBENCH_PAIRS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(10_000_000);
        println!(
            "\n## 2. uncontended lock+unlock pair (uncontended.c, {pairs} pairs x 5 rounds, best round)"
        );
        let recs = recorders();
        let pa = pairs.to_string();
        let mut plain = Vec::new();
        let mut rec = vec![Vec::new(); recs.len()];
        let mut lost_v = vec![Vec::new(); recs.len()];
        let mut cost_v = vec![Vec::new(); recs.len()];
        for _ in 0..reps {
            let (_, out, _) = run_plain(&unc, &[&pa], &[]);
            plain.push(field(&out, "ns_per_pair").unwrap_or(f64::NAN));
            for (k, (_, lb)) in recs.iter().enumerate() {
                let r = run_recorded_with(lb, &tmp, &unc, &[&pa], &[]);
                rec[k].push(field(&r.stdout, "ns_per_pair").unwrap_or(f64::NAN));
                cost_v[k].push(recorder_cost(&r.stderr).map_or(f64::NAN, |c| c.0));
                let t = Trace::open(&r.trace).expect("trace");
                let l = t.footer.as_ref().map_or(0, |f| f.lost);
                lost_v[k].push(l as f64 / (l as f64 + t.event_count() as f64));
            }
        }
        let p = median(plain);
        println!("unrecorded {p:.1} ns/pair (median of {reps} runs)");
        for (k, (label, _)) in recs.iter().enumerate() {
            let r = median(rec[k].clone());
            let l = &lost_v[k];
            println!(
                "{label}: recorded {r:.1} ns/pair: +{:.1} ns per pair, ratio {:.2}x; lost {:.1}% (median; runs: {}); the recorder's own CPU {:.1} ns per event (target 15)",
                r - p,
                r / p,
                median(l.clone()) * 100.0,
                l.iter().map(|x| format!("{:.1}%", x * 100.0)).collect::<Vec<_>>().join(" "),
                median(cost_v[k].clone())
            );
        }
        // What no recorder of this design can avoid on this machine (issue
        // 8's 16 ns target): the three clock reads of a pair, one fenced,
        // and its two 32-byte slots, in a plain C loop.
        if cfg!(target_arch = "x86_64") {
            let floor = tmp.join("pair_floor");
            gcc(&progs.join("bench/pair_floor.c"), &floor, &[]);
            let (_, out, _) = run_plain(&floor, &[&pa], &[]);
            let f = |k| field(&out, k).unwrap_or(f64::NAN);
            let (bare, fl, clocks) = (f("bare_ns"), f("floor_ns"), f("clocks_only_ns"));
            println!(
                "floor of the design (pair_floor.c: 3 clock reads, one fenced, 2 slots of 32 bytes, nothing else): +{:.1} ns per pair (the clock reads alone +{:.1} ns; bare pair {bare:.1} ns)",
                fl - bare,
                clocks - bare
            );
        }
    }

    if want("contended") {
        println!("\n## 3+4. contended fixture (contended.c): wall time and distortion");
        let cont = tmp.join("contended");
        gcc(&progs.join("bench/contended.c"), &cont, &[]);
        let shim = tmp.join("libcount_shim.so");
        gcc(
            &progs.join("bench/count_shim.c"),
            &shim,
            &["-shared", "-fPIC", "-ldl"],
        );
        // Contended fraction four ways: what the program itself saw
        // (contended.c's own look at the lock word) alone and while
        // recorded, what the counting shim saw, and what the trace says.
        // The trace must match the program's own count in the same run
        // (test the_trace_counts_the_contention_the_program_itself_saw);
        // the gap between "alone" and "recorded" is the recorder's effect
        // on the program.
        println!("| threads | unrecorded s | recorded s | ratio | contended: program alone | shim | program recorded | trace | events lost |");
        println!("|---|---|---|---|---|---|---|---|---|");
        let recs = recorders();
        for threads in [2, 8, 64] {
            let ops = (1_600_000 / threads).to_string();
            let th = threads.to_string();
            let args = [th.as_str(), ops.as_str()];
            let (mut pw, mut shim_f, mut own_f) = (Vec::new(), Vec::new(), Vec::new());
            let mut rw = vec![Vec::new(); recs.len()];
            let mut trace_f = vec![Vec::new(); recs.len()];
            let mut own_rec_f = vec![Vec::new(); recs.len()];
            let mut lost = vec![Vec::new(); recs.len()];
            let total = (threads * (1_600_000 / threads)) as f64;
            for _ in 0..reps {
                let (w, out, _) = run_plain(&cont, &args, &[]);
                pw.push(w);
                own_f.push(field(&out, "own_contended").unwrap_or(f64::NAN) / total);
                for (k, (_, lb)) in recs.iter().enumerate() {
                    let r = run_recorded_with(lb, &tmp, &cont, &args, &["--quiet"]);
                    rw[k].push(r.wall_s);
                    own_rec_f[k]
                        .push(field(&r.stdout, "own_contended").unwrap_or(f64::NAN) / total);
                    let t = Trace::open(&r.trace).expect("trace");
                    let l = t.footer.as_ref().map_or(0, |f| f.lost);
                    lost[k].push(l as f64 / (l as f64 + t.event_count() as f64));
                    let (a, c) = contended_in_trace(&t);
                    trace_f[k].push(c as f64 / a.max(1) as f64);
                }
                let (_, _, err) = run_plain(&cont, &args, &[("LD_PRELOAD", &shim)]);
                let a = field(&err, "acquisitions").unwrap_or(0.0);
                let c = field(&err, "contended").unwrap_or(0.0);
                shim_f.push(c / a.max(1.0));
            }
            let p = median(pw);
            for (k, (label, _)) in recs.iter().enumerate() {
                let r = median(rw[k].clone());
                println!(
                    "| {threads} {label} | {p:.3} | {r:.3} | {:.2}x | {:.3}% | {:.3}% | {:.3}% | {:.3}% | {:.1}% |",
                    r / p,
                    median(own_f.clone()) * 100.0,
                    median(shim_f.clone()) * 100.0,
                    median(own_rec_f[k].clone()) * 100.0,
                    median(trace_f[k].clone()) * 100.0,
                    median(lost[k].clone()) * 100.0
                );
            }
        }
    }

    if want("paths") {
        // The cost of a call path (what a contended event adds for its
        // stack, by default): uncontended.c recorded with `--stacks all`
        // (both events of every pair carry a path) against the default
        // (none do), half the difference per pair. Its paths are short
        // (main, libc's start, _start) above the recorder's own frames,
        // which the CFI walk passes through first.
        let pairs: u64 = std::env::var("LSBENCH_PATH_PAIRS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000_000);
        println!(
            "\n## 8. call path per event (uncontended.c, {pairs} pairs, --stacks all against the default)"
        );
        let recs = recorders();
        let pa = pairs.to_string();
        for (what, extra) in [
            ("gcc -O2 -g", &[][..]),
            (
                "gcc -O2 -g -fno-omit-frame-pointer",
                &["-fno-omit-frame-pointer"][..],
            ),
        ] {
            let bin = tmp.join("uncontended-paths");
            gcc(&progs.join("bench/uncontended.c"), &bin, extra);
            let mut per = vec![Vec::new(); recs.len()];
            let mut frames = vec![0.0; recs.len()];
            for _ in 0..reps {
                for (k, (_, lb)) in recs.iter().enumerate() {
                    let r0 = run_recorded_with(lb, &tmp, &bin, &[&pa], &["--quiet"]);
                    let base = field(&r0.stdout, "ns_per_pair").unwrap_or(f64::NAN);
                    let r =
                        run_recorded_with(lb, &tmp, &bin, &[&pa], &["--quiet", "--stacks", "all"]);
                    let all = field(&r.stdout, "ns_per_pair").unwrap_or(f64::NAN);
                    per[k].push((all - base) / 2.0);
                    let t = Trace::open(&r.trace).expect("trace");
                    let p = t.call_paths();
                    frames[k] =
                        p.values().map(|f| f.len()).sum::<usize>() as f64 / p.len().max(1) as f64;
                }
            }
            for (k, (label, _)) in recs.iter().enumerate() {
                println!(
                    "{what}: {label}: +{:.0} ns per event with a call path ({:.1} frames per distinct path; runs: {})",
                    median(per[k].clone()),
                    frames[k],
                    per[k].iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(" ")
                );
            }
        }
    }

    if want("fluid") {
        // A real program's rate, default settings: every event must
        // arrive (the test asserts it); here the rates and the cost.
        println!(
            "\n## 6. fluid_like (fluidanimate-like: 2 threads, 4096 mutexes), default settings"
        );
        let fl = tmp.join("fluid_like");
        gcc(&progs.join("fluid_like.c"), &fl, &[]);
        let steps = if quick { "1000000" } else { "3000000" };
        let args = ["2", steps, "60"];
        println!("| run | unrecorded s | recorded s | ratio | events offered/s | drained/s | lost | waits (ms) |");
        println!("|---|---|---|---|---|---|---|---|");
        for k in 0..reps {
            let (pw, _, _) = run_plain(&fl, &args, &[]);
            let r = run_recorded(&tmp, &fl, &args, &[]);
            let t = Trace::open(&r.trace).expect("trace");
            let lost = t.footer.as_ref().map_or(0, |f| f.lost);
            let events = t.event_count() as u64;
            let prog_s = field(&r.stdout, "seconds").unwrap_or(f64::NAN);
            let waits = r
                .stderr
                .split("waited ")
                .nth(1)
                .and_then(|x| x.split('(').nth(1))
                .and_then(|x| x.split(" in total").next())
                .unwrap_or("0")
                .to_string();
            println!(
                "| {k} | {pw:.3} | {:.3} | {:.2}x | {:.1} M | {:.1} M | {lost} | {waits} |",
                r.wall_s,
                r.wall_s / pw,
                (events + lost) as f64 / prog_s / 1e6,
                events as f64 / r.wall_s / 1e6,
            );
        }
    }

    if want("threads") {
        // Within 2x of the unrecorded wall time. Threads
        // take over the buffers of joined ones (no mapping per thread);
        // "program" is the time the program itself measures (creating,
        // running and joining the threads), "wall" the whole command.
        // RSS: the recorder's own peak as its summary prints it (`VmHWM`;
        // not `wait4`'s ru_maxrss, which Linux keeps across fork and exec:
        // after a section that read large traces here it showed this
        // process's peak). A build before that line prints NaN.
        println!("\n## 7. 1000 short threads (short_threads.c: 100 pairs each)");
        let st = tmp.join("short_threads");
        gcc(&progs.join("short_threads.c"), &st, &[]);
        println!("| alive at once | recorder | wall unrecorded | wall recorded | wall ratio | program unrecorded | program recorded | program ratio | recorder peak RSS | lost | buffers reused |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|");
        for alive in ["16", "1"] {
            let args = ["1000", "100", alive];
            let recs = recorders();
            let mut pw = Vec::new();
            let mut ps = Vec::new();
            // Per recorder: walls, program times, RSS, lost, reused.
            type Runs = (Vec<f64>, Vec<f64>, Vec<f64>, u64, Vec<f64>);
            let mut per: Vec<Runs> = recs
                .iter()
                .map(|_| (Vec::new(), Vec::new(), Vec::new(), 0, Vec::new()))
                .collect();
            for _ in 0..reps {
                let (w, out, _) = run_plain(&st, &args, &[]);
                pw.push(w);
                ps.push(field(&out, "seconds").unwrap_or(f64::NAN));
                for (i, (_, lsb)) in recs.iter().enumerate() {
                    let r = run_recorded_with(lsb, &tmp, &st, &args, &[]);
                    let e = &mut per[i];
                    e.0.push(r.wall_s);
                    e.1.push(field(&r.stdout, "seconds").unwrap_or(f64::NAN));
                    e.2.push(recorder_cost(&r.stderr).map_or(f64::NAN, |c| c.1));
                    let t = Trace::open(&r.trace).expect("trace");
                    e.3 += t.footer.as_ref().map_or(0, |f| f.lost);
                    // "lockscope: N threads reused the buffer of a finished thread"
                    let reused = r
                        .stderr
                        .lines()
                        .find(|l| l.contains("reused the buffer"))
                        .and_then(|l| l.split_whitespace().nth(1))
                        .and_then(|w| w.replace(',', "").parse().ok())
                        .unwrap_or(0.0);
                    e.4.push(reused);
                }
            }
            let (p, pp) = (median(pw), median(ps));
            for (i, (name, _)) in recs.iter().enumerate() {
                let e = per[i].clone();
                let (r, rp) = (median(e.0), median(e.1));
                println!(
                    "| {alive} | {name} | {p:.3} s | {r:.3} s | {:.2}x | {pp:.3} s | {rp:.3} s | {:.2}x | {:.0} MB | {} | {:.0} |",
                    r / p,
                    rp / pp,
                    median(e.2),
                    e.3,
                    median(e.4)
                );
            }
        }
    }

    if want("private") {
        // Nothing shared between threads on the hot path,
        // so the added cost per pair must not grow with the thread count.
        // The fixture prints the slowest thread's ns per pair; with more
        // threads than CPUs that grows for both runs, so the comparison
        // is the added ns per pair and the ratio, per thread count.
        let pairs: u64 = if quick { 200_000 } else { 2_000_000 };
        println!(
            "\n## 8. private mutex per thread (private.c: {pairs} pairs per thread, 20 iterations of work between)"
        );
        let pv = tmp.join("private");
        gcc(&progs.join("bench/private.c"), &pv, &["-O2", "-pthread"]);
        // With more threads than CPUs each thread's wall time per pair
        // also counts the time it waited for a CPU: "CPU-normalized"
        // scales the added cost by min(threads, CPUs) / threads.
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        println!("| threads | unrecorded ns/pair | recorded ns/pair | added ns/pair | ratio | added vs 1 thread | CPU-normalized added vs 1 thread | events lost | recorder CPU ns/event | recorder peak MB |");
        println!("|---|---|---|---|---|---|---|---|---|---|");
        let pa = pairs.to_string();
        let mut added1 = f64::NAN;
        for threads in [1, 2, 8, 16] {
            let th = threads.to_string();
            let args = [th.as_str(), pa.as_str()];
            let (mut pw, mut rw, mut lost) = (Vec::new(), Vec::new(), 0u64);
            let (mut cpu, mut mem) = (Vec::new(), Vec::new());
            for _ in 0..reps {
                let (_, out, _) = run_plain(&pv, &args, &[]);
                pw.push(field(&out, "ns_per_pair").unwrap_or(f64::NAN));
                let r = run_recorded(&tmp, &pv, &args, &[]);
                rw.push(field(&r.stdout, "ns_per_pair").unwrap_or(f64::NAN));
                let (c, m) = recorder_cost(&r.stderr).unwrap_or((f64::NAN, f64::NAN));
                cpu.push(c);
                mem.push(m);
                let t = Trace::open(&r.trace).expect("trace");
                lost += t.footer.as_ref().map_or(0, |f| f.lost);
            }
            let (p, r) = (median(pw), median(rw));
            if threads == 1 {
                added1 = r - p;
            }
            println!(
                "| {threads} | {p:.1} | {r:.1} | {:+.1} | {:.2}x | {:.2}x | {:.2}x | {lost} | {:.1} | {:.0} |",
                r - p,
                r / p,
                (r - p) / added1,
                (r - p) * (threads as f64).min(cpus) / threads as f64 / added1,
                median(cpu),
                median(mem)
            );
        }
    }

    if want("bytes") {
        println!("\n## 5. bytes per event on disk");
        println!("| program | events | bytes | bytes/event |");
        println!("|---|---|---|---|");
        let mut fixtures: Vec<(String, PathBuf, Vec<String>)> = Vec::new();
        for f in [
            "mutex",
            "rwlock",
            "condvar",
            "barrier_sem_spin",
            "many_threads",
        ] {
            let b = tmp.join(f);
            gcc(&progs.join(format!("{f}.c")), &b, &[]);
            fixtures.push((f.to_string(), b, vec![]));
        }
        let demo = lockscope_bin().with_file_name("lockscope-demo");
        if demo.exists() {
            fixtures.push(("lockscope-demo".into(), demo, vec![]));
        }
        fixtures.push((
            "uncontended (1M pairs)".into(),
            unc.clone(),
            vec!["200000".into()],
        ));
        let (mut te, mut tb) = (0u64, 0u64);
        for (name, bin, args) in &fixtures {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            let r = run_recorded(&tmp, bin, &a, &["--quiet"]);
            let t = Trace::open(&r.trace).expect("trace");
            let e = t.event_count() as u64;
            let b = std::fs::metadata(&r.trace).map_or(0, |m| m.len());
            te += e;
            tb += b;
            println!("| {name} | {e} | {b} | {:.2} |", b as f64 / e.max(1) as f64);
        }
        println!(
            "| all | {te} | {tb} | {:.2} |",
            tb as f64 / te.max(1) as f64
        );
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
