//! A signal the program already got from its process group is
//! not forwarded again by the recorder (servers treat a second SIGINT as
//! "force quit").

use crate::record_util;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use record_util::*;

fn count(stdout: &str) -> u32 {
    printed_count(stdout).unwrap_or_else(|| panic!("no sigint_count in {stdout}"))
}

fn printed_count(stdout: &str) -> Option<u32> {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("sigint_count="))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn timeout_s_int_reaches_the_program_once() {
    let dir = temp("timeout-int");
    let bin = build_c("sigint_count", &dir);
    let out = Command::new("timeout")
        .args(["-s", "INT", "1"])
        .arg(env!("CARGO_BIN_EXE_lockscope"))
        .args(["record", "-o"])
        .arg(dir.join("t.lstrace"))
        .arg("--")
        .arg(&bin)
        .stdin(Stdio::null())
        .output()
        .expect("timeout (coreutils) runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(count(&stdout), 1, "stdout: {stdout}\nstderr: {stderr}");
    // The trace is finished normally.
    let t = lockscope_format::Trace::open(dir.join("t.lstrace")).unwrap();
    assert!(t.footer.is_some(), "{stderr}");
}

#[test]
fn kill_int_to_the_process_group_reaches_the_program_once() {
    let dir = temp("pgrp-int");
    let bin = build_c("sigint_count", &dir);
    // The recorder leads a process group of its own, as a shell job does.
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["record", "-o"])
        .arg(dir.join("t.lstrace"))
        .arg("--")
        .arg(&bin)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let pgid = child.id() as i32;
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    // SAFETY: kill(2) on the process group we just created.
    assert_eq!(unsafe { libc_kill(-pgid, 2) }, 0);
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let st = child.wait().unwrap();
    let stdout = rest.join("\n");
    assert!(st.success(), "{stdout}");
    assert_eq!(count(&stdout), 1, "{stdout}");
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}
