//! `lockscope report` in bounded memory on a trace whose events alone
//! would take more than the bound in memory.

use crate::report_memory_support;

use std::process::Command;

/// Runs `lockscope report --no-symbols TRACE`; returns its stdout, stderr
/// and peak RSS in KiB, its own: measured by the helper
/// `tests/programs/peak_rss.c`, which forks it. A `wait4` here would
/// count the peak of this test process, which every CLI test shares.
fn report_with_peak_rss(trace: &std::path::Path) -> (String, String, i64) {
    let dir = lockscope_test_support::scratch_dir("report-memory-rss");
    let peak_rss = lockscope_test_support::build_c("peak_rss", dir.path());
    let rss_file = dir.path().join("peak_kib");
    let out = Command::new(peak_rss)
        .arg(&rss_file)
        .arg(env!("CARGO_BIN_EXE_lockscope"))
        .args(["report", "--no-symbols"])
        .arg(trace)
        .output()
        .expect("run lockscope under peak_rss");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "report failed ({}): {stderr}",
        out.status
    );
    let peak_kib = std::fs::read_to_string(&rss_file)
        .expect("peak_rss wrote the peak")
        .trim()
        .parse()
        .expect("peak RSS in KiB");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr,
        peak_kib,
    )
}

// See issue 30: a detailed-mode trace was loaded whole for the spinlock,
// barrier and dead-write sections (2M events: ~330 MiB).
#[test]
fn report_of_a_large_detailed_trace_stays_in_bounded_memory() {
    let dir = lockscope_test_support::scratch_dir("report-memory");
    let trace = dir.path().join("large.lstrace");
    let events = report_memory_support::write_trace(&trace, 2_000_000, 2, true);
    assert_eq!(events, 2_000_000);
    let (stdout, stderr, peak_kib) = report_with_peak_rss(&trace);
    // The events alone take 48 bytes each in memory (96 MB here).
    let in_memory_kib =
        (events * std::mem::size_of::<lockscope_format::Event>() as u64 / 1024) as i64;
    assert!(
        peak_kib < 64 << 10 && peak_kib < in_memory_kib / 2,
        "peak RSS {peak_kib} KiB for {events} events ({in_memory_kib} KiB of events in memory)"
    );
    // Still the whole report: every event analysed, and the left-out
    // sections said on stderr with the commands that print them.
    assert!(stdout.contains(", 2,000,000 events, 0 lost"), "{stdout}");
    assert!(
        stderr.contains("spinlocks, barriers and dead writes left out")
            && stderr.contains("lockscope deadwrites"),
        "{stderr}"
    );
}
