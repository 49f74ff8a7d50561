//! Call paths of programs built the ordinary way: C++ at `-O2` without
//! frame pointers, and a library loaded with `dlopen` after the recorder
//! started, are unwound with the loaded objects' CFI.

use crate::record_util;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use lockscope_format::Record;
use record_util::{lockscope, ok, record, temp, workspace};

/// Compiles tests/programs/stacks/cxx_pool.cpp with `g++ -O2 -g` and
/// `extra` into `dir/name`.
fn build_pool(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let flags: Vec<&str> = ["-O2", "-g"].iter().chain(extra).copied().collect();
    record_util::build_cxx("stacks/cxx_pool", dir, name, &flags)
}

/// The function name of a folded frame (`name (file:line)`).
fn function(frame: &str) -> &str {
    frame.split(" (").next().unwrap_or(frame)
}

/// No frame outside a mapping: every return address of every call path
/// falls in an executable segment the process had mapped.
fn assert_frames_mapped(run: &record_util::Run, what: &str) {
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
    assert_frames_mapped(&run, &what);
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

/// A library loaded with `dlopen` after the recorder started (built at
/// `-O2` without frame pointers) is registered on the first path that
/// reaches it: its contended waits carry both of its frames, where the
/// frame-pointer walk gave `lib_contend` alone.
#[test]
fn call_paths_reach_into_a_library_loaded_after_start() {
    let dir = temp("call-paths-dlopen");
    let progs = workspace().join("tests/programs/stacks");
    let lib = dir.join("libdl_lib.so");
    let main = dir.join("dl_main");
    for (out, src, extra) in [
        (&lib, "dl_lib.c", &["-shared", "-fPIC"][..]),
        (&main, "dl_main.c", &["-ldl"][..]),
    ] {
        let st = Command::new("gcc")
            .args(["-O2", "-g", "-pthread", "-o"])
            .arg(out)
            .arg(progs.join(src))
            .args(extra)
            .status()
            .expect("gcc");
        assert!(st.success(), "gcc failed on {src}");
    }
    let run = record(&dir, &[], &main, &[lib.to_str().unwrap()], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("truth-lib count=2000\n"),
        "{}",
        run.stdout
    );
    assert_frames_mapped(&run, "dl_main");
    let a = [
        "export",
        "--format",
        "folded",
        run.trace_path.to_str().unwrap(),
    ];
    let folded = ok(&lockscope(&a, None));
    let stacks: Vec<&str> = folded
        .lines()
        .filter(|l| l.contains(";lock lib_lock "))
        .collect();
    assert!(!stacks.is_empty(), "lib_lock never waited:\n{folded}");
    for l in stacks {
        let frames: Vec<&str> = l
            .rsplit_once(' ')
            .unwrap()
            .0
            .split(';')
            .map(function)
            .collect();
        let n = frames.len();
        assert!(n >= 3, "{l}");
        assert_eq!(
            frames[n - 3..],
            ["lib_worker", "lib_contend", "lock lib_lock"],
            "{l}"
        );
    }
}
