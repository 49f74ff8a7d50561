//! Predictions against real fixes: for each fixture pair in
//! `tests/programs/whatif/` (a program and the same program with a fix
//! applied), measures the real speedup of the fix (plain `gcc -O2`
//! builds, medians of interleaved runs) and what `lockscope whatif`
//! predicts from recordings of the unfixed build (medians over several
//! recordings), and prints both, the prediction's range and the error.
//!
//! Run: `cargo build --release --workspace && cargo run --release -p
//! lockscope --example whatif_validate [FILTER]` (needs gcc with OpenMP).
//! `WHATIF_RUNS` (5) timed runs per build, `WHATIF_TRACES` (3)
//! recordings per case, `WHATIF_THREADS` ("2 4"). FILTER keeps the cases
//! whose name contains it. `LOCKSCOPE_BEFORE=PATH` also predicts from
//! the same recordings with another `lockscope` binary (a build before a
//! change to the model) and prints its figures on a `before:` line. A benchmark that prints figures, not a test:
//! timings on a shared machine vary, and the table says so with the
//! spread of the timed runs.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

#[path = "support/mod.rs"]
mod support;
use support::{check, lockscope, median};

/// How a case's program is recorded.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Timing mode on the plain build.
    Timing,
    /// Detailed mode on a `lockscope cc` build.
    Detailed,
}

/// One fixture pair and the prediction to check.
struct Case {
    name: &'static str,
    /// Source under tests/programs/whatif/.
    src: &'static str,
    openmp: bool,
    /// Arguments after the thread count (OpenMP: the thread count is
    /// OMP_NUM_THREADS and these are all the arguments): the unfixed
    /// and the fixed program.
    unfixed: &'static [&'static str],
    fixed: &'static [&'static str],
    /// Arguments of the recorded run (fewer rounds in detailed mode).
    recorded: &'static [&'static str],
    mode: Mode,
    /// `lockscope whatif` arguments; the first scenario's speedup (or
    /// the ULCP-free one's with `--ulcp-free`) is the prediction.
    whatif: &'static [&'static str],
}

const CASES: &[Case] = &[
    Case {
        name: "four sections, ulcp-free",
        src: "four_sections.c",
        openmp: false,
        unfixed: &["60000", "locked"],
        fixed: &["60000", "fixed"],
        recorded: &["6000", "locked"],
        mode: Mode::Detailed,
        whatif: &["--ulcp-free"],
    },
    Case {
        name: "read-mostly 0%, readers",
        src: "rw_table.c",
        openmp: false,
        unfixed: &["60000", "mutex", "0", "512", "200"],
        fixed: &["60000", "rwlock", "0", "512", "200"],
        recorded: &["60000", "mutex", "0", "512", "200"],
        mode: Mode::Timing,
        whatif: &["--readers", "lookup"],
    },
    Case {
        name: "read-mostly 5%, readers",
        src: "rw_table.c",
        openmp: false,
        unfixed: &["60000", "mutex", "50", "512", "200"],
        fixed: &["60000", "rwlock", "50", "512", "200"],
        recorded: &["60000", "mutex", "50", "512", "200"],
        mode: Mode::Timing,
        whatif: &["--readers", "lookup"],
    },
    Case {
        name: "read-mostly 20%, readers",
        src: "rw_table.c",
        openmp: false,
        unfixed: &["60000", "mutex", "200", "512", "200"],
        fixed: &["60000", "rwlock", "200", "512", "200"],
        recorded: &["60000", "mutex", "200", "512", "200"],
        mode: Mode::Timing,
        whatif: &["--readers", "lookup"],
    },
    Case {
        name: "read-mostly 0%, rwlock (detailed)",
        src: "rw_table.c",
        openmp: false,
        unfixed: &["60000", "mutex", "0", "512", "200"],
        fixed: &["60000", "rwlock", "0", "512", "200"],
        recorded: &["6000", "mutex", "0", "512", "200"],
        mode: Mode::Detailed,
        whatif: &["--rwlock", "m"],
    },
    Case {
        name: "read-mostly 5%, rwlock (detailed)",
        src: "rw_table.c",
        openmp: false,
        unfixed: &["60000", "mutex", "50", "512", "200"],
        fixed: &["60000", "rwlock", "50", "512", "200"],
        recorded: &["6000", "mutex", "50", "512", "200"],
        mode: Mode::Detailed,
        whatif: &["--rwlock", "m"],
    },
    Case {
        name: "half section, shrink 50",
        src: "half_section.c",
        openmp: false,
        unfixed: &["60000", "full"],
        fixed: &["60000", "half"],
        recorded: &["60000", "full"],
        mode: Mode::Timing,
        whatif: &["--shrink", "fold_state=50"],
    },
    Case {
        name: "openmp imbalance, remove critical",
        src: "omp_imbalance.c",
        openmp: true,
        unfixed: &["200", "critical"],
        fixed: &["200", "reduction"],
        recorded: &["200", "critical"],
        mode: Mode::Timing,
        whatif: &["--remove-lock", ".gomp_critical_user_sum_lock"],
    },
];

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The command that runs `bin` with `threads` threads and `args`.
fn command(case: &Case, bin: &Path, threads: u32, args: &[&str]) -> Command {
    let mut c = Command::new(bin);
    if case.openmp {
        c.env("OMP_NUM_THREADS", threads.to_string());
    } else {
        c.arg(threads.to_string());
    }
    c.args(args);
    c
}

