//! `lockscope deadwrites` on a fixture with exactly known dead writes
//! (as in DeadSpy): partial overlaps of different widths, and a write killed
//! by another thread across a barrier.

use crate::detailed_support;

use detailed_support::*;

fn fname(c: &serde_json::Value) -> String {
    c["function"].as_str().unwrap().to_string()
}

#[test]
fn deadwrites_exact_bytes_pairs_and_threads() {
    for c in compilers() {
        let dir = Scratch::new("deadwrites");
        let bin = dir.path("deadwrites");
        build_instrumented(c, &fixture("deadwrites.c"), &bin);
        let trace = dir.path("all.lstrace");
        record(&bin, &[], &trace, &[("LOCKSCOPE_ALL_ACCESSES", "1")]);
        let j = analysis_json("deadwrites", &trace);
        let l = c.label;
        assert_eq!(j["schema"], "lockscope.deadwrites/1");
        assert_eq!(j["all_accesses"], true, "{l}");
        assert_eq!(j["writes"], 9, "{l}: {j:#}");
        assert_eq!(j["bytes_written"], 58, "{l}: {j:#}");
        assert_eq!(j["dead_bytes"], 26, "{l}: {j:#}");
        assert_eq!(j["dead_writes"], 5, "{l}: {j:#}");
        assert_eq!(j["cross_thread_dead_bytes"], 8, "{l}: {j:#}");
        let mut pairs: Vec<(String, String, u64, u64, u64)> = j["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    fname(&p["dead"]),
                    fname(&p["killing"]),
                    p["bytes"].as_u64().unwrap(),
                    p["count"].as_u64().unwrap(),
                    p["cross_thread_bytes"].as_u64().unwrap(),
                )
            })
            .collect();
        pairs.sort();
        let p = |d: &str, k: &str, b, n, x| (d.to_string(), k.to_string(), b, n, x);
        assert_eq!(
            pairs,
            vec![
                p("fill_u", "clear_hi", 4, 1, 0),
                p("fill_u", "patch_lo", 4, 1, 0),
                p("init_a", "reset_a", 8, 1, 0),
                p("patch_lo", "patch_s1", 2, 1, 0),
                p("put_x", "overwrite_x", 8, 1, 8),
            ],
            "{l}: {j:#}"
        );
        let top = &j["dead_sites"][0];
        assert_eq!(fname(&top["context"]), "fill_u", "{l}: {j:#}");
        assert_eq!(
            (top["bytes"].as_u64(), top["count"].as_u64()),
            (Some(8), Some(2))
        );
        let text = analysis_text("deadwrites", &trace);
        assert!(
            text.contains("26 of 58 bytes written were overwritten before any read"),
            "{l}: {text}"
        );
    }
}
