//! The recorder's ELF build-id reader on arbitrary bytes (the body of the
//! `elf_build_id` fuzz target, also replayed over the seed corpus by the
//! stable test `crates/format/tests/fuzz_corpus.rs`): the files it reads
//! are whatever a recorded program mapped, untrusted. It must never
//! panic, never read past the image, and a build-id it returns is a
//! GNU note's descriptor: non-empty and inside the image.

/// Runs one input.
pub fn run(data: &[u8]) {
    if let Some(id) = lockscope_record::build_id_of_bytes(data) {
        assert!(!id.is_empty() && id.len() <= data.len());
        assert!(
            data.windows(id.len()).any(|w| w == id.as_slice()),
            "the build-id is bytes of the image"
        );
    }
}
