//! `lockscope record` on a real server from Debian: memcached 1.6 (four
//! worker threads behind libevent, item locks, LRU and slab locks,
//! per-thread statistics mutexes, maintenance threads on condition
//! variables), driven by a client in this test that knows exactly what it
//! asked for. Checks what a user of a server needs to trust:
//!
//! - the server computes the same under the recorder: every value set is
//!   read back, and memcached's own counters (`cmd_set`, `get_hits`) equal
//!   the client's requests;
//! - SIGINT to the recorder's process group (`kill -INT -PGID`, as
//!   `timeout` and supervisors send it) shuts memcached down normally
//!   (exit 0; that it arrives once is record_signals.rs's test: memcached
//!   shows no difference);
//! - the trace is complete: 0 events lost, at least one mutex acquisition
//!   per request, every acquisition released.
//!
//! Skipped with a notice when memcached is not installed
//! (`apt-get install memcached`; scripts/test.sh installs it).

use crate::record_util;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use record_util::{lockscope, ok, temp};
use serde_json::Value;

fn memcached() -> Option<std::path::PathBuf> {
    lockscope_test_support::tool_or_skip("memcached", "memcached")
}

/// A port nobody listens on now (the kernel's pick for an ephemeral bind).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Connects, retrying while the recorded server starts.
fn connect(port: u16) -> TcpStream {
    let start = Instant::now();
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => {
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                // Each request is written whole; without this, Nagle and
                // delayed ACKs add ~40 ms to requests written in pieces.
                s.set_nodelay(true).unwrap();
                return s;
            }
            Err(e) if start.elapsed() < Duration::from_secs(30) => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("memcached did not listen on {port}: {e}"),
        }
    }
}

/// One line of the text protocol's reply.
fn line(r: &mut BufReader<TcpStream>) -> String {
    let mut s = String::new();
    r.read_line(&mut s).unwrap();
    s.trim_end().to_string()
}

/// `n` sets then `n` gets of distinct keys on one connection; every get
/// must return the value set.
fn client(port: u16, id: usize, n: usize) {
    let s = connect(port);
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    for i in 0..n {
        let v = format!("value-{id}-{i}-{}", "x".repeat(i % 50));
        let req = format!("set k{id}_{i} 0 0 {}\r\n{v}\r\n", v.len());
        w.write_all(req.as_bytes()).unwrap();
        assert_eq!(line(&mut r), "STORED", "set k{id}_{i}");
    }
    for i in 0..n {
        let v = format!("value-{id}-{i}-{}", "x".repeat(i % 50));
        w.write_all(format!("get k{id}_{i}\r\n").as_bytes())
            .unwrap();
        assert_eq!(line(&mut r), format!("VALUE k{id}_{i} 0 {}", v.len()));
        let mut data = vec![0u8; v.len() + 2];
        r.read_exact(&mut data).unwrap();
        assert_eq!(&data[..v.len()], v.as_bytes(), "get k{id}_{i}");
        assert_eq!(line(&mut r), "END");
    }
}

/// memcached's `stats` as name -> value.
fn stats(port: u16) -> std::collections::HashMap<String, String> {
    let s = connect(port);
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    w.write_all(b"stats\r\n").unwrap();
    let mut out = std::collections::HashMap::new();
    loop {
        let l = line(&mut r);
        if l == "END" || l.is_empty() {
            break;
        }
        let mut it = l.split_whitespace().skip(1);
        if let (Some(k), Some(v)) = (it.next(), it.next()) {
            out.insert(k.to_string(), v.to_string());
        }
    }
    out
}

#[test]
fn memcached_serves_exactly_what_it_was_asked_under_record_and_stops_on_sigint() {
    let Some(mc) = memcached() else { return };
    let dir = temp("memcached");
    let trace = dir.path().join("mc.lstrace");
    let port = free_port();
    let port_s = port.to_string();
    // Its own process group, so that the test can signal the group the
    // way a terminal's Ctrl-C does: recorder and memcached both get it.
    let child = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["record", "-o", trace.to_str().unwrap(), "--"])
        .arg(&mc)
        // -u root: memcached refuses to run as root without it (CI runs
        // as root); ignored otherwise. -U 0: no UDP.
        .args(["-u", "root", "-t", "4", "-U", "0", "-l", "127.0.0.1", "-p"])
        .arg(&port_s)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let pgid = child.id() as i32;

    const CLIENTS: usize = 4;
    const N: usize = 500;
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| std::thread::spawn(move || client(port, id, N)))
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let st = stats(port);
    let total = (CLIENTS * N) as u64;
    let num = |k: &str| -> u64 { st[k].parse().unwrap() };
    assert_eq!(num("cmd_set"), total, "{st:?}");
    assert_eq!(num("get_hits"), total, "{st:?}");
    assert_eq!(num("get_misses"), 0, "{st:?}");

    // SAFETY: kill(2) on the process group of our own child, which we
    // created above; SIGINT is 2 on Linux.
    assert_eq!(unsafe { libc_kill(-pgid, 2) }, 0);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "memcached must shut down normally\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );

    let a = ["report", trace.to_str().unwrap(), "--json", "--no-symbols"];
    let r: Value = serde_json::from_str(&ok(&lockscope(&a, None))).unwrap();
    assert_eq!(r["lost_events"], 0, "{stderr}");
    // No section without its release, none inside another's, no release
    // without its acquisition, nothing still held at exit.
    for (k, v) in r["anomalies"].as_object().unwrap() {
        assert_eq!(v, 0, "anomaly {k}: {}", r["anomalies"]);
    }
    assert_eq!(r["open_holds"].as_array().unwrap().len(), 0);
    let mut acquired = 0u64;
    for l in r["locks"].as_array().unwrap() {
        if l["kind"] == "mutex" {
            acquired += l["acquisitions"].as_u64().unwrap();
        }
    }
    assert!(
        acquired >= 2 * total,
        "{acquired} mutex acquisitions for {} requests",
        2 * total
    );
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}
