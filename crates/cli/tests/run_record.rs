//! `lockscope run` composes with `lockscope record`: a run with a swapped
//! lock can be recorded (record's preload library sees each call first and
//! forwards it to the swapped lock), and the program's output stays the
//! same.

mod run_support;
use run_support::*;
use std::process::{Command, Stdio};

#[test]
fn record_of_a_swapped_run_keeps_output_and_sees_the_mutex() {
    let dir = temp("record");
    let Some(prog) = build("condvar_pc.c", &dir) else {
        return;
    };
    let preload = build_lib("lockscope-preload", "liblockscope_preload.so");
    let base = lockscope_run(&["--lock", "pthread"], &prog, &["1500"]);
    for lock in ["mcs", "hmcs"] {
        let trace = dir.join(format!("{lock}.lstrace"));
        let o = Command::new(env!("CARGO_BIN_EXE_lockscope"))
            .arg("record")
            .arg("-o")
            .arg(&trace)
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_lockscope"))
            .args(["run", "--lock", lock, "--verbose", "--"])
            .arg(&prog)
            .arg("1500")
            .env("LOCKSCOPE_SWAP_LIB", swap_lib())
            .env("LOCKSCOPE_PRELOAD_LIB", &preload)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(shell_code(&o), 0, "{lock}: {err}");
        assert_eq!(o.stdout, base.stdout, "{lock}: output changed under record");
        // The swapped lock really was in use under the recorder...
        let (n, m) = verbose_counts(&err).unwrap_or_else(|| panic!("no summary: {err}"));
        assert!(n >= 1 && m >= 9_000, "{lock}: {err}");
        // ...and the recorder saw the program's acquisitions.
        let report = Command::new(env!("CARGO_BIN_EXE_lockscope"))
            .arg("report")
            .arg(&trace)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&report.stdout);
        assert!(
            report.status.success(),
            "report failed: {}",
            String::from_utf8_lossy(&report.stderr)
        );
        assert!(
            text.contains("mutex"),
            "{lock}: no mutex in the report:\n{text}"
        );
    }
}
