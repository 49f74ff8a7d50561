//! Helpers shared by the tests of lockscope's crates, instead of a copy in
//! each crate's `tests/` directory. A dev-dependency only: nothing that
//! ships links it.
//!
//! - [`poll_until`]: wait for a condition by polling it, with a deadline
//!   that fails the test with a message (tests synchronize on what they
//!   can observe, never on a fixed sleep: the machine is noisy).
//! - [`workspace_root`]: the repository root, to find fixtures under
//!   `tests/programs/` and golden files under `tests/golden/`.
//! - [`scratch_dir`]: a fresh temporary directory, removed when dropped
//!   (kept for inspection when the test fails).
//! - [`build_c`]: compile a C fixture of `tests/programs/` with gcc.
//! - [`shell_code`]: a process's exit status as a shell prints it.
//! - [`synthetic_trace`]: the preamble of a generated trace (one process,
//!   its threads, the recorder's costs) for benchmarks and memory tests.
//! - [`tool_or_skip`]: a program a test needs from outside (python3,
//!   pbzip2, memcached ...): skipped with a message when missing, except
//!   under `scripts/test.sh` (CI), which installs it and makes a missing
//!   one a failure.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

/// How long [`poll_until`] waits by default: long enough for a loaded
/// 2-core machine, short enough that a hang fails the test in seconds.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);

/// Polls `cond` until it is true; panics naming `what` if it is still
/// false after `deadline`. Polls eagerly at first (a yield), then every
/// millisecond, so a condition that becomes true quickly is seen quickly.
pub fn poll_until(what: &str, deadline: Duration, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    let mut polls = 0u32;
    while !cond() {
        assert!(
            t0.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}"
        );
        polls += 1;
        if polls < 100 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// The repository root (the directory of the workspace's Cargo.toml).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root exists")
}

/// A scratch directory of one test (see [`scratch_dir`]). Derefs to its
/// path.
pub struct Scratch(Option<tempfile::TempDir>);

impl Scratch {
    /// The directory.
    pub fn path(&self) -> &Path {
        self.0.as_ref().expect("present until dropped").path()
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.path()
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        self.path()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // A failing test's files (traces, fixtures, logs) are what explains
        // the failure: keep them, and say where.
        if std::thread::panicking() {
            if let Some(d) = self.0.take() {
                eprintln!("test files kept in {}", d.keep().display());
            }
        }
    }
}

/// A fresh temporary directory whose name starts with `lockscope-{tag}-`,
/// removed (with its contents) when the value is dropped, unless the
/// thread is panicking (a failing test): then it is kept and its path
/// printed.
pub fn scratch_dir(tag: &str) -> Scratch {
    Scratch(Some(
        tempfile::Builder::new()
            .prefix(&format!("lockscope-{tag}-"))
            .tempdir()
            .expect("cannot create a temporary directory"),
    ))
}

