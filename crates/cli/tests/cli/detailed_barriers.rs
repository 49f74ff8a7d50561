//! `lockscope barriers` on a phase program whose second barrier is
//! redundant by construction and whose first is not.

use crate::detailed_support;

use detailed_support::*;
use std::path::Path;

#[test]
fn barriers_redundant_by_context_and_last_arriver() {
    for c in compilers() {
        let dir = Scratch::new("barriers");
        let bin = dir.path("barrier_phases");
        build_instrumented(c, &fixture("barrier_phases.c"), &bin);
        let trace = dir.path("all.lstrace");
        record(&bin, &[], &trace, &[("LOCKSCOPE_ALL_ACCESSES", "1")]);
        let j = analysis_json("barriers", &trace);
        let l = c.label;
        assert_eq!(j["schema"], "lockscope.barriers/1");
        assert_eq!(
            (j["instances"].as_u64(), j["redundant"].as_u64()),
            (Some(8), Some(4)),
            "{l}: {j:#}"
        );
        let bs = j["barriers"].as_array().unwrap();
        assert_eq!(bs.len(), 1, "{l}: {j:#}");
        let b = &bs[0];
        assert_eq!(b["barrier"], "bar");
        assert_eq!(b["participants"], 3);
        let mut ctx: Vec<(String, u64, u64)> = b["contexts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["function"].as_str().unwrap().to_string(),
                    c["instances"].as_u64().unwrap(),
                    c["redundant"].as_u64().unwrap(),
                )
            })
            .collect();
        ctx.sort();
        assert_eq!(
            ctx,
            vec![
                ("sync_inputs".to_string(), 4, 0),
                ("sync_outputs".to_string(), 4, 4)
            ],
            "{l}: {j:#}"
        );
        // Every needed instance names the dependence through `in`.
        for i in b["instance_list"].as_array().unwrap() {
            if i["redundant"] == false {
                let dep = i["dependence"].as_str().unwrap();
                assert!(dep.contains(" wrote in"), "{l}: {dep}");
                assert!(dep.ends_with(" reads it after"), "{l}: {dep}");
            }
        }
        // Worker 2 arrives last at every sync_inputs.
        let at_inputs: Vec<&serde_json::Value> = b["last_arrivers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["site"].as_str().unwrap().starts_with("sync_inputs "))
            .collect();
        assert_eq!(at_inputs.len(), 1, "{l}: {j:#}");
        assert_eq!(at_inputs[0]["instances"], 4, "{l}: {j:#}");
        assert!(at_inputs[0]["wait_caused_ns"].as_u64().unwrap() > 0);
        let text = analysis_text("barriers", &trace);
        assert!(
            text.contains("always redundant here: elide this call"),
            "{l}: {text}"
        );
    }
}

/// A barrier made of a mutex, a condition variable and a counter
/// (`handmade_barrier.c`) is recognised with exactly its instances, and
/// judged like the pthread one; `done_cond`, signalled rather than
/// broadcast, is not taken for a barrier.
#[test]
fn hand_made_barrier_recognised_with_exact_instances() {
    for c in compilers() {
        let dir = Scratch::new("handmade_barrier");
        let bin = dir.path("handmade_barrier");
        build_instrumented(c, &fixture("handmade_barrier.c"), &bin);
        let trace = dir.path("all.lstrace");
        record(&bin, &[], &trace, &[("LOCKSCOPE_ALL_ACCESSES", "1")]);
        let j = analysis_json("barriers", &trace);
        let l = c.label;
        assert_eq!(
            (j["instances"].as_u64(), j["redundant"].as_u64()),
            (Some(8), Some(4)),
            "{l}: {j:#}"
        );
        let bs = j["barriers"].as_array().unwrap();
        assert_eq!(bs.len(), 1, "{l}: {j:#}");
        let b = &bs[0];
        assert_eq!(b["barrier"], "bar", "{l}: {j:#}");
        assert_eq!(b["kind"], "mutex+condvar", "{l}: {j:#}");
        assert_eq!(b["participants"], 3, "{l}: {j:#}");
        let mut ctx: Vec<(String, u64, u64)> = b["contexts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["function"].as_str().unwrap().to_string(),
                    c["instances"].as_u64().unwrap(),
                    c["redundant"].as_u64().unwrap(),
                )
            })
            .collect();
        ctx.sort();
        assert_eq!(
            ctx,
            vec![
                ("sync_inputs".to_string(), 4, 0),
                ("sync_outputs".to_string(), 4, 4)
            ],
            "{l}: {j:#}"
        );
        for i in b["instance_list"].as_array().unwrap() {
            assert_eq!(i["waits"].as_array().unwrap().len(), 3, "{l}: {i:#}");
            if i["redundant"] == false {
                let dep = i["dependence"].as_str().unwrap();
                assert!(dep.contains(" wrote in"), "{l}: {dep}");
            }
        }
        // Worker 2 arrives last (broadcasts) at every sync_inputs.
        let at_inputs: Vec<&serde_json::Value> = b["last_arrivers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["site"].as_str().unwrap().starts_with("sync_inputs "))
            .collect();
        assert_eq!(at_inputs.len(), 1, "{l}: {j:#}");
        assert_eq!(at_inputs[0]["instances"], 4, "{l}: {j:#}");
        let text = analysis_text("barriers", &trace);
        assert!(text.contains("mutex + condition variable"), "{l}: {text}");
        assert!(
            text.contains("elide the barrier call at sync_outputs"),
            "{l}: {text}"
        );
    }
}

