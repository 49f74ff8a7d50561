//! A synthetic detailed-mode trace of known size, for the bounded-memory
//! test of `lockscope report` and its benchmark (`examples/report_memory.rs`).

use std::path::Path;

use lockscope_format::{phase, Event, Op};

/// Writes a trace of `threads` threads, each taking one of 8 mutexes in
/// turn until `events` events in all; with `detailed`, each section reads
/// and writes a shared word (detailed-mode events: the report's spinlock,
/// barrier and dead-write sections read them), else it is a timing-mode
/// trace of lock and unlock events only. Returns the number written.
pub fn write_trace(path: &Path, events: u64, threads: u32, detailed: bool) -> u64 {
    let mut w = lockscope_test_support::synthetic_trace(path, "synthetic-detailed", threads);
    let per_section = if detailed { 4 } else { 2 };
    let per_thread = events / u64::from(threads) / per_section;
    let mut n = 0;
    let mut end = 0;
    let mut buf = Vec::with_capacity(8192);
    for t in 1..=threads {
        // Threads take turns in time (no two hold a lock at once): the
        // sections' order is the file's, and the trace stays valid.
        let mut time = 1_000 + u64::from(t) * 100;
        for i in 0..per_thread {
            let lock = 0x5555_0000_1000 + 64 * (i % 8);
            let word = 0x5555_0001_0000 + 8 * (i % 64);
            let ev = |time, op: Op, flags, addr, site| Event {
                time,
                op: op as u8,
                flags,
                addr,
                site,
                ..Event::default()
            };
            buf.push(ev(time, Op::MutexLock, phase::DONE, lock, 0x4000_1000));
            if detailed {
                buf.push(ev(time + 20, Op::Read, 8, word, 0x4000_1010));
                buf.push(ev(time + 40, Op::Write, 8, word, 0x4000_1020));
            }
            buf.push(ev(
                time + 60,
                Op::MutexUnlock,
                phase::DONE,
                lock,
                0x4000_1030,
            ));
            time += 100 * u64::from(threads);
            n += per_section;
            if buf.len() >= 8000 {
                w.write_events(t, &buf).unwrap();
                buf.clear();
            }
        }
        w.write_events(t, &buf).unwrap();
        buf.clear();
        end = end.max(time);
    }
    lockscope_test_support::finish_synthetic_trace(w, threads, end, n);
    n
}
