//! cargo-fuzz entry point of the hardware-trace parser target; the body is
//! in `fuzz/targets/hwtrace_parser.rs`, shared with the stable replay tests.
//! Seeds: `fuzz/seeds/hwtrace_parser/`.
#![no_main]

#[path = "../targets/hwtrace_parser.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
