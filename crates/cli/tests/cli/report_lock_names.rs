//! Names of locks that have no symbol of their own: a heap object's
//! member lock is named by its class and member when DWARF says which
//! member it is, else by its first use; a lock inside a global struct by
//! its member path. The names appear the same in the text
//! report, its JSON, the folded stacks and the pprof profile.
//!
//! Ground truth: tests/programs/report/member_locks.cpp prints its locks'
//! addresses and acquisition counts; its holder thread makes each
//! worker's first submit() and record_stat() wait.

use crate::record_util;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use record_util::{hex, kv, lockscope, ok, record, temp};
use serde_json::Value;

const WORKERS: u64 = 4;
const ROUNDS: u64 = 1000;

/// Compiles member_locks.cpp with g++ -O2 and `debug` (`-g` or none).
fn build(dir: &Path, debug: Option<&str>) -> PathBuf {
    let name = format!("member_locks{}", debug.unwrap_or(""));
    let flags: Vec<&str> = ["-O2"].into_iter().chain(debug).collect();
    record_util::build_cxx("report/member_locks", dir, &name, &flags)
}

struct Recorded {
    _dir: record_util::TempDir,
    trace: PathBuf,
    truth: HashMap<String, String>,
    json: Value,
    text: String,
}

impl Recorded {
    fn new(name: &str, debug: Option<&str>) -> Recorded {
        Recorded::with_args(name, debug, &[])
    }

    fn with_args(name: &str, debug: Option<&str>, args: &[&str]) -> Recorded {
        let dir = temp(name);
        let bin = build(dir.path(), debug);
        let run = record(dir.path(), &[], &bin, args, b"");
        assert_eq!(run.code, 0, "{}", run.stderr);
        let line = run
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("truth "))
            .expect("a truth line");
        let truth = kv(line);
        let t = run.trace_path.to_str().unwrap();
        let json = serde_json::from_str(&ok(&lockscope(&["report", t, "--json"], None))).unwrap();
        let text = ok(&lockscope(&["report", t], None));
        Recorded {
            _dir: dir,
            trace: run.trace_path.clone(),
            truth,
            json,
            text,
        }
    }

    /// The JSON row of the lock whose address the program printed as `key`.
    fn lock(&self, key: &str) -> &Value {
        let addr = format!("{:#x}", hex(&self.truth[key]));
        self.json["locks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["address"] == addr)
            .unwrap_or_else(|| panic!("no lock {key} at {addr}: {:#}", self.json["locks"]))
    }

    fn folded(&self) -> String {
        let t = self.trace.to_str().unwrap();
        ok(&lockscope(&["export", "--format", "folded", t], None))
    }

    /// The decompressed pprof profile (its string table holds the names).
    fn pprof(&self) -> Vec<u8> {
        let out = self.trace.with_extension("pb.gz");
        let (t, o) = (self.trace.to_str().unwrap(), out.to_str().unwrap());
        ok(&lockscope(
            &["export", "--format", "pprof", t, "-o", o],
            None,
        ));
        let gz = Command::new("gzip")
            .arg("-dc")
            .arg(&out)
            .output()
            .expect("gzip");
        assert!(gz.status.success());
        gz.stdout
    }
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The LOCKS table row of the text report naming `label`.
fn table_row<'a>(text: &'a str, label: &str) -> &'a str {
    let sec = text.split("\nLOCKS").nth(1).expect("a LOCKS section");
    sec.lines()
        .take_while(|l| !l.is_empty())
        .find(|l| l.split_whitespace().nth(1) == Some(label))
        .unwrap_or_else(|| panic!("no LOCKS row {label}:\n{text}"))
}

/// Asserts that `label` names the lock in the text, JSON, folded stacks
/// and pprof profile, with the acquisitions the program counted.
fn assert_named_everywhere(r: &Recorded, key: &str, label: &str, by: &str, acq: u64) {
    let l = r.lock(key);
    assert_eq!(l["label"], label, "{l:#}");
    assert_eq!(l["named_by"], by, "{l:#}");
    assert_eq!(l["acquisitions"], acq, "{l:#}");
    // Each worker's first attempt waited for the holder's 50 ms.
    assert!(l["contended"].as_u64().unwrap() >= WORKERS, "{l:#}");
    let row = table_row(&r.text, label);
    let acq_text = format!("{},{:03}", acq / 1000, acq % 1000);
    assert_eq!(
        row.split_whitespace().nth(3),
        Some(acq_text.as_str()),
        "{row}"
    );
    assert!(
        r.text
            .contains(&format!(" {label} at {}", l["address"].as_str().unwrap())),
        "no heading for {label}:\n{}",
        r.text
    );
    // Blame rows name the lock as the table does.
    assert!(
        r.json["blame"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["lock_name"] == label),
        "{:#}",
        r.json["blame"]
    );
    let folded = r.folded();
    assert!(
        folded
            .lines()
            .any(|s| s.contains(&format!(";lock {label} "))),
        "{folded}"
    );
    assert!(contains(&r.pprof(), &format!("lock {label}")));
}

