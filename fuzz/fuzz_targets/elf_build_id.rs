//! cargo-fuzz entry point of the ELF build-id target; the body is in
//! `fuzz/targets/elf_build_id.rs`, shared with the stable replay tests.
//! Seeds: `fuzz/seeds/elf_build_id/`.
#![no_main]

#[path = "../targets/elf_build_id.rs"]
mod target;

libfuzzer_sys::fuzz_target!(|data: &[u8]| target::run(data));
