//! Locks seen only through their futex words (Rust `std::sync`) are told
//! apart by role from the runtime code that waits on them; a `Condvar` is
//! a condition variable, not a lock. Ground truth: rust_sync_roles.rs,
//! which prints its objects' addresses and sizes.

use crate::record_util;

use record_util::{build_rust_with, hex, kv, lockscope, ok, record, temp};
use serde_json::Value;

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

struct Roles {
    stdout: String,
    json: Value,
    trace: std::path::PathBuf,
    _dir: record_util::TempDir,
}

fn record_roles(tag: &str) -> Roles {
    let dir = temp(tag);
    let bin = build_rust_with("report/rust_sync_roles", &dir, &["-O", "-g"]);
    let run = record(&dir, &[], &bin, &[], b"");
    let t = run.trace_path.to_str().unwrap().to_string();
    let json = serde_json::from_str(&ok(&lockscope(&["report", &t, "--json"], None))).unwrap();
    Roles {
        stdout: run.stdout,
        json,
        trace: run.trace_path,
        _dir: dir,
    }
}

/// (address, size) of the object of role `role`.
fn object(out: &str, role: &str) -> (u64, u64) {
    let line = out
        .lines()
        .find(|l| l.starts_with("truth-role ") && kv(l)["role"] == role)
        .unwrap_or_else(|| panic!("no {role} in {out}"));
    let m = kv(line);
    (hex(&m["addr"]), m["size"].parse().unwrap())
}

fn inside(v: &Value, (addr, size): (u64, u64)) -> bool {
    (addr..addr + size).contains(&hex(v["address"].as_str().unwrap()))
}

fn rows<'a>(r: &'a Value, table: &str, obj: (u64, u64)) -> Vec<&'a Value> {
    r[table]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| inside(l, obj))
        .collect()
}