#[test]
fn a_member_lock_is_named_by_its_class_and_member() {
    let r = Recorded::new("names-member", Some("-g"));
    let acq = r.truth["pool_acq"].parse::<u64>().unwrap();
    assert_eq!(acq, WORKERS * ROUNDS + 1);
    assert_named_everywhere(&r, "pool_m", "ThreadPool::m_", "member", acq);
    // A heap lock has no symbol: `name` stays null, the address stays.
    assert_eq!(r.lock("pool_m")["name"], Value::Null);
}

#[test]
fn a_global_struct_member_lock_is_named_by_its_member_path() {
    let r = Recorded::new("names-global", Some("-g"));
    let acq = r.truth["stats_acq"].parse::<u64>().unwrap();
    assert_eq!(acq, WORKERS * ROUNDS + 1);
    assert_named_everywhere(&r, "stats_lock", "g_stats.lock", "symbol", acq);
    assert_eq!(r.lock("stats_lock")["name"], "g_stats.lock");
}

#[test]
fn a_heap_lock_without_debug_info_is_named_by_its_first_use_site() {
    let r = Recorded::new("names-nodebug", None);
    let acq = r.truth["pool_acq"].parse::<u64>().unwrap();
    assert_named_everywhere(&r, "pool_m", "mutex@ThreadPool::submit", "first_use", acq);
    // Without DWARF a global's member is its symbol and offset.
    let acq = r.truth["stats_acq"].parse::<u64>().unwrap();
    assert_named_everywhere(&r, "stats_lock", "g_stats+0x8", "symbol", acq);
}

#[test]
fn a_lock_whose_class_has_two_mutexes_is_named_by_its_first_use_site() {
    let r = Recorded::new("names-two-mutexes", Some("-g"));
    let l = r.lock("pair_a");
    // Pair has a_ and b_: the class cannot say which one this is.
    assert_eq!(l["label"], "mutex@Pair::bump", "{l:#}");
    assert_eq!(l["named_by"], "first_use", "{l:#}");
    assert_eq!(
        l["acquisitions"].as_u64().unwrap(),
        r.truth["pair_acq"].parse::<u64>().unwrap()
    );
}

#[test]
fn two_locks_that_would_share_a_name_are_told_apart_by_a_suffix() {
    let r = Recorded::with_args("names-unique", Some("-g"), &["spare"]);
    // Numbered in address order: the spare pool was allocated second.
    let (pool, spare) = (hex(&r.truth["pool_m"]), hex(&r.truth["spare_m"]));
    let (first, second) = if pool < spare {
        ("pool_m", "spare_m")
    } else {
        ("spare_m", "pool_m")
    };
    assert_eq!(r.lock(first)["label"], "ThreadPool::m_");
    assert_eq!(r.lock(second)["label"], "ThreadPool::m_#2");
    assert_eq!(r.lock(second)["named_by"], "member");
    assert_eq!(r.lock("spare_m")["acquisitions"], 1);
    // The text names them apart too.
    table_row(&r.text, "ThreadPool::m_");
    table_row(&r.text, "ThreadPool::m_#2");
}

#[test]
fn the_csv_lock_table_carries_the_name_and_what_made_it() {
    let r = Recorded::new("names-csv", Some("-g"));
    let t = r.trace.to_str().unwrap();
    let csv = ok(&lockscope(&["report", t, "--csv", "locks"], None));
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| head.iter().position(|h| *h == n).unwrap();
    let addr = format!("{:#x}", hex(&r.truth["pool_m"]));
    let row: Vec<&str> = lines
        .map(|l| l.split(',').collect::<Vec<_>>())
        .find(|c| c[col("address")] == addr)
        .unwrap_or_else(|| panic!("no row {addr}:\n{csv}"));
    assert_eq!(row[col("label")], "ThreadPool::m_");
    assert_eq!(row[col("named_by")], "member");
}
