//! lockscope's exports opened in the viewer people read them with:
//! speedscope's own web app (npm package `speedscope`,
//! installed by `scripts/test-viewers.sh`), served on 127.0.0.1 by this
//! test and run in Debian's headless `chromium`, loads
//! `export --format speedscope`, `--format perfetto` (Chrome trace-event
//! JSON, which speedscope imports too), `--format pprof` and
//! `--format folded`: the app's importer names the format it recognized,
//! reports no error, and shows one profile per recorded thread.
//! Screenshots are saved under the target's test-temporary directory
//! (`target/tmp/export-viewers/`) for a person to look at.
//!
//! A viewer that is not installed fails the test with the command that
//! installs it, as a missing `chromium` or `go` does elsewhere.

use crate::export_util;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;

use export_util::{lockscope, record_fixture, report_json, require_tool, require_viewer};

/// speedscope's built app (`dist/release` of the npm package).
fn speedscope_app() -> PathBuf {
    require_viewer(
        "npm/node_modules/speedscope/dist/release/index.html",
        "speedscope's app",
    )
    .parent()
    .unwrap()
    .to_path_buf()
}

/// A static file server on 127.0.0.1 for one test: `/app/...` from
/// speedscope's app, `/data/...` from `data`. It answers at most
/// `MAX_REQUESTS` requests, one connection at a time, then stops.
struct Server {
    port: u16,
}

const MAX_REQUESTS: usize = 500;

fn content_type(p: &Path) -> &'static str {
    match p.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript",
        Some("css") => "text/css",
        Some("json") => "application/json",
        Some("wasm") => "application/wasm",
        Some("png") => "image/png",
        Some("woff2") => "font/woff2",
        _ => "application/octet-stream",
    }
}

fn serve_one(mut s: TcpStream, app: &Path, data: &Path) -> std::io::Result<()> {
    let mut line = String::new();
    let mut r = BufReader::new(s.try_clone()?);
    r.read_line(&mut line)?;
    // The request's headers are not needed; read them off.
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
    }
    let target = line.split_whitespace().nth(1).unwrap_or("/");
    let target = target.split(['?', '#']).next().unwrap();
    let file = if target.contains("..") {
        None
    } else if let Some(rest) = target.strip_prefix("/app/") {
        Some(app.join(rest))
    } else {
        target.strip_prefix("/data/").map(|rest| data.join(rest))
    };
    match file.and_then(|f| std::fs::read(&f).ok().map(|b| (f, b))) {
        Some((f, body)) => {
            write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                content_type(&f),
                body.len()
            )?;
            s.write_all(&body)?;
        }
        None => {
            s.write_all(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            )?;
        }
    }
    s.flush()
}

impl Server {
    fn start(app: PathBuf, data: PathBuf) -> Server {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for s in l.incoming().take(MAX_REQUESTS).flatten() {
                let _ = serve_one(s, &app, &data);
            }
        });
        Server { port }
    }

    /// The app's URL opening `/data/file` (speedscope fetches it).
    fn url(&self, file: &str) -> String {
        let base = format!("http://127.0.0.1:{}", self.port);
        format!("{base}/app/index.html#profileURL={base}/data/{file}")
    }
}

