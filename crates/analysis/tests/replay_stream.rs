//! The streaming replay (actions spilled to a temporary file,
//! read back per thread) gives exactly the results of the in-memory one,
//! on recorded fixtures and on a synthetic trace large enough to span many
//! spill blocks, with more threads than CPUs (so the CPU-share
//! conversion, computed by a merge when streaming and by a sort in
//! memory, matters).

mod common;

use std::path::Path;

use common::*;
use lockscope_format::Op;
use lockscope_replay::replay::{self, Program, Scenario};
use lockscope_trace::input;

fn both(path: &Path) -> (Program, Program) {
    let meta = input::index(path, &mut |_, _| {}).unwrap();
    let spilled = replay::build(path, &meta).unwrap();
    let mem = replay::build_in_memory(path, &meta).unwrap();
    (spilled, mem)
}

fn assert_same(path: &Path) {
    let (s, m) = both(path);
    assert!(s.spilled_bytes() > 0, "{}: nothing spilled", path.display());
    assert_eq!(m.spilled_bytes(), 0);
    assert_eq!(s.threads.len(), m.threads.len());
    assert_eq!(s.action_count(), m.action_count());
    assert!(s.action_count() > 0);
    assert_eq!(s.turns, m.turns);
    for t in 0..s.threads.len() {
        let a: Vec<_> = s.actions(t).collect();
        let b: Vec<_> = m.actions(t).collect();
        assert_eq!(a.len(), b.len(), "thread {t}: action count");
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert_eq!(x, y, "{}: thread {t}, action {i}", path.display());
        }
    }
    let mut scenarios = vec![
        Scenario::default(),
        Scenario {
            keep_overhead: true,
            ..Scenario::default()
        },
    ];
    if !s.locks.is_empty() {
        scenarios.push(Scenario {
            remove_locks: vec![0],
            ..Scenario::default()
        });
    }
    if !s.sections.is_empty() {
        scenarios.push(Scenario {
            shrink: vec![(0, 50)],
            readers: vec![s.sections.len() as u32 - 1],
            ..Scenario::default()
        });
    }
    for sc in &scenarios {
        for cpus in [1, 2, 4] {
            let a = replay::simulate(&s, cpus, sc);
            let b = replay::simulate(&m, cpus, sc);
            let what = format!("{} on {cpus} CPUs, {sc:?}", path.display());
            assert_eq!(a.wall_ns, b.wall_ns, "{what}");
            assert_eq!(a.ends, b.ends, "{what}");
            assert_eq!(a.lock_wait, b.lock_wait, "{what}");
            assert_eq!(a.lock_wait_by_lock, b.lock_wait_by_lock, "{what}");
            assert_eq!(a.forced, b.forced, "{what}");
        }
    }
    assert!(s.take_error().is_none());
    let (ra, rb) = (
        replay::report(&s, 0).unwrap(),
        replay::report(&m, 0).unwrap(),
    );
    assert_eq!(
        serde_json::to_string(&ra).unwrap(),
        serde_json::to_string(&rb).unwrap()
    );
    // Built and replayed in one go, the simulations reading the work of
    // the compute actions while the pass writing it still runs: the same.
    let meta = input::index(path, &mut |_, _| {}).unwrap();
    for cpus in [0, 1, 3] {
        let (p, rc) = replay::build_and_report(path, &meta, cpus).unwrap();
        assert_eq!(p.overhead_ns, m.overhead_ns, "{}", path.display());
        assert_eq!(
            serde_json::to_string(&rc).unwrap(),
            serde_json::to_string(&replay::report(&m, cpus).unwrap()).unwrap(),
            "{} on {cpus} CPUs",
            path.display()
        );
    }
}

#[test]
fn streaming_replay_matches_in_memory_on_recorded_fixtures() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden");
    let mut n = 0;
    for e in std::fs::read_dir(&root).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "lstrace") {
            assert_same(&p);
            n += 1;
        }
    }
    assert!(n >= 2, "recorded fixtures under {}", root.display());
}

/// xorshift64*: deterministic.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

#[test]
fn streaming_replay_matches_in_memory_on_a_synthetic_trace() {
    // 5 threads on 2 CPUs, 3 mutexes and a reader-writer lock, contended
    // (a thread that wants a held lock waits for its release), ~150 000
    // events: dozens of 32 KiB spill blocks per thread.
    const THREADS: u32 = 5;
    let mut tb = Tb::new();
    tb.chunk = 4096;
    tb.overhead(10.0, 10.0, 10.0);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut free_at = [0u64; 4];
    let mut next: Vec<u64> = (0..THREADS).map(|t| 1_000 + 37 * u64::from(t)).collect();
    let mut n = 0;
    while n < 150_000 {
        let (ti, &want) = next.iter().enumerate().min_by_key(|x| x.1).unwrap();
        let t = ti as u32 + 1;
        let k = rng.below(4) as usize;
        let addr = 0x1000 + 0x40 * k as u64;
        let site = 0x4000 + 0x10 * (k as u64) + 0x100 * (rng.below(2));
        let (lock, unlock, flags) = if k == 3 {
            let rd = rng.below(4) != 0;
            (
                if rd { Op::RwRdlock } else { Op::RwWrlock },
                Op::RwUnlock,
                DONE,
            )
        } else {
            (Op::MutexLock, Op::MutexUnlock, DONE)
        };
        let got = if want < free_at[k] {
            tb.ev(t, want, lock, BEGIN, addr, site);
            tb.ev(t, free_at[k] + 40, lock, CONT, addr, site);
            n += 2;
            free_at[k] + 40
        } else {
            tb.ev(t, want, lock, flags, addr, site);
            n += 1;
            want
        };
        // Detailed-mode accesses inside the section, 40 ns apart: the
        // access-cost estimate and its correction are exercised too.
        let reads = rng.below(4);
        for j in 0..reads {
            tb.ev(t, got + 10 + 40 * j, Op::Read, 0, 0x9000 + 8 * j, site + 4);
            n += 1;
        }
        let rel = got + 50 + 40 * reads + rng.below(400);
        tb.ev(t, rel, unlock, DONE, addr, site + 0x8);
        n += 1;
        free_at[k] = rel;
        next[ti] = rel + 100 + rng.below(900);
    }
    let end = next.iter().copied().max().unwrap();
    for t in 1..=THREADS {
        tb.thread(t, &format!("w{t}"), 0, end);
    }
    let path = tb.write();
    assert_same(&path);
    let meta = input::index(&path, &mut |_, _| {}).unwrap();
    let p = replay::build(&path, &meta).unwrap();
    assert_eq!(p.access_ns, 40, "back-to-back accesses are 40 ns apart");
    // Every access is at most 40 ns after the step before it: with the
    // estimated cost removed, no work is left before any of them.
    let mut n = 0;
    for t in 0..p.threads.len() {
        for a in p.actions(t) {
            if let replay::Action::Compute {
                ns, access: true, ..
            } = a
            {
                assert_eq!(ns, 0, "thread {t}: {a:?}");
                n += 1;
            }
        }
    }
    assert!(n > 1000, "{n} computes ended at an access");
}
