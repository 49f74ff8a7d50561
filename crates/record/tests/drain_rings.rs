//! The drain against hand-made session directories: rings filled with
//! `lockscope_ring::ring::Producer` exactly as the preload library fills them,
//! drained while being written, checked event by event in the trace.

use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use lockscope_format::{phase, LossReason, Op, Record, Trace};
use lockscope_ring::raw::{Head, Slot, OP_THREAD_NAME};
use lockscope_ring::ring::{self, Producer, RingIdentity};
use lockscope_ring::session::{
    maps_file_name, proc_file_name, ring_file_name, ProcessHeader, RingHeader, HEADER_BYTES,
    PROC_MAGIC,
};
use lockscope_test_support::{poll_until, DEFAULT_DEADLINE};

/// The thread names of a trace as (OS tid of the thread named, name), in
/// file order. Panics if a name comes before its thread's record.
fn thread_names(t: &Trace) -> Vec<(u32, String)> {
    let mut ids = std::collections::HashMap::new();
    let mut names = Vec::new();
    for r in &t.records {
        match r {
            Record::Thread(th) => {
                ids.insert(th.id, th.tid);
            }
            Record::ThreadName(n) => {
                let tid = *ids.get(&n.thread).expect("ThreadName after its Thread");
                names.push((tid, n.name.clone()));
            }
            _ => {}
        }
    }
    names
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lsrec-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn map_file(path: &Path, len: usize) -> *mut u8 {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    f.set_len(len as u64).unwrap();
    // SAFETY: fresh file of `len` bytes.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    p as *mut u8
}

/// Writes a process file the way the preload library does (magic last).
fn make_proc(dir: &Path, pid: u32, gen: u32, ppid: u32, argv: &[&str]) -> &'static ProcessHeader {
    let mut text = Vec::new();
    for a in argv {
        text.extend_from_slice(a.as_bytes());
        text.push(0);
    }
    let path = dir.join(proc_file_name(pid, gen));
    let base = map_file(&path, HEADER_BYTES + text.len());
    // SAFETY: the mapping is large enough; the header is plain data.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), base.add(HEADER_BYTES), text.len());
        let h = base as *mut ProcessHeader;
        (*h).version = 1;
        (*h).pid = pid;
        (*h).ppid = ppid;
        (*h).exec_generation = gen;
        (*h).start_tsc = lockscope_ring::tsc::now();
        (*h).argv_bytes = text.len() as u32;
        (*h).acquire_cost_ticks.store(100, Ordering::Relaxed);
        (*h).release_cost_ticks.store(50, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
        std::ptr::write_volatile(&mut (*h).magic, PROC_MAGIC);
        &*h
    }
}

fn make_ring(dir: &Path, pid: u32, tid: u32, parent_tid: u32, kib: u64) -> (Producer, *mut u8) {
    let len = ring::file_bytes(ring::capacity_for_kib(kib));
    let base = map_file(&dir.join(ring_file_name(pid, 0, tid)), len);
    let mut name = [0u8; 16];
    name[..4].copy_from_slice(b"work");
    let id = RingIdentity {
        pid,
        tid,
        exec_generation: 0,
        parent_tid,
        start_tsc: lockscope_ring::tsc::now(),
        name,
    };
    // SAFETY: fresh zeroed mapping of `len` bytes.
    (unsafe { Producer::init(base, len, &id) }.unwrap(), base)
}

fn head(op: Op, flags: u8, addr: u64, site: u64) -> Head {
    Head {
        tsc: lockscope_ring::tsc::now(),
        addr,
        site,
        op: op as u8,
        flags,
        ..Head::default()
    }
}

fn run_drain(dir: &Path, out: &Path, producer: impl FnOnce()) -> lockscope_record::RecordOutcome {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let h = s.spawn(|| lockscope_record::drain_dir(dir, out, &stop).unwrap());
        producer();
        stop.store(true, Ordering::Release);
        h.join().unwrap()
    })
}