fn time_once(case: &Case, bin: &Path, threads: u32, args: &[&str]) -> f64 {
    let t = Instant::now();
    let o = command(case, bin, threads, args)
        .output()
        .expect("run fixture");
    check(case.src, &o);
    t.elapsed().as_secs_f64()
}

fn build(src: &Path, out: &Path, openmp: bool, instrumented: bool) {
    let mut c = if instrumented {
        let mut c = Command::new(lockscope());
        c.arg("cc");
        c
    } else {
        Command::new("gcc")
    };
    c.args(["-O2", "-g", "-pthread"]);
    if openmp {
        c.arg("-fopenmp");
    }
    let o = c.arg(src).arg("-o").arg(out).output().expect("compiler");
    check("build", &o);
}

/// (speedup, low, high, note) of the case's scenario in a whatif JSON.
fn prediction(v: &serde_json::Value, ulcp: bool) -> (f64, f64, f64, String) {
    let s = if ulcp {
        &v["ulcp_free"]
    } else {
        &v["scenarios"][0]
    };
    let x = s["speedup"].as_f64().unwrap_or(f64::NAN);
    let lo = s["range"][0].as_f64().unwrap_or(x);
    let hi = s["range"][1].as_f64().unwrap_or(x);
    let note = s["uncertain"].as_str().unwrap_or("").to_string();
    (x, lo, hi, note)
}

