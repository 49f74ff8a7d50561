//! Coalescing of repeated identical accesses
//! (`LOCKSCOPE_COALESCE=1`): the trace holds one event plus one
//! `AccessRepeat` per run, and the analyses' answers do not change.

use crate::detailed_support;

use detailed_support::*;
use lockscope_format::{Op, Trace};

#[test]
fn repeats_are_recorded_once_with_a_count_and_deadwrites_agree() {
    for c in compilers() {
        let l = c.label;
        let dir = Scratch::new("repeats");
        let bin = dir.path("repeats");
        build_instrumented(c, &fixture("repeats.c"), &bin);
        let mut answers = Vec::new();
        for coalesce in ["0", "1"] {
            let trace = dir.path(&format!("t{coalesce}.lstrace"));
            record(
                &bin,
                &[],
                &trace,
                &[
                    ("LOCKSCOPE_ALL_ACCESSES", "1"),
                    ("LOCKSCOPE_COALESCE", coalesce),
                ],
            );
            let t = Trace::open(&trace).unwrap();
            let evs: Vec<_> = t.events.values().flatten().collect();
            let count = |op: Op| evs.iter().filter(|e| e.op == op as u8).count();
            let repeats: Vec<(u64, u64)> = evs
                .iter()
                .filter(|e| e.op == Op::AccessRepeat as u8)
                .map(|e| (e.arg, e.arg2))
                .collect();
            if coalesce == "0" {
                assert!(count(Op::Read) >= 1000, "{l}: {}", count(Op::Read));
                assert!(count(Op::Write) >= 1000, "{l}: {}", count(Op::Write));
                assert!(repeats.is_empty(), "{l}: {repeats:?}");
            } else {
                assert!(count(Op::Read) < 100, "{l}: {}", count(Op::Read));
                assert!(count(Op::Write) < 100, "{l}: {}", count(Op::Write));
                assert!(repeats.contains(&(999, 1)), "{l}: {repeats:?}");
                assert!(repeats.contains(&(999, 2)), "{l}: {repeats:?}");
            }
            let j = analysis_json("deadwrites", &trace);
            // clang unrolls the loop: several sites, one function.
            let (mut bytes, mut count) = (0, 0);
            for p in j["pairs"].as_array().unwrap() {
                assert_eq!(p["dead"]["function"], "store_out", "{l}: {j:#}");
                assert_eq!(p["killing"]["function"], "store_out", "{l}: {j:#}");
                bytes += p["bytes"].as_u64().unwrap();
                count += p["count"].as_u64().unwrap();
            }
            assert_eq!((bytes, count), (7992, 999), "{l}: {j:#}");
            answers.push((
                j["writes"].clone(),
                j["dead_bytes"].clone(),
                j["dead_writes"].clone(),
                j["bytes_written"].clone(),
            ));
        }
        assert_eq!(answers[0], answers[1], "{l}");
        assert_eq!(answers[0].0, 1000, "{l}");
        assert_eq!(answers[0].2, 999, "{l}");
    }
}
