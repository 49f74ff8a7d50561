//! Compiles the BPF program (`bpf/futex.bpf.c`) with clang, the only
//! compiler that targets BPF. Without clang the crate still builds (the
//! README's first command needs only Rust and gcc) and attach mode says
//! what is missing when it is asked for: the alternative, committing the
//! compiled object, would ship a binary nobody can review.
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(lockscope_no_bpf)");
    println!("cargo::rerun-if-changed=bpf/futex.bpf.c");
    println!("cargo::rerun-if-env-changed=CLANG");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let obj = out.join("futex.bpf.o");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let status = Command::new(&clang)
        .args([
            "-O2",
            "-g",
            "-target",
            "bpf",
            "-Wall",
            "-Werror",
            "-c",
            "bpf/futex.bpf.c",
            "-o",
        ])
        .arg(&obj)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("{clang} failed to compile bpf/futex.bpf.c ({s})"),
        Err(e) => {
            println!(
                "cargo::warning=attach mode (lockscope record -p) is not built: {clang}: {e}; install clang and rebuild"
            );
            println!("cargo::rustc-cfg=lockscope_no_bpf");
            // An empty file so that include_bytes! has something to name.
            std::fs::write(&obj, b"").expect("write the empty BPF object");
        }
    }
}
