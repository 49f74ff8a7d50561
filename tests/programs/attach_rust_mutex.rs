//! Attach-mode fixture: four threads share one `std::sync::Mutex` for
//! SECONDS (argv[1]) seconds; prints `iterations N counter C` (C == N).
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn main() {
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let m = Arc::new(Mutex::new(0u64));
    let stop = Instant::now() + Duration::from_secs_f64(secs);
    let hs: Vec<_> = (0..4)
        .map(|_| {
            let m = m.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                while Instant::now() < stop {
                    let mut g = m.lock().unwrap();
                    *g += 1;
                    for i in 0..2000u64 {
                        std::hint::black_box(i);
                    }
                    drop(g);
                    n += 1;
                }
                n
            })
        })
        .collect();
    let total: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
    println!("iterations {total} counter {}", *m.lock().unwrap());
}