/// In a default-mode trace (accesses inside critical sections only)
/// redundancy cannot be decided: `barriers` and `report` say so and give
/// no redundancy count, which read as "every barrier is needed" on PARSEC
/// fluidanimate's trace.
#[test]
fn barriers_in_a_default_mode_trace_say_undecided_not_zero_redundant() {
    let c = compilers()[0];
    let dir = Scratch::new("barriers_default");
    let bin = dir.path("barrier_phases");
    build_instrumented(c, &fixture("barrier_phases.c"), &bin);
    let trace = dir.path("default.lstrace");
    record(&bin, &[], &trace, &[]);
    let j = analysis_json("barriers", &trace);
    assert_eq!(j["instances"].as_u64(), Some(8), "{j:#}");
    for sub in ["barriers", "report"] {
        let text = analysis_text(sub, &trace);
        assert!(text.contains("redundancy undecided"), "{sub}: {text}");
        // No "N redundant": the note saying why may use the word.
        let words: Vec<&str> = text.split_whitespace().collect();
        let counted = words
            .windows(2)
            .any(|w| w[0].parse::<u64>().is_ok() && w[1].starts_with("redundant"));
        assert!(!counted, "{sub}: {text}");
    }
}

/// OpenMP (GCC's libgomp; clang's `-fopenmp` needs LLVM's runtime, which
/// the hooks do not cover): ten regions of three threads, each with a
/// `#pragma omp barrier` and the barrier at the region's end, neither
/// ordering a dependence by itself (each thread writes its own slot, read
/// by the main thread after the region). The explicit barrier is advised
/// for elision; the region's end, the team's join, never is.
#[test]
fn openmp_region_end_is_never_advised_for_elision() {
    let c = compilers()[0];
    let dir = Scratch::new("omp-barriers");
    let bin = dir.path("omp_regions");
    let src = lockscope_test_support::workspace_root().join("tests/programs/omp_regions.c");
    build_instrumented_with(c, &src, &bin, &["-fopenmp"]);
    let trace = dir.path("all.lstrace");
    record(&bin, &[], &trace, &[("LOCKSCOPE_ALL_ACCESSES", "1")]);
    let j = analysis_json("barriers", &trace);
    let bs = j["barriers"].as_array().unwrap();
    assert_eq!(bs.len(), 1, "{j:#}");
    let b = &bs[0];
    assert_eq!(b["barrier"], "main._omp_fn.0", "{j:#}");
    assert_eq!(b["kind"], "openmp", "{j:#}");
    assert_eq!(
        (b["instances"].as_u64(), b["participants"].as_u64()),
        (Some(20), Some(3))
    );
    let ctx = b["contexts"].as_array().unwrap();
    assert_eq!(ctx.len(), 2, "{j:#}");
    let end = ctx
        .iter()
        .find(|c| c["region_end"] == true)
        .expect("the region's end");
    let explicit = ctx
        .iter()
        .find(|c| c["region_end"].is_null())
        .expect("the explicit barrier");
    assert_eq!(end["instances"], 10);
    assert_eq!(explicit["instances"], 10);
    assert!(
        explicit["site"]
            .as_str()
            .unwrap()
            .contains("omp_regions.c:"),
        "{j:#}"
    );
    let text = analysis_text("barriers", &trace);
    let elide: Vec<&str> = text.lines().filter(|l| l.contains("elide")).collect();
    assert!(
        !elide.is_empty()
            && elide
                .iter()
                .all(|l| l.contains(explicit["site"].as_str().unwrap())),
        "{text}"
    );
    assert!(text.contains("its join): not removable"), "{text}");
    // The last arriver at the region's end is blamed for the region's work.
    assert!(
        text.contains("balance the work of the parallel region started at main"),
        "{text}"
    );
}

/// OpenMP critical sections and locks in detailed mode: the hooks linked
/// into the instrumented program find libgomp's functions past the
/// preload library's (looked up by symbol version; a plain lookup found
/// the preload library's GOMP_critical_start, not libgomp's, and the
/// critical sections went unrecorded), and each lock's sections, with the
/// accesses inside them, reach the analyses: every pair of consecutive
/// sections from different threads touches the lock's one counter, so
/// ulcp finds only conflicts, on all four locks.
#[test]
fn openmp_critical_sections_reach_the_detailed_analyses() {
    let c = compilers()[0];
    let dir = Scratch::new("omp-locks");
    let bin = dir.path("omp_locks");
    let src = lockscope_test_support::workspace_root().join("tests/programs/omp_locks.c");
    build_instrumented_with(c, &src, &bin, &["-fopenmp", "-ldl"]);
    let trace = dir.path("d.lstrace");
    let out = record(&bin, &[Path::new("500")], &trace, &[]);
    assert!(
        out.contains("threads 3 sums 285000 285000 285000 285000"),
        "{out}"
    );
    let j = analysis_json("ulcp", &trace);
    let locks = j["locks"].as_array().expect("ulcp locks");
    let mut names: Vec<&str> = locks.iter().map(|l| l["name"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            ".gomp_critical_user_tally",
            "GOMP_critical_start",
            "set_lk",
            "test_lk"
        ],
        "{j:#}"
    );
    for l in locks {
        // 3 threads x 500 sections of each lock.
        assert_eq!(l["sections"], 1500, "{l:#}");
        let p = &l["pairs"];
        for kind in ["null_lock", "read_read", "disjoint_write", "benign"] {
            assert_eq!(p[kind], 0, "{kind}: {l:#}");
        }
    }
}
