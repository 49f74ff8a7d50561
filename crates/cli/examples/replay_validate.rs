//! `lockscope replay` "without the recorder" against the program run
//! alone: for each program, the median wall time of plain runs and the
//! replay's `unrecorded_wall_ns` of recordings made in between (runs and
//! recordings interleaved, so that a change of load hits both), with
//! the error, and whether the replay said it could not tell
//! (`unrecorded_uncertain`, when granting the locks in recorded and in
//! arrival order disagree).
//!
//! Run: `cargo build --release --workspace && cargo run --release -p
//! lockscope --example replay_validate [FILTER]` (needs gcc with OpenMP;
//! pbzip2 when installed). Programs built elsewhere are added with
//! `REPLAY_EXTRA="name=command args;name2=..."` (run through `sh -c`,
//! e.g. PARSEC's fluidanimate: `fluid=/path/fluidanimate 2 20
//! in_35K.fluid /tmp/out.fluid`). `REPLAY_RUNS` (5) timed runs and
//! `REPLAY_TRACES` (3) recordings per program. A benchmark that prints
//! figures, not a test: timings on a shared machine vary.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

#[path = "support/mod.rs"]
mod support;
use support::{check, lockscope, median};

/// One program: a shell command line, with `{bin}` replaced by the
/// built fixture (when `src` is given).
struct Case {
    name: String,
    /// Fixture source under tests/programs/ (None: `cmd` is complete).
    src: Option<&'static str>,
    openmp: bool,
    cmd: String,
    /// OMP_NUM_THREADS for OpenMP programs.
    omp_threads: u32,
}

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn fixture(name: &str, src: &'static str, openmp: bool, args: &str, omp: u32) -> Case {
    Case {
        name: name.into(),
        src: Some(src),
        openmp,
        cmd: format!("{{bin}} {args}"),
        omp_threads: omp,
    }
}

fn cases(dir: &Path) -> Vec<Case> {
    let mut v = vec![
        fixture(
            "four sections, 2 thr",
            "whatif/four_sections.c",
            false,
            "2 60000 locked",
            0,
        ),
        fixture(
            "four sections, 4 thr",
            "whatif/four_sections.c",
            false,
            "4 60000 locked",
            0,
        ),
        fixture(
            "read-mostly 5%, 4 thr",
            "whatif/rw_table.c",
            false,
            "4 60000 mutex 50 512 200",
            0,
        ),
        fixture(
            "half section, 2 thr",
            "whatif/half_section.c",
            false,
            "2 60000 full",
            0,
        ),
        fixture(
            "openmp imbalance, 2 thr",
            "whatif/omp_imbalance.c",
            true,
            "200 critical",
            2,
        ),
        fixture(
            "openmp imbalance, 4 thr",
            "whatif/omp_imbalance.c",
            true,
            "200 critical",
            4,
        ),
    ];
    if Command::new("pbzip2").arg("-V").output().is_ok() {
        // 24 MB of text-like data that compresses (a stream of words).
        let input = dir.join("pbzip2-input");
        let mut data = Vec::with_capacity(24 << 20);
        let mut x: u32 = 12345;
        while data.len() < 24 << 20 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let w = ["lock", "wait", "thread", "mutex", "queue", "block", "data"];
            data.extend_from_slice(w[(x >> 16) as usize % w.len()].as_bytes());
            data.push(if x & 0x100 != 0 { b' ' } else { b'\n' });
        }
        std::fs::write(&input, data).expect("pbzip2 input");
        v.push(Case {
            name: "pbzip2 -p2, 24 MB".into(),
            src: None,
            openmp: false,
            cmd: format!("pbzip2 -p2 -k -c {} > /dev/null", input.display()),
            omp_threads: 0,
        });
    }
    if let Ok(extra) = std::env::var("REPLAY_EXTRA") {
        for item in extra.split(';').filter(|s| !s.trim().is_empty()) {
            let (name, cmd) = item.split_once('=').unwrap_or((item, item));
            v.push(Case {
                name: name.trim().into(),
                src: None,
                openmp: false,
                cmd: cmd.trim().into(),
                omp_threads: 0,
            });
        }
    }
    v
}

