// Fixture: a Rust std Mutex (futex-based, never calls pthread_mutex_*)
// made to wait for sure: main holds it while a named thread tries to take
// it, then releases it after 200 ms. The wait and the wake reach the
// kernel through libc's `syscall`.
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn main() {
    let m = Arc::new(Mutex::new(0u64));
    let g = m.lock().unwrap();
    let m2 = Arc::clone(&m);
    let t = std::thread::Builder::new()
        .name("contender".into())
        .spawn(move || *m2.lock().unwrap() += 1)
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    drop(g);
    t.join().unwrap();
    println!("value={} addr={:p}", *m.lock().unwrap(), &*m);
}
