//! The hardware-trace parser and importer on arbitrary bytes: every bad
//! line must be an error naming file, line and column, never a panic, and
//! whatever imports must export and import again.
//!
//! Seeds: `fuzz/seeds/hwtrace_parser/` (replayed on stable by
//! `crates/hwtrace/tests/fuzz_corpus.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    lockscope_hwtrace::exercise(data);
});
