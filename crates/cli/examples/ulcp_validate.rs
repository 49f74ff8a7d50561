//! Validation of `lockscope whatif --ulcp-free` against reality:
//! the fixture `tests/programs/detailed/ulcp_table.c` takes one global
//! mutex for work that never conflicts; its fixed version (`fixed`
//! argument) takes no lock. At 2 and 4 threads this measures the real
//! speedup of the fix (plain builds, medians of interleaved runs), then
//! records detailed-mode traces of the unfixed version and prints the
//! speedups `whatif --ulcp-free` and `whatif --remove-lock table_lock`
//! predict (medians over the recordings), with what `--remove-lock`
//! predicts from timing-mode traces of the plain build, and their errors
//! against the measurement. `ULCP_RUNS` (7) and `ULCP_TRACES` (3) set the
//! counts; `ULCP_SHAPE="READS WORK"` the fixture's section and round sizes.
//!
//! Run: `cargo build --release -p lockscope && cargo run --release -p
//! lockscope --example ulcp_validate [ROUNDS [TRACED_ROUNDS]]` (needs gcc). A benchmark
//! that prints figures, not a test: timings on a loaded machine vary.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

#[path = "support/mod.rs"]
mod support;
use support::{check, lockscope, median};

/// Wall time of one run of the fixture, seconds.
fn run_once(bin: &Path, threads: u32, rounds: &str, mode: &str, shape: &[String]) -> f64 {
    let t = Instant::now();
    let o = Command::new(bin)
        .args([&threads.to_string(), rounds, mode])
        .args(shape)
        .output()
        .expect("run fixture");
    check("fixture", &o);
    t.elapsed().as_secs_f64()
}

fn whatif(trace: &Path, args: &[&str]) -> serde_json::Value {
    let o = Command::new(lockscope())
        .arg("whatif")
        .args(args)
        .args(["--json", "--top", "0"])
        .arg(trace)
        .output()
        .expect("run lockscope whatif");
    check("lockscope whatif", &o);
    serde_json::from_slice(&o.stdout).expect("whatif JSON")
}

fn main() {
    // Timed runs are long enough to hide process start-up; the detailed
    // trace is shorter (detailed mode records every access in a section).
    let rounds = std::env::args().nth(1).unwrap_or_else(|| "200000".into());
    let traced = std::env::args().nth(2).unwrap_or_else(|| "50000".into());
    // The locked program's time is a convoy's: it varies by a third from
    // one run to the next (57-76 ms at 2 threads, best of 5, in three
    // sessions of one afternoon). Medians of interleaved runs, and of the
    // predictions of several recordings, not one lucky run of each.
    let runs: usize = std::env::var("ULCP_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    let traces: usize = std::env::var("ULCP_TRACES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    // `ULCP_SHAPE="READS WORK"`: the fixture's table reads per section and
    // work steps per round (default 128 and 40: sections of ~0.1 us).
    let shape: Vec<String> = std::env::var("ULCP_SHAPE")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/programs/detailed/ulcp_table.c");
    let dir = std::env::temp_dir().join(format!("lockscope-ulcp-validate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let plain = dir.join("plain");
    let inst = dir.join("inst");
    let o = Command::new("gcc")
        .args(["-O2", "-g", "-pthread"])
        .arg(&src)
        .arg("-o")
        .arg(&plain)
        .output()
        .expect("gcc");
    check("gcc", &o);
    let o = Command::new(lockscope())
        .args(["cc", "-O2", "-g", "-pthread"])
        .arg(&src)
        .arg("-o")
        .arg(&inst)
        .output()
        .expect("lockscope cc");
    check("lockscope cc", &o);
    println!(
        "ulcp_table: {rounds} rounds per thread timed (median of {runs} interleaved runs); \
         predictions: medians over {traces} recordings (detailed mode: {traced} rounds; \
         timing mode: {rounds} rounds of the plain build){}",
        if shape.is_empty() {
            String::new()
        } else {
            format!("; fixture shape (reads, work): {}", shape.join(" "))
        }
    );
    println!(
        "{:>7} {:>9} {:>9} {:>9} {:>10} {:>7} {:>12} {:>7} {:>13} {:>7}",
        "threads",
        "locked",
        "fixed",
        "measured",
        "ulcp-free",
        "error",
        "remove-lock",
        "error",
        "timing trace",
        "error"
    );
    for threads in [2u32, 4] {
        let (mut lv, mut fv) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            lv.push(run_once(&plain, threads, &rounds, "locked", &shape));
            fv.push(run_once(&plain, threads, &rounds, "fixed", &shape));
        }
        let (locked, fixed) = (median(lv), median(fv));
        let measured = locked / fixed;
        let (mut pu, mut pr, mut pt) = (Vec::new(), Vec::new(), Vec::new());
        let mut top = None;
        for k in 0..traces {
            let trace = dir.join(format!("t{threads}-{k}.lstrace"));
            let o = Command::new(lockscope())
                .args(["record", "-q", "-o"])
                .arg(&trace)
                .arg("--")
                .arg(&inst)
                .args([&threads.to_string(), traced.as_str(), "locked"])
                .args(&shape)
                .output()
                .expect("lockscope record");
            check("lockscope record", &o);
            let u = whatif(&trace, &["--ulcp-free"]);
            pu.push(u["ulcp_free"]["speedup"].as_f64().unwrap_or(0.0));
            top = top.or_else(|| u["ulcp_free"]["regions"].get(0).cloned());
            let r = whatif(&trace, &["--remove-lock", "table_lock"]);
            pr.push(r["scenarios"][0]["speedup"].as_f64().unwrap_or(0.0));
            let timing = dir.join(format!("p{threads}-{k}.lstrace"));
            let o = Command::new(lockscope())
                .args(["record", "-q", "-o"])
                .arg(&timing)
                .arg("--")
                .arg(&plain)
                .args([&threads.to_string(), rounds.as_str(), "locked"])
                .args(&shape)
                .output()
                .expect("lockscope record");
            check("lockscope record", &o);
            let r = whatif(&timing, &["--remove-lock", "table_lock"]);
            pt.push(r["scenarios"][0]["speedup"].as_f64().unwrap_or(0.0));
        }
        let list = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        println!(
            "        predictions per recording: ulcp-free {}, remove-lock {}, timing trace {}",
            list(&pu),
            list(&pr),
            list(&pt)
        );
        let (pu, pr, pt) = (median(pu), median(pr), median(pt));
        println!(
            "{:>7} {:>8.1}ms {:>8.1}ms {:>8.2}x {:>9.2}x {:>+6.1}% {:>11.2}x {:>+6.1}% {:>12.2}x {:>+6.1}%",
            threads,
            locked * 1e3,
            fixed * 1e3,
            measured,
            pu,
            (pu / measured - 1.0) * 100.0,
            pr,
            (pr / measured - 1.0) * 100.0,
            pt,
            (pt / measured - 1.0) * 100.0
        );
        if let Some(top) = top {
            println!(
                "        top ULCP region: {} <-> {} (P {:.0}%)",
                top["first"].as_str().unwrap_or("?"),
                top["second"].as_str().unwrap_or("?"),
                top["p"].as_f64().unwrap_or(0.0) * 100.0
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
