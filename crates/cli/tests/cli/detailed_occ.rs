//! `lockscope occ` on the PinCS Fig. 1 program: the data-access model must
//! equal the ground truth the program computes from its logged order.

use crate::detailed_support;

use detailed_support::*;

#[test]
fn pincs_fig1_access_model_matches_ground_truth() {
    for c in compilers() {
        let dir = Scratch::new("occ");
        let bin = dir.path("pincs_fig1");
        build_instrumented(c, &fixture("pincs_fig1.c"), &bin);
        let (trace, tf) = (dir.path("t.lstrace"), dir.path("truth.txt"));
        record(&bin, &[&tf], &trace, &[]);
        let truth = truth(&tf);
        let j = analysis_json("occ", &trace);
        assert_eq!(j["schema"], "lockscope.occ/1");
        // The rwlock is the static `lock` (locks taken inside the C library,
        // if any, are other sections).
        let s = j["sections"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "lock")
            .unwrap_or_else(|| panic!("{}: no section for `lock`: {j:#}", c.label));
        assert_eq!(s["key"], "lock");
        assert_eq!(
            s["instances"].as_u64().unwrap().to_string(),
            truth["sections"]
        );
        for f in [
            "rdops",
            "wrops",
            "rdwr_locs",
            "rd_locs",
            "rdwr_cachelines",
            "rd_cachelines",
            "pair_conflict",
            "intersect_locs",
            "intersect_cachelines",
        ] {
            let want: f64 = truth[f].parse().unwrap();
            let got = s[f].as_f64().unwrap();
            assert!(
                (got - want).abs() < 1e-6,
                "{} {f}: got {got}, want {want}",
                c.label
            );
        }
        // Conflicts only through `shared`, false sharing on the array.
        assert_eq!(s["intersect_locs"].as_f64().unwrap(), 1.0);
        assert!(s["intersect_cachelines"].as_f64().unwrap() > 1.0);
        let threads = s["threads"].as_array().unwrap();
        assert_eq!(threads.len(), 3);
        for t in threads {
            assert_eq!(t["x_acq"].as_u64().unwrap(), 300);
            assert_eq!(t["s_acq"].as_u64().unwrap(), 0);
            for f in ["frac_wait", "frac_cs"] {
                let v = t[f].as_f64().unwrap();
                assert!((0.0..=1.0).contains(&v), "{f} = {v}");
            }
            assert!(t["frac_cs"].as_f64().unwrap() > 0.0);
        }
        let p = s["conflict_prob"].as_f64().unwrap();
        let (pc, w) = (
            s["pair_conflict"].as_f64().unwrap(),
            s["waits"].as_f64().unwrap(),
        );
        assert!((p - (1.0 - (1.0 - pc).powf(w))).abs() < 1e-12);
        let eff = j["max_occ_efficiency"].as_f64().unwrap();
        let best = j["best_case_speedup"].as_f64().unwrap();
        assert!((best - 1.0 / (1.0 - eff)).abs() < 1e-9);
        // Text output in the layout of the paper's Fig. 1.
        let text = analysis_text("occ", &trace);
        for needle in [
            "rdops",
            "rdwr cachelines",
            "conflict prob",
            "intersect locs",
            "x_acq 300",
            "Max OCC efficiency is",
            "Best case speedup is",
        ] {
            assert!(text.contains(needle), "{needle}: {text}");
        }
    }
}
