//! Many traces: `lockscope export --format parquet` tables of several
//! labelled recordings, read by DuckDB with the queries docs/fleet.md
//! documents, and `lockscope report A B C [--group-by KEY]`, give exactly
//! the per-lock totals `lockscope report --json` gives for each trace and
//! for groups of them.

use crate::export_util;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use export_util::*;
use serde_json::Value;

/// The SQL block named `name` in docs/fleet.md (```sql NAME ... ```).
fn documented_query(name: &str) -> String {
    let doc = std::fs::read_to_string(workspace().join("docs/fleet.md")).unwrap();
    let start = format!("```sql {name}\n");
    let at = doc
        .find(&start)
        .unwrap_or_else(|| panic!("docs/fleet.md has no query {name}"))
        + start.len();
    let end = doc[at..].find("```").unwrap();
    doc[at..at + end].to_string()
}

/// Rows of a documented query run by DuckDB over the tables in `tables`
/// (the doc's `lockscope-tables/` paths are relative to its parent).
fn run_query(name: &str, tables: &Path) -> Vec<Value> {
    run_sql(tables, &documented_query(name))
}

/// A lock's name across runs, from its JSON: its label, or `KIND at
/// FIRST USE` when only its address names it (docs/fleet.md).
fn identity(l: &Value) -> String {
    if l["named_by"] == "address" {
        format!(
            "{} at {}",
            l["kind"].as_str().unwrap(),
            l["first_use"].as_str().unwrap()
        )
    } else {
        l["label"].as_str().unwrap().to_string()
    }
}

/// lock -> (wait ns, acquisitions) of one report.
fn per_lock(r: &Value) -> BTreeMap<String, (u64, u64)> {
    let mut m = BTreeMap::new();
    for l in r["locks"].as_array().unwrap() {
        let e = m.entry(identity(l)).or_insert((0, 0));
        e.0 += l["wait_ns"]["total"].as_u64().unwrap();
        e.1 += l["acquisitions"].as_u64().unwrap_or(0);
    }
    m
}

