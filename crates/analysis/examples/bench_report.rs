//! Speed benchmark of `lockscope report`'s analysis on a synthetic trace.
//!
//! ```text
//! cargo run --release -p lockscope-analysis --example bench_report -- [EVENTS] [THREADS] [PATH] [replay]
//! ```
//!
//! Writes a trace of EVENTS events (default 100 million) from THREADS
//! threads (default 4) taking 16 locks with realistic contention (a
//! discrete simulation: a thread that wants a held lock waits for its
//! release), then runs the whole analysis (index, time-ordered merge,
//! model, report with symbolization off) in a child process and prints
//! the elapsed time, events per second and the child's peak RSS. The
//! analysis runs in a child so that the peak RSS is the analysis' own,
//! not the generator's. With `replay`, the child runs what
//! `lockscope replay` does instead (`replay::build_and_report`: build
//! the replay program, spilling its actions, then the two simulations,
//! beside the pass that writes the work of its compute actions) and
//! prints the same figures.
//! A PATH that exists is used as it is (not generated again, not deleted).

use std::path::{Path, PathBuf};
use std::time::Instant;

use lockscope_format::*;

fn rss_peak_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// User + system CPU seconds of this process (all threads), from
/// /proc/self/stat: on a shared machine wall time alone says little.
fn cpu_seconds() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may contain spaces).
    let rest = s.rsplit_once(')').map_or("", |x| x.1);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of stat, 12 and 13 here.
    (ticks(11) + ticks(12)) / 100.0
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*: deterministic, no dependency.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn generate(path: &Path, events: u64, threads: u32) -> u64 {
    let mut w = lockscope_test_support::synthetic_trace(path, "synthetic-bench", threads);
    const LOCKS: usize = 16;
    let mut free_at = [0u64; LOCKS];
    let mut next = vec![1_000u64; threads as usize];
    let mut bufs: Vec<Vec<Event>> = vec![Vec::with_capacity(8192); threads as usize];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut n = 0u64;
    let ev = |time, op: Op, flags, addr, site| Event {
        time,
        op: op as u8,
        flags,
        addr,
        site,
        ..Event::default()
    };
    while n < events {
        // The thread that wants a lock first goes next.
        let (ti, &want) = next.iter().enumerate().min_by_key(|x| x.1).unwrap();
        // Lock 0 is hot (half the acquisitions), the others cold.
        let k = if rng.below(2) == 0 {
            0
        } else {
            1 + rng.below(LOCKS as u64 - 1) as usize
        };
        let addr = 0x5555_0000_1000 + 64 * k as u64;
        let site = 0x4000_1000 + 0x40 * (k as u64 % 4) + 0x1000 * ti as u64;
        let b = &mut bufs[ti];
        let got = if want < free_at[k] {
            b.push(ev(want, Op::MutexLock, phase::BEGIN, addr, site));
            b.push(ev(
                free_at[k] + 40,
                Op::MutexLock,
                phase::DONE | phase::CONTENDED,
                addr,
                site,
            ));
            n += 2;
            free_at[k] + 40
        } else {
            b.push(ev(want, Op::MutexLock, phase::DONE, addr, site));
            n += 1;
            want
        };
        let rel = got + 50 + rng.below(400);
        b.push(ev(rel, Op::MutexUnlock, phase::DONE, addr, site + 0x20));
        n += 1;
        free_at[k] = rel;
        next[ti] = rel + 100 + rng.below(900);
        if b.len() >= 8000 {
            w.write_events(ti as u32 + 1, b).unwrap();
            b.clear();
        }
    }
    let mut end = 0;
    for (ti, b) in bufs.iter().enumerate() {
        w.write_events(ti as u32 + 1, b).unwrap();
        end = end.max(next[ti]);
    }
    lockscope_test_support::finish_synthetic_trace(w, threads, end, n);
    n
}

