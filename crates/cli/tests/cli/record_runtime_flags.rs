//! The settings of the injected runtimes are flags of `lockscope record`
//! (`--all-accesses`, `--no-coalesce`, ...): each flag records what its
//! environment variable records, and `--help` names both.

use crate::detailed_support;

use std::path::Path;
use std::process::Command;

use detailed_support::*;
use lockscope_format::{Op, Trace};

/// Records `bin` with extra `record` flags and environment.
fn record_with(bin: &Path, trace: &Path, flags: &[&str], env: &[(&str, &str)]) {
    let mut cmd = Command::new(lockscope());
    cmd.arg("record")
        .arg("-o")
        .arg(trace)
        .args(flags)
        .arg("--")
        .arg(bin);
    // The test's own environment must not decide the default run.
    for k in ["LOCKSCOPE_ALL_ACCESSES", "LOCKSCOPE_COALESCE"] {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "lockscope record {flags:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// (reads, writes, repeat records) of a trace.
fn access_counts(trace: &Path) -> (usize, usize, usize) {
    let t = Trace::open(trace).unwrap();
    let evs: Vec<_> = t.events.values().flatten().collect();
    let count = |op: Op| evs.iter().filter(|e| e.op == op as u8).count();
    (count(Op::Read), count(Op::Write), count(Op::AccessRepeat))
}

/// tests/programs/detailed/repeats.c reads `flag` 1000 times and stores
/// `out` 1000 times, outside any critical section: recorded only with every
/// access, and as 1000 events each only without coalescing.
#[test]
fn all_accesses_and_no_coalesce_flags_record_what_their_variables_do() {
    for c in compilers() {
        let l = c.label;
        let dir = Scratch::new("runtime-flags");
        let bin = dir.path("repeats");
        build_instrumented(c, &fixture("repeats.c"), &bin);

        let by_env = dir.path("env.lstrace");
        record_with(
            &bin,
            &by_env,
            &[],
            &[("LOCKSCOPE_ALL_ACCESSES", "1"), ("LOCKSCOPE_COALESCE", "0")],
        );
        let by_flag = dir.path("flag.lstrace");
        record_with(&bin, &by_flag, &["--all-accesses", "--no-coalesce"], &[]);
        let plain = dir.path("plain.lstrace");
        record_with(&bin, &plain, &[], &[]);

        let (env, flag, none) = (
            access_counts(&by_env),
            access_counts(&by_flag),
            access_counts(&plain),
        );
        // The variables' effect, as detailed_repeats.rs checks it.
        assert!(env.0 >= 1000 && env.1 >= 1000 && env.2 == 0, "{l}: {env:?}");
        // The flags': the same events, exactly.
        assert_eq!(flag, env, "{l}: flags and variables differ");
        // Neither: the accesses outside critical sections are not recorded.
        assert!(none.0 < 10 && none.1 < 10, "{l}: {none:?}");

        // --all-accesses alone keeps coalescing on, as the variable alone
        // does: one event plus one repeat record per run.
        let coalesced = dir.path("coalesced.lstrace");
        record_with(&bin, &coalesced, &["--all-accesses"], &[]);
        let co = access_counts(&coalesced);
        assert!(co.0 < 100 && co.1 < 100 && co.2 >= 2, "{l}: {co:?}");

        // The analyses see the same: lockset says every access was recorded.
        assert_eq!(analysis_json("lockset", &by_flag)["all_accesses"], true);
        assert_eq!(analysis_json("lockset", &plain)["all_accesses"], false);
    }
}

/// `lockscope record --help` teaches each runtime flag and names the
/// variable it sets (scripts that set the variable keep working).
#[test]
fn record_help_names_each_runtime_flag_with_its_variable() {
    let o = Command::new(lockscope())
        .args(["record", "--help"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout);
    for (flag, var) in [
        ("--all-accesses", "LOCKSCOPE_ALL_ACCESSES=1"),
        ("--no-coalesce", "LOCKSCOPE_COALESCE=0"),
        ("--access-frames", "LOCKSCOPE_ACCESS_FRAMES"),
        ("--outside-frames", "LOCKSCOPE_OUTSIDE_FRAMES"),
        ("--event-frames", "LOCKSCOPE_EVENT_FRAMES"),
        ("--omp-wait-ms", "LOCKSCOPE_OMP_WAIT_MS"),
        ("--cupti", "LOCKSCOPE_CUPTI"),
    ] {
        let at = help
            .find(&format!("{flag} "))
            .or_else(|| help.find(&format!("{flag}\n")))
            .unwrap_or_else(|| panic!("{flag} not in --help:\n{help}"));
        // The variable is named in the flag's own paragraph.
        let para = help[at..].split("\n\n").next().unwrap();
        assert!(para.contains(var), "{flag}: {para}");
    }
}