fn int(v: &Value) -> u64 {
    v.as_u64()
        .or_else(|| v.as_f64().map(|f| f as u64))
        .unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Three recordings of `mutex.c` in `DIR/runs`: two of label group=a on
/// hosts h1 and h2, one of group=b on h1; with each one's report.
fn three_labelled_runs(
    test: &str,
) -> (
    TempDir,
    std::path::PathBuf,
    Vec<(&'static str, &'static str, Value)>,
) {
    let dir = temp(test);
    let bin = build_c("mutex", &dir);
    let labels = [("a", "h1"), ("a", "h2"), ("b", "h1")];
    let runs_dir = dir.join("runs");
    std::fs::create_dir_all(&runs_dir).unwrap();
    let mut reports = Vec::new();
    for (k, (group, host)) in labels.into_iter().enumerate() {
        let g = format!("group={group}");
        let h = format!("host={host}");
        let run = record(&dir, &["--label", &g, "--label", &h], &bin, &[], b"");
        let trace = runs_dir.join(format!("run{k}.lstrace"));
        std::fs::rename(&run.trace_path, &trace).unwrap();
        reports.push((group, host, report_json(&trace)));
    }
    (dir, runs_dir, reports)
}

#[test]
fn one_report_over_many_traces_sums_each_locks_figures_per_group() {
    let (_dir, runs_dir, reports) = three_labelled_runs("many-traces");
    let out = lockscope(&[
        "report".as_ref(),
        "--json".as_ref(),
        "--group-by".as_ref(),
        "group".as_ref(),
        runs_dir.as_os_str(),
    ]);
    let f: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(f["schema"], "lockscope.fleet/1");
    assert_eq!(f["traces"].as_array().unwrap().len(), 3);
    let groups = f["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2);
    for g in groups {
        let value = g["value"].as_str().unwrap();
        let members: Vec<&Value> = reports
            .iter()
            .filter(|r| r.0 == value)
            .map(|r| &r.2)
            .collect();
        assert_eq!(g["traces"].as_array().unwrap().len(), members.len());
        // Per lock: the sum and the highest of the traces' own figures.
        let mut want: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
        for r in &members {
            for (k, v) in per_lock(r) {
                want.entry(k).or_default().push(v);
            }
        }
        let locks = g["locks"].as_array().unwrap();
        assert_eq!(locks.len(), want.len(), "group {value}");
        for l in locks {
            let key = l["lock"].as_str().unwrap().to_string();
            let v = &want[&key];
            assert_eq!(int(&l["traces"]), v.len() as u64);
            assert_eq!(
                int(&l["wait_ns"]["total"]),
                v.iter().map(|x| x.0).sum::<u64>()
            );
            assert_eq!(
                int(&l["wait_ns"]["max"]),
                v.iter().map(|x| x.0).max().unwrap()
            );
            assert_eq!(
                int(&l["acquisitions"]["total"]),
                v.iter().map(|x| x.1).sum::<u64>()
            );
        }
    }
    // The text form names the groups and the traces.
    let text = String::from_utf8(lockscope(&[
        "report".as_ref(),
        "--group-by".as_ref(),
        "group".as_ref(),
        runs_dir.as_os_str(),
    ]))
    .unwrap();
    assert!(
        text.contains("LOCKS, group=a (2 traces: [1] [2])"),
        "{text}"
    );
    assert!(text.contains("LOCKS, group=b (1 trace: [3])"), "{text}");
}

#[test]
fn the_fleet_queries_give_the_reports_totals() {
    let (dir, runs_dir, reports) = three_labelled_runs("parquet");
    let tables = dir.join("lockscope-tables");
    lockscope(&[
        "export".as_ref(),
        "--format".as_ref(),
        "parquet".as_ref(),
        runs_dir.as_os_str(),
        "-o".as_ref(),
        tables.as_os_str(),
    ]);
    for t in ["runs", "labels", "locks", "sites", "threads"] {
        assert!(tables.join(format!("{t}.parquet")).is_file(), "{t}");
    }

    // Top locks: every (lock, first use) with the sums over the runs.
    let mut want: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    for (_, _, r) in &reports {
        for (k, (w, a)) in per_lock(r) {
            let e = want.entry(k).or_default();
            e.0 += w;
            e.1 += a;
            e.2 += 1;
        }
    }
    let rows = run_query("top_locks", &tables);
    assert_eq!(rows.len(), want.len().min(20));
    for row in &rows {
        let key = row["lock"].as_str().unwrap().to_string();
        let (w, a, n) = want[&key];
        assert_eq!(
            (
                int(&row["wait_ns"]),
                int(&row["acquisitions"]),
                int(&row["runs"])
            ),
            (w, a, n),
            "{key:?}"
        );
    }
    // Ordered by wait, most first.
    assert!(rows
        .windows(2)
        .all(|p| int(&p[0]["wait_ns"]) >= int(&p[1]["wait_ns"])));

    // Growth between the groups: mean wait per run that used the lock.
    let mean = |group: &str| {
        let mut m: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for (_, _, r) in reports.iter().filter(|x| x.0 == group) {
            for (k, (w, _)) in per_lock(r) {
                let e = m.entry(k).or_default();
                e.0 += w;
                e.1 += 1;
            }
        }
        m
    };
    let (a, b) = (mean("a"), mean("b"));
    let rows = run_query("wait_growth", &tables);
    let both = a.keys().filter(|k| b.contains_key(*k)).count();
    assert_eq!(rows.len(), both);
    for row in &rows {
        let key = row["lock"].as_str().unwrap().to_string();
        let before = a[&key].0 as f64 / a[&key].1 as f64;
        let after = b[&key].0 as f64 / b[&key].1 as f64;
        let got = row["growth_ns"].as_f64().unwrap();
        assert!(
            (got - (after - before)).abs() < 1.0,
            "{key:?}: {got} vs {}",
            after - before
        );
    }

    // Hosts where `hot` waits most.
    let rows = run_query("hosts_for_lock", &tables);
    let mut hosts: BTreeMap<&str, u64> = BTreeMap::new();
    for (_, host, r) in &reports {
        let w: u64 = r["locks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["label"] == "hot")
            .map(|l| l["wait_ns"]["total"].as_u64().unwrap())
            .sum();
        *hosts.entry(host).or_default() += w;
    }
    assert_eq!(rows.len(), hosts.len());
    for row in &rows {
        let h = row["host"].as_str().unwrap();
        assert_eq!(int(&row["wait_ns"]), hosts[h], "host {h}");
    }
    assert!(
        hosts.values().sum::<u64>() > 0,
        "the fixture's `hot` lock never waited"
    );
}

#[test]
fn the_tables_carry_their_schema_version_and_refuse_a_file_as_directory() {
    let (dir, trace) = record_fixture("parquet-schema", "mutex", &[]);
    let tables = dir.join("lockscope-tables");
    lockscope(&[
        "export".as_ref(),
        "--format".as_ref(),
        "parquet".as_ref(),
        trace.as_os_str(),
        "-o".as_ref(),
        tables.as_os_str(),
    ]);
    let rows = run_sql(
        &tables,
        "SELECT schema_version, events FROM 'lockscope-tables/runs.parquet'",
    );
    let r = report_json(&trace);
    assert_eq!(rows.len(), 1);
    assert_eq!(int(&rows[0]["schema_version"]), 1);
    assert_eq!(int(&rows[0]["events"]), r["events"].as_u64().unwrap());
    // -o naming a file is refused, and the file is left alone.
    let f = dir.join("file");
    std::fs::write(&f, b"keep").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["export", "--format", "parquet"])
        .arg(&trace)
        .arg("-o")
        .arg(&f)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("writes a directory"));
    assert_eq!(std::fs::read(&f).unwrap(), b"keep");
    // Other formats take one trace.
    let out = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["export", "--format", "folded"])
        .arg(&trace)
        .arg(&trace)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("takes one trace"));
}

