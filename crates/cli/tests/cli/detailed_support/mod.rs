//! Shared helpers of the detailed-mode tests (`detailed_*.rs`): build a
//! fixture from `tests/programs/detailed/` with `lockscope cc`/`c++` under
//! gcc and clang, run it, record it, and read the ground truth it prints.
//!
//! Both compilers are required (CI installs clang): a missing one fails
//! the tests rather than skipping them, unless
//! `LOCKSCOPE_TEST_ONLY_GCC=1` says so explicitly.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The lockscope binary under test.
pub fn lockscope() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_lockscope"))
}

/// A fixture source path.
pub fn fixture(name: &str) -> PathBuf {
    lockscope_test_support::workspace_root()
        .join("tests/programs/detailed")
        .join(name)
}

/// A compiler pair: (label, C driver, C++ driver).
#[derive(Clone, Copy, Debug)]
pub struct Compiler {
    /// "gcc" or "clang".
    pub label: &'static str,
    /// C driver.
    pub cc: &'static str,
    /// C++ driver.
    pub cxx: &'static str,
}

/// The compilers every detailed test runs with.
pub fn compilers() -> Vec<Compiler> {
    let mut v = vec![Compiler {
        label: "gcc",
        cc: "gcc",
        cxx: "g++",
    }];
    if std::env::var_os("LOCKSCOPE_TEST_ONLY_GCC").is_none() {
        v.push(Compiler {
            label: "clang",
            cc: "clang",
            cxx: "clang++",
        });
    }
    for c in &v {
        let ok = Command::new(c.cc)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            ok,
            "{} not found: detailed mode is tested with gcc and clang (apt-get install clang), \
             or set LOCKSCOPE_TEST_ONLY_GCC=1",
            c.cc
        );
    }
    v
}

/// A scratch directory, removed on drop (kept when the test fails).
pub struct Scratch(lockscope_test_support::Scratch);

impl Scratch {
    /// A fresh directory under the system temp dir.
    pub fn new(tag: &str) -> Scratch {
        Scratch(lockscope_test_support::scratch_dir(&format!(
            "detailed-{tag}"
        )))
    }
    /// A path inside.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

fn is_cxx(src: &Path) -> bool {
    src.extension().is_some_and(|e| e == "cpp")
}

fn check(what: &str, o: &Output) {
    assert!(
        o.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Builds `src` with `lockscope cc` (or `c++`) and the given compiler.
pub fn build_instrumented(c: Compiler, src: &Path, out: &Path) {
    build_instrumented_with(c, src, out, &[])
}

/// [`build_instrumented`] with more compiler flags (`-fopenmp`).
pub fn build_instrumented_with(c: Compiler, src: &Path, out: &Path, flags: &[&str]) {
    let (sub, var, drv) = if is_cxx(src) {
        ("c++", "LOCKSCOPE_CXX", c.cxx)
    } else {
        ("cc", "LOCKSCOPE_CC", c.cc)
    };
    let o = Command::new(lockscope())
        .arg(sub)
        .args(["-O2", "-g", "-pthread"])
        .args(flags)
        .arg(src)
        .arg("-o")
        .arg(out)
        .env(var, drv)
        .output()
        .unwrap();
    check(
        &format!("lockscope {sub} ({}) {}", c.label, src.display()),
        &o,
    );
}

/// Builds `src` with the plain compiler (no instrumentation).
pub fn build_plain(c: Compiler, src: &Path, out: &Path) {
    let drv = if is_cxx(src) { c.cxx } else { c.cc };
    let o = Command::new(drv)
        .args(["-O2", "-g", "-pthread"])
        .arg(src)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap();
    check(&format!("{drv} {}", src.display()), &o);
}

/// Runs a program; returns its output (asserting success).
pub fn run(bin: &Path, args: &[&Path], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(bin);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().unwrap();
    check(&bin.display().to_string(), &o);
    o
}

/// Records `bin args` into `trace` (asserting success); returns the
/// program's stdout.
pub fn record(bin: &Path, args: &[&Path], trace: &Path, env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(lockscope());
    cmd.arg("record")
        .arg("-o")
        .arg(trace)
        .arg("--")
        .arg(bin)
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().unwrap();
    check(&format!("lockscope record {}", bin.display()), &o);
    // Nothing lost in default mode, on any fixture. Regression: the
    // recorder's own pthread_getattr_np at thread exit allocated, the
    // runtime's allocation hook ran inside the recorder and counted 12
    // "lost" events per 2-thread run (fixed by `thread::quietly`).
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("LOST"), "{}: {err}", bin.display());
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs `lockscope SUB --json TRACE` and parses the result.
pub fn analysis_json(sub: &str, trace: &Path) -> serde_json::Value {
    let o = Command::new(lockscope())
        .arg(sub)
        .arg("--json")
        .arg(trace)
        .output()
        .unwrap();
    check(&format!("lockscope {sub}"), &o);
    serde_json::from_slice(&o.stdout).expect("valid JSON")
}

/// Runs `lockscope SUB TRACE` (text).
pub fn analysis_text(sub: &str, trace: &Path) -> String {
    let o = Command::new(lockscope())
        .arg(sub)
        .arg(trace)
        .output()
        .unwrap();
    check(&format!("lockscope {sub}"), &o);
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Ground truth written by a fixture: `key words... value` lines, keyed by
/// all words but the last.
pub fn truth(path: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e} (the fixture writes it)", path.display()));
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect()
}
