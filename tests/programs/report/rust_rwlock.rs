//! A Rust std::sync::RwLock: two futex words inside
//! (readers sleep on one, writers on the other) that the report must
//! show as one lock. main write-locks it for 50 ms while two readers and
//! two writers try to take it, so each of them sleeps at least once.
//!
//! Truth line: `truth-rwlock addr=0x.. size=N sleepers=4`.
use std::sync::{Arc, RwLock};
use std::time::Duration;

fn main() {
    let l = Arc::new(RwLock::new(0u64));
    let addr = &*l as *const RwLock<u64> as usize;
    let size = std::mem::size_of::<RwLock<u64>>();
    let g = l.write().unwrap();
    let hs: Vec<_> = (0..4)
        .map(|i| {
            let l = Arc::clone(&l);
            std::thread::spawn(move || {
                if i % 2 == 0 {
                    let r = l.read().unwrap();
                    std::thread::sleep(Duration::from_millis(20));
                    drop(r);
                } else {
                    std::thread::sleep(Duration::from_millis(5));
                    *l.write().unwrap() += 1;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    drop(g);
    for h in hs {
        h.join().unwrap();
    }
    println!("truth-rwlock addr={addr:#x} size={size} sleepers=4");
    println!("writes {}", *l.read().unwrap());
}
