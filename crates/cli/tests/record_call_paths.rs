//! Call paths of programs built the ordinary way: C++ at `-O2` without
//! frame pointers is unwound with the loaded objects' CFI.

#[path = "record_util/mod.rs"]
mod record_util;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use lockscope_format::Record;
use record_util::{lockscope, ok, record, temp, workspace};

/// Compiles tests/programs/stacks/cxx_pool.cpp with `g++ -O2 -g` and
/// `extra` into `dir/name`.
fn build_pool(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let src = workspace().join("tests/programs/stacks/cxx_pool.cpp");
    let out = dir.join(name);
    let st = Command::new("g++")
        .args(["-O2", "-g", "-pthread"])
        .args(extra)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| panic!("g++ must be installed to build the fixtures: {e}"));
    assert!(st.success(), "g++ failed on {}", src.display());
    out
}

/// The function name of a folded frame (`name (file:line)`).
fn function(frame: &str) -> &str {
    frame.split(" (").next().unwrap_or(frame)
}

/// The pool recorded once: the folded stacks of its `log_m` waits
/// (without weights), after checking the run's truth and that every
/// recorded frame lies in an executable mapping of the process.
fn log_stacks(dir: &Path, bin: &Path) -> BTreeSet<String> {
    let what = bin.display().to_string();
    let run = record(dir, &[], bin, &[], b"");
    assert_eq!(run.code, 0, "{what}: {}", run.stderr);
    assert!(
        run.stdout.contains("truth-jobs count=4000\n"),
        "{what}: {}",
        run.stdout
    );
    // No frame outside a mapping: every return address of every call path
    // falls in an executable segment the process had mapped.
    let t = run.trace();
    let exec: Vec<(u32, u64, u64)> = t
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Map(m) if m.perms.contains('x') => Some((m.process, m.start, m.end)),
            _ => None,
        })
        .collect();
    let mut paths = 0;
    for r in &t.records {
        if let Record::Stack(s) = r {
            paths += 1;
            for &f in &s.frames {
                assert!(
                    exec.iter()
                        .any(|&(p, lo, hi)| p == s.process && (lo..hi).contains(&f)),
                    "{what}: frame {f:#x} of {:x?} is in no executable mapping",
                    s.frames
                );
            }
        }
    }
    assert!(paths > 0, "{what}: no call path recorded");
    let a = [
        "export",
        "--format",
        "folded",
        run.trace_path.to_str().unwrap(),
    ];
    let folded = ok(&lockscope(&a, None));
    for l in folded.lines() {
        assert!(
            l.split(';')
                .all(|f| !f.starts_with('?') && !f.starts_with("0x")),
            "{what}: a frame that names no function: {l}"
        );
    }
    let stacks: BTreeSet<String> = folded
        .lines()
        .filter(|l| l.contains(";lock log_m "))
        .map(|l| l.rsplit_once(' ').unwrap().0.to_string())
        .collect();
    assert!(!stacks.is_empty(), "{what}: log_m never waited:\n{folded}");
    for s in &stacks {
        // The user's chain, innermost last in folded order, and nothing
        // between its functions.
        let frames: Vec<&str> = s.split(';').map(function).collect();
        let n = frames.len();
        assert!(n >= 4, "{what}: {s}");
        assert_eq!(
            frames[n - 4..],
            [
                "ThreadPool::worker_loop()",
                "run_job",
                "log_result",
                "lock log_m"
            ],
            "{what}: {s}"
        );
    }
    stacks
}

/// Built with plain `g++ -O2 -g` (no `-fno-omit-frame-pointer`), the
/// pool's contended lock has the same folded stacks (user functions and
/// lines) as built with frame pointers, all of them whole, and no frame
/// outside a mapping. The frame-pointer walk gave `log_result;lock log_m`
/// without its callers (or garbage frames) for the first build.
// See issue 28.
#[test]
fn call_paths_without_frame_pointers_match_those_with_them() {
    let dir = temp("call-paths-no-fp");
    let mut got = Vec::new();
    for (name, extra) in [
        ("pool-nofp", &["-fomit-frame-pointer"][..]),
        ("pool-fp", &["-fno-omit-frame-pointer"][..]),
    ] {
        let sub = dir.join(name);
        std::fs::create_dir_all(&sub).unwrap();
        let bin = build_pool(&sub, name, extra);
        got.push(log_stacks(&sub, &bin));
    }
    assert_eq!(got[0], got[1], "without frame pointers, then with them");
}
