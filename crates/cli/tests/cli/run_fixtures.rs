//! `lockscope run` on the C/C++ fixtures of tests/programs/locks: output
//! and exit status identical to the original under every `--lock` and
//! `--wait` choice (condition variables, trylock/timedlock, static
//! initialisers, recursive and error-checking mutexes, C++ std::mutex and
//! condition_variable).

use crate::run_support;
use run_support::*;

/// Runs a fixture with a workload argument small enough that the 16
/// configurations finish quickly even where spinning waiters outnumber
/// the cores (FIFO locks with `--wait spin` hand the lock to preempted
/// threads: that is the slowness `lockscope locks bench` shows).
fn fixture(file: &str, args: &[&str]) {
    let dir = temp(file);
    if let Some(prog) = build(file, &dir) {
        same_output_under_every_lock(&prog, args);
    }
}

#[test]
fn condvar_producer_consumer_same_output_under_every_lock() {
    fixture("condvar_pc.c", &["1500"]);
}

#[test]
fn trylock_and_timedlock_same_output_under_every_lock() {
    fixture("trylock_timed.c", &[]);
}

#[test]
fn static_initialisers_and_special_kinds_same_output_under_every_lock() {
    fixture("static_kinds.c", &["3000"]);
}

#[test]
fn cxx_mutex_and_condition_variable_same_output_under_every_lock() {
    fixture("cxx_sync.cpp", &["1500"]);
}

#[test]
fn hand_given_deep_hierarchies_keep_the_output() {
    let dir = temp("hier");
    let Some(prog) = build("condvar_pc.c", &dir) else {
        return;
    };
    let base = lockscope_run(&["--lock", "pthread"], &prog, &["3000"]);
    for lock in ["hmcs", "ahmcs"] {
        for h in ["2x2x2:2,2,1", "4x2"] {
            let o = lockscope_run(&["--lock", lock, "--hierarchy", h], &prog, &["3000"]);
            assert_eq!(o.stdout, base.stdout, "{lock} --hierarchy {h}");
            assert_eq!(shell_code(&o), 0);
        }
    }
}

#[test]
fn verbose_reports_replaced_mutexes_and_acquisitions() {
    let dir = temp("verbose");
    let Some(prog) = build("static_kinds.c", &dir) else {
        return;
    };
    let o = lockscope_run(&["--lock", "mcs", "--verbose"], &prog, &["6400"]);
    let err = String::from_utf8_lossy(&o.stderr);
    let (n, m) = verbose_counts(&err).unwrap_or_else(|| panic!("no summary line in {err}"));
    // 16 static + 1 adaptive static + 6 threads x 100 heap mutexes
    // init'd and destroyed; the recursive and error-checking ones stay
    // with glibc.
    assert_eq!(n, 16 + 1 + 6 * 100, "{err}");
    // 6 threads x (6400 static + 800 adaptive + 900 recursive + 100 heap).
    assert!(m >= 6 * (6400 + 800 + 900 + 100), "{err}");
    assert!(err.contains("2 mutexes left to glibc"), "{err}");
    // Without --verbose the library says nothing.
    let quiet = lockscope_run(&["--lock", "mcs"], &prog, &["100"]);
    assert!(String::from_utf8_lossy(&quiet.stderr).is_empty());
}

#[test]
fn exit_status_and_signals_pass_through() {
    let sh = std::path::Path::new("/bin/sh");
    let o = lockscope_run(&["--lock", "ticket"], sh, &["-c", "exit 7"]);
    assert_eq!(shell_code(&o), 7);
    let o = lockscope_run(&["--lock", "ticket"], sh, &["-c", "kill -TERM $$"]);
    assert_eq!(shell_code(&o), 128 + 15);
    let o = lockscope_run(
        &["--lock", "mcs"],
        std::path::Path::new("/nonexistent/program"),
        &[],
    );
    assert_eq!(shell_code(&o), 127);
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/program"));
}

#[test]
fn unknown_lock_lists_the_valid_names() {
    let o = lockscope_run(&["--lock", "foo"], std::path::Path::new("/bin/true"), &[]);
    assert_eq!(shell_code(&o), 2);
    let err = String::from_utf8_lossy(&o.stderr);
    for name in ["pthread", "tas", "mcs", "hmcs", "ahmcs"] {
        assert!(err.contains(name), "{err}");
    }
    let o = lockscope_run(
        &["--lock", "mcs", "--wait", "nap"],
        std::path::Path::new("/bin/true"),
        &[],
    );
    assert_eq!(shell_code(&o), 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("spin-then-park"));
}
