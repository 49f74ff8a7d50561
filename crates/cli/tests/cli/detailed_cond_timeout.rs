//! After a timed-out `pthread_cond_timedwait`, the critical
//! section that re-opens is on the wait's mutex (the event's `arg` then
//! holds the errno, not the mutex).

use crate::detailed_support;

use detailed_support::*;

const ROUNDS: u64 = 20;

#[test]
fn condvar_timeout_reopens_section_on_the_mutex() {
    for c in compilers() {
        let dir = Scratch::new("cond-timeout");
        let bin = dir.path("cond_timeout");
        build_instrumented(c, &fixture("cond_timeout.c"), &bin);
        let trace = dir.path("t.lstrace");
        let out = record(&bin, &[], &trace, &[("LOCKSCOPE_ALL_ACCESSES", "1")]);
        assert_eq!(
            out.trim(),
            format!("counter {} timeouts {ROUNDS}", 2 * ROUNDS),
            "{}",
            c.label
        );

        // Every section is on `m`: two per waiter round, one per plain
        // one, and main's final read.
        let j = analysis_json("ulcp", &trace);
        let locks = j["locks"].as_array().unwrap();
        let names: Vec<&str> = locks.iter().map(|l| l["name"].as_str().unwrap()).collect();
        assert!(
            !names.contains(&"0x6e"),
            "{}: a section opened on ETIMEDOUT: {names:?}",
            c.label
        );
        let m = locks
            .iter()
            .find(|l| l["name"] == "m")
            .unwrap_or_else(|| panic!("{}: no lock m: {j:#}", c.label));
        assert_eq!(m["sections"].as_u64(), Some(3 * ROUNDS + 1), "{}", c.label);

        // So `counter` is protected by `m`, never unprotected.
        let j = analysis_json("lockset", &trace);
        let unprotected = j["unprotected"].as_array().unwrap();
        assert!(unprotected.is_empty(), "{}: {j:#}", c.label);
        let protected = j["protected"].as_array().unwrap();
        let pm = protected
            .iter()
            .find(|p| p["lock"] == "m")
            .unwrap_or_else(|| panic!("{}: m protects nothing: {j:#}", c.label));
        assert!(
            pm["data"]
                .as_array()
                .unwrap()
                .iter()
                .any(|d| d == "counter"),
            "{}: {j:#}",
            c.label
        );
    }
}
