//! `lockscope lockset` on the fixture with an unprotected counter.

use crate::detailed_support;

use detailed_support::*;

#[test]
fn lockset_finds_the_protected_data_and_the_unprotected_counter() {
    for c in compilers() {
        let dir = Scratch::new("lockset");
        let bin = dir.path("racy_counter");
        build_instrumented(c, &fixture("racy_counter.c"), &bin);
        let trace = dir.path("all.lstrace");
        record(&bin, &[], &trace, &[("LOCKSCOPE_ALL_ACCESSES", "1")]);
        let j = analysis_json("lockset", &trace);
        assert_eq!(j["schema"], "lockscope.lockset/1");
        assert_eq!(j["all_accesses"], true);
        let protected = j["protected"].as_array().unwrap();
        assert_eq!(protected.len(), 1, "{}: {j:#}", c.label);
        assert_eq!(protected[0]["lock"], "m");
        let data: Vec<&str> = protected[0]["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_str().unwrap())
            .collect();
        assert_eq!(
            data,
            ["heap make_table<-main", "protected_total", "table"],
            "{}",
            c.label
        );
        let unprotected = j["unprotected"].as_array().unwrap();
        assert_eq!(unprotected.len(), 1, "{}: {j:#}", c.label);
        assert_eq!(unprotected[0]["data"], "racy_hits");
        let sites: Vec<&str> = unprotected[0]["sites"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        assert!(
            sites
                .iter()
                .any(|s| s.starts_with("worker (racy_counter.c:")),
            "{}: {sites:?}",
            c.label
        );

        // Without the outside accesses the race cannot be seen, and the
        // report says why.
        let trace = dir.path("cs.lstrace");
        record(&bin, &[], &trace, &[]);
        let j = analysis_json("lockset", &trace);
        assert_eq!(j["all_accesses"], false);
        assert_eq!(j["unprotected"].as_array().unwrap().len(), 0);
        assert!(j["notes"][0]
            .as_str()
            .unwrap()
            .contains("lockscope record --all-accesses"));
    }
}