fn main() {
    let filter = std::env::args().nth(1).unwrap_or_default();
    let runs = env_num("WHATIF_RUNS", 5);
    let traces = env_num("WHATIF_TRACES", 3);
    let threads: Vec<u32> = std::env::var("WHATIF_THREADS")
        .unwrap_or_else(|_| "2 4".into())
        .split_whitespace()
        .filter_map(|t| t.parse().ok())
        .collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/programs/whatif");
    let dir =
        std::env::temp_dir().join(format!("lockscope-whatif-validate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    println!(
        "real speedup: median of {runs} interleaved runs of each build (min-max of the ratio over \
         pairs in brackets); prediction: median over {traces} recordings of the unfixed build, \
         range: the widest range those recordings gave"
    );
    println!(
        "{:<36} {:>3} {:>7} {:>15} {:>9} {:>17} {:>7} {:>7}",
        "case", "thr", "unfixed", "real", "predicted", "range", "error", "inside"
    );
    for case in CASES.iter().filter(|c| c.name.contains(&filter)) {
        let src = root.join(case.src);
        let stem = case.src.trim_end_matches(".c");
        let plain = dir.join(format!("{stem}.plain"));
        build(&src, &plain, case.openmp, false);
        let recorded_bin = if case.mode == Mode::Detailed {
            let inst = dir.join(format!("{stem}.inst"));
            build(&src, &inst, case.openmp, true);
            inst
        } else {
            plain.clone()
        };
        for &t in &threads {
            let (mut u, mut f, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..runs {
                let a = time_once(case, &plain, t, case.unfixed);
                let b = time_once(case, &plain, t, case.fixed);
                ratios.push(a / b);
                u.push(a);
                f.push(b);
            }
            let real = median(u.clone()) / median(f);
            let (rmin, rmax) = ratios
                .iter()
                .fold((f64::MAX, 0.0f64), |(a, b), &r| (a.min(r), b.max(r)));
            let mut preds = Vec::new();
            let (mut lo, mut hi) = (f64::MAX, 0.0f64);
            let mut notes = Vec::new();
            let before_bin = std::env::var_os("LOCKSCOPE_BEFORE");
            let (mut before, mut blo, mut bhi) = (Vec::new(), f64::MAX, 0.0f64);
            for k in 0..traces {
                let trace = dir.join(format!("{stem}-{t}-{k}.lstrace"));
                let mut rec = Command::new(lockscope());
                rec.args(["record", "-q", "-o"])
                    .arg(&trace)
                    .arg("--")
                    .arg(&recorded_bin);
                if case.openmp {
                    rec.env("OMP_NUM_THREADS", t.to_string());
                } else {
                    rec.arg(t.to_string());
                }
                let o = rec.args(case.recorded).output().expect("lockscope record");
                check("lockscope record", &o);
                let o = Command::new(lockscope())
                    .arg("whatif")
                    .args(case.whatif)
                    .args(["--json", "--top", "0"])
                    .arg(&trace)
                    .output()
                    .expect("lockscope whatif");
                check("lockscope whatif", &o);
                let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("whatif JSON");
                let (x, l, h, note) = prediction(&v, case.whatif.contains(&"--ulcp-free"));
                if let Some(bin) = &before_bin {
                    let o = Command::new(bin)
                        .arg("whatif")
                        .args(case.whatif)
                        .args(["--json", "--top", "0"])
                        .arg(&trace)
                        .output()
                        .expect("lockscope whatif (before)");
                    check("lockscope whatif (before)", &o);
                    let v: serde_json::Value =
                        serde_json::from_slice(&o.stdout).expect("whatif JSON");
                    let (x, l, h, _) = prediction(&v, case.whatif.contains(&"--ulcp-free"));
                    before.push(x);
                    blo = blo.min(l);
                    bhi = bhi.max(h);
                }
                preds.push(x);
                lo = lo.min(l);
                hi = hi.max(h);
                if !note.is_empty() && !notes.contains(&note) {
                    notes.push(note);
                }
            }
            let list: Vec<String> = preds.iter().map(|x| format!("{x:.2}")).collect();
            let p = median(preds);
            let err = (p / real - 1.0) * 100.0;
            let inside = lo <= real && real <= hi;
            println!(
                "{:<36} {:>3} {:>6.0}ms {:>5.2}x [{:.2}-{:.2}] {:>8.2}x {:>8.2}-{:<8.2} {:>+6.1}% {:>7}",
                case.name,
                t,
                median(u) * 1e3,
                real,
                rmin,
                rmax,
                p,
                lo,
                hi,
                err,
                if err.abs() <= 15.0 {
                    "within"
                } else if inside {
                    "yes"
                } else {
                    "NO"
                }
            );
            println!("    per recording: {}", list.join(" "));
            if !before.is_empty() {
                let b = median(before);
                println!(
                    "    before: {b:.2}x ({blo:.2}-{bhi:.2}) {:+.1}%",
                    (b / real - 1.0) * 100.0
                );
            }
            for n in notes {
                println!("    uncertain: {n}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
