//! `lockscope locks bench` and `lockscope locks list`: the JSON and table
//! outputs carry one run per (lock, waiting policy, thread count, critical
//! section) with throughput and per-thread shares.

use std::process::Command;

fn lockscope(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn bench_json_has_one_consistent_run_per_configuration() {
    let o = lockscope(&[
        "locks",
        "bench",
        "--json",
        "--threads",
        "1,3",
        "--duration-ms",
        "20",
        "--algorithms",
        "mcs,pthread,ahmcs",
        "--wait",
        "spin-then-park",
        "--cs",
        "both",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
    assert_eq!(doc["schema"], "lockscope-locks-bench/1");
    let runs = doc["results"].as_array().unwrap();
    // 3 locks x 2 thread counts x 2 critical sections.
    assert_eq!(runs.len(), 12);
    for r in runs {
        let threads = r["threads"].as_u64().unwrap() as usize;
        let per: Vec<u64> = r["per_thread"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(per.len(), threads);
        assert_eq!(per.iter().sum::<u64>(), r["acquisitions"].as_u64().unwrap());
        let shares: f64 = r["shares"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .sum();
        assert!((shares - 1.0).abs() < 1e-6, "{r}");
        assert_eq!(r["consistent"], true);
        assert!(r["mops"].as_f64().unwrap() > 0.0);
        // The fields of schema lockscope-locks-bench/1, which the CLI
        // writes by hand since the locks crate has no serde.
        let cs = r["critical_section"].as_str().unwrap();
        assert!(cs == "empty" || cs == "nonempty", "{r}");
        for key in ["seconds", "min_share_ratio", "max_share_ratio", "jain"] {
            assert!(r[key].as_f64().is_some(), "{key} missing in {r}");
        }
        let wait = r["wait"].as_str().unwrap();
        assert!(
            wait == "spin-then-park" || (r["algorithm"] == "pthread" && wait == "futex"),
            "{r}"
        );
    }
}

#[test]
fn bench_table_and_list_and_errors() {
    let o = lockscope(&[
        "locks",
        "bench",
        "--threads",
        "2",
        "--duration-ms",
        "10",
        "--algorithms",
        "tas",
        "--cs",
        "empty",
    ]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("Mops/s") && out.contains("jain"), "{out}");
    // tas x 2 policies = 2 rows after the two header lines.
    assert_eq!(
        out.lines().filter(|l| l.starts_with("empty")).count(),
        2,
        "{out}"
    );

    let o = lockscope(&["locks", "bench", "--algorithms", "foo"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("foo") && err.contains("ahmcs") && err.contains("pthread"),
        "{err}"
    );
    let o = lockscope(&["locks", "bench", "--threads", "0"]);
    assert_eq!(o.status.code(), Some(2));

    let o = lockscope(&["locks", "list"]);
    let out = String::from_utf8_lossy(&o.stdout);
    for name in [
        "tas", "ttas", "ticket", "mcs", "clh", "cmcs", "hmcs", "ahmcs", "HMCS<",
    ] {
        assert!(out.contains(name), "{out}");
    }
}