#[test]
fn concurrent_drain_keeps_every_event_in_order() {
    let dir = temp_dir("order");
    let out = dir.with_extension("lstrace");
    let pid = 4242;
    let ph = make_proc(&dir, pid, 0, 1, &["/bin/prog", "prog", "-x"]);
    std::fs::write(
        dir.join(maps_file_name(pid, 0, 0)),
        format!(
            "00400000-00401000 r-xp 00000000 00:00 0 {}\n7f0000000000-7f0000001000 rw-p 00000000 00:00 0 \n",
            std::env::current_exe().unwrap().display()
        ),
    )
    .unwrap();
    const N: u64 = 300_000;
    // Every push that finds the ring full is retried (so the content is
    // complete) and counted by the ring as lost: the trace must report
    // exactly that many.
    let mut failed = 0u64;
    let outcome = run_drain(&dir, &out, || {
        let (mut p, _) = make_ring(&dir, pid, 100, 0, 256);
        let (mut q, _) = make_ring(&dir, pid, 101, 100, 256);
        let mut name = [0u8; 16];
        name[..6].copy_from_slice(b"worker");
        let (a, b) = (
            u64::from_le_bytes(name[..8].try_into().unwrap()),
            u64::from_le_bytes(name[8..].try_into().unwrap()),
        );
        let mut h = head(Op::MutexLock, 0, 0, 0);
        h.op = OP_THREAD_NAME;
        h.addr = 101; // the thread names itself
        assert!(q.push(h, Some((a, b)), &[]));
        let mut i = 0;
        while i < N {
            let lock = 0x1000 + (i % 3) * 64;
            let ev = if i % 1000 == 999 {
                (
                    head(
                        Op::MutexLock,
                        phase::DONE | phase::CONTENDED,
                        lock,
                        0x401010,
                    ),
                    vec![0x401010, 0x401200, 0x401300],
                )
            } else {
                (head(Op::MutexLock, phase::DONE, lock, 0x401000), vec![])
            };
            if p.push(ev.0, None, &ev.1) {
                while !p.push(head(Op::MutexUnlock, 0, lock, 0x401004), None, &[]) {
                    failed += 1;
                    std::thread::yield_now();
                }
                i += 1;
            } else {
                failed += 1;
                std::thread::yield_now();
            }
        }
        assert!(q.push(
            head(Op::FutexWait, phase::BEGIN, 0x9000, 0x401100),
            Some((0, 0)),
            &[]
        ));
        assert!(q.push(
            head(Op::FutexWait, phase::DONE, 0x9000, 0x401100),
            None,
            &[]
        ));
        ph.exit_code.store(3, Ordering::Relaxed);
        ph.end_tsc
            .store(lockscope_ring::tsc::now(), Ordering::Release);
        p.header()
            .expect("attached")
            .end_tsc
            .store(lockscope_ring::tsc::now(), Ordering::Release);
    });
    assert_eq!(outcome.lost, failed);
    let t = Trace::open(&out).unwrap();
    let footer = t.footer.as_ref().expect("complete trace");
    assert_eq!(footer.lost, failed);
    println!("{failed} pushes found the ring full");
    let threads: Vec<_> = t
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Thread(th) => Some(th.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(threads.len(), 2);
    let t100 = threads.iter().find(|x| x.tid == 100).unwrap();
    let t101 = threads.iter().find(|x| x.tid == 101).unwrap();
    assert_eq!(t101.parent, t100.id);
    assert_eq!(t100.name, "work");
    // The in-stream annotations of losses add up to the counted loss.
    let all = &t.events[&t100.id];
    let annotated: u64 = all
        .iter()
        .filter(|e| e.op == Op::Lost as u8)
        .map(|e| e.arg)
        .sum();
    assert_eq!(annotated, failed);
    let ev: Vec<_> = all
        .iter()
        .filter(|e| e.op != Op::Lost as u8)
        .copied()
        .collect();
    assert_eq!(ev.len() as u64, 2 * N);
    assert_eq!(footer.events, all.len() as u64 + 2);
    let mut last = 0;
    let mut contended = 0;
    for (k, pair) in ev.chunks(2).enumerate() {
        let lock = 0x1000 + (k as u64 % 3) * 64;
        assert_eq!((pair[0].op, pair[0].addr), (Op::MutexLock as u8, lock));
        assert_eq!((pair[1].op, pair[1].addr), (Op::MutexUnlock as u8, lock));
        assert!(pair[0].time >= last && pair[1].time >= pair[0].time);
        last = pair[1].time;
        if pair[0].flags & phase::CONTENDED != 0 {
            contended += 1;
            assert_ne!(pair[0].stack, 0);
        } else {
            assert_eq!(pair[0].stack, 0);
        }
    }
    assert_eq!(contended, N / 1000);
    let stacks: Vec<_> = t
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Stack(s) => Some(s.frames.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(stacks, vec![vec![0x401010, 0x401200, 0x401300]]);
    let locks = t
        .records
        .iter()
        .filter(|r| matches!(r, Record::Lock(_)))
        .count();
    assert_eq!(locks, 4, "3 mutexes + 1 futex word");
    assert!(t
        .records
        .iter()
        .any(|r| matches!(r, Record::ThreadName(n) if n.thread == t101.id && n.name == "worker")));
    let proc = t
        .records
        .iter()
        .find_map(|r| match r {
            Record::Process(p) => Some(p.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        (proc.pid, proc.exe.as_str(), proc.argv.clone()),
        (pid, "/bin/prog", vec!["prog".to_string(), "-x".to_string()])
    );
    let maps: Vec<_> = t
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Map(m) => Some(m.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(maps.len(), 2);
    assert_eq!(maps[0].start, 0x400000);
    assert!(
        !maps[0].build_id.is_empty(),
        "test binaries have a build-id"
    );
    assert_eq!(maps[1].path, 0);
    assert!(t
        .records
        .iter()
        .any(|r| matches!(r, Record::Overhead(o) if o.acquire_ns > 0.0)));
    // Both threads end, the process ends with the status its exit handler
    // stored.
    assert_eq!(
        t.records
            .iter()
            .filter(|r| matches!(r, Record::ThreadEnd(_)))
            .count(),
        2
    );
    assert!(t
        .records
        .iter()
        .any(|r| matches!(r, Record::ProcessEnd(e) if e.status == 3)));
    let top = &outcome.top_locks[0];
    assert_eq!((top.contended, top.kind), (N / 1000 / 3, "MutexLock"));
    let acq: u64 = outcome.top_locks.iter().map(|l| l.acquisitions).sum();
    assert_eq!(acq, N);
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_file(&out).unwrap();
}

#[test]
fn overflow_and_corruption_are_counted_not_hidden() {
    let dir = temp_dir("loss");
    let out = dir.with_extension("lstrace");
    let pid = 77;
    make_proc(&dir, pid, 0, 1, &["/bin/x"]);
    let cap = ring::capacity_for_kib(2);
    let (mut p, base) = make_ring(&dir, pid, 5, 0, 2);
    // Fill the ring before any drain runs: cap events fit, 100 are lost.
    for i in 0..cap + 100 {
        p.push(head(Op::MutexLock, 0, 0x10 + i % 2, 0x20), None, &[]);
    }
    let outcome = run_drain(&dir, &out, || {
        // SAFETY: the ring header at the start of our own mapping.
        let h = unsafe { &*(base as *const RingHeader) };
        // The drain has taken the full ring (read caught up with write)...
        poll_until("the drain to empty the full ring", DEFAULT_DEADLINE, || {
            h.read.load(Ordering::Acquire) == h.write.load(Ordering::Acquire)
        });
        // ...now scribble: publish 3 slots whose head claims 40 frames.
        let w = h.write.load(Ordering::Acquire);
        // SAFETY: our own mapping; mimics a program overwriting its ring.
        unsafe {
            let slots = base.add(HEADER_BYTES) as *mut Slot;
            let mut bad = head(Op::MutexLock, 0, 1, 2);
            bad.nframes = 40;
            slots.add((w % cap) as usize).write(bad.to_slot());
        }
        h.write.store(w + 3, Ordering::Release);
        poll_until(
            "the drain to take the scribbled slots",
            DEFAULT_DEADLINE,
            || h.read.load(Ordering::Acquire) >= w + 3,
        );
    });
    let t = Trace::open(&out).unwrap();
    let losses: Vec<_> = t
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Loss(l) => Some((l.reason, l.events)),
            _ => None,
        })
        .collect();
    assert!(
        losses.contains(&(LossReason::BufferFull, 100)),
        "{losses:?}"
    );
    assert!(
        losses.contains(&(LossReason::CorruptBuffer, 3)),
        "{losses:?}"
    );
    assert_eq!(t.footer.as_ref().unwrap().lost, 103);
    assert_eq!(outcome.lost, 103);
    let ev = t.events.values().next().unwrap();
    // cap events, then the in-stream annotation of the 100 lost.
    assert_eq!(ev.len() as u64, cap + 1);
    let last = ev.last().unwrap();
    assert_eq!((last.op, last.arg), (Op::Lost as u8, 100));
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_file(&out).unwrap();
}

fn name_event(tid: u32, name: &str) -> (Head, (u64, u64)) {
    let mut b = [0u8; 16];
    b[..name.len()].copy_from_slice(name.as_bytes());
    let mut h = head(Op::MutexLock, 0, u64::from(tid), 0x401000);
    h.op = OP_THREAD_NAME;
    (
        h,
        (
            u64::from_le_bytes(b[..8].try_into().unwrap()),
            u64::from_le_bytes(b[8..].try_into().unwrap()),
        ),
    )
}

#[test]
fn a_name_goes_to_the_thread_named_not_the_one_naming() {
    let dir = temp_dir("names");
    let out = dir.with_extension("lstrace");
    let pid = 4343;
    make_proc(&dir, pid, 0, 1, &["/bin/prog"]);
    run_drain(&dir, &out, || {
        let (mut main, base) = make_ring(&dir, pid, 200, 0, 64);
        // SAFETY: the ring header at the start of the mapping.
        let hdr = unsafe { &*(base as *const RingHeader) };
        // Names a thread whose ring does not exist yet...
        let (h, args) = name_event(201, "early");
        assert!(main.push(h, Some(args), &[]));
        // ...and is drained before that ring appears (the name waits).
        poll_until("the drain to take the early name", DEFAULT_DEADLINE, || {
            hdr.read.load(Ordering::Acquire) >= hdr.write.load(Ordering::Acquire)
        });
        let (mut worker, wbase) = make_ring(&dir, pid, 201, 200, 64);
        assert!(worker.push(
            head(Op::MutexLock, phase::DONE, 0x1000, 0x401000),
            None,
            &[]
        ));
        // SAFETY: the ring header at the start of the worker's mapping.
        let whdr = unsafe { &*(wbase as *const RingHeader) };
        poll_until(
            "the drain to find and drain the worker's ring",
            DEFAULT_DEADLINE,
            || whdr.read.load(Ordering::Acquire) == whdr.write.load(Ordering::Acquire),
        );
        // Names it again once its ring is known, names itself, and names
        // a thread it could not identify (tid 0: dropped).
        for (tid, name) in [(201, "later"), (200, "self"), (0, "nobody")] {
            let (h, args) = name_event(tid, name);
            assert!(main.push(h, Some(args), &[]));
        }
    });
    let names = thread_names(&Trace::open(&out).unwrap());
    assert_eq!(
        names,
        vec![
            (201, "early".to_string()),
            (201, "later".to_string()),
            (200, "self".to_string())
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_file(&out).unwrap();
}

/// Waits until the drain has consumed every slot of the ring at `base`.
fn wait_drained(base: *mut u8) {
    // SAFETY: `base` is a live ring mapping (the test keeps it mapped).
    let h = unsafe { &*(base as *const RingHeader) };
    let t0 = std::time::Instant::now();
    while h.read.load(Ordering::Acquire) != h.write.load(Ordering::Acquire) {
        assert!(
            t0.elapsed().as_secs() < 30,
            "the drain never emptied the ring"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Waits until the drain is past the ring's latest hand-over event.
fn wait_handoff_read(base: *mut u8) {
    // SAFETY: `base` is a live ring mapping (the test keeps it mapped).
    let h = unsafe { &*(base as *const RingHeader) };
    let t0 = std::time::Instant::now();
    while h.read.load(Ordering::Acquire) < h.handoff.load(Ordering::Acquire) {
        assert!(
            t0.elapsed().as_secs() < 30,
            "the drain never read the hand-over"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
fn a_recycled_ring_changes_owner_without_mixing_their_events() {
    // One ring, five owners in turn, exactly as the preload library
    // recycles the ring of a joined thread: the owner stamps its exit, the
    // joiner pools the ring, a new thread takes it over once drained
    // (hand-over event) and records its own events. Each owner must come
    // out as its own thread with exactly its own events and losses.
    use lockscope_ring::session::{POOL_OPEN, POOL_POOLED};
    let dir = temp_dir("recycle");
    let out = dir.with_extension("lstrace");
    let pid = 4343;
    let ph = make_proc(&dir, pid, 0, 1, &["/bin/prog"]);
    const OWNERS: u32 = 5;
    let mut behind = 0;
    let outcome = run_drain(&dir, &out, || {
        let (mut p, base) = make_ring(&dir, pid, 100, 0, 16);
        // SAFETY: the mapping stays for the whole test.
        let hdr = unsafe { &*(base as *const RingHeader) };
        for owner in 0..OWNERS {
            let tid = 100 + owner;
            if owner > 0 {
                // The joiner pools it; the new thread waits until drained.
                assert!(hdr
                    .pool
                    .compare_exchange(POOL_OPEN, POOL_POOLED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok());
                if owner == 2 {
                    // Give the drain time to end the pooled owner early
                    // (vacated) before the next one takes over.
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    wait_drained(base);
                } else {
                    // The preload library's condition: the previous
                    // hand-over was read (the previous owner's last events
                    // may still be in the ring).
                    wait_handoff_read(base);
                }
                // SAFETY: the previous owner is done; the mapping is live.
                p = unsafe { Producer::resume(base) }.unwrap();
                let mut name = [0u8; 16];
                name[..5].copy_from_slice(b"next\0");
                let id = RingIdentity {
                    pid,
                    tid,
                    exec_generation: 0,
                    parent_tid: 100,
                    start_tsc: lockscope_ring::tsc::now(),
                    name,
                };
                if hdr.read.load(Ordering::Acquire) != hdr.write.load(Ordering::Acquire) {
                    // The previous owner's last events are still unread:
                    // the drain must stop at the hand-over.
                    behind += 1;
                }
                while !p.hand_over(&id) {
                    std::thread::yield_now();
                }
                assert_eq!(hdr.pool.load(Ordering::Acquire), POOL_OPEN);
                assert_eq!(hdr.end_tsc.load(Ordering::Acquire), 0);
            }
            // Owner k does 1000 * (k + 1) pairs.
            for i in 0..1000 * u64::from(owner + 1) {
                let lock = 0x1000 + i % 4 * 64;
                while !p.try_push(head(Op::MutexLock, phase::DONE, lock, 0x401000), None, &[]) {
                    std::thread::yield_now();
                }
                while !p.try_push(head(Op::MutexUnlock, 0, lock, 0x401004), None, &[]) {
                    std::thread::yield_now();
                }
            }
            if owner == 3 {
                // Owner 3 drops 7 events (as a full ring counts them).
                let l = &hdr.lost;
                l.store(l.load(Ordering::Relaxed) + 7, Ordering::Relaxed);
            }
            hdr.end_tsc
                .store(lockscope_ring::tsc::now(), Ordering::Release);
        }
        ph.end_tsc
            .store(lockscope_ring::tsc::now(), Ordering::Release);
    });
    println!("{behind} of 3 hand-overs found the previous owner's events unread");
    assert_eq!(outcome.lost, 7);
    let t = Trace::open(&out).unwrap();
    let threads: Vec<_> = t
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Thread(th) => Some(th.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        threads.iter().map(|t| t.tid).collect::<Vec<_>>(),
        (100..100 + OWNERS).collect::<Vec<_>>(),
        "one thread per owner, in order"
    );
    for th in &threads {
        let k = u64::from(th.tid - 100 + 1) * 1000;
        let evs = t.events.get(&th.id).map(Vec::as_slice).unwrap_or(&[]);
        let n = |op: Op| evs.iter().filter(|e| e.op() == Some(op)).count() as u64;
        assert_eq!(
            (n(Op::MutexLock), n(Op::MutexUnlock)),
            (k, k),
            "tid {}",
            th.tid
        );
        if th.tid > 100 {
            assert_eq!(th.name, "next");
            let first = threads[0].id;
            assert_eq!(th.parent, first, "parent found by tid");
        }
        let ends = t
            .records
            .iter()
            .filter(|r| matches!(r, Record::ThreadEnd(e) if e.thread == th.id))
            .count();
        assert_eq!(ends, 1, "tid {} ends once", th.tid);
        let lost: u64 = t
            .records
            .iter()
            .filter_map(|r| match r {
                Record::Loss(l) if l.thread == th.id && l.reason == LossReason::BufferFull => {
                    Some(l.events)
                }
                _ => None,
            })
            .sum();
        assert_eq!(lost, if th.tid == 103 { 7 } else { 0 }, "tid {}", th.tid);
    }
}

#[test]
fn a_first_ring_under_an_alternative_name_is_drained() {
    // The kernel reused a tid whose ring file still exists (recycled by
    // later threads): the new thread's first ring is `T..-<tid>.1.ring`.
    let dir = temp_dir("altname");
    let out = dir.with_extension("lstrace");
    let pid = 4444;
    let ph = make_proc(&dir, pid, 0, 1, &["/bin/prog"]);
    let outcome = run_drain(&dir, &out, || {
        let len = ring::file_bytes(ring::capacity_for_kib(16));
        let base = map_file(&dir.join(format!("T{pid}-0-77.1.ring")), len);
        let id = RingIdentity {
            pid,
            tid: 77,
            start_tsc: lockscope_ring::tsc::now(),
            ..RingIdentity::default()
        };
        // SAFETY: fresh zeroed mapping of `len` bytes.
        let mut p = unsafe { Producer::init(base, len, &id) }.unwrap();
        for _ in 0..100 {
            assert!(p.push(
                head(Op::MutexLock, phase::DONE, 0x1000, 0x401000),
                None,
                &[]
            ));
            assert!(p.push(head(Op::MutexUnlock, 0, 0x1000, 0x401004), None, &[]));
        }
        p.header()
            .expect("attached")
            .end_tsc
            .store(lockscope_ring::tsc::now(), Ordering::Release);
        ph.end_tsc
            .store(lockscope_ring::tsc::now(), Ordering::Release);
    });
    assert_eq!(outcome.lost, 0);
    let t = Trace::open(&out).unwrap();
    let th: Vec<_> = t
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Thread(th) => Some(th.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(th.len(), 1);
    assert_eq!(th[0].tid, 77);
    let evs = t.events.get(&th[0].id).map(Vec::as_slice).unwrap_or(&[]);
    assert_eq!(
        evs.iter().filter(|e| e.op() == Some(Op::MutexLock)).count(),
        100
    );
}

/// The recorder scales with cores: a pass that finds several
/// rings holding megabytes is copied by several threads, each sending its
/// own batches to the converter workers. Every event must still come out
/// exactly once, in its thread's order, whichever thread copied it and
/// whichever worker converted it; events written after that pass follow.
#[test]
fn a_heavy_pass_copied_by_several_threads_keeps_every_event_in_order() {
    let dir = temp_dir("parallel");
    let out = dir.with_extension("lstrace");
    let pid = 4343;
    let ph = make_proc(&dir, pid, 0, 1, &["/bin/prog", "prog"]);
    const RINGS: u32 = 5;
    const BEFORE: u64 = 40_000; // per ring, waiting when the drain starts
    const AFTER: u64 = 60_000; // per ring, written while it drains
                               // The sequence number of each event is its lock address: order and
                               // completeness are checked per thread from it.
    let seq_head = |i: u64| head(Op::MutexLock, phase::DONE, 0x10_0000 + i * 8, 0x401000);
    let mut rings: Vec<(Producer, *mut u8)> = (0..RINGS)
        .map(|k| make_ring(&dir, pid, 500 + k, 0, 4096))
        .collect();
    for (p, _) in &mut rings {
        for i in 0..BEFORE {
            assert!(
                p.push(seq_head(i), None, &[]),
                "the ring holds the first part"
            );
        }
    }
    let stop = AtomicBool::new(false);
    let outcome = std::thread::scope(|s| {
        let h = s.spawn(|| lockscope_record::drain_dir_with(&dir, &out, &stop, 3).unwrap());
        for i in BEFORE..BEFORE + AFTER {
            for (p, _) in &mut rings {
                while !p.push(seq_head(i), None, &[]) {
                    std::thread::yield_now();
                }
            }
        }
        let now = lockscope_ring::tsc::now();
        for (p, _) in &rings {
            p.header()
                .expect("attached")
                .end_tsc
                .store(now, Ordering::Release);
        }
        ph.end_tsc.store(now, Ordering::Release);
        stop.store(true, Ordering::Release);
        h.join().unwrap()
    });
    assert!(
        outcome.parallel_copies >= 1,
        "the first pass found {RINGS} rings of {BEFORE} events: copied in parallel"
    );
    assert_eq!(outcome.writers, 3);
    assert_eq!(outcome.lost, 0);
    let t = Trace::open(&out).unwrap();
    assert_eq!(t.footer.as_ref().unwrap().lost, 0);
    let mut tid_of = std::collections::HashMap::new();
    for r in &t.records {
        if let Record::Thread(th) = r {
            tid_of.insert(th.id, th.tid);
        }
    }
    assert_eq!(tid_of.len(), RINGS as usize);
    for (th, evs) in &t.events {
        let seqs: Vec<u64> = evs
            .iter()
            .filter(|e| e.op == Op::MutexLock as u8)
            .map(|e| (e.addr - 0x10_0000) / 8)
            .collect();
        let want: Vec<u64> = (0..BEFORE + AFTER).collect();
        assert!(
            seqs == want,
            "thread {} (tid {}): {} events, first out of order at {:?}",
            th,
            tid_of[th],
            seqs.len(),
            seqs.iter().zip(&want).position(|(a, b)| a != b)
        );
        assert!(evs.windows(2).all(|w| w[0].time <= w[1].time));
    }
}

/// A recording drained by two converter workers in which thread
/// `main_tid` made thread `ended_tid` (one event each), which has ended
/// and whose ring the drain has closed; then `then(dir, main)` runs, and
/// every producer it returns ends with `main` and the process. The trace,
/// read back (the session directory and file are removed).
fn after_a_closed_thread(
    tag: &str,
    pid: u32,
    main_tid: u32,
    ended_tid: u32,
    then: impl FnOnce(&Path, &mut Producer) -> Vec<Producer>,
) -> Trace {
    let dir = temp_dir(tag);
    let out = dir.with_extension("lstrace");
    let ph = make_proc(&dir, pid, 0, 1, &["/bin/prog"]);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let h = s.spawn(|| lockscope_record::drain_dir_with(&dir, &out, &stop, 2).unwrap());
        let (mut main, _) = make_ring(&dir, pid, main_tid, 0, 64);
        let (mut ended, _) = make_ring(&dir, pid, ended_tid, main_tid, 64);
        for p in [&mut main, &mut ended] {
            assert!(p.push(
                head(Op::MutexLock, phase::DONE, 0x1000, 0x401000),
                None,
                &[]
            ));
        }
        ended
            .header()
            .expect("attached")
            .end_tsc
            .store(lockscope_ring::tsc::now(), Ordering::Release);
        let ended_file = dir.join(ring_file_name(pid, 0, ended_tid));
        poll_until(
            "the drain to close the ended thread",
            DEFAULT_DEADLINE,
            || !ended_file.exists(),
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
        let more = then(&dir, &mut main);
        let now = lockscope_ring::tsc::now();
        for p in more.iter().chain([&main]) {
            p.header()
                .expect("attached")
                .end_tsc
                .store(now, Ordering::Release);
        }
        ph.end_tsc.store(now, Ordering::Release);
        stop.store(true, Ordering::Release);
        h.join().unwrap();
    });
    let t = Trace::open(&out).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_file(&out).unwrap();
    t
}

/// With several converter workers the one converting a naming
/// thread can be behind the named thread's, which may have ended by the
/// time the name is converted. The name must still reach the thread it
/// was given to (it was parked for a thread that never came, and lost:
/// `names_given_across_threads_are_kept_with_two_workers`
/// failed one run in a few). Here the lag is made certain: the name is
/// written after the named thread's ring was closed.
#[test]
fn a_name_converted_after_the_named_thread_ended_is_kept() {
    let t = after_a_closed_thread("late_name", 4545, 300, 301, |_, main| {
        let (h2, args) = name_event(301, "late");
        assert!(main.push(h2, Some(args), &[]));
        Vec::new()
    });
    let names = thread_names(&t);
    assert_eq!(names, vec![(301, "late".to_string())]);
}

/// A name one thread gives another is written for the thread
/// named when the two are converted by different workers. Placement is
/// known: the process's first thread (no parent) is not counted, so with
/// two workers its first child joins it on the first worker and the
/// second child goes to the second.
#[test]
fn names_given_across_converter_workers_reach_the_thread_named() {
    let dir = temp_dir("cross_names");
    let out = dir.with_extension("lstrace");
    let pid = 4646;
    let ph = make_proc(&dir, pid, 0, 1, &["/bin/prog"]);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let h = s.spawn(|| lockscope_record::drain_dir_with(&dir, &out, &stop, 2).unwrap());
        let (mut main, mbase) = make_ring(&dir, pid, 400, 0, 64);
        wait_registered(&mut main, mbase);
        let (mut a, abase) = make_ring(&dir, pid, 401, 400, 64);
        wait_registered(&mut a, abase);
        let (mut b, bbase) = make_ring(&dir, pid, 402, 400, 64);
        wait_registered(&mut b, bbase);
        // b (second worker) names a (first worker) and a names b, and
        // main names both.
        for (p, tid, name) in [(&mut b, 401, "a-by-b"), (&mut a, 402, "b-by-a")] {
            let (h2, args) = name_event(tid, name);
            assert!(p.push(h2, Some(args), &[]));
        }
        for (tid, name) in [(401, "a-by-main"), (402, "b-by-main")] {
            let (h2, args) = name_event(tid, name);
            assert!(main.push(h2, Some(args), &[]));
        }
        let now = lockscope_ring::tsc::now();
        for p in [&main, &a, &b] {
            p.header()
                .expect("attached")
                .end_tsc
                .store(now, Ordering::Release);
        }
        ph.end_tsc.store(now, Ordering::Release);
        stop.store(true, Ordering::Release);
        h.join().unwrap();
    });
    let names: std::collections::BTreeSet<(u32, String)> =
        thread_names(&Trace::open(&out).unwrap())
            .into_iter()
            .collect();
    let want: std::collections::BTreeSet<(u32, String)> = [
        (401, "a-by-b"),
        (402, "b-by-a"),
        (401, "a-by-main"),
        (402, "b-by-main"),
    ]
    .into_iter()
    .map(|(t, n)| (t, n.to_string()))
    .collect();
    assert_eq!(names, want);
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_file(&out).unwrap();
}

/// Waits until the drain has opened the ring at `base` (it reads the
/// ring's first event), so that threads are registered in a known order.
fn wait_registered(p: &mut Producer, base: *mut u8) {
    // SAFETY: `base` is `p`'s live ring mapping (the test keeps it mapped).
    let h = unsafe { &*(base as *const RingHeader) };
    assert!(p.push(
        head(Op::MutexLock, phase::DONE, 0x2000, 0x401000),
        None,
        &[]
    ));
    poll_until("the drain to open the ring", DEFAULT_DEADLINE, || {
        h.read.load(Ordering::Acquire) >= h.write.load(Ordering::Acquire)
    });
}

/// Call paths written once and then as tails of the last one
/// (`XF_PATH_TAIL`: six sites under three tails, in runs, the rings
/// drained while written) reach the trace as whole paths, each event with
/// the path it was pushed with.
#[test]
fn call_paths_written_as_tails_reach_the_trace_whole() {
    let dir = temp_dir("tails");
    let out = dir.with_extension("lstrace");
    let pid = 4343;
    let ph = make_proc(&dir, pid, 0, 1, &["/bin/prog", "prog"]);
    const N: u64 = 60_000;
    // The first two tails have the same length: only their frames tell
    // them apart.
    let tails: [&[u64]; 3] = [&[0x402000, 0x403000], &[0x402100, 0x403100], &[]];
    let path_of = |i: u64| -> Vec<u64> {
        let site = 0x401000 + (i % 6) * 4;
        let tail = tails[(i / 500 % 3) as usize];
        std::iter::once(site).chain(tail.iter().copied()).collect()
    };
    run_drain(&dir, &out, || {
        let (mut p, _) = make_ring(&dir, pid, 100, 0, 16);
        for i in 0..N {
            let frames = path_of(i);
            let h = head(Op::AtomicLoad, 3, 0x10_0000 + i, frames[0]);
            let args = i.is_multiple_of(2).then_some((i, i));
            while !p.try_push(h, args, &frames) {
                std::thread::yield_now();
            }
        }
        ph.end_tsc
            .store(lockscope_ring::tsc::now(), Ordering::Release);
        p.header()
            .expect("attached")
            .end_tsc
            .store(lockscope_ring::tsc::now(), Ordering::Release);
    });
    let t = Trace::open(&out).unwrap();
    let stacks = t.call_paths();
    // 6 sites under the first two tails, and the 6 one-frame paths.
    assert_eq!(stacks.len(), 18);
    let events: Vec<_> = t
        .events
        .values()
        .flatten()
        .filter(|e| e.op == Op::AtomicLoad as u8)
        .collect();
    assert_eq!(events.len() as u64, N);
    for (k, e) in events.iter().enumerate() {
        let i = e.addr - 0x10_0000;
        assert_eq!(i, k as u64, "events in order");
        assert_eq!(
            stacks.get(&e.stack),
            Some(&path_of(i).as_slice()),
            "path of event {i}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_file(&out).unwrap();
}

/// A name given to a thread just after its `pthread_create`, before its
/// first stamp, when the kernel reused the tid of a thread that has
/// ended: it goes to the new thread, not to the old one (the latest to
/// start before the name, which it went to before).
#[test]
fn a_name_given_to_a_reused_tid_before_its_first_stamp_goes_to_the_new_thread() {
    let t = after_a_closed_thread("reused_tid_name", 4646, 400, 401, |dir, main| {
        // main creates a thread that gets tid 401 again and names it
        // before the new thread stamps its start.
        let (h2, args) = name_event(401, "fresh");
        assert!(main.push(h2, Some(args), &[]));
        std::thread::sleep(std::time::Duration::from_millis(2));
        let (mut new, _) = make_ring(dir, 4646, 401, 400, 64);
        assert!(new.push(
            head(Op::MutexLock, phase::DONE, 0x1000, 0x401000),
            None,
            &[]
        ));
        vec![new]
    });
    let mut with_tid: Vec<(u64, u32)> = t
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Thread(th) if th.tid == 401 => Some((th.start_ns, th.id)),
            _ => None,
        })
        .collect();
    with_tid.sort_unstable();
    assert_eq!(with_tid.len(), 2, "{with_tid:?}");
    let named: Vec<(u32, String)> = t
        .records
        .iter()
        .filter_map(|r| match r {
            Record::ThreadName(n) => Some((n.thread, n.name.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        named,
        vec![(with_tid[1].1, "fresh".to_string())],
        "threads {with_tid:?}"
    );
}

/// The closing summary counts a lock acquisition still blocked when the
/// recording ends (a program killed in a deadlock) with its wait so far,
/// and reads a timed-out condition wait
/// as the recorder encodes it (FAIL: the errno in `arg`, the mutex in
/// `arg2`) without taking the errno for a lock or the wait for a lock
/// wait.
#[test]
fn summary_counts_a_wait_still_open_at_the_end_and_no_errno_as_a_lock() {
    let dir = temp_dir("open-wait");
    let out = dir.with_extension("lstrace");
    let pid = 78;
    make_proc(&dir, pid, 0, 1, &["/bin/x"]);
    let (m, c, stuck) = (0x10, 0x30, 0x40);
    let etimedout = 110;
    let (mut p, _base) = make_ring(&dir, pid, 6, 0, 64);
    let t0 = std::time::Instant::now();
    p.push(head(Op::MutexLock, phase::DONE, m, 0x20), None, &[]);
    p.push(
        head(Op::CondTimedwait, phase::BEGIN, c, 0x21),
        Some((m, 0)),
        &[],
    );
    p.push(
        head(Op::CondTimedwait, phase::FAIL, c, 0x21),
        Some((etimedout, m)),
        &[],
    );
    p.push(head(Op::MutexUnlock, phase::DONE, m, 0x22), None, &[]);
    p.push(head(Op::MutexLock, phase::BEGIN, stuck, 0x23), None, &[]);
    let outcome = run_drain(&dir, &out, || {
        std::thread::sleep(std::time::Duration::from_millis(20));
    });
    let elapsed = t0.elapsed().as_nanos() as u64;
    let lock = |addr: u64| outcome.top_locks.iter().find(|l| l.addr == addr);
    assert!(lock(etimedout).is_none(), "{:?}", outcome.top_locks);
    let s = lock(stuck).expect("the lock still waited for");
    assert_eq!((s.acquisitions, s.contended, s.still_waiting), (0, 0, 1));
    // Blocked to the end of the recording, at least through most of the
    // 20 ms sleep (the events were written before the drain started its
    // clock, which starts the trace: their times are its start).
    assert!(
        s.wait_ns >= 10_000_000 && s.wait_ns <= elapsed,
        "{s:?} in {elapsed} ns"
    );
    let m = lock(m).expect("the mutex");
    assert_eq!((m.acquisitions, m.still_waiting, m.wait_ns), (1, 0, 0));
    let c = lock(c).expect("the condition variable");
    assert_eq!((c.still_waiting, c.wait_ns), (0, 0));
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_file(&out).unwrap();
}
