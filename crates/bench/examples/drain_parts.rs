//! Cost of the pieces of the drain, single-threaded: ring decode, and
//! event encoding. For finding the bottleneck of the drain pipeline.
use std::time::Instant;

use lockscope_format::codec::Encoder;
use lockscope_format::Event;
use lockscope_ring::raw::Head;
use lockscope_ring::ring::{self, Consumer, Producer, RingIdentity};

fn main() {
    let dir = std::env::temp_dir().join(format!("lsparts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("r.ring");
    let len = ring::file_bytes(ring::capacity_for_kib(4096));
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    f.set_len(len as u64).unwrap();
    use std::os::unix::io::AsRawFd;
    // SAFETY: a shared mapping of the file just sized to `len` bytes.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    } as *mut u8;
    // SAFETY: `base` is a fresh zeroed mapping of `len` bytes, used by
    // nothing else.
    let mut p = unsafe { Producer::init(base, len, &RingIdentity::default()) }.unwrap();
    let mut c = Consumer::open(&path).unwrap();
    let n_per = 100_000u64;
    let rounds = 100;
    let (mut tp, mut td) = (0.0, 0.0);
    let mut sink = 0u64;
    for _ in 0..rounds {
        let t0 = Instant::now();
        for i in 0..n_per {
            let h = Head {
                tsc: i,
                addr: 0x1000 + (i & 1) * 64,
                site: 0x4000,
                op: 1,
                ..Head::default()
            };
            assert!(p.push(h, None, &[]));
        }
        tp += t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        c.drain(|e| sink = sink.wrapping_add(e.head.tsc));
        td += t0.elapsed().as_secs_f64();
    }
    // The same slots read in place, no RawEvent.
    // SAFETY: the slots follow the ring's 4 KiB header inside the mapping.
    let slots = unsafe { base.add(4096) as *const lockscope_ring::raw::Slot };
    let mut tr = 0.0;
    let cap = ring::capacity_for_kib(4096);
    for r in 0..rounds {
        for i in 0..n_per {
            let h = Head {
                tsc: i,
                addr: 0x1000 + (i & 1) * 64,
                site: 0x4000,
                op: 1,
                ..Head::default()
            };
            assert!(p.push(h, None, &[]));
        }
        let t0 = Instant::now();
        let start = (rounds + r) * n_per;
        for k in start..start + n_per {
            // SAFETY: index below the capacity, inside the mapping; the
            // slots were written by this thread's pushes just above.
            let h = Head::from_slot(unsafe { &*slots.add((k % cap) as usize) });
            sink = sink.wrapping_add(h.tsc);
        }
        tr += t0.elapsed().as_secs_f64();
        c.drain(|_| {});
    }
    let n = (n_per * rounds) as f64;
    println!("in-place read {:.1} ns/event", tr * 1e9 / n);
    println!(
        "push {:.1} ns/event, Consumer::drain {:.1} ns/event",
        tp * 1e9 / n,
        td * 1e9 / n
    );
    let evs: Vec<Event> = (0..65536u64)
        .map(|i| Event {
            time: i * 30,
            op: if i & 1 == 0 { 1 } else { 4 },
            addr: 0x5555_0000_1000,
            site: 0x4011a0 + (i & 1) * 8,
            ..Event::default()
        })
        .collect();
    let t0 = Instant::now();
    let mut bytes = 0;
    for _ in 0..100 {
        let mut enc = Encoder::new();
        let mut out = Vec::with_capacity(evs.len() * 5);
        for e in &evs {
            enc.encode(e, &mut out);
        }
        bytes += out.len();
    }
    println!(
        "encode {:.1} ns/event ({} bytes/event) {sink}",
        t0.elapsed().as_secs_f64() * 1e9 / (100.0 * evs.len() as f64),
        bytes / (100 * evs.len())
    );
    let _ = std::fs::remove_dir_all(&dir);
}
