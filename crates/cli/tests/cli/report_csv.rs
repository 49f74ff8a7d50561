//! `report --csv` quotes what RFC 4180 requires, CR included (the
//! hand-written quoting once did not quote `\r`).

use crate::record_util;
use record_util::*;

use std::process::Command;

#[test]
fn csv_quotes_a_carriage_return_in_a_thread_name() {
    let dir = temp("report-csv");
    let src = workspace().join("tests/programs/report/csv_names.c");
    let bin = dir.join("csv_names");
    let st = Command::new("gcc")
        .args(["-O1", "-g", "-pthread", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success());
    let run = record(&dir, &[], &bin, &[], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["report", "--csv", "threads"])
        .arg(&run.trace_path)
        .output()
        .unwrap();
    assert!(out.status.success());
    let csv = String::from_utf8(out.stdout).unwrap();
    assert!(csv.contains("\"cr\rxy\""), "{csv:?}");
    // Every row has the header's number of fields once quoting is
    // honoured.
    let fields = |line: &str| {
        let (mut n, mut quoted) = (1, false);
        for c in line.chars() {
            match c {
                '"' => quoted = !quoted,
                ',' if !quoted => n += 1,
                _ => {}
            }
        }
        n
    };
    let rows: Vec<&str> = csv.split('\n').filter(|l| !l.is_empty()).collect();
    let want = fields(rows[0]);
    for r in &rows[1..] {
        assert_eq!(fields(r), want, "{r:?}");
    }
}
