//! `lockscope run` on a real multithreaded program from Debian: pbzip2
//! (mutexes and condition variables between its reader, compressor and
//! writer threads). Compressed and decompressed output must be
//! byte-identical to the original under every lock. Skipped with a notice
//! when pbzip2 is not installed (`apt-get install pbzip2`).

use crate::run_support;
use run_support::*;
use std::path::Path;

fn pbzip2() -> Option<std::path::PathBuf> {
    lockscope_test_support::tool_or_skip("pbzip2", "pbzip2")
}

/// 2.5 MB of compressible text, so that -b1 gives ~25 blocks for the
/// worker threads.
fn input(dir: &Path) -> std::path::PathBuf {
    let mut s = String::new();
    let mut x: u64 = 1;
    while s.len() < 2_500_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let w = [
            "lock",
            "mutex",
            "queue",
            "thread",
            "wait",
            "spin",
            "park",
            "hand-over",
            "node",
        ][(x % 9) as usize];
        s.push_str(w);
        s.push(if x % 11 < 1 { '\n' } else { ' ' });
    }
    let p = dir.join("in.txt");
    std::fs::write(&p, s).unwrap();
    p
}

#[test]
fn pbzip2_compress_and_decompress_identical_under_every_lock() {
    let Some(pbz) = pbzip2() else { return };
    let dir = temp("pbzip2");
    let inp = input(&dir);
    let inp_s = inp.to_str().unwrap();
    // -p4: more threads than the CI machine's 2 cores; -b1: 100 kB blocks.
    same_output_under_every_lock(&pbz, &["-p4", "-b1", "-c", inp_s]);
    let compressed =
        lockscope_run(&["--lock", "pthread"], &pbz, &["-p4", "-b1", "-c", inp_s]).stdout;
    let bz = dir.join("in.txt.bz2");
    std::fs::write(&bz, &compressed).unwrap();
    let original = std::fs::read(&inp).unwrap();
    for alg in ALGORITHMS {
        for wait in WAITS {
            let o = lockscope_run(
                &["--lock", alg, "--wait", wait],
                &pbz,
                &["-d", "-p4", "-c", bz.to_str().unwrap()],
            );
            assert_eq!(
                shell_code(&o),
                0,
                "{alg} {wait}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            assert!(
                o.stdout == original,
                "{alg} {wait}: decompressed output differs"
            );
        }
    }
    let o = lockscope_run(
        &["--lock", "hmcs", "--verbose"],
        &pbz,
        &["-p4", "-b1", "-c", inp_s],
    );
    let (n, m) = verbose_counts(&String::from_utf8_lossy(&o.stderr)).expect("summary line");
    assert!(
        n >= 3 && m > 0,
        "pbzip2 should use several mutexes: {n} {m}"
    );
}
