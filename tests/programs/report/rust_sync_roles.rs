//! Rust std locks seen only through their futex words, each in its role.
//!
//! 1. A `Mutex`: 4 threads take it ITERS times each, with work inside;
//!    main holds it for 50 ms while they start, so each sleeps on it.
//! 2. An `RwLock`: 2 writers and 2 readers take it ITERS times each; main
//!    holds it for writing 50 ms longer, so each sleeps on it too.
//! 3. A barrier built on a `Mutex` + `Condvar`: the 4 threads meet ROUNDS
//!    times; thread 0 sleeps 2 ms before each arrival, so the others wait
//!    on the condition variable (not for a lock) about ROUNDS * 2 ms each.
//!
//! Truth lines: `truth-role role=R addr=0x.. size=N` for each object and
//! `truth-barrier rounds=N threads=N sleep_ms=N`.
//! Built with plain `rustc -O -g` (no crates).
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Duration;

const THREADS: usize = 4;
const ITERS: u64 = 20_000;
const ROUNDS: u64 = 50;
const SLEEP_MS: u64 = 2;

struct Barrier {
    state: Mutex<(usize, u64)>,
    cv: Condvar,
}

impl Barrier {
    fn wait(&self) {
        let mut g = self.state.lock().unwrap();
        let gen = g.1;
        g.0 += 1;
        if g.0 == THREADS {
            g.0 = 0;
            g.1 += 1;
            self.cv.notify_all();
        } else {
            while g.1 == gen {
                g = self.cv.wait(g).unwrap();
            }
        }
    }
}

fn spin(n: u64) -> u64 {
    let mut x = 0u64;
    for i in 0..n {
        x = x.wrapping_add(std::hint::black_box(i));
    }
    x
}

fn main() {
    let m = Arc::new(Mutex::new(0u64));
    let rw = Arc::new(RwLock::new(0u64));
    let bar = Arc::new(Barrier {
        state: Mutex::new((0, 0)),
        cv: Condvar::new(),
    });
    let size = |p: usize, n: usize| format!("addr={p:#x} size={n}");
    println!("truth-role role=mutex {}", size(&*m as *const _ as usize, std::mem::size_of::<Mutex<u64>>()));
    println!("truth-role role=rwlock {}", size(&*rw as *const _ as usize, std::mem::size_of::<RwLock<u64>>()));
    println!("truth-role role=condvar {}", size(&bar.cv as *const _ as usize, std::mem::size_of::<Condvar>()));
    println!(
        "truth-role role=barrier-mutex {}",
        size(&bar.state as *const _ as usize, std::mem::size_of::<Mutex<(usize, u64)>>())
    );
    let held_m = m.lock().unwrap();
    let held_rw = rw.write().unwrap();
    let hs: Vec<_> = (0..THREADS)
        .map(|t| {
            let (m, rw, bar) = (Arc::clone(&m), Arc::clone(&rw), Arc::clone(&bar));
            std::thread::spawn(move || {
                for _ in 0..ITERS {
                    *m.lock().unwrap() += spin(50);
                }
                for _ in 0..ITERS {
                    if t < 2 {
                        *rw.write().unwrap() += spin(50);
                    } else {
                        std::hint::black_box(*rw.read().unwrap() + spin(50));
                    }
                }
                for _ in 0..ROUNDS {
                    if t == 0 {
                        std::thread::sleep(Duration::from_millis(SLEEP_MS));
                    }
                    bar.wait();
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    drop(held_m);
    std::thread::sleep(Duration::from_millis(50));
    drop(held_rw);
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(bar.state.lock().unwrap().1, ROUNDS);
    println!("truth-barrier rounds={ROUNDS} threads={THREADS} sleep_ms={SLEEP_MS}");
}
