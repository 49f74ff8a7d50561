//! Replays the corpus of every fuzz target on stable Rust (cargo-fuzz
//! itself needs nightly): each target's body runs over every file of its
//! checked-in seed corpus `fuzz/seeds/<target>/`, over the fuzzer's own
//! corpus `fuzz/corpus/<target>/` when one exists locally (it is not
//! checked in), and over the golden traces. A panic fails the test and
//! names the file.

use std::path::{Path, PathBuf};

#[path = "../../../fuzz/targets/trace_reader.rs"]
mod trace_reader;

#[path = "../../../fuzz/targets/hwtrace_parser.rs"]
mod hwtrace_parser;

#[path = "../../../fuzz/targets/elf_build_id.rs"]
mod elf_build_id;

/// The body of a fuzz target: runs one input.
type Body = fn(&[u8]);

/// Every fuzz target: its name (the file under `fuzz/fuzz_targets/`) and
/// its body.
const TARGETS: &[(&str, Body)] = &[
    ("trace_reader", trace_reader::run),
    ("hwtrace_parser", hwtrace_parser::run),
    ("elf_build_id", elf_build_id::run),
];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

#[test]
fn every_fuzz_target_is_replayed() {
    let mut on_disk: Vec<String> = files(&fuzz_dir().join("fuzz_targets"))
        .iter()
        .filter_map(|p| Some(p.file_stem()?.to_str()?.to_string()))
        .collect();
    on_disk.sort();
    let mut here: Vec<String> = TARGETS.iter().map(|(n, _)| n.to_string()).collect();
    here.sort();
    assert_eq!(
        on_disk, here,
        "fuzz/fuzz_targets and TARGETS differ: add the new target's body here"
    );
}

#[test]
fn corpus_of_every_fuzz_target_replays_without_panic() {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden");
    for (name, run) in TARGETS {
        let seeds = files(&fuzz_dir().join("seeds").join(name));
        assert!(!seeds.is_empty(), "fuzz/seeds/{name} has no seed");
        let mut inputs = seeds;
        inputs.extend(files(&fuzz_dir().join("corpus").join(name)));
        inputs.extend(
            files(&golden)
                .into_iter()
                .filter(|p| p.extension().is_some_and(|e| e == "lstrace")),
        );
        for path in &inputs {
            let bytes = std::fs::read(path).unwrap();
            let r = std::panic::catch_unwind(|| run(&bytes));
            assert!(r.is_ok(), "{name} panicked on {}", path.display());
        }
    }
}