// A barrier built on a Mutex and a Condvar: its waits are condition
// waits, without lock advice; the std Mutex and RwLock are named as such.
#[test]
fn a_condvar_barrier_is_not_counted_as_lock_wait() {
    let r = record_roles("futex-condvar");
    let j = &r.json;
    let cv = object(&r.stdout, "condvar");
    assert!(rows(j, "locks", cv).is_empty(), "{:#}", j["locks"]);
    let conds = rows(j, "conds", cv);
    assert_eq!(conds.len(), 1, "{:#}", j["conds"]);
    // 50 rounds, 3 threads waiting for the 4th each round (it sleeps 2 ms
    // first): at least 150 waits of about 2 ms.
    let c = conds[0];
    assert!(u(&c["waits"]) >= 150, "{c}");
    assert!(u(&c["wait_ns"]["total"]) >= 150_000_000, "{c}");
    // In the threads' time as condition waiting, not lock waiting.
    let cond_ns: u64 = j["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| u(&t["cond_wait_ns"]))
        .sum();
    assert!(
        cond_ns >= u(&c["wait_ns"]["total"]) * 9 / 10,
        "{:#}",
        j["threads"]
    );
    assert!(u(&j["verdict"]["cond_wait_ns"]) >= 150_000_000);
    let cv_addr = c["address"].as_str().unwrap();
    assert!(j["recommendations"]
        .as_array()
        .unwrap()
        .iter()
        .all(|a| a["address"] != cv_addr));
    assert!(j["blame"]
        .as_array()
        .unwrap()
        .iter()
        .all(|b| b["lock"] != cv_addr));
    // The Mutex and RwLock that main held while the threads started.
    for (role, kind) in [("mutex", "futex-mutex"), ("rwlock", "futex-rwlock")] {
        let ls = rows(j, "locks", object(&r.stdout, role));
        assert_eq!(ls.len(), 1, "{role}: {:#}", j["locks"]);
        assert_eq!(ls[0]["kind"], kind);
        assert!(u(&ls[0]["contended"]) >= 1, "{}", ls[0]);
    }
    // The barrier's mutex, re-taken after each wake, is a mutex.
    for l in rows(j, "locks", object(&r.stdout, "barrier-mutex")) {
        assert_eq!(l["kind"], "futex-mutex", "{l}");
    }
    let text = ok(&lockscope(&["report", r.trace.to_str().unwrap()], None));
    assert!(text.contains("CONDITION VARIABLES"), "{text}");
}

// The site of a futex wait is the user's line: waits that returned at
// once (EAGAIN) are not a row of their own under std's futex wrapper.
#[test]
fn futex_wait_sites_are_user_frames() {
    let r = record_roles("futex-sites");
    for l in r.json["locks"].as_array().unwrap() {
        if !l["kind"].as_str().unwrap().starts_with("futex") {
            continue;
        }
        for s in l["sites"].as_array().unwrap() {
            let f = s["function"].as_str().unwrap_or_default();
            assert!(
                f.starts_with("rust_sync_roles::"),
                "site {s} of {}",
                l["address"]
            );
        }
    }
}

// A wait on a futex lock is blamed on the wake that ended it, named by
// the waker's own code: main releases the Mutex at line 93 and the
// RwLock at line 95 after holding each for 50 ms. The wake's site alone
// is std's futex wrapper ("[no user frame]"), and a later wake that woke
// nobody took the blame from it.
#[test]
fn a_futex_wait_is_blamed_on_the_user_code_of_the_wake_that_ended_it() {
    let r = record_roles("futex-blame");
    let blame = r.json["blame"].as_array().unwrap();
    for (role, line) in [
        ("mutex", "rust_sync_roles.rs:93"),
        ("rwlock", "rust_sync_roles.rs:95"),
    ] {
        let obj = object(&r.stdout, role);
        let rows: Vec<&Value> = blame
            .iter()
            .filter(|b| (obj.0..obj.0 + obj.1).contains(&hex(b["lock"].as_str().unwrap())))
            .collect();
        assert!(
            rows.iter()
                .any(|b| b["holder_site"].as_str().unwrap().contains(line)
                    && u(&b["wait_ns"]) >= 40_000_000),
            "{role}: no 40 ms wait blamed on main's release at {line}: {rows:#?}"
        );
        for b in &rows {
            let h = b["holder_site"].as_str().unwrap();
            assert!(!h.contains("[no user frame]"), "{role}: {b}");
        }
    }
}

// A cargo release build has its symbols but no DWARF: the note names the
// Cargo.toml setting, not a -dbgsym package of a "stripped" binary.
#[test]
fn a_rust_build_without_debug_info_is_told_the_cargo_setting() {
    let dir = temp("futex-nodebug");
    // What cargo's release profile does: no debug info, and the std
    // library's stripped too.
    let bin = build_rust_with(
        "report/rust_sync_roles",
        &dir,
        &["-O", "-C", "strip=debuginfo"],
    );
    let run = record(&dir, &[], &bin, &[], b"");
    let t = run.trace_path.to_str().unwrap();
    let r: Value = serde_json::from_str(&ok(&lockscope(&["report", t, "--json"], None))).unwrap();
    let notes: Vec<&str> = r["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .filter(|n| n.contains("rust_sync_roles:"))
        .collect();
    assert_eq!(notes.len(), 1, "{:#}", r["notes"]);
    assert!(
        notes[0].contains("debug = \"line-tables-only\""),
        "{}",
        notes[0]
    );
    assert!(
        !notes[0].contains("stripped") && !notes[0].contains("dbgsym"),
        "{}",
        notes[0]
    );
}

// A futex word's acquisitions and holds are not seen: null in JSON and
// empty in CSV, never a number (they were 0, or woken waits counted as
// acquisitions, fewer than the contended ones after a merge).
#[test]
fn unseen_futex_lock_numbers_are_null_in_json() {
    let r = record_roles("futex-null");
    let j = &r.json;
    let ls = rows(j, "locks", object(&r.stdout, "mutex"));
    assert_eq!(ls.len(), 1, "{:#}", j["locks"]);
    let l = ls[0];
    for k in [
        "acquisitions",
        "contended_ratio",
        "owner_changes",
        "first_attempt_ratio",
        "avg_waiters",
        "hold_ns",
    ] {
        assert!(l[k].is_null(), "{k}: {l}");
    }
    assert!(
        u(&l["contended"]) >= 1 && u(&l["wait_ns"]["total"]) > 0,
        "{l}"
    );
    for t in l["threads"].as_array().unwrap() {
        assert!(t["acquisitions"].is_null() && t["hold_ns"].is_null(), "{t}");
    }
    let sites = l["sites"].as_array().unwrap();
    assert!(!sites.is_empty(), "{l}");
    for s in sites {
        assert!(s["acquisitions"].is_null() && s["hold_ns"].is_null(), "{s}");
    }
    let csv = ok(&lockscope(
        &["report", r.trace.to_str().unwrap(), "--csv"],
        None,
    ));
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| head.iter().position(|h| *h == name).unwrap();
    let addr = l["address"].as_str().unwrap();
    let row: Vec<&str> = lines
        .find(|x| x.starts_with(addr))
        .expect("the mutex in the CSV")
        .split(',')
        .collect();
    for k in ["acquisitions", "hold_total_ns", "owner_changes"] {
        assert_eq!(row[col(k)], "", "{k}: {row:?}");
    }
    assert_eq!(row[col("contended")], l["contended"].to_string());
}

/// The data element of an HTML page.
fn page_data(page: &str) -> Value {
    let open = "id=\"lockscope-data\">";
    let a = page.find(open).expect("data element") + open.len();
    let b = a + page[a..].find("</script>").unwrap();
    serde_json::from_str(&page[a..b]).unwrap()
}

// The HTML timeline draws a Rust Condvar's futex waits as condition waits
// (blocked, grey), as the report counts them, and a std Mutex's as lock
// waits: its bins were all "wait" before the role was known.
#[test]
fn the_html_timeline_draws_a_futex_condvar_as_blocked_not_lock_wait() {
    let r = record_roles("futex-html");
    let cv = object(&r.stdout, "condvar");
    let cond_ns = u(&rows(&r.json, "conds", cv)[0]["wait_ns"]["total"]);
    let lock_ns: u64 = r.json["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| u(&l["wait_ns"]["total"]))
        .sum();
    let dir = temp("futex-html-page");
    let page_path = dir.path().join("p.html");
    let t = r.trace.to_str().unwrap();
    ok(&lockscope(
        &["html", t, "-o", page_path.to_str().unwrap()],
        None,
    ));
    let d = page_data(&std::fs::read_to_string(&page_path).unwrap());
    // Heat: [thread][category: wait, hold, blocked, unlock] -> [[bin, ns]].
    let sum = |cat: usize| -> u64 {
        d["heat"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|t| t[cat].as_array().unwrap().iter())
            .map(|b| u(&b[1]))
            .sum()
    };
    // The lock waits drawn are the locks' (the overhead correction of the
    // report takes a little off), never the condvar's 150 ms and more.
    assert!(
        sum(0) < lock_ns + cond_ns / 2,
        "wait drawn {} ns, locks {lock_ns}, condvar {cond_ns}",
        sum(0)
    );
    assert!(sum(2) >= cond_ns * 9 / 10, "blocked drawn {}", sum(2));
    // The spans kept on the condvar's word are condition waits; it has
    // the same name in the page as in the report.
    let name = rows(&r.json, "conds", cv)[0]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let strings = d["strings"].as_array().unwrap();
    let on_cv: Vec<&Value> = d["spans"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| {
            let o = s[4].as_i64().unwrap();
            o >= 0 && strings[o as usize] == name.as_str()
        })
        .collect();
    assert!(
        !on_cv.is_empty(),
        "no span names the condvar {name}: {strings:?}"
    );
    assert!(on_cv.iter().all(|s| s[1] == "cond wait"), "{on_cv:?}");
    // The RwLock's two words (readers', writers' 4 bytes on) are one lock,
    // named as the report's one row names it.
    let rw = rows(&r.json, "locks", object(&r.stdout, "rwlock"));
    assert_eq!(rw.len(), 1);
    let rw_label = rw[0]["label"].as_str().unwrap();
    let rw_addr = hex(rw[0]["address"].as_str().unwrap());
    for s in strings.iter().filter_map(|s| s.as_str()) {
        assert!(
            s != format!("{:#x}", rw_addr + 4),
            "the writers' word named apart from {rw_label}: {strings:?}"
        );
    }
    assert!(
        d["spans"].as_array().unwrap().iter().any(|s| s[4]
            .as_i64()
            .is_some_and(|o| o >= 0 && strings[o as usize] == rw_label)),
        "{strings:?}"
    );
}
