//! The hardware-trace parser and importer on arbitrary bytes (the body of
//! the `hwtrace_parser` fuzz target, also replayed over the seed corpus by
//! stable tests: `crates/format/tests/fuzz_corpus.rs` and
//! `crates/hwtrace/tests/fuzz_corpus.rs`): every bad line must be an error
//! naming file, line and column, never a panic, and whatever imports must
//! export and import again to the same accesses.

/// Runs one input.
pub fn run(data: &[u8]) {
    lockscope_hwtrace::exercise(data);
}