/// Runs headless Chromium on `url` with `extra` flags in a fresh profile
/// directory; returns (stdout, stderr).
fn chromium(url: &str, extra: &[String], home: &Path) -> (String, String) {
    let browser = require_tool("chromium", "chromium");
    let profile = home.join(format!("chromium-{}", extra.len()));
    let _ = std::fs::remove_dir_all(&profile);
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            // speedscope draws with WebGL: with no GPU, Chromium 137 and
            // later create a WebGL context only when software rendering
            // is allowed explicitly (before, SwiftShader was a silent
            // fallback; without it the page logs "Failed to create WebGL
            // context").
            "--enable-unsafe-swiftshader",
            "--use-angle=swiftshader",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--window-size=1400,900",
            // speedscope fetches the profile after load: give the page
            // time to import and draw before the DOM or screen is taken.
            "--virtual-time-budget=15000",
            // The page's console on stderr: the importer says what it
            // recognized, or why it failed.
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .env("HOME", home)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "chromium failed: {stderr}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// The page's console messages (from Chromium's log on stderr).
fn console(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(|l| l.split_once("] ").map_or(l, |x| x.1))
        .collect()
}

/// Loads `file` (in `data`) into speedscope; asserts the importer took
/// it as `format` with no error and returns the DOM. Saves a screenshot
/// `name.png`.
fn load(server: &Server, file: &str, format: &str, name: &str, home: &Path) -> String {
    let url = server.url(file);
    let (dom, err) = chromium(&url, &["--dump-dom".to_string()], home);
    let log = console(&err);
    assert!(
        log.iter()
            .any(|l| l.contains(&format!("\"Importing as {format}\""))),
        "speedscope did not import {file} as {format}; console:\n{}",
        log.join("\n")
    );
    for bad in ["Failed to load format", "Uncaught", "Error"] {
        assert!(
            !log.iter().any(|l| l.contains(bad)),
            "speedscope reported an error loading {file}:\n{}",
            log.join("\n")
        );
    }
    assert!(
        !dom.contains("Something went wrong"),
        "speedscope failed to show {file}"
    );
    // The flame chart is WebGL on a canvas: a picture for a person (and a
    // painted one is well over the size of a blank page).
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("export-viewers");
    std::fs::create_dir_all(&dir).unwrap();
    let png = dir.join(format!("{name}.png"));
    let _ = std::fs::remove_file(&png);
    chromium(&url, &[format!("--screenshot={}", png.display())], home);
    let bytes = std::fs::read(&png).expect("a screenshot was written");
    assert!(
        bytes.starts_with(b"\x89PNG") && bytes.len() > 8_000,
        "{}",
        png.display()
    );
    eprintln!("screenshot: {}", png.display());
    dom
}

/// The profile chooser's `NAME (k/N)`: (k, N).
fn profiles_shown(dom: &str) -> Option<(usize, usize)> {
    dom.match_indices('(').find_map(|(at, _)| {
        let rest = &dom[at + 1..];
        let (k, rest) = rest.split_once('/')?;
        let (n, _) = rest.split_once(')')?;
        Some((k.parse().ok()?, n.parse().ok()?))
    })
}

fn export(trace: &Path, format: &str, out: &Path) {
    lockscope(&[
        "export".as_ref(),
        "--format".as_ref(),
        format.as_ref(),
        trace.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
}

#[test]
fn exports_open_in_speedscope_app_in_chromium() {
    let app = speedscope_app();
    let (dir, trace) = record_fixture("i11-viewers-sleep", "report/sleep_hold", &[]);
    let threads = report_json(&trace)["threads"].as_array().unwrap().len();
    assert_eq!(threads, 3, "sleep_hold runs main and two threads");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    export(&trace, "speedscope", &data.join("run.speedscope.json"));
    export(&trace, "perfetto", &data.join("run.trace.json"));
    export(&trace, "pprof", &data.join("run.pb.gz"));
    export(&trace, "folded", &data.join("run.folded"));
    let server = Server::start(app, data);

    // speedscope's own format: one evented profile per thread, the
    // document's name as the page title.
    let dom = load(
        &server,
        "run.speedscope.json",
        "speedscope json file",
        "speedscope",
        &dir,
    );
    let title = dom
        .split_once("<title>")
        .and_then(|(_, t)| t.split_once("</title>"))
        .map(|(t, _)| t)
        .unwrap_or_default();
    assert!(
        title.starts_with("lockscope: ") && title.ends_with("sleep_hold - speedscope"),
        "profile name not shown: {title:?}"
    );
    // One profile per thread, the one shown first the waiter's (the
    // export's activeProfileIndex).
    let (shown, n) = profiles_shown(&dom).expect("profile chooser");
    assert_eq!(n, threads, "one profile per thread");
    assert!(
        shown > 1,
        "the main thread (which only joins) is shown first"
    );
    assert!(dom.contains("sleep_hold (tid "), "thread names not shown");

    // The Perfetto export (trace-event JSON): speedscope's Trace Event
    // importer makes one profile per (process, thread) track from the
    // complete slices and the thread-name metadata.
    let dom = load(
        &server,
        "run.trace.json",
        "Trace Event Format profile",
        "perfetto-json",
        &dir,
    );
    assert_eq!(
        profiles_shown(&dom),
        Some((1, threads)),
        "one profile per thread"
    );
    assert!(dom.contains("sleep_hold (tid "), "thread names not shown");

    // pprof (gzipped profile.proto) and folded stacks: the wait profile.
    load(
        &server,
        "run.pb.gz",
        "protobuf encoded pprof file",
        "pprof",
        &dir,
    );
    load(
        &server,
        "run.folded",
        "collapsed stack format",
        "folded",
        &dir,
    );
}