/// The rows of `sql`, run by DuckDB (Python) in the parent directory of
/// `tables`, which must be named `lockscope-tables` as in docs/fleet.md.
fn run_sql(tables: &Path, sql: &str) -> Vec<Value> {
    require_viewer("py/duckdb", "DuckDB's Python package (PyPI duckdb)");
    assert_eq!(tables.file_name().unwrap(), "lockscope-tables");
    let file = tables.parent().unwrap().join("query.sql");
    std::fs::write(&file, sql).unwrap();
    let out = Command::new(require_tool("python3", "python3"))
        .arg(workspace().join("crates/cli/tests/cli/export_util/duckdb_query.py"))
        .arg(&file)
        .arg(tables.parent().unwrap())
        .env("PYTHONPATH", viewers().join("py"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "DuckDB failed on {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_event_tables_hold_every_contended_wait_and_every_critical_section() {
    let _cpus = crate::cpus();
    // mutex.c's threads contend unless the machine runs them one at a
    // time (seen: 0 of 88,000 acquisitions contended with both CPUs busy):
    // the truth of that run, so it is recorded again, up to 3 times; the
    // tables are checked against whatever run is kept.
    let mut tries = 0;
    let (dir, trace) = loop {
        tries += 1;
        let (dir, trace) = record_fixture("parquet-events", "mutex", &[]);
        let contended: u64 = report_json(&trace)["locks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["contended"].as_u64().unwrap_or(0))
            .sum();
        if contended > 0 || tries == 3 {
            break (dir, trace);
        }
        eprintln!("no contended acquisition (a busy machine): recording again");
    };
    let tables = dir.join("lockscope-tables");
    lockscope(&[
        "export".as_ref(),
        "--format".as_ref(),
        "parquet".as_ref(),
        "--events".as_ref(),
        trace.as_os_str(),
        "-o".as_ref(),
        tables.as_os_str(),
    ]);
    let r = report_json(&trace);
    let per_lock = run_sql(
        &tables,
        "SELECT l.address, l.contended, l.acquisitions,
                (SELECT count(*) FROM 'lockscope-tables/waits.parquet' w WHERE w.address = l.address) AS waits,
                (SELECT count(*) FROM 'lockscope-tables/holds.parquet' h WHERE h.address = l.address) AS holds
         FROM 'lockscope-tables/locks.parquet' l",
    );
    assert_eq!(per_lock.len(), r["locks"].as_array().unwrap().len());
    for row in &per_lock {
        let a = row["address"].as_str().unwrap();
        // One row per contended acquisition and per critical section.
        assert_eq!(int(&row["waits"]), int(&row["contended"]), "lock {a}");
        assert_eq!(int(&row["holds"]), int(&row["acquisitions"]), "lock {a}");
    }
    assert!(
        per_lock.iter().any(|r| int(&r["waits"]) > 0),
        "no contended wait"
    );
    // Every call path a wait or hold names is in call_paths, and waits
    // name the holder that let them in.
    let orphans = run_sql(
        &tables,
        "SELECT count(*) AS n FROM (
           SELECT path_id AS p FROM 'lockscope-tables/waits.parquet'
           UNION ALL SELECT holder_path_id FROM 'lockscope-tables/waits.parquet'
           UNION ALL SELECT path_id FROM 'lockscope-tables/holds.parquet')
         WHERE p IS NOT NULL
           AND p NOT IN (SELECT path_id FROM 'lockscope-tables/call_paths.parquet')",
    );
    assert_eq!(int(&orphans[0]["n"]), 0);
    let holders = run_sql(
        &tables,
        "SELECT count(holder_tid) AS with_holder, count(*) AS n,
                count(*) FILTER (WHERE holder_tid = tid) AS own
         FROM 'lockscope-tables/waits.parquet'",
    );
    assert!(int(&holders[0]["with_holder"]) > 0);
    assert_eq!(int(&holders[0]["own"]), 0, "a thread waited for itself");
    // Every table has exactly the columns docs/fleet.md documents, in
    // that order.
    for (table, cols) in documented_columns() {
        let got: Vec<String> = run_sql(
            &tables,
            &format!("DESCRIBE SELECT * FROM 'lockscope-tables/{table}.parquet'"),
        )
        .iter()
        .map(|r| r["column_name"].as_str().unwrap().to_string())
        .collect();
        assert_eq!(got, cols, "table {table}");
    }
}

/// The tables and their columns as the tables of docs/fleet.md list them:
/// per row, the table name, then the backticked names outside
/// parentheses (inside them are examples and explanations).
fn documented_columns() -> Vec<(String, Vec<String>)> {
    let doc = std::fs::read_to_string(workspace().join("docs/fleet.md")).unwrap();
    let mut v = Vec::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split(" | ").collect();
        if !line.starts_with("| `") || cells.len() != 3 {
            continue;
        }
        let table = cells[0]
            .trim_start_matches("| ")
            .trim_matches('`')
            .to_string();
        let mut outside = String::new();
        let mut depth = 0;
        for ch in cells[2].chars() {
            match ch {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ if depth == 0 => outside.push(ch),
                _ => {}
            }
        }
        let cols = outside
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect();
        v.push((table, cols));
    }
    assert_eq!(v.len(), 8, "docs/fleet.md documents 8 tables: {v:?}");
    v
}

#[test]
fn diff_of_two_groups_compares_each_locks_mean_wait_and_its_spread() {
    let dir = temp("group-diff");
    let bin = build_c("report/held_for", &dir);
    // Group A holds the lock 60 ms per run, group B 120 ms: the waiter's
    // wait doubles, far beyond the run-to-run spread.
    let mut waits: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (group, ms) in [("a", "60"), ("b", "120")] {
        let g = dir.join(group);
        std::fs::create_dir_all(&g).unwrap();
        for k in 0..3 {
            let run = record(&dir, &[], &bin, &[ms], b"");
            let t = g.join(format!("run{k}.lstrace"));
            std::fs::rename(&run.trace_path, &t).unwrap();
            let r = report_json(&t);
            let w = r["locks"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|l| l["label"] == "held")
                .map(|l| l["wait_ns"]["total"].as_u64().unwrap())
                .sum();
            waits.entry(group).or_default().push(w);
        }
    }
    let out = lockscope(&[
        "diff".as_ref(),
        dir.join("a").as_os_str(),
        dir.join("b").as_os_str(),
        "--json".as_ref(),
    ]);
    let d: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(d["schema"], "lockscope.groupdiff/1");
    let held = d["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["lock"] == "held")
        .expect("the held lock");
    let mean = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len() as f64;
    let (ma, mb) = (mean(&waits["a"]), mean(&waits["b"]));
    assert!((held["wait_a"]["mean"].as_f64().unwrap() - ma).abs() < 1.0);
    assert!((held["wait_b"]["mean"].as_f64().unwrap() - mb).abs() < 1.0);
    assert_eq!(held["traces"], serde_json::json!([3, 3]));
    // Each waited about as long as the hold: 60 ms, then 120 ms.
    assert!((45e6..80e6).contains(&ma), "A: {ma}");
    assert!((100e6..150e6).contains(&mb), "B: {mb}");
    assert_eq!(held["beyond_spread"], true, "{held}");
    // The largest change comes first, and the text says so.
    assert_eq!(d["locks"][0]["lock"], "held");
    let text = String::from_utf8(lockscope(&[
        "diff".as_ref(),
        dir.join("a").as_os_str(),
        dir.join("b").as_os_str(),
    ]))
    .unwrap();
    assert!(
        text.lines().next().unwrap().contains("held wait +")
            && text.contains("beyond the run-to-run spread"),
        "{text}"
    );
}
