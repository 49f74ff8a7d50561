//! `lockscope cc` / `c++` and the TSan-ABI runtime: instrumented programs
//! print exactly what uninstrumented ones print (recorded or not), and the
//! runtime records atomics, heap blocks and release values with their
//! exact values.

use crate::detailed_support;

use std::process::Command;

use detailed_support::*;
use lockscope_format::{Event, Op, Trace};

const FIXTURES: &[&str] = &[
    "ulcp_kinds.c",
    "pincs_fig1.c",
    "racy_counter.c",
    "cxx_inventory.cpp",
    "atomics.c",
];

#[test]
fn instrumented_programs_print_what_uninstrumented_ones_print() {
    for c in compilers() {
        for f in FIXTURES {
            let dir = Scratch::new("same");
            let src = fixture(f);
            let (plain, instr) = (dir.path("plain"), dir.path("instr"));
            build_plain(c, &src, &plain);
            build_instrumented(c, &src, &instr);
            let want = run(&plain, &[], &[]).stdout;
            let got = run(&instr, &[], &[]).stdout;
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&want),
                "{} {f}: outside lockscope record",
                c.label
            );
            let recorded = record(&instr, &[], &dir.path("t.lstrace"), &[]);
            assert_eq!(
                recorded,
                String::from_utf8_lossy(&want),
                "{} {f}: under lockscope record",
                c.label
            );
        }
    }
}

#[test]
fn compiler_queries_pass_through_unchanged() {
    for c in compilers() {
        let direct = Command::new(c.cc).arg("--version").output().unwrap();
        let wrapped = Command::new(lockscope())
            .args(["cc", "--version"])
            .env("LOCKSCOPE_CC", c.cc)
            .output()
            .unwrap();
        assert!(wrapped.status.success());
        assert_eq!(wrapped.stdout, direct.stdout, "{}", c.label);
        let direct = Command::new(c.cc).arg("-dumpmachine").output().unwrap();
        let wrapped = Command::new(lockscope())
            .args(["cc", "-dumpmachine"])
            .env("LOCKSCOPE_CC", c.cc)
            .output()
            .unwrap();
        assert_eq!(wrapped.stdout, direct.stdout, "{}", c.label);
    }
}

#[test]
fn compile_errors_are_reported_with_the_compilers_status() {
    let dir = Scratch::new("err");
    let src = dir.path("bad.c");
    std::fs::write(&src, "int main(void) { return undeclared; }\n").unwrap();
    let o = Command::new(lockscope())
        .arg("cc")
        .arg(&src)
        .arg("-o")
        .arg(dir.path("bad"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("undeclared"));
}

fn ops(evs: &[Event], op: Op) -> Vec<&Event> {
    evs.iter().filter(|e| e.op == op as u8).collect()
}

#[test]
fn runtime_records_atomics_heap_blocks_and_release_values() {
    for c in compilers() {
        let dir = Scratch::new("atomics");
        let bin = dir.path("atomics");
        build_instrumented(c, &fixture("atomics.c"), &bin);
        let trace = dir.path("t.lstrace");
        record(&bin, &[], &trace, &[]);
        let t = Trace::open(&trace).unwrap();
        assert_eq!(t.events.len(), 1, "{}: one thread", c.label);
        let evs = t.events.values().next().unwrap();
        let l = c.label;

        // 1000 fetch_add(1) on an 8-byte counter: old values 0..999.
        let adds = ops(evs, Op::AtomicFetchAdd);
        assert_eq!(adds.len(), 1000, "{l}");
        for (i, e) in adds.iter().enumerate() {
            assert_eq!(e.flags & 7, 3, "{l}: log2(8)");
            assert_eq!((e.arg, e.arg2), (i as u64, i as u64 + 1), "{l}");
            assert_eq!(e.flags >> 3 & 7, 5, "{l}: seq_cst");
        }
        assert!(adds.iter().all(|e| e.addr == adds[0].addr));
        // Compare-exchange: success 0 -> 1, then failure seeing 1.
        let cas = ops(evs, Op::AtomicCas);
        assert_eq!(cas.len(), 2, "{l}");
        assert_eq!(
            (cas[0].flags & 0x47, cas[0].arg, cas[0].arg2),
            (2, 0, 1),
            "{l}"
        );
        assert_eq!(
            (cas[1].flags & 0x47, cas[1].arg, cas[1].arg2),
            (0x42, 1, 1),
            "{l}"
        );
        let xchg = ops(evs, Op::AtomicExchange);
        assert_eq!(xchg.len(), 1);
        assert_eq!(
            (xchg[0].flags & 7, xchg[0].arg, xchg[0].arg2),
            (0, 0, 7),
            "{l}"
        );
        let st = ops(evs, Op::AtomicStore);
        assert_eq!(st.len(), 1);
        assert_eq!((st[0].flags & 7, st[0].arg, st[0].arg2), (1, 0, 300), "{l}");
        // Atomics carry their call path (the shadow stack), whose first
        // frame is the site.
        let stacks = t.call_paths();
        let path = &stacks[&adds[0].stack];
        assert_eq!(path[0], adds[0].site, "{l}");

        // Heap blocks of 24 and 100 (realloc'd to 200) bytes, each
        // freed after its allocation (realloc frees the old block, maybe at
        // the same address). The 4096-byte block is not checked: clang may
        // see through it (memset, copy, free) and drop it.
        let freed_after = |a: &Event| {
            let i = evs.iter().position(|e| e == a).unwrap();
            evs[i..]
                .iter()
                .any(|e| e.op == Op::Free as u8 && e.addr == a.addr)
        };
        let allocs = ops(evs, Op::Alloc);
        for size in [24, 100, 200] {
            let v: Vec<&&Event> = allocs.iter().filter(|e| e.arg == size).collect();
            assert_eq!(v.len(), 1, "{l}: one block of {size}");
            assert!(freed_after(v[0]), "{l}: block of {size} freed");
        }

        // `total` is written with 5 then 6 inside the critical section:
        // its value at release is 6.
        let total = ops(evs, Op::ReleaseValue)
            .into_iter()
            .find(|e| e.flags == 8 && e.arg == 6)
            .unwrap_or_else(|| panic!("{l}: no release value 6"));
        // Two stores in a row may be one `Write` and one coalesced repeat
        // (`AccessRepeat`, kind 2: coalescing is on by default).
        let writes = ops(evs, Op::Write)
            .into_iter()
            .filter(|e| e.addr == total.addr)
            .count() as u64
            + ops(evs, Op::AccessRepeat)
                .into_iter()
                .filter(|e| e.addr == total.addr && e.arg2 == 2)
                .map(|e| e.arg)
                .sum::<u64>();
        assert_eq!(writes, 2, "{l}: two writes of total");
        assert!(ops(evs, Op::ReleaseValue)
            .iter()
            .all(|e| e.addr != total.addr || e.arg == 6));
        // No access is recorded outside the critical section by default.
        let lock_at = evs
            .iter()
            .position(|e| e.op == Op::MutexLock as u8)
            .unwrap();
        let unlock_at = evs
            .iter()
            .position(|e| e.op == Op::MutexUnlock as u8)
            .unwrap();
        for (i, e) in evs.iter().enumerate() {
            if e.op == Op::Read as u8 || e.op == Op::Write as u8 {
                assert!(
                    i > lock_at && i < unlock_at,
                    "{l}: access outside the section"
                );
            }
        }
    }
}
