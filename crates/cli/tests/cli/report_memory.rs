//! `lockscope report` in bounded memory on a trace whose events alone
//! would take more than the bound in memory.

mod report_memory_support;

use std::process::{Command, Stdio};

/// Runs `lockscope report --no-symbols TRACE`; returns its stdout, stderr
/// and peak RSS in KiB (the child's own, from `wait4`).
// The child is reaped with wait4 (for its rusage), which clippy cannot see.
#[allow(clippy::zombie_processes)]
fn report_with_peak_rss(trace: &std::path::Path) -> (String, String, i64) {
    let child = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["report", "--no-symbols"])
        .arg(trace)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run lockscope");
    let id = child.id();
    // Read both pipes to the end before reaping the child, which then
    // cannot block on a full pipe.
    let (mut out, mut err) = (child.stdout.unwrap(), child.stderr.unwrap());
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut err, &mut s).unwrap();
        s
    });
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut out, &mut stdout).unwrap();
    let stderr = err_thread.join().unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value to overwrite.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: reaps our own child (std's handle was consumed above, so
    // nothing else waits for it); both pointers are valid.
    let r = unsafe { libc::wait4(id as i32, &mut status, 0, &mut ru) };
    assert_eq!(r, id as i32, "wait4: {}", std::io::Error::last_os_error());
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "report failed ({status}): {stderr}"
    );
    (stdout, stderr, ru.ru_maxrss)
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
