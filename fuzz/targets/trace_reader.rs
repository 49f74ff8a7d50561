//! The trace reader on arbitrary bytes (the body of the `trace_reader`
//! fuzz target, also replayed over the seed corpus by a stable test:
//! `crates/format/tests/fuzz_corpus.rs`): it must return an error naming an
//! offset, never panic, and never allocate without bound.
//!
//! Every record carries a CRC-32, so random bytes almost never get past
//! the checksum to the record decoders. The input is therefore read twice:
//! as is (framing, checksums, header), and re-framed as a valid file whose
//! records are cut from the input with correct checksums, which sends the
//! fuzzer's bytes into the payload decoders (header, tables, event chunks).

use lockscope_format::{Record, Trace, TraceReader, FORMAT_MAJOR, MAGIC};

fn exercise(bytes: &[u8]) {
    // Whole-file reader (what tests and small tools use).
    if let Ok(t) = Trace::read(bytes) {
        let _ = t.event_count();
    }
    // Streaming reader, decoding every chunk (what the analyses use).
    if let Ok(mut r) = TraceReader::new(bytes) {
        while let Ok(Some(rec)) = r.next() {
            if let Record::Events(c) = rec {
                let _ = c.for_each(|e| {
                    let _ = e.op();
                });
            }
        }
    }
    // Skipping damage (`--skip-corrupt`): must end, each stretch skipped
    // inside the file, never twice over the same bytes.
    if let Ok(r) = TraceReader::new(std::io::Cursor::new(bytes)) {
        if let Ok(mut r) = r.skipping_corrupt() {
            while let Ok(Some(_)) = r.next() {}
            let mut end = 0;
            for s in r.skipped() {
                assert!(s.offset >= end && s.offset + s.bytes <= bytes.len() as u64);
                end = s.offset + s.bytes;
            }
        }
    }
}

/// Input as `(kind u8, len u8, payload[len])*` turned into framed records
/// with valid checksums; the first record is forced to be a header.
fn reframe(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 64);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_MAJOR.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    let mut i = 0;
    let mut first = true;
    while i + 2 <= data.len() {
        let kind = if first { 0 } else { data[i] };
        first = false;
        let len = (data[i + 1] as usize).min(data.len() - i - 2);
        let payload = &data[i + 2..i + 2 + len];
        i += 2 + len;
        out.push(kind);
        out.extend_from_slice(&(len as u32).to_le_bytes());
        out.extend_from_slice(payload);
        let mut h = crc32fast::Hasher::new();
        h.update(&[kind]);
        h.update(payload);
        out.extend_from_slice(&h.finalize().to_le_bytes());
    }
    out
}

/// One fuzz input: the bytes as they are, then re-framed.
pub fn run(data: &[u8]) {
    exercise(data);
    exercise(&reframe(data));
}
