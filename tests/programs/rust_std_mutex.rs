//! A Rust program whose locks reach the recorder only through the futex
//! system call (libc's `syscall` function).
//!
//! 1. A `std::sync::Mutex` held by main for 100 ms while 3 threads try to
//!    take it: each of them must sleep in the kernel at least once.
//! 2. A hand-made futex word: each thread calls FUTEX_WAIT with a value
//!    that never matches (returns EAGAIN at once) and FUTEX_WAKE with no
//!    waiter, an exact number of times, through libc's `syscall`, the
//!    same entry std uses.
//!
//! Truth lines: `truth-std addr=0x.. size=N tid=T` per waiting thread (at
//! least one FutexWait inside the mutex's bytes each: rustc may put the
//! futex word after the data), and the usual exact lines for the
//! hand-made futex (op=FutexWait phase=fail, op=FutexWake phase=done).
//! Built with plain `rustc` (no crates): libc functions declared here.
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

extern "C" {
    fn syscall(num: i64, ...) -> i64;
    fn getpid() -> i32;
}
const SYS_FUTEX: i64 = 202;
const SYS_GETTID: i64 = 186;
const FUTEX_WAIT_PRIVATE: i64 = 128;
const FUTEX_WAKE_PRIVATE: i64 = 1 | 128;

fn tid() -> u32 {
    unsafe { syscall(SYS_GETTID) as u32 }
}

static WORD: AtomicU32 = AtomicU32::new(5);

fn main() {
    let m = Arc::new(Mutex::new(0u64));
    let addr = &*m as *const Mutex<u64> as usize;
    let guard = m.lock().unwrap();
    let handles: Vec<_> = (0..3u64)
        .map(|i| {
            let m = Arc::clone(&m);
            std::thread::spawn(move || {
                let t = tid();
                *m.lock().unwrap() += 1;
                // The hand-made futex: exact counts.
                let (waits, wakes) = (100 + i * 10, 50 + i);
                let w = &WORD as *const AtomicU32;
                for _ in 0..waits {
                    // Expected 0, the word holds 5: EAGAIN at once.
                    let r = unsafe { syscall(SYS_FUTEX, w, FUTEX_WAIT_PRIVATE, 0i64, 0usize) };
                    assert_eq!(r, -1);
                }
                for _ in 0..wakes {
                    let r = unsafe { syscall(SYS_FUTEX, w, FUTEX_WAKE_PRIVATE, 1i64) };
                    assert_eq!(r, 0);
                }
                (t, waits, wakes)
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(100));
    drop(guard);
    let pid = unsafe { getpid() };
    for h in handles {
        let (t, waits, wakes) = h.join().unwrap();
        println!(
            "truth-std addr={addr:#x} size={} tid={t}",
            std::mem::size_of::<Mutex<u64>>()
        );
        let w = &WORD as *const AtomicU32;
        println!("truth pid={pid} gen=0 tid={t} addr={w:p} op=FutexWait phase=fail count={waits}");
        println!("truth pid={pid} gen=0 tid={t} addr={w:p} op=FutexWake phase=done count={wakes}");
    }
    println!("rust_std_mutex: {}", *m.lock().unwrap());
}
