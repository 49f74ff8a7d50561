//! `lockscope import` / `export --format hwtrace`: a detailed-mode trace
//! exported and imported back gives the same `spin` result; the Table II
//! example of docs/hwtrace.md imports and shows its lock; bad input is
//! refused with file, line and column.

use crate::detailed_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use detailed_support::*;
use serde_json::Value;

fn spin_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/programs/spin")
        .join(name)
}

fn ok(cmd: &mut Command) -> String {
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `spin --json --no-symbols`, without what an import cannot keep: symbol
/// tables (site names) and trace thread ids (threads are compared by tid).
fn spin_result(trace: &Path) -> Value {
    let out = ok(Command::new(lockscope())
        .args(["spin", "--json", "--no-symbols"])
        .arg(trace));
    let mut j: Value = serde_json::from_str(&out).unwrap();
    for l in j["spinlocks"].as_array_mut().unwrap() {
        for t in l["threads"].as_array_mut().unwrap() {
            t.as_object_mut().unwrap().remove("thread");
        }
        l["threads"]
            .as_array_mut()
            .unwrap()
            .sort_by_key(|t| t["tid"].as_u64());
        for s in l["sites"].as_array_mut().unwrap() {
            s.as_object_mut().unwrap().remove("site");
        }
    }
    for u in j["unprotected"].as_array_mut().unwrap() {
        u.as_object_mut().unwrap().remove("sites");
    }
    j
}

#[test]
fn import_of_export_gives_the_same_spin_result() {
    for c in compilers() {
        for (fixture, env) in [
            ("spinlocks.c", &[("LOCKSCOPE_ALL_ACCESSES", "1")][..]),
            ("decoys.c", &[][..]),
            ("sleepy_holder.c", &[][..]),
            ("cxx_flag.cpp", &[("LOCKSCOPE_ALL_ACCESSES", "1")][..]),
            ("volatile_release.c", &[("LOCKSCOPE_ALL_ACCESSES", "1")][..]),
        ] {
            let dir = Scratch::new("spin-rt");
            let bin = dir.path("prog");
            build_instrumented(c, &spin_fixture(fixture), &bin);
            let trace = dir.path("t.lstrace");
            record(&bin, &[], &trace, env);
            let csv = dir.path("t.csv");
            ok(Command::new(lockscope())
                .args(["export", "--format", "hwtrace", "-o"])
                .arg(&csv)
                .arg(&trace));
            let back = dir.path("back.lstrace");
            ok(Command::new(lockscope())
                .args(["import", "--format", "hwtrace"])
                .arg(&csv)
                .arg("-o")
                .arg(&back));
            let a = spin_result(&trace);
            let b = spin_result(&back);
            assert!(
                !a["spinlocks"].as_array().unwrap().is_empty()
                    || !a["rejected"].as_array().unwrap().is_empty(),
                "{}/{fixture}: nothing found: {a:#}",
                c.label
            );
            assert_eq!(a, b, "{}/{fixture}", c.label);
            // Export also writes to standard output.
            let text = ok(Command::new(lockscope())
                .args(["export", "--format", "hwtrace"])
                .arg(&trace));
            assert_eq!(text, std::fs::read_to_string(&csv).unwrap());
        }
    }
}

#[test]
fn table_ii_example_imports() {
    let dir = Scratch::new("spin-table2");
    let out = dir.path("t.lstrace");
    ok(Command::new(lockscope())
        .args(["import", "--format", "hwtrace", "--clock-hz", "200M"])
        .arg(spin_fixture("table2.tsv"))
        .arg("-o")
        .arg(&out));
    let j = analysis_json("spin", &out);
    assert_eq!(j["spinlocks"].as_array().unwrap().len(), 1, "{j:#}");
    let l = &j["spinlocks"][0];
    assert_eq!(l["address"], "0x70000030");
    assert_eq!(l["kind"], "ttas");
    assert_eq!(l["acquisitions"], 2);
    assert_eq!(l["releases"], 2);
    assert_eq!(l["failed_attempts"], 2);
    // cycles at 200 MHz: 5 ns each (the numbers are worked out in
    // docs/hwtrace.md).
    assert_eq!(l["wait_ns"], (16 + 10) * 5);
    assert_eq!(l["hold_ns"], (13 + 12) * 5);
    assert_eq!(l["protects"], serde_json::json!(["0x70000040"]));
    let names: Vec<&str> = l["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["udp service", "udp test"]);
    let dump = ok(Command::new(lockscope()).arg("dump").arg(&out));
    assert!(dump.contains("AtomicRmw"), "{dump}");
}

#[test]
fn import_names_file_line_and_column_of_a_bad_row() {
    let dir = Scratch::new("spin-bad");
    let csv = dir.path("bad.csv");
    std::fs::write(
        &csv,
        "time,opoint,origin,address,operation,value\n1,CPU0,CPU0,0x10,R32,0\n2,CPU0,CPU0,0x10,X32,0\n",
    )
    .unwrap();
    let o = Command::new(lockscope())
        .args(["import", "--format", "hwtrace"])
        .arg(&csv)
        .arg("-o")
        .arg(dir.path("t.lstrace"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "{}:3:18: operation \"X32\" is not IP, R8..R64, W8..W64, A8..A64 or THREAD",
            csv.display()
        )),
        "{err}"
    );
}

#[test]
fn import_takes_the_schedule_from_a_second_file() {
    let dir = Scratch::new("spin-sched");
    let trace = dir.path("trace.csv");
    let sched = dir.path("sched.csv");
    std::fs::write(
        &trace,
        "time,opoint,origin,address,operation,value\n\
         10,CPU0,CPU0,0x40,A32,1\n15,CPU1,CPU1,0x40,A32,1\n20,CPU0,CPU0,0x40,W32,0\n\
         21,CPU1,CPU1,0x40,A32,1\n30,CPU1,CPU1,0x40,W32,0\n",
    )
    .unwrap();
    std::fs::write(
        &sched,
        "time,opoint,origin,address,operation,value\n0,CPU0,CPU0,7,THREAD,seven\n\
         0,CPU1,CPU1,9,THREAD,nine\n",
    )
    .unwrap();
    let out = dir.path("t.lstrace");
    ok(Command::new(lockscope())
        .args(["import", "--format", "hwtrace", "--cpus", "1", "--schedule"])
        .arg(&sched)
        .arg(&trace)
        .arg("-o")
        .arg(&out));
    let j = analysis_json("spin", &out);
    let l = &j["spinlocks"][0];
    assert_eq!(l["acquisitions"], 2);
    assert_eq!(l["failed_attempts"], 1);
    let threads: Vec<(u64, &str)> = l["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["tid"].as_u64().unwrap(), t["name"].as_str().unwrap()))
        .collect();
    assert_eq!(threads, [(7, "seven"), (9, "nine")]);
    assert!(
        l["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["kind"] == "oversubscribed"),
        "{l:#}"
    );
}
