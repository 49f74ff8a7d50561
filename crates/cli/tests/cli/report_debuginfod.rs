//! Debug files from a debuginfod server, and from a
//! Debian package's separate debug file (a real distribution binary).

use crate::record_util;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockscope_test_support::tool_or_skip;
use record_util::{build_id_hex, build_stripped_locks, record, run_tool, temp};
use serde_json::Value;

/// A debuginfod server on 127.0.0.1 for one test: it serves `file` at
/// `/buildid/<id>/debuginfo` while `serving` is set (404 otherwise and for
/// every other build-id), with `Content-Length` or chunked, and counts the
/// requests for `id`. It stops when dropped, or by itself after 5 minutes.
struct Server {
    url: String,
    hits: Arc<AtomicUsize>,
    serving: Arc<AtomicBool>,
    chunked: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start(id: &str, file: Vec<u8>) -> Server {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        l.set_nonblocking(true).unwrap();
        let hits = Arc::new(AtomicUsize::new(0));
        let serving = Arc::new(AtomicBool::new(true));
        let chunked = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let want = format!("/buildid/{id}/debuginfo");
        let (h, s, c, st) = (hits.clone(), serving.clone(), chunked.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let end = Instant::now() + Duration::from_secs(300);
            while !st.load(Ordering::Relaxed) && Instant::now() < end {
                let (conn, _) = match l.accept() {
                    Ok(x) => x,
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                };
                conn.set_nonblocking(false).unwrap();
                conn.set_read_timeout(Some(Duration::from_secs(10)))
                    .unwrap();
                let mut r = BufReader::new(&conn);
                let mut first = String::new();
                if r.read_line(&mut first).is_err() {
                    continue;
                }
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                        break;
                    }
                }
                let path = first.split_whitespace().nth(1).unwrap_or("").to_string();
                let mut w = &conn;
                if path != want {
                    let _ = w
                        .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found");
                    continue;
                }
                h.fetch_add(1, Ordering::Relaxed);
                if !s.load(Ordering::Relaxed) {
                    let _ = w.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
                } else if c.load(Ordering::Relaxed) {
                    let _ = w.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
                    for part in file.chunks(10_000) {
                        let _ = write!(w, "{:x}\r\n", part.len());
                        let _ = w.write_all(part);
                        let _ = w.write_all(b"\r\n");
                    }
                    let _ = w.write_all(b"0\r\n\r\n");
                } else {
                    let _ = write!(
                        w,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
                        file.len()
                    );
                    let _ = w.write_all(&file);
                }
            }
        });
        Server {
            url,
            hits,
            serving,
            chunked,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `lockscope report TRACE --json` with the given environment (the debug
/// directories and debuginfod variables of the test's own environment are
/// removed first).
fn report_json(trace: &Path, extra: &[&str], env: &[(&str, &str)]) -> Value {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lockscope"));
    c.args(["report", trace.to_str().unwrap(), "--json"])
        .args(extra);
    for v in [
        "LOCKSCOPE_DEBUG_DIRS",
        "LOCKSCOPE_DEBUGINFOD",
        "DEBUGINFOD_URLS",
        "DEBUGINFOD_CACHE_PATH",
        "DEBUGINFOD_MAXSIZE",
    ] {
        c.env_remove(v);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// `truth-name` lines of stripped_locks: address -> (name, count).
fn truths(stdout: &str) -> HashMap<String, (String, u64)> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("truth-name "))
        .map(|l| {
            let kv: HashMap<&str, &str> = l.split(' ').filter_map(|w| w.split_once('=')).collect();
            let addr = format!("{:#x}", u64::from_str_radix(&kv["addr"][2..], 16).unwrap());
            (addr, (kv["name"].to_string(), kv["count"].parse().unwrap()))
        })
        .collect()
}

/// Whether every lock of the fixture is named from the debug file, with
/// the user's function and line as its site (`take`, line 30, inlined
/// into main at -O2).
fn named_from_debug_info(r: &Value, truth: &HashMap<String, (String, u64)>) -> bool {
    let locks = r["locks"].as_array().unwrap();
    truth.iter().all(|(addr, (name, count))| {
        let l = locks
            .iter()
            .find(|l| l["address"] == addr.as_str())
            .unwrap_or_else(|| panic!("no lock at {addr}: {r}"));
        assert_eq!(l["acquisitions"].as_u64(), Some(*count), "{addr}");
        let site = &l["sites"][0];
        l["name"] == name.as_str()
            && site["function"] == "take"
            && site["line"] == 30
            && site["file"]
                .as_str()
                .is_some_and(|f| f.ends_with("stripped_locks.c"))
    })
}

/// Item 2 (debuginfod): a stripped fixture whose debug file
/// (`objcopy --only-keep-debug`) is on no local path is named once a
/// debuginfod server has it: its static locks (`lru_locks[12]`,
/// `buckets[3].lock`, `stats_lock`) and the user's function and line. The
/// file is fetched once (chunked) into the elfutils cache layout
/// (`CACHE/ID/debuginfo`) and read from there next time; a file over
/// DEBUGINFOD_MAXSIZE is refused with a note naming the limit;
/// `--no-debuginfod` asks nothing; a server's 404 is remembered as an empty
/// file and not asked again.
#[test]
fn debuginfod_names_a_stripped_binary() {
    let dir = temp("debuginfod-server");
    build_stripped_locks(&dir);
    std::fs::copy(dir.join("full"), dir.join("prog")).unwrap();
    run_tool("strip", &["--strip-all", "prog"], &dir);
    let id = build_id_hex(&dir.join("prog"));
    let debug = std::fs::read(dir.join("prog.debug")).unwrap();
    let run = record(&dir, &[], &dir.join("prog"), &[], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let truth = truths(&run.stdout);
    assert_eq!(truth.len(), 5);

    let server = Server::start(&id, debug.clone());
    server.chunked.store(true, Ordering::Relaxed);
    let cache = dir.join("cache");
    let env = |cache: &Path| -> Vec<(String, String)> {
        vec![
            ("DEBUGINFOD_URLS".into(), server.url.clone()),
            (
                "DEBUGINFOD_CACHE_PATH".into(),
                cache.to_str().unwrap().into(),
            ),
        ]
    };
    let as_ref = |v: &[(String, String)]| -> Vec<(String, String)> { v.to_vec() };
    let call = |extra: &[&str], env: &[(String, String)]| {
        let e: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        report_json(&run.trace_path, extra, &e)
    };

    // Without a server: the fallback names, and a note.
    let bare = call(&[], &[]);
    assert!(!named_from_debug_info(&bare, &truth));
    assert!(bare["notes"].to_string().contains("stripped"));

    let r = call(&[], &as_ref(&env(&cache)));
    assert!(named_from_debug_info(&r, &truth), "{r}");
    assert_eq!(server.hits.load(Ordering::Relaxed), 1);
    let cached: PathBuf = cache.join(&id).join("debuginfo");
    assert_eq!(
        std::fs::read(&cached).unwrap(),
        debug,
        "the elfutils layout"
    );
    assert!(
        !r["notes"].to_string().contains("stripped"),
        "{}",
        r["notes"]
    );

    // From the cache: no request.
    let again = call(&[], &as_ref(&env(&cache)));
    assert!(named_from_debug_info(&again, &truth));
    assert_eq!(server.hits.load(Ordering::Relaxed), 1);

    // The size limit (with Content-Length this time).
    server.chunked.store(false, Ordering::Relaxed);
    let small = dir.join("cache-small");
    let mut e = env(&small);
    e.push(("DEBUGINFOD_MAXSIZE".into(), "1000".into()));
    let r = call(&[], &e);
    assert!(!named_from_debug_info(&r, &truth));
    assert_eq!(server.hits.load(Ordering::Relaxed), 2);
    let notes = r["notes"].to_string();
    assert!(
        notes.contains("larger than 1000 bytes (DEBUGINFOD_MAXSIZE)"),
        "{notes}"
    );
    assert!(!small.join(&id).join("debuginfo").exists());

    // Turned off: nothing asked.
    let off = dir.join("cache-off");
    for (extra, var) in [(&["--no-debuginfod"][..], None), (&[][..], Some("0"))] {
        let mut e = env(&off);
        if let Some(v) = var {
            e.push(("LOCKSCOPE_DEBUGINFOD".into(), v.into()));
        }
        let r = call(extra, &e);
        assert!(!named_from_debug_info(&r, &truth));
        assert!(
            !r["notes"].to_string().contains("debuginfod at"),
            "{}",
            r["notes"]
        );
    }
    assert_eq!(server.hits.load(Ordering::Relaxed), 2);

    // Not found: remembered, not asked again.
    server.serving.store(false, Ordering::Relaxed);
    let miss = dir.join("cache-miss");
    for _ in 0..2 {
        let r = call(&[], &env(&miss));
        assert!(!named_from_debug_info(&r, &truth));
        let notes = r["notes"].to_string();
        assert!(
            notes.contains(&format!("debuginfod at {}", server.url)),
            "{notes}"
        );
    }
    assert_eq!(server.hits.load(Ordering::Relaxed), 3);
    assert_eq!(
        std::fs::metadata(miss.join(&id).join("debuginfo"))
            .unwrap()
            .len(),
        0
    );
}

/// Item 2 on a real distribution binary: Debian's /usr/bin/python3 is
/// stripped (no .symtab, no DWARF; `take_gil` is static, so not in
/// .dynsym either); the python3-dbg package (Debian main) installs its
/// separate debug file under /usr/lib/debug/.build-id/. Recorded running
/// four threads, the GIL's mutex is taken in take_gil and drop_gil, and
/// the report names those functions with their file and line, and the
/// lock by its member path (`_PyRuntime.ceval.gil.mutex` in 3.11), which
/// only the debug file found by build-id can give. Skipped (saying so) when the
/// debug file is not installed (scripts/test-packages.txt installs it).
#[test]
fn debian_python3_named_through_python3_dbg() {
    let Some(py) = tool_or_skip("/usr/bin/python3", "python3") else {
        return;
    };
    let real = std::fs::canonicalize(&py).unwrap();
    let id = build_id_hex(&real);
    let debug = PathBuf::from("/usr/lib/debug/.build-id")
        .join(&id[..2])
        .join(format!("{}.debug", &id[2..]));
    if tool_or_skip(debug.to_str().unwrap(), "python3-dbg").is_none() {
        return;
    }
    let sections = Command::new("readelf")
        .args(["-S", "-W"])
        .arg(&real)
        .output()
        .unwrap();
    let sections = String::from_utf8_lossy(&sections.stdout);
    assert!(
        !sections.contains(".symtab") && !sections.contains(".debug_info"),
        "{} is expected stripped",
        real.display()
    );
    let dynsym = Command::new("nm").arg("-D").arg(&real).output().unwrap();
    assert!(!String::from_utf8_lossy(&dynsym.stdout).contains(" take_gil"));

    let dir = temp("python3-debug-file");
    let script = record_util::workspace().join("tests/programs/report/gil_threads.py");
    let run = record(&dir, &[], &py, &[script.to_str().unwrap()], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("truth-gil threads=4"));
    let r = report_json(&run.trace_path, &[], &[]);
    let notes = r["notes"].to_string();
    assert!(!notes.contains("python3"), "{notes}");
    let mut named = std::collections::BTreeSet::new();
    for l in r["locks"].as_array().unwrap() {
        for s in l["sites"].as_array().unwrap() {
            let f = s["function"].as_str().unwrap_or("");
            if (f == "take_gil" || f == "drop_gil")
                && s["file"].as_str().is_some_and(|p| p.contains("ceval_gil"))
                && s["line"].as_u64().is_some()
            {
                named.insert(f.to_string());
                // The lock itself by its path in the debug file's types
                // (from .dynsym alone it would be `_PyRuntime+0x1b8`).
                let name = l["name"].as_str().unwrap();
                assert!(
                    name.starts_with("_PyRuntime.") && name.contains(".gil."),
                    "{name}"
                );
            }
        }
    }
    assert_eq!(
        named.into_iter().collect::<Vec<_>>(),
        ["drop_gil", "take_gil"],
        "{:#}",
        r["locks"]
    );
}

/// A child process killed when dropped.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Item 2, debuginfod over `https://` (every public server): fetched with
/// curl, checked with the test's own certificate authority
/// (`CURL_CA_BUNDLE`), from a TLS server on 127.0.0.1 (Python's
/// http.server serving a directory laid out as debuginfod's URLs), into
/// the same cache; the report names the user's function and line.
#[test]
fn debuginfod_over_https_through_curl() {
    for tool in ["curl", "openssl"] {
        if tool_or_skip(tool, tool).is_none() {
            return;
        }
    }
    let Some(py) = tool_or_skip("/usr/bin/python3", "python3") else {
        return;
    };
    let dir = temp("debuginfod-https");
    let src = record_util::workspace().join("tests/programs/report/stripped_locks.c");
    let st = Command::new("gcc")
        .args(["-O2", "-g", "-pthread", "-o"])
        .arg(dir.join("full"))
        .arg(&src)
        .status()
        .expect("gcc");
    assert!(st.success());
    let id = build_id_hex(&dir.join("full"));
    let served = dir.join("www/buildid").join(&id);
    std::fs::create_dir_all(&served).unwrap();
    run_tool(
        "objcopy",
        &[
            "--only-keep-debug",
            "full",
            served.join("debuginfo").to_str().unwrap(),
        ],
        &dir,
    );
    std::fs::copy(dir.join("full"), dir.join("prog")).unwrap();
    run_tool("strip", &["--strip-all", "prog"], &dir);
    let st = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "key.pem",
            "-out",
            "cert.pem",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .current_dir(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "openssl req");
    // Serves www/ over TLS; exits by itself after 120 s.
    let server = "import http.server, ssl, sys, os, threading\n\
        os.chdir(sys.argv[1])\n\
        class H(http.server.SimpleHTTPRequestHandler):\n    \
            def log_message(self, *a): pass\n\
        srv = http.server.HTTPServer(('127.0.0.1', 0), H)\n\
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n\
        ctx.load_cert_chain(sys.argv[2], sys.argv[3])\n\
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)\n\
        print(srv.server_address[1], flush=True)\n\
        threading.Timer(120, lambda: os._exit(0)).start()\n\
        srv.serve_forever()\n";
    let mut child = Child(
        Command::new(py)
            .arg("-c")
            .arg(server)
            .arg(dir.join("www"))
            .arg(dir.join("cert.pem"))
            .arg(dir.join("key.pem"))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut port = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut port)
        .unwrap();
    let url = format!("https://127.0.0.1:{}", port.trim());

    let run = record(&dir, &[], &dir.join("prog"), &[], b"");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let truth = truths(&run.stdout);
    let cache = dir.join("cache");
    let cert = dir.join("cert.pem");
    let r = report_json(
        &run.trace_path,
        &[],
        &[
            ("DEBUGINFOD_URLS", &url),
            ("DEBUGINFOD_CACHE_PATH", cache.to_str().unwrap()),
            ("CURL_CA_BUNDLE", cert.to_str().unwrap()),
        ],
    );
    assert!(named_from_debug_info(&r, &truth), "{}\n{r}", r["notes"]);
    assert!(cache.join(&id).join("debuginfo").exists());
    // Without the certificate authority curl refuses the server, and
    // the note says why.
    let r = report_json(
        &run.trace_path,
        &[],
        &[
            ("DEBUGINFOD_URLS", &url),
            (
                "DEBUGINFOD_CACHE_PATH",
                dir.join("cache2").to_str().unwrap(),
            ),
            ("CURL_CA_BUNDLE", "/nonexistent/ca.pem"),
        ],
    );
    assert!(!named_from_debug_info(&r, &truth));
    let notes = r["notes"].to_string();
    assert!(
        notes.contains("debuginfod failed") && notes.contains("curl"),
        "{notes}"
    );
}
