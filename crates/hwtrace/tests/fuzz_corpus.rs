//! Replays the fuzz corpus (`fuzz/seeds/hwtrace_parser/`) on stable, and
//! runs the same check on generated input: parsing and importing may fail
//! but never panic, and what imports exports and imports again.

use std::path::Path;

use proptest::prelude::*;

#[test]
fn fuzz_corpus_replays_without_panics() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/hwtrace_parser");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let data = std::fs::read(&p).unwrap();
        lockscope_hwtrace::exercise(&data);
        n += 1;
    }
    assert!(n >= 5, "corpus in {} has {n} files", dir.display());
}

#[test]
fn the_seeds_that_must_import_do() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/hwtrace_parser");
    for name in ["table2.tsv", "schedule.csv", "crlf_unknown_values.csv"] {
        let data = std::fs::read(dir.join(name)).unwrap();
        let p = lockscope_hwtrace::parse(name, &data).unwrap();
        lockscope_hwtrace::import(&[p], &Default::default()).unwrap();
    }
    for (name, err) in [
        ("bad_utf8.csv", "bad_utf8.csv:2:3: not UTF-8 text"),
        (
            "too_wide.csv",
            "too_wide.csv:2:17: value 0x10000 does not fit in 16 bits",
        ),
        (
            "duplicate_column.csv",
            "duplicate_column.csv:1:37: column \"time\" named twice",
        ),
        (
            "bad_thread.csv",
            "bad_thread.csv:2:8: thread id 9999999999 does not fit in 32 bits",
        ),
    ] {
        let data = std::fs::read(dir.join(name)).unwrap();
        let e = lockscope_hwtrace::parse(name, &data).unwrap_err();
        assert_eq!(e.to_string(), err);
    }
    let data = std::fs::read(dir.join("overflow.tsv")).unwrap();
    let p = lockscope_hwtrace::parse("overflow.tsv", &data).unwrap();
    let e = lockscope_hwtrace::import(&[p], &Default::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "overflow.tsv:4:1: time 18446744073709551615 cycles at 1000 Hz overflows 64-bit ns"
    );
}

fn line() -> impl Strategy<Value = String> {
    let field = prop_oneof![
        Just("".to_string()),
        Just("-".to_string()),
        "[0-9]{1,20}",
        "0x[0-9a-fA-F]{0,18}",
        "[0-9]{1,3}>[0-9]{1,3}",
        prop_oneof![
            Just("IP"),
            Just("R8"),
            Just("W16"),
            Just("A32"),
            Just("A64"),
            Just("THREAD"),
            Just("r64")
        ]
        .prop_map(str::to_string),
        "CPU[0-3]",
        "[ -~]{0,6}",
    ];
    prop::collection::vec(field, 3..8).prop_map(|v| v.join(","))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn generated_rows_never_panic(rows in prop::collection::vec(line(), 0..30), tab in any::<bool>()) {
        let mut text = String::from("time,opoint,origin,address,operation,value\n");
        for r in rows {
            text.push_str(&r);
            text.push('\n');
        }
        if tab {
            text = text.replace(',', "\t");
        }
        lockscope_hwtrace::exercise(text.as_bytes());
    }

    #[test]
    fn random_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..400)) {
        lockscope_hwtrace::exercise(&data);
    }
}