fn analyze(path: &Path) {
    let cfg = lockscope_report::ReportConfig {
        symbolize: false,
        ..Default::default()
    };
    let t0 = Instant::now();
    let r = lockscope_report::analyze(path, &cfg, &mut |_, _, _| {}).expect("analysis");
    let json = serde_json::to_string(&r).unwrap();
    let dt = t0.elapsed().as_secs_f64();
    println!(
        "report: {} events in {:.2} s wall ({:.2} s CPU on 2 threads) = {:.1} M events/s; \
         peak RSS {:.1} MiB; {} locks, {} threads, JSON {} bytes",
        r.events,
        dt,
        cpu_seconds(),
        r.events as f64 / dt / 1e6,
        rss_peak_kb() as f64 / 1024.0,
        r.locks.len(),
        r.threads.len(),
        json.len()
    );
}

fn replay(path: &Path) {
    use lockscope_replay::replay;
    use lockscope_trace::input;
    let t0 = Instant::now();
    let meta = input::index(path, &mut |_, _| {}).expect("index");
    // What `lockscope replay` does: the simulations start before the
    // build's last pass ends (`LOCKSCOPE_REPLAY_TIMINGS=1` for phases).
    let (p, r) = replay::build_and_report(path, &meta, 0).expect("replay");
    let dt = t0.elapsed().as_secs_f64();
    println!(
        "replay: {} events in {:.2} s wall ({:.2} s CPU) \
         = {:.1} M events/s; peak RSS {:.1} MiB; {} actions spilled in {:.0} MB; \
         recorded {:.3} ms, replayed {:.3} ms",
        meta.index.events(),
        dt,
        cpu_seconds(),
        meta.index.events() as f64 / dt / 1e6,
        rss_peak_kb() as f64 / 1024.0,
        r.actions,
        p.spilled_bytes() as f64 / 1e6,
        r.recorded_wall_ns as f64 / 1e6,
        r.replayed_wall_ns as f64 / 1e6,
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--decode-only") {
        let t0 = Instant::now();
        let f = std::io::BufReader::new(std::fs::File::open(&args[2]).unwrap());
        let mut r = TraceReader::new(f).unwrap();
        let mut x = 0u64;
        while let Some(rec) = r.next().unwrap() {
            if let Record::Events(c) = rec {
                c.for_each(|e| x = x.wrapping_add(e.time)).unwrap();
            }
        }
        println!("decode {:.2} s ({x})", t0.elapsed().as_secs_f64());
        return;
    }
    if args.get(1).map(String::as_str) == Some("--merge-only") {
        // Profiling aid: the reading stages alone (index + merge).
        let p = Path::new(&args[2]);
        let t0 = Instant::now();
        let meta = lockscope_trace::input::index(p, &mut |_, _| {}).unwrap();
        let t1 = t0.elapsed().as_secs_f64();
        let mut m = lockscope_trace::input::Merge::new(p, &meta.index).unwrap();
        let mut x = 0u64;
        m.run(
            |t, e| x = x.wrapping_add(e.time ^ u64::from(t)),
            &mut |_, _| {},
        )
        .unwrap();
        println!(
            "index {t1:.2} s, index+merge {:.2} s ({x})",
            t0.elapsed().as_secs_f64()
        );
        return;
    }
    if args.get(1).map(String::as_str) == Some("--analyze") {
        analyze(Path::new(&args[2]));
        return;
    }
    if args.get(1).map(String::as_str) == Some("--replay") {
        replay(Path::new(&args[2]));
        return;
    }
    let mode = if args.get(4).map(String::as_str) == Some("replay") {
        "--replay"
    } else {
        "--analyze"
    };
    let events: u64 = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000_000);
    let threads: u32 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(4);
    let path: PathBuf = args
        .get(3)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join(format!("lockscope-bench-{events}.lstrace")));
    let existed = path.exists();
    if !existed {
        let t0 = Instant::now();
        let n = generate(&path, events, threads);
        let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        println!(
            "generated {n} events from {threads} threads in {:.1} s: {} ({:.0} MB, {:.2} bytes/event)",
            t0.elapsed().as_secs_f64(),
            path.display(),
            bytes as f64 / 1e6,
            bytes as f64 / n as f64
        );
    }
    let st = std::process::Command::new(std::env::current_exe().unwrap())
        .arg(mode)
        .arg(&path)
        .status()
        .expect("run the analysis child");
    if args.get(3).is_none() && !existed {
        let _ = std::fs::remove_file(&path);
    }
    std::process::exit(st.code().unwrap_or(1));
}
