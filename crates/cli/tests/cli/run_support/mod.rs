//! Helpers of the `run_*` integration tests: build the preload library and
//! the C fixtures, run a program under `lockscope run`.
// Each test file uses a part of these helpers (and of the re-exports).
#![allow(dead_code, unused_imports)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

pub const ALGORITHMS: [&str; 8] = [
    "tas", "ttas", "ticket", "mcs", "clh", "cmcs", "hmcs", "ahmcs",
];
pub const WAITS: [&str; 2] = ["spin", "spin-then-park"];

pub use lockscope_test_support::{workspace_root as workspace, Scratch};

/// A fresh directory for one test, removed when it passes.
pub fn temp(name: &str) -> Scratch {
    lockscope_test_support::scratch_dir(&format!("run-{name}"))
}

/// Builds (or brings up to date) the cdylib of `package` with the same
/// profile and target directory as the `lockscope` binary under test and
/// returns the path of `file` (the CLI does not link the preload
/// libraries, so `cargo test -p lockscope` alone would not build them).
pub fn build_lib(package: &str, file: &str) -> PathBuf {
    let exe = Path::new(env!("CARGO_BIN_EXE_lockscope"));
    let profile_dir = exe.parent().unwrap();
    let target = profile_dir.parent().unwrap();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "-q", "-p", package, "--target-dir"])
        .arg(target)
        .current_dir(workspace());
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    let st = cmd.status().expect("cannot run cargo");
    assert!(st.success(), "building {package} failed");
    let lib = profile_dir.join(file);
    assert!(lib.is_file(), "{} missing after build", lib.display());
    lib
}

/// `liblockscope_swap.so` (see [`build_lib`]).
pub fn swap_lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| build_lib("lockscope-swap", "liblockscope_swap.so"))
}

/// Compiles tests/programs/locks/<file> (C or C++) into `dir`, or None
/// (with a notice) when the compiler is missing.
pub fn build(file: &str, dir: &Path) -> Option<PathBuf> {
    let src = workspace().join("tests/programs/locks").join(file);
    let (stem, cc) = match file.strip_suffix(".cpp") {
        Some(s) => (s, "g++"),
        None => (file.strip_suffix(".c").unwrap(), "gcc"),
    };
    let out = dir.join(stem);
    lockscope_test_support::tool_or_skip(cc, cc)?;
    match Command::new(cc)
        .args(["-O2", "-Wall", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
    {
        Ok(st) => {
            assert!(st.success(), "{cc} failed on {}", src.display());
            Some(out)
        }
        Err(_) => {
            eprintln!("NOTICE: {cc} not found, skipping the {file} fixture");
            None
        }
    }
}

/// Runs `lockscope run OPTS -- PROG ARGS` with stdin from /dev/null.
pub fn lockscope_run(opts: &[&str], prog: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .arg("run")
        .args(opts)
        .arg("--")
        .arg(prog)
        .args(args)
        .env("LOCKSCOPE_SWAP_LIB", swap_lib())
        .stdin(Stdio::null())
        .output()
        .expect("cannot start lockscope")
}

pub fn shell_code(o: &Output) -> i32 {
    lockscope_test_support::shell_code(o.status)
}

/// Runs PROG under every algorithm and waiting policy and checks that its
/// stdout and exit status equal those of `--lock pthread`.
pub fn same_output_under_every_lock(prog: &Path, args: &[&str]) {
    let base = lockscope_run(&["--lock", "pthread"], prog, args);
    let direct = Command::new(prog).args(args).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&base.stdout),
        String::from_utf8_lossy(&direct.stdout),
        "--lock pthread changed the output of {}",
        prog.display()
    );
    assert_eq!(
        shell_code(&base),
        0,
        "{} failed: {}",
        prog.display(),
        String::from_utf8_lossy(&base.stderr)
    );
    for alg in ALGORITHMS {
        for wait in WAITS {
            let o = lockscope_run(&["--lock", alg, "--wait", wait], prog, args);
            assert_eq!(
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&base.stdout),
                "{} under --lock {alg} --wait {wait}: output differs; stderr: {}",
                prog.display(),
                String::from_utf8_lossy(&o.stderr)
            );
            assert_eq!(
                shell_code(&o),
                shell_code(&base),
                "{alg} {wait}: exit status differs"
            );
        }
    }
}

/// Parses `replaced N mutexes, M acquisitions` from the verbose line.
pub fn verbose_counts(stderr: &str) -> Option<(u64, u64)> {
    let line = stderr.lines().find(|l| l.contains("replaced "))?;
    let after = line.split("replaced ").nth(1)?;
    let mut it = after.split_whitespace();
    let n = it.next()?.parse().ok()?;
    let _ = it.next()?; // "mutexes,"
    let m = it.next()?.parse().ok()?;
    Some((n, m))
}
