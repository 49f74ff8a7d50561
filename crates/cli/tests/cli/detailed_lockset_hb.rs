//! `lockscope lockset` with happens-before: create, join and
//! barrier crossings hand data over without sharing it.

use crate::detailed_support;

use detailed_support::*;

#[test]
fn variable_written_under_lock_read_after_join_is_not_flagged() {
    for c in compilers() {
        let dir = Scratch::new("lockset-hb");
        let bin = dir.path("join_handoff");
        build_instrumented(c, &fixture("join_handoff.c"), &bin);
        let trace = dir.path("all.lstrace");
        record(&bin, &[], &trace, &[("LOCKSCOPE_ALL_ACCESSES", "1")]);
        let j = analysis_json("lockset", &trace);
        let unprotected: Vec<&str> = j["unprotected"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u["data"].as_str().unwrap())
            .collect();
        assert_eq!(unprotected, ["racy"], "{}: {j:#}", c.label);
        let protected = j["protected"].as_array().unwrap();
        assert_eq!(protected.len(), 1, "{}: {j:#}", c.label);
        assert_eq!(protected[0]["lock"], "m");
        assert_eq!(protected[0]["data"], serde_json::json!(["total"]));
        let s = &j["states"];
        assert_eq!(
            (
                s["exclusive"].as_u64(),
                s["shared"].as_u64(),
                s["shared_modified"].as_u64(),
                s["handed_off"].as_u64()
            ),
            (Some(8), Some(1), Some(0), Some(9)),
            "{}: {j:#}",
            c.label
        );
    }
}
