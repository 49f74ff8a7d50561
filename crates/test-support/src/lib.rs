//! Helpers shared by the tests of lockscope's crates, instead of a copy in
//! each crate's `tests/` directory. A dev-dependency only: nothing that
//! ships links it.
//!
//! - [`poll_until`]: wait for a condition by polling it, with a deadline
//!   that fails the test with a message (tests synchronize on what they
//!   can observe, never on a fixed sleep: the machine is noisy).
//! - [`workspace_root`]: the repository root, to find fixtures under
//!   `tests/programs/` and golden files under `tests/golden/`.
//! - [`scratch_dir`]: a fresh temporary directory, removed when dropped.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

use std::path::PathBuf;
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

/// A fresh temporary directory whose name starts with `lockscope-{tag}-`,
/// removed (with its contents) when the value is dropped.
pub fn scratch_dir(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("lockscope-{tag}-"))
        .tempdir()
        .expect("cannot create a temporary directory")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

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
    fn workspace_root_holds_the_fixtures_and_scratch_dirs_go_away() {
        assert!(workspace_root().join("tests/programs").is_dir());
        let d = scratch_dir("support");
        let p = d.path().to_path_buf();
        assert!(p.is_dir());
        drop(d);
        assert!(!p.exists());
    }
}