/// Compiles `tests/programs/{rel}.c` (`rel` like `mutex` or
/// `report/sleep_hold`) with `gcc -O2 -g -Wall -pthread` into
/// `dir/{file name of rel}` and returns that path. Fails the test, naming
/// the problem, when gcc is missing or the compilation fails.
pub fn build_c(rel: &str, dir: &Path) -> PathBuf {
    let src = workspace_root()
        .join("tests/programs")
        .join(format!("{rel}.c"));
    let out = dir.join(Path::new(rel).file_name().expect("a file name"));
    let st = Command::new("gcc")
        .args(["-O2", "-g", "-Wall", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("gcc must be installed to build the fixtures");
    assert!(st.success(), "gcc failed on {}", src.display());
    out
}

/// Compiles `tests/programs/{rel}.cpp` with `g++ -pthread` and `flags`
/// (optimisation, `-g`, frame pointers: what the test varies) into
/// `dir/{name}` and returns that path. Fails the test, naming the
/// problem, when g++ is missing or the compilation fails.
pub fn build_cxx(rel: &str, dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let src = workspace_root()
        .join("tests/programs")
        .join(format!("{rel}.cpp"));
    let out = dir.join(name);
    let st = Command::new("g++")
        .arg("-pthread")
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| panic!("g++ must be installed to build the fixtures: {e}"));
    assert!(st.success(), "g++ failed on {}", src.display());
    out
}

/// A trace writer on `path` whose header, process (pid 1000, trace id
/// 1), threads (ids 1..=`threads`, tids 1001.., named `worker-N`) and
/// recorder costs (10 ns each) are written: the caller adds the events
/// and the footer. For traces of known shape and size (benchmarks of the
/// reader, bounded-memory tests).
pub fn synthetic_trace(
    path: &Path,
    command: &str,
    threads: u32,
) -> lockscope_format::TraceWriter<std::io::BufWriter<std::fs::File>> {
    use lockscope_format::{Header, Overhead, Process, Record, Thread, TraceWriter};
    let header = Header {
        tsc_hz: 1e9,
        command: vec![command.into()],
        host: "bench".into(),
        recorder_version: "bench".into(),
        cpus: 2,
        cache_line: 64,
        ..Header::default()
    };
    let f = std::fs::File::create(path).expect("create trace");
    let mut w = TraceWriter::new(std::io::BufWriter::with_capacity(1 << 20, f), &header)
        .expect("write the header");
    let mut records = vec![Record::Process(Process {
        id: 1,
        pid: 1000,
        argv: vec![command.into()],
        exe: "/nonexistent".into(),
        ..Process::default()
    })];
    records.extend((1..=threads).map(|t| {
        Record::Thread(Thread {
            id: t,
            process: 1,
            tid: 1000 + t,
            name: format!("worker-{t}"),
            start_ns: 0,
            parent: 0,
        })
    }));
    records.push(Record::Overhead(Overhead {
        process: 1,
        acquire_ns: 10.0,
        release_ns: 10.0,
        event_ns: 10.0,
    }));
    for r in &records {
        w.write(r).expect("write the preamble");
    }
    w
}

/// Ends a [`synthetic_trace`] of `threads` threads: each thread's end at
/// `end_ns`, then the footer counting `events`.
pub fn finish_synthetic_trace(
    mut w: lockscope_format::TraceWriter<std::io::BufWriter<std::fs::File>>,
    threads: u32,
    end_ns: u64,
    events: u64,
) {
    use lockscope_format::{Footer, Record, ThreadEnd};
    for t in 1..=threads {
        w.write(&Record::ThreadEnd(ThreadEnd { thread: t, end_ns }))
            .expect("write a thread's end");
    }
    w.finish(&Footer {
        duration_ns: end_ns,
        events,
        lost: 0,
        exit_status: 0,
    })
    .expect("write the footer");
}

/// Set by `scripts/test.sh` (the README's test command, which CI runs),
/// after it installed every package of `scripts/test-packages.txt`: a
/// tool missing then is a broken set-up, and the test fails.
pub const REQUIRE_TOOLS_ENV: &str = "LOCKSCOPE_REQUIRE_TOOLS";

/// The path of `tool` (an absolute path, or a name looked up in `PATH`)
/// that the calling test needs, from the Debian `package`. When it is
/// missing: under [`REQUIRE_TOOLS_ENV`] the test fails naming the package;
/// otherwise (a developer's `cargo test` on a machine without it) the
/// test is skipped: a line on stderr says which and why, and `None` is
/// returned. One policy for every such test. Not taken: skipping
/// silently everywhere (CI would pass without ever running them) or
/// failing everywhere (`cargo test` would need every package first).
pub fn tool_or_skip(tool: &str, package: &str) -> Option<PathBuf> {
    let found = if tool.contains('/') {
        Some(PathBuf::from(tool)).filter(|p| p.is_file())
    } else {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .map(|d| d.join(tool))
            .find(|p| p.is_file())
    };
    if found.is_none() {
        assert!(
            std::env::var_os(REQUIRE_TOOLS_ENV).is_none(),
            "`{tool}` is missing: this test needs the Debian package `{package}` \
             (scripts/test-packages.txt; scripts/test.sh installs it as root)"
        );
        eprintln!(
            "NOTICE: `{tool}` is missing (apt-get install {package}): test skipped \
             (scripts/test.sh installs it and runs the test)"
        );
    }
    found
}

/// The exit status as a shell reports it: the exit code, or 128 + the
/// signal that killed the process.
pub fn shell_code(st: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_tool_is_found_on_the_path_or_by_its_absolute_path() {
        let sh = tool_or_skip("sh", "dash").expect("sh is everywhere");
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{}", sh.display());
        assert_eq!(tool_or_skip(sh.to_str().unwrap(), "dash"), Some(sh));
    }

    #[test]
    fn poll_until_sees_a_condition_set_by_another_thread() {
        let flag = Arc::new(AtomicBool::new(false));
        let f = flag.clone();
        let h = std::thread::spawn(move || f.store(true, Ordering::SeqCst));
        poll_until("the flag", DEFAULT_DEADLINE, || flag.load(Ordering::SeqCst));
        h.join().unwrap();
    }

    #[test]
    #[should_panic(expected = "waiting for never")]
    fn poll_until_fails_loud_at_the_deadline() {
        poll_until("never", Duration::from_millis(20), || false);
    }

    #[test]
    fn build_c_compiles_a_fixture_and_shell_code_reads_its_status() {
        let d = scratch_dir("support-build");
        let bin = build_c("echo_sum", &d);
        assert_eq!(bin, d.join("echo_sum"));
        let st = Command::new(&bin)
            .stdin(std::process::Stdio::null())
            .status()
            .unwrap();
        assert_eq!(
            shell_code(st),
            0,
            "echo_sum exits with its sum (0 for no input)"
        );
        let killed = Command::new("sh")
            .args(["-c", "kill -9 $$"])
            .status()
            .unwrap();
        assert_eq!(shell_code(killed), 128 + 9);
    }

    #[test]
    fn a_scratch_dir_is_kept_when_its_test_panics() {
        let kept = std::thread::spawn(|| {
            let d = scratch_dir("support-kept");
            let p = d.to_path_buf();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                let _d = d;
                panic!("failing test");
            }));
            assert!(r.is_err());
            p
        })
        .join()
        .unwrap();
        assert!(kept.is_dir(), "kept after a panic");
        std::fs::remove_dir_all(&kept).unwrap();
    }

    #[test]
    fn workspace_root_holds_the_fixtures_and_scratch_dirs_go_away() {
        assert!(workspace_root().join("tests/programs").is_dir());
        let d = scratch_dir("support");
        let p = d.path().to_path_buf();
        assert!(p.is_dir());
        drop(d);
        assert!(!p.exists());
    }
}