fn build(src: &Path, out: &Path, openmp: bool) {
    let mut c = Command::new("gcc");
    c.args(["-O2", "-g", "-pthread"]);
    if openmp {
        c.arg("-fopenmp");
    }
    let o = c.arg(src).arg("-o").arg(out).output().expect("gcc");
    check("build", &o);
}

fn shell(case: &Case, line: &str) -> Command {
    let mut c = Command::new("sh");
    c.args(["-c", line]);
    if case.openmp {
        c.env("OMP_NUM_THREADS", case.omp_threads.to_string());
    }
    c
}

fn main() {
    let filter = std::env::args().nth(1).unwrap_or_default();
    let runs = env_num("REPLAY_RUNS", 5);
    let traces = env_num("REPLAY_TRACES", 3);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/programs");
    let dir =
        std::env::temp_dir().join(format!("lockscope-replay-validate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    println!(
        "alone: median of {runs} plain runs; replay: median over {traces} recordings (made \
         between the runs) of `replay`'s wall time without the recorder; says: whether the \
         replay said it cannot tell (granting in recorded and in arrival order disagree)"
    );
    println!(
        "{:<28} {:>9} {:>9} {:>9} {:>8} {:>9} {:>7}",
        "program", "alone", "recorded", "replay", "error", "arrival", "says"
    );
    for case in cases(&dir).iter().filter(|c| c.name.contains(&filter)) {
        let line = match case.src {
            Some(src) => {
                let bin: PathBuf = dir.join(src.replace('/', "_").trim_end_matches(".c"));
                if !bin.exists() {
                    build(&root.join(src), &bin, case.openmp);
                }
                case.cmd.replace("{bin}", &bin.display().to_string())
            }
            None => case.cmd.clone(),
        };
        let (mut alone, mut rec, mut rep, mut arr) = (vec![], vec![], vec![], vec![]);
        let mut says = 0;
        for k in 0..runs.max(traces) {
            if k < runs {
                let t = Instant::now();
                let o = shell(case, &line).output().expect("run");
                check(&case.name, &o);
                alone.push(t.elapsed().as_secs_f64() * 1e3);
            }
            if k < traces {
                let trace = dir.join(format!("t{k}.lstrace"));
                let lk = lockscope().display().to_string();
                let o = shell(
                    case,
                    &format!("{lk} record -q -o {} -- sh -c '{line}'", trace.display()),
                )
                .output()
                .expect("record");
                check("lockscope record", &o);
                let o = Command::new(lockscope())
                    .args(["replay", "--json"])
                    .arg(&trace)
                    .output()
                    .expect("replay");
                check("lockscope replay", &o);
                let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
                rec.push(v["recorded_wall_ns"].as_f64().unwrap_or(f64::NAN) / 1e6);
                rep.push(v["unrecorded_wall_ns"].as_f64().unwrap_or(f64::NAN) / 1e6);
                arr.push(v["unrecorded_arrival_wall_ns"].as_f64().unwrap_or(f64::NAN) / 1e6);
                if v["unrecorded_uncertain"].is_string() {
                    says += 1;
                }
                let _ = std::fs::remove_file(&trace);
            }
        }
        let a = median(alone);
        let r = median(rep.clone());
        let err = (r / a - 1.0) * 100.0;
        println!(
            "{:<28} {:>7.0}ms {:>7.0}ms {:>7.0}ms {:>+7.1}% {:>7.0}ms {:>4}/{}",
            case.name,
            a,
            median(rec),
            r,
            err,
            median(arr),
            says,
            traces
        );
        let list: Vec<String> = rep.iter().map(|x| format!("{x:.0}")).collect();
        println!("    per recording (ms): {}", list.join(" "));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
