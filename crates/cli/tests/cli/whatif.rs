//! `lockscope whatif` on a fixture with a known answer: two threads whose
//! critical sections under one lock touch disjoint data, so the lock only
//! serializes them. Removing it must predict a parallel speedup; the real
//! speedup of the lock-free build is measured and printed next to the
//! prediction (timings are not asserted: the machine is shared).

use crate::record_util;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use record_util::{record, temp, workspace};
use serde_json::Value;

fn build(dir: &Path, name: &str, defs: &[&str]) -> std::path::PathBuf {
    let src = workspace().join("tests/programs/whatif_disjoint.c");
    let out = dir.join(name);
    let st = Command::new("gcc")
        .args(["-O2", "-g", "-pthread"])
        .args(defs)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .expect("gcc");
    assert!(st.success());
    out
}

fn whatif(trace: &Path, extra: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .arg("whatif")
        .arg("--json")
        .arg("--no-symbols")
        .args(extra)
        .arg(trace)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "whatif failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// Best of three wall times of a plain run (5x the recorded rounds, so
/// that start-up costs do not dominate).
fn best_wall(bin: &Path) -> f64 {
    (0..3)
        .map(|_| {
            let t = Instant::now();
            let st = Command::new(bin).arg("2000").output().unwrap();
            assert!(st.status.success());
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

#[test]
fn removing_a_lock_over_disjoint_sections_predicts_a_parallel_speedup() {
    let dir = temp("whatif-disjoint");
    let locked = build(&dir, "locked", &[]);
    let free = build(&dir, "free", &["-DNOLOCK"]);
    // The lock is the static `big`; without symbols it is named by its
    // address, which the curve of the most waited-for lock gives. A
    // shared machine may have run the two workers one after the other
    // (no contention recorded): record again then.
    let (run, j) = (0..4)
        .map(|_| {
            let run = record(&dir, &[], &locked, &[], b"");
            assert!(run.trace_path.exists(), "{}", run.stderr);
            let j = whatif(&run.trace_path, &["--top", "1"]);
            (run, j)
        })
        .find(|(_, j)| !j["curves"].as_array().unwrap().is_empty())
        .expect("the two workers never contended in four recordings");
    assert_eq!(j["schema"], "lockscope.whatif/1");
    let curve = &j["curves"][0];
    let lock = curve["lock"].as_str().unwrap().to_string();
    // Shorter sections never make the program slower, and the curve
    // starts at the unchanged run.
    let pts: Vec<f64> = curve["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["speedup"].as_f64().unwrap())
        .collect();
    assert_eq!(pts.len(), 5);
    assert!((pts[0] - 1.0).abs() < 1e-9, "{curve:#}");
    assert!(pts.windows(2).all(|w| w[1] >= w[0] - 1e-9), "{curve:#}");

    let j2 = whatif(&run.trace_path, &["--top", "0", "--remove-lock", &lock]);
    let s = &j2["scenarios"][0];
    let predicted = s["speedup"].as_f64().unwrap();
    // Both workers end earlier, and nobody waits for the lock any more.
    assert!(s["threads"].as_array().unwrap().len() >= 2, "{s:#}");
    assert_eq!(s["locks"][0]["predicted_wait_ns"], 0, "{s:#}");
    assert!(predicted > 1.05, "two serialized threads on 2 CPUs: {s:#}");
    // On one CPU the lock-free run cannot overlap the two workers: it is
    // slower than on two (what it still gains is the lock's own cost,
    // the wake-ups of its waiters).
    let j1 = whatif(
        &run.trace_path,
        &["--top", "0", "--cpus", "1", "--remove-lock", &lock],
    );
    let one = j1["scenarios"][0]["speedup"].as_f64().unwrap();
    let wall1 = j1["scenarios"][0]["predicted_wall_ns"].as_u64().unwrap();
    let wall2 = s["predicted_wall_ns"].as_u64().unwrap();
    assert!(wall2 < wall1, "1 CPU {wall1} ns vs 2 CPUs {wall2} ns");
    // Deterministic.
    assert_eq!(
        whatif(&run.trace_path, &["--top", "0", "--remove-lock", &lock]),
        j2
    );

    // The sections only touch their thread's data: as readers of a
    // reader-writer lock they would not exclude each other either, which
    // predicts the same as removing the lock. (Symbols on: the site is
    // named by its function.)
    let out = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["whatif", "--json", "--top", "0", "--readers", "run"])
        .arg(&run.trace_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let jr: Value = serde_json::from_slice(&out.stdout).unwrap();
    let readers = jr["scenarios"][0]["speedup"].as_f64().unwrap();
    assert!(
        (readers - predicted).abs() <= predicted * 0.1,
        "readers {readers} vs removed {predicted}: {jr:#}"
    );
    // Never more: sharing a lock cannot save more than removing it (under
    // outside load it was predicted at 1.48x against 1.26x).
    assert!(
        readers <= predicted + 1e-9,
        "readers {readers} vs removed {predicted}: {jr:#}"
    );

    let measured = best_wall(&locked) / best_wall(&free);
    println!(
        "whatif --remove-lock {lock}: predicted speedup {predicted:.2}x, measured {measured:.2}x \
         (ratio {:.2}); on 1 CPU predicted {one:.2}x",
        predicted / measured
    );
}
