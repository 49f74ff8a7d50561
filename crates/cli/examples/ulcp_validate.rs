//! Validation of `lockscope whatif --ulcp-free` against reality (issue 9):
//! the fixture `tests/programs/detailed/ulcp_table.c` takes one global
//! mutex for work that never conflicts; its fixed version (`fixed`
//! argument) takes no lock. At 2 and 4 threads this measures the real
//! speedup of the fix (plain builds, best of several runs of each), then
//! records a detailed-mode trace of the unfixed version and prints the
//! speedups `whatif --ulcp-free` and `whatif --remove-lock table_lock`
//! predict, and their error against the measurement.
//!
//! Run: `cargo build --release -p lockscope && cargo run --release -p
//! lockscope --example ulcp_validate [ROUNDS [TRACED_ROUNDS]]` (needs gcc). A benchmark
//! that prints figures, not a test: timings on a loaded machine vary.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn lockscope() -> PathBuf {
    if let Some(p) = std::env::var_os("LOCKSCOPE") {
        return p.into();
    }
    // target/<profile>/examples/ulcp_validate -> target/<profile>/lockscope
    let exe = std::env::current_exe().expect("own path");
    exe.parent()
        .and_then(Path::parent)
        .map(|d| d.join("lockscope"))
        .expect("target directory")
}

fn check(what: &str, o: &std::process::Output) {
    if !o.status.success() {
        eprintln!(
            "{what} failed ({}):\n{}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        std::process::exit(1);
    }
}

fn best_of(bin: &Path, threads: u32, rounds: &str, mode: &str, runs: u32) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..runs {
        let t = Instant::now();
        let o = Command::new(bin)
            .args([&threads.to_string(), rounds, mode])
            .output()
            .expect("run fixture");
        check("fixture", &o);
        best = best.min(t.elapsed().as_secs_f64());
    }
    best
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
    // Timed runs are long enough to hide process start-up; the traced run
    // is shorter (detailed mode records every access in a section).
    let rounds = std::env::args().nth(1).unwrap_or_else(|| "200000".into());
    let traced = std::env::args().nth(2).unwrap_or_else(|| "5000".into());
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
    println!("ulcp_table: {rounds} rounds per thread timed (best of 5 runs), {traced} traced");
    println!(
        "{:>7} {:>9} {:>9} {:>9} {:>10} {:>7} {:>12} {:>7}",
        "threads", "locked", "fixed", "measured", "ulcp-free", "error", "remove-lock", "error"
    );
    for threads in [2u32, 4] {
        let locked = best_of(&plain, threads, &rounds, "locked", 5);
        let fixed = best_of(&plain, threads, &rounds, "fixed", 5);
        let measured = locked / fixed;
        let trace = dir.join(format!("t{threads}.lstrace"));
        let o = Command::new(lockscope())
            .arg("record")
            .arg("-o")
            .arg(&trace)
            .arg("--")
            .arg(&inst)
            .args([&threads.to_string(), traced.as_str(), "locked"])
            .output()
            .expect("lockscope record");
        check("lockscope record", &o);
        let u = whatif(&trace, &["--ulcp-free"]);
        let pu = u["ulcp_free"]["speedup"].as_f64().unwrap_or(0.0);
        let r = whatif(&trace, &["--remove-lock", "table_lock"]);
        let pr = r["scenarios"][0]["speedup"].as_f64().unwrap_or(0.0);
        println!(
            "{:>7} {:>8.1}ms {:>8.1}ms {:>8.2}x {:>9.2}x {:>+6.1}% {:>11.2}x {:>+6.1}%",
            threads,
            locked * 1e3,
            fixed * 1e3,
            measured,
            pu,
            (pu / measured - 1.0) * 100.0,
            pr,
            (pr / measured - 1.0) * 100.0
        );
        if let Some(top) = u["ulcp_free"]["regions"].get(0) {
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
