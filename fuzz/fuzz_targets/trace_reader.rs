//! cargo-fuzz entry point of the trace reader target; the body is in
//! `fuzz/targets/trace_reader.rs`, shared with the stable replay test.
#![no_main]

#[path = "../targets/trace_reader.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
