//! The trace reader against corrupted recordings: real traces written by
//! `lockscope record` are bit-flipped, truncated and spliced, and
//! `Trace::read` must never panic. Single-bit flips after the preamble
//! must be *detected* (every record carries a CRC-32, which catches all
//! single-bit errors). The stable counterpart of the cargo-fuzz target in
//! fuzz/ (which needs nightly).

use crate::record_util;
use record_util::*;

use std::panic::{catch_unwind, AssertUnwindSafe};

use lockscope_format::Trace;

/// A small deterministic generator (xorshift*), so a failure names a
/// reproducible case.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn read(bytes: &[u8], what: &str) -> Option<Result<Trace, String>> {
    match catch_unwind(AssertUnwindSafe(|| Trace::read(bytes))) {
        Ok(r) => Some(r.map_err(|e| e.to_string())),
        Err(_) => panic!("Trace::read panicked on {what}"),
    }
}

fn recorded(name: &str, stdin: &[u8]) -> Vec<u8> {
    let dir = temp(&format!("mut-{name}"));
    let bin = build_c(name, &dir);
    let run = record(&dir, &["--quiet"], &bin, &[], stdin);
    std::fs::read(&run.trace_path).unwrap()
}

#[test]
fn record_mutated_traces_never_panic_and_flips_are_caught() {
    let input: String = (1..=40).map(|i| format!("{i}\n")).collect();
    let traces = [
        recorded("echo_sum", input.as_bytes()),
        recorded("fork_exec", b""),
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for (ti, orig) in traces.iter().enumerate() {
        assert!(read(orig, "the original").unwrap().is_ok());
        for case in 0..1500 {
            let mut b = orig.clone();
            let what = match case % 5 {
                0 | 1 => {
                    // One bit flipped after the magic and version.
                    let at = 12 + rng.below(b.len() - 12);
                    let bit = rng.below(8);
                    b[at] ^= 1 << bit;
                    let r = read(&b, &format!("trace {ti} bit {bit} flipped at {at}")).unwrap();
                    assert!(
                        r.is_err(),
                        "trace {ti}: flipping bit {bit} at byte {at} went unnoticed"
                    );
                    continue;
                }
                2 => {
                    let at = rng.below(b.len());
                    b.truncate(at);
                    let r = read(&b, &format!("trace {ti} truncated at {at}")).unwrap();
                    // Cut at a record boundary: readable, but no footer.
                    if let Ok(t) = r {
                        assert!(t.footer.is_none(), "truncated at {at} yet complete");
                    }
                    continue;
                }
                3 => {
                    // Splice: a range of the file copied over another place.
                    let len = 1 + rng.below(64);
                    let from = rng.below(b.len() - len);
                    let to = rng.below(b.len() - len);
                    let piece = b[from..from + len].to_vec();
                    b[to..to + len].copy_from_slice(&piece);
                    format!("trace {ti} splice {from}+{len} -> {to}")
                }
                _ => {
                    // Random bytes over a few places, including lengths.
                    for _ in 0..1 + rng.below(8) {
                        let at = rng.below(b.len());
                        b[at] = rng.next() as u8;
                    }
                    format!("trace {ti} random bytes, case {case}")
                }
            };
            let _ = read(&b, &what);
        }
    }
}
