//! Peak memory and speed of `lockscope report` on synthetic traces.
//!
//! ```text
//! cargo build --release --workspace
//! cargo run --release -p lockscope --example report_memory -- [EVENTS...]
//! ```
//!
//! For each size (default 2, 10 and 20 million events) writes a
//! timing-mode trace of 1 and of 9 threads and a detailed-mode one of 2
//! threads (`tests/cli/report_memory_support`), runs `target/release/lockscope
//! report --no-symbols` (the one beside this example) on it in a child and prints its wall time, events
//! per second and peak RSS (`wait4`'s `ru_maxrss`, the child's own).
//! `LOCKSCOPE=PATH` runs another build (a baseline) instead.

#[path = "../tests/cli/report_memory_support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::time::Instant;

// The children are reaped with wait4 (for their rusage), which clippy
// cannot see.
#[allow(clippy::zombie_processes)]
fn main() {
    let sizes: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![2_000_000, 10_000_000, 20_000_000]
    } else {
        sizes
    };
    // Beside this example's directory: target/release/lockscope.
    let bin = std::env::var_os("LOCKSCOPE").map_or_else(
        || {
            let exe = std::env::current_exe().expect("own path");
            exe.parent()
                .and_then(|d| d.parent())
                .map(|d| d.join("lockscope"))
                .expect("target directory")
        },
        PathBuf::from,
    );
    let dir = lockscope_test_support::scratch_dir("report-memory");
    println!("{}", bin.display());
    for &events in &sizes {
        for (threads, detailed) in [(1, false), (9, false), (2, true)] {
            let path = dir.path().join("t.lstrace");
            let n = support::write_trace(&path, events, threads, detailed);
            let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
            let t0 = Instant::now();
            let child = std::process::Command::new(&bin)
                .args(["report", "--no-symbols"])
                .arg(&path)
                .stdout(std::process::Stdio::null())
                // Its note that a large detailed trace's extra sections
                // are left out would interleave with the table.
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("run lockscope");
            let mut status = 0;
            // SAFETY: an all-zero rusage is a valid value to overwrite.
            let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: waits for our own child; both pointers are valid.
            unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
            let wall = t0.elapsed().as_secs_f64();
            println!(
                "{:>9} events {} thread{} {:<8} {:>6.1} MB: {:6.2} s, {:5.1} M events/s, peak RSS {:6.1} MiB",
                n,
                threads,
                if threads == 1 { " " } else { "s" },
                if detailed { "detailed" } else { "timing" },
                bytes as f64 / 1e6,
                wall,
                n as f64 / wall / 1e6,
                ru.ru_maxrss as f64 / 1024.0
            );
        }
    }
}
