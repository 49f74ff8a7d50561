//! Separate debug files from debuginfod servers.
//!
//! When a module has no debug info on this machine and `DEBUGINFOD_URLS`
//! is set, its debug file is asked for by GNU build-id
//! (`URL/buildid/HEX/debuginfo`, the protocol of elfutils' debuginfod) and
//! kept in the cache that elfutils' client uses, so that `gdb`,
//! `debuginfod-find` and lockscope share downloads:
//! `$DEBUGINFOD_CACHE_PATH`, else `$XDG_CACHE_HOME/debuginfod_client`,
//! else `~/.cache/debuginfod_client`, holding `HEX/debuginfo`. A server's
//! "not found" is remembered there as an empty file, as elfutils does, for
//! `cache_miss_s` seconds (the number in that file of the cache, else 600),
//! so that a report does not ask again for every runtime library.
//!
//! The HTTP client is a small one on `std::net::TcpStream` (GET, status,
//! `Content-Length` or chunked bodies, redirects) rather than a crate: the
//! maintained clients bring a dozen crates (ureq: `url`, `idna` and the
//! Unicode tables, or `http`; with TLS also rustls and ring, a C and
//! assembly build), for one request per module. `https://` URLs (every
//! public server) are fetched by the `curl` program when it is installed:
//! it carries the TLS stack, the system's certificates and proxy settings,
//! which an in-process client would have to duplicate.
//!
//! Limits, with elfutils' variable names: `DEBUGINFOD_TIMEOUT` (seconds
//! to connect and between two reads, default 30), `DEBUGINFOD_MAXTIME`
//! (seconds for a whole download, default 300), `DEBUGINFOD_MAXSIZE`
//! (bytes, default 2 GiB: larger files are not read for symbols anyway).
//! Turned off by `LOCKSCOPE_DEBUGINFOD=0` (or `off`, `no`) or by
//! [`set_enabled`] (`lockscope report --no-debuginfod`).
//!
//! # Entry points
//! [`Config::from_env`] (the servers and limits, or `None` when look-ups
//! are off) and [`debuginfo`] (a build id's debug file: from the cache, or
//! downloaded into it).
//!
//! # Design constraints
//! The only code of lockscope that opens network connections, in a crate
//! of its own so that nothing else can: the symbolizer asks it for a
//! file by build id and gets a path or nothing. A failure is never an
//! error of the report (a missing debug file means fewer names); it is
//! remembered for the run so that one refused download is not repeated
//! for every address.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

static DISABLED: AtomicBool = AtomicBool::new(false);

/// Turns debuginfod look-ups on or off for this process (the environment
/// can only turn them off too: see [`Config::from_env`]).
pub fn set_enabled(on: bool) {
    DISABLED.store(!on, Ordering::Relaxed);
}

/// Default of `DEBUGINFOD_MAXSIZE`.
pub const DEFAULT_MAX_SIZE: u64 = 2 << 30;
/// Default of `DEBUGINFOD_TIMEOUT`, seconds.
pub const DEFAULT_TIMEOUT_S: u64 = 30;
/// Default of `DEBUGINFOD_MAXTIME`, seconds.
pub const DEFAULT_MAX_TIME_S: u64 = 300;
/// How long a server's "not found" is believed when the cache has no
/// `cache_miss_s` file (elfutils' default).
const DEFAULT_MISS_S: u64 = 600;
/// Redirects followed per request.
const MAX_REDIRECTS: usize = 4;
/// Bytes of status line and headers accepted.
const MAX_HEADER_BYTES: usize = 64 << 10;

/// Where and how to ask.
#[derive(Clone, Debug)]
pub struct Config {
    /// Server base URLs, in order.
    pub urls: Vec<String>,
    /// The client cache directory.
    pub cache: PathBuf,
    /// Connect timeout and longest wait between two reads.
    pub timeout: Duration,
    /// Longest time for one download.
    pub max_time: Duration,
    /// Largest file accepted.
    pub max_size: u64,
}

impl Config {
    /// The configuration from the environment, or `None` when no server
    /// is named (`DEBUGINFOD_URLS` unset or empty) or look-ups are turned
    /// off (`LOCKSCOPE_DEBUGINFOD=0|off|no`, [`set_enabled`]).
    pub fn from_env() -> Option<Config> {
        if DISABLED.load(Ordering::Relaxed) {
            return None;
        }
        let off = std::env::var("LOCKSCOPE_DEBUGINFOD")
            .is_ok_and(|v| matches!(v.trim(), "0" | "off" | "no" | "false"));
        if off {
            return None;
        }
        let urls: Vec<String> = std::env::var("DEBUGINFOD_URLS")
            .ok()?
            .split_whitespace()
            .map(|u| u.trim_end_matches('/').to_string())
            .filter(|u| !u.is_empty())
            .collect();
        if urls.is_empty() {
            return None;
        }
        let num = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .filter(|&n| n > 0)
                .unwrap_or(default)
        };
        Some(Config {
            urls,
            cache: cache_dir()?,
            timeout: Duration::from_secs(num("DEBUGINFOD_TIMEOUT", DEFAULT_TIMEOUT_S)),
            max_time: Duration::from_secs(num("DEBUGINFOD_MAXTIME", DEFAULT_MAX_TIME_S)),
            max_size: num("DEBUGINFOD_MAXSIZE", DEFAULT_MAX_SIZE),
        })
    }

    /// `urls` joined for messages.
    pub fn describe(&self) -> String {
        self.urls.join(" ")
    }
}

/// The cache elfutils' client uses.
fn cache_dir() -> Option<PathBuf> {
    let var = |n: &str| std::env::var_os(n).filter(|v| !v.is_empty());
    if let Some(p) = var("DEBUGINFOD_CACHE_PATH") {
        return Some(p.into());
    }
    if let Some(p) = var("XDG_CACHE_HOME") {
        return Some(PathBuf::from(p).join("debuginfod_client"));
    }
    Some(PathBuf::from(var("HOME")?).join(".cache/debuginfod_client"))
}

/// Why a debug file could not be fetched (a server that does not have it
/// is not an error: see [`debuginfo`]).
#[derive(Debug)]
#[non_exhaustive]
pub enum DebuginfodError {
    /// The same request failed earlier in this process, with this
    /// message: it is not sent again (a report asks for one file from
    /// several analyses).
    Earlier {
        /// What the earlier attempt said.
        what: String,
    },
    /// A URL lockscope cannot use (names the URL and why).
    Url {
        /// The URL.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// Connecting, sending or receiving failed (includes timeouts).
    Io {
        /// The URL asked.
        url: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The server answered with an HTTP status other than 200 or 404.
    Status {
        /// The URL asked.
        url: String,
        /// The status line.
        status: String,
    },
    /// The answer was not valid HTTP.
    Protocol {
        /// The URL asked.
        url: String,
        /// What was wrong.
        why: String,
    },
    /// The file is larger than `DEBUGINFOD_MAXSIZE`.
    TooLarge {
        /// The URL asked.
        url: String,
        /// The limit in bytes.
        limit: u64,
    },
    /// The download took longer than `DEBUGINFOD_MAXTIME`.
    TooSlow {
        /// The URL asked.
        url: String,
        /// The limit.
        limit: Duration,
    },
    /// What the server sent is not the debug file asked for (not ELF, or
    /// another build-id).
    WrongFile {
        /// The URL asked.
        url: String,
        /// What is wrong.
        why: String,
    },
    /// `curl`, needed for `https://`, failed or is not installed.
    Curl {
        /// The URL asked.
        url: String,
        /// curl's message or why it could not run.
        why: String,
    },
    /// The cache could not be written.
    Cache {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl fmt::Display for DebuginfodError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DebuginfodError::Earlier { what } => write!(f, "{what}"),
            DebuginfodError::Url { url, why } => write!(f, "{url}: {why}"),
            DebuginfodError::Io { url, source } => write!(f, "{url}: {source}"),
            DebuginfodError::Status { url, status } => write!(f, "{url}: HTTP {status}"),
            DebuginfodError::Protocol { url, why } => write!(f, "{url}: bad answer: {why}"),
            DebuginfodError::TooLarge { url, limit } => write!(
                f,
                "{url}: file larger than {limit} bytes (DEBUGINFOD_MAXSIZE)"
            ),
            DebuginfodError::TooSlow { url, limit } => write!(
                f,
                "{url}: download took longer than {} s (DEBUGINFOD_MAXTIME)",
                limit.as_secs()
            ),
            DebuginfodError::WrongFile { url, why } => write!(f, "{url}: {why}"),
            DebuginfodError::Curl { url, why } => write!(f, "{url}: curl: {why}"),
            DebuginfodError::Cache { path, source } => {
                write!(f, "debuginfod cache {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for DebuginfodError {}

/// What [`debuginfo`] found.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The debug file in the cache, when a server (or the cache) had it.
    pub path: Option<PathBuf>,
    /// Servers that failed (a server without the file is not one).
    pub errors: Vec<DebuginfodError>,
    /// Whether the answer came from the cache (a file, or a remembered
    /// "not found") without asking a server.
    pub cached: bool,
}

/// The debug file of the build `build_id`, from the cache or else from
/// the servers in order (the first that has it). The file is checked to
/// be ELF with the same build-id before it enters the cache.
pub fn debuginfo(cfg: &Config, build_id: &[u8]) -> Outcome {
    let mut out = Outcome::default();
    if build_id.is_empty() {
        return out;
    }
    let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
    let dir = cfg.cache.join(&hex);
    let target = dir.join("debuginfo");
    if let Ok(m) = std::fs::metadata(&target) {
        if m.len() > 0 {
            if check_elf(&target, build_id).is_ok() {
                out.path = Some(target);
                out.cached = true;
                return out;
            }
            // A damaged or foreign file: fetch it again.
            let _ = std::fs::remove_file(&target);
        } else {
            let age = m
                .modified()
                .ok()
                .and_then(|t| SystemTime::now().duration_since(t).ok())
                .unwrap_or(Duration::MAX);
            if age < miss_time(&cfg.cache) {
                out.cached = true;
                return out;
            }
            let _ = std::fs::remove_file(&target);
        }
    }
    // A fetch that failed in this process is not tried again: the
    // report's analyses each symbolize (the gains, the GPU pass), and a
    // refused download (too large, too slow, a server error) was asked
    // for once per analysis. A file not found is remembered on disk.
    let key = (cfg.cache.clone(), hex.clone());
    if let Some(msgs) = failed().lock().ok().and_then(|m| m.get(&key).cloned()) {
        out.errors = msgs
            .into_iter()
            .map(|what| DebuginfodError::Earlier { what })
            .collect();
        return out;
    }
    if let Err(e) = create_private_dir(&dir) {
        out.errors.push(DebuginfodError::Cache {
            path: dir,
            source: e,
        });
        return out;
    }
    // One temporary file per attempt: two reports running at once each
    // download into their own file and the rename is atomic.
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let tmp = dir.join(format!(
        ".debuginfo.{}.{}.part",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let mut not_found = 0;
    for base in &cfg.urls {
        let url = format!("{base}/buildid/{hex}/debuginfo");
        let got =
            fetch(cfg, &url, &tmp).and_then(|found| match found {
                true => check_elf(&tmp, build_id).map(|()| true).map_err(|why| {
                    DebuginfodError::WrongFile {
                        url: url.clone(),
                        why,
                    }
                }),
                false => Ok(false),
            });
        match got {
            Ok(true) => match std::fs::rename(&tmp, &target) {
                Ok(()) => {
                    out.path = Some(target);
                    return out;
                }
                Err(e) => {
                    out.errors.push(DebuginfodError::Cache {
                        path: target.clone(),
                        source: e,
                    });
                    break;
                }
            },
            Ok(false) => not_found += 1,
            Err(e) => out.errors.push(e),
        }
    }
    let _ = std::fs::remove_file(&tmp);
    if not_found == cfg.urls.len() {
        // Remember "not found", as elfutils does: an empty file.
        let _ = std::fs::File::create(&target);
    }
    if !out.errors.is_empty() {
        if let Ok(mut m) = failed().lock() {
            m.insert(key, out.errors.iter().map(ToString::to_string).collect());
        }
    }
    out
}

/// Fetches that failed in this process: (cache, build-id) -> messages.
type Failed = std::sync::Mutex<std::collections::HashMap<(PathBuf, String), Vec<String>>>;

fn failed() -> &'static Failed {
    static F: std::sync::OnceLock<Failed> = std::sync::OnceLock::new();
    F.get_or_init(Default::default)
}

/// `cache_miss_s` of the cache (elfutils keeps its settings as files
/// holding a number), else 600 s.
fn miss_time(cache: &Path) -> Duration {
    let s = std::fs::read_to_string(cache.join("cache_miss_s"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(DEFAULT_MISS_S);
    Duration::from_secs(s)
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    // Debug files reveal what a user runs: the cache is the user's only.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Ok when `path` is an ELF file with GNU build-id `want`.
fn check_elf(path: &Path, want: &[u8]) -> Result<(), String> {
    use object::Object;
    let data = std::fs::read(path).map_err(|e| e.to_string())?;
    let file = object::File::parse(&*data).map_err(|e| format!("not an ELF file ({e})"))?;
    match file.build_id() {
        Ok(Some(id)) if id == want => Ok(()),
        Ok(Some(_)) => Err("the file has another build-id".into()),
        _ => Err("the file has no build-id".into()),
    }
}

/// Downloads `url` into `dest`: `Ok(true)` when it is there, `Ok(false)`
/// when the server does not have it (404).
fn fetch(cfg: &Config, url: &str, dest: &Path) -> Result<bool, DebuginfodError> {
    let deadline = Instant::now() + cfg.max_time;
    let mut url = url.to_string();
    for _ in 0..=MAX_REDIRECTS {
        if url.starts_with("https://") {
            return fetch_curl(cfg, &url, dest, deadline);
        }
        match http_get(cfg, &url, dest, deadline)? {
            Got::File => return Ok(true),
            Got::NotFound => return Ok(false),
            Got::Redirect(to) => url = to,
        }
    }
    Err(DebuginfodError::Protocol {
        url,
        why: format!("more than {MAX_REDIRECTS} redirects"),
    })
}

enum Got {
    File,
    NotFound,
    Redirect(String),
}

/// `http://host[:port]/path` -> (host, port, path).
fn split_url(url: &str) -> Result<(String, u16, String), DebuginfodError> {
    let bad = |why: &str| DebuginfodError::Url {
        url: url.to_string(),
        why: why.to_string(),
    };
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| bad("only http:// and https:// URLs are supported"))?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if hostport.contains('@') {
        return Err(bad("user names in URLs are not supported"));
    }
    let (host, port) = if let Some(h) = hostport.strip_prefix('[') {
        // [v6]:port
        let (h, p) = h.split_once(']').ok_or_else(|| bad("unclosed '['"))?;
        (h, p.strip_prefix(':'))
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    let port = match port {
        Some(p) => p.parse().map_err(|_| bad("bad port"))?,
        None => 80,
    };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    Ok((host.to_string(), port, path.to_string()))
}

fn http_get(
    cfg: &Config,
    url: &str,
    dest: &Path,
    deadline: Instant,
) -> Result<Got, DebuginfodError> {
    let (host, port, path) = split_url(url)?;
    let io = |source: std::io::Error| DebuginfodError::Io {
        url: url.to_string(),
        source,
    };
    let proto = |why: String| DebuginfodError::Protocol {
        url: url.to_string(),
        why,
    };
    let addrs: Vec<_> = (host.as_str(), port)
        .to_socket_addrs()
        .map_err(io)?
        .collect();
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "host has no address");
    let mut stream = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, cfg.timeout) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = e,
        }
    }
    let stream = stream.ok_or_else(|| io(last))?;
    stream.set_read_timeout(Some(cfg.timeout)).map_err(io)?;
    stream.set_write_timeout(Some(cfg.timeout)).map_err(io)?;
    let host_header = if port == 80 {
        host.clone()
    } else if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host_header}\r\nUser-Agent: lockscope/{}\r\n\
         Accept: */*\r\nConnection: close\r\n\r\n",
        env!("CARGO_PKG_VERSION")
    );
    (&stream).write_all(req.as_bytes()).map_err(io)?;
    let mut r = BufReader::new(&stream);
    let mut head_bytes = 0usize;
    let mut line = |r: &mut BufReader<&TcpStream>| -> Result<String, DebuginfodError> {
        let mut buf = Vec::new();
        let n = r
            .by_ref()
            .take((MAX_HEADER_BYTES - head_bytes.min(MAX_HEADER_BYTES)) as u64)
            .read_until(b'\n', &mut buf)
            .map_err(io)?;
        head_bytes += n;
        if n == 0 || !buf.ends_with(b"\n") {
            return Err(proto(format!(
                "the header ended early or is longer than {MAX_HEADER_BYTES} bytes"
            )));
        }
        Ok(String::from_utf8_lossy(&buf).trim_end().to_string())
    };
    let status_line = line(&mut r)?;
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    let code: u16 = parts
        .next()
        .and_then(|c| c.parse().ok())
        .filter(|_| version.starts_with("HTTP/1."))
        .ok_or_else(|| proto(format!("status line {status_line:?}")))?;
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut location = None;
    loop {
        let h = line(&mut r)?;
        if h.is_empty() {
            break;
        }
        let Some((k, v)) = h.split_once(':') else {
            return Err(proto(format!("header line {h:?}")));
        };
        let v = v.trim();
        match k.trim().to_ascii_lowercase().as_str() {
            "content-length" => {
                length = Some(
                    v.parse()
                        .map_err(|_| proto(format!("Content-Length {v:?}")))?,
                )
            }
            "transfer-encoding" => chunked = v.to_ascii_lowercase().contains("chunked"),
            "location" => location = Some(v.to_string()),
            _ => {}
        }
    }
    match code {
        200 => {}
        404 => return Ok(Got::NotFound),
        301 | 302 | 303 | 307 | 308 => {
            let to = location.ok_or_else(|| proto(format!("{code} without Location")))?;
            let to = if to.starts_with('/') {
                format!("http://{host_header}{to}")
            } else {
                to
            };
            return Ok(Got::Redirect(to));
        }
        _ => {
            return Err(DebuginfodError::Status {
                url: url.to_string(),
                status: status_line
                    .split_once(' ')
                    .map_or(status_line.clone(), |x| x.1.to_string()),
            })
        }
    }
    let too_large = || DebuginfodError::TooLarge {
        url: url.to_string(),
        limit: cfg.max_size,
    };
    if length.is_some_and(|n| n > cfg.max_size) {
        return Err(too_large());
    }
    let file = std::fs::File::create(dest).map_err(|e| DebuginfodError::Cache {
        path: dest.to_path_buf(),
        source: e,
    })?;
    let mut sink = Sink {
        file: std::io::BufWriter::new(file),
        written: 0,
        max: cfg.max_size,
        deadline,
    };
    let copied = if chunked {
        read_chunked(&mut r, &mut sink)
    } else {
        copy_body(&mut r, &mut sink, length)
    };
    match copied {
        Ok(()) => {}
        Err(BodyError::TooLarge) => return Err(too_large()),
        Err(BodyError::TooSlow) => {
            return Err(DebuginfodError::TooSlow {
                url: url.to_string(),
                limit: cfg.max_time,
            })
        }
        Err(BodyError::Io(e)) => return Err(io(e)),
        Err(BodyError::Bad(why)) => return Err(proto(why)),
        Err(BodyError::Write(e)) => {
            return Err(DebuginfodError::Cache {
                path: dest.to_path_buf(),
                source: e,
            })
        }
    }
    sink.file.flush().map_err(|e| DebuginfodError::Cache {
        path: dest.to_path_buf(),
        source: e,
    })?;
    Ok(Got::File)
}

enum BodyError {
    TooLarge,
    TooSlow,
    Io(std::io::Error),
    Write(std::io::Error),
    Bad(String),
}

/// Where a body goes, with its limits.
struct Sink {
    file: std::io::BufWriter<std::fs::File>,
    written: u64,
    max: u64,
    deadline: Instant,
}

impl Sink {
    fn put(&mut self, b: &[u8]) -> Result<(), BodyError> {
        self.written += b.len() as u64;
        if self.written > self.max {
            return Err(BodyError::TooLarge);
        }
        if Instant::now() > self.deadline {
            return Err(BodyError::TooSlow);
        }
        self.file.write_all(b).map_err(BodyError::Write)
    }
}

/// The body of a `Content-Length` answer (or up to the end of the
/// connection when no length is given).
fn copy_body<R: Read>(r: &mut R, sink: &mut Sink, length: Option<u64>) -> Result<(), BodyError> {
    let mut left = length;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let want = match left {
            Some(0) => return Ok(()),
            Some(n) => buf.len().min(n.try_into().unwrap_or(usize::MAX)),
            None => buf.len(),
        };
        let n = r.read(&mut buf[..want]).map_err(BodyError::Io)?;
        if n == 0 {
            return match left {
                None => Ok(()),
                Some(n) => Err(BodyError::Bad(format!(
                    "the connection closed {n} bytes before the announced length"
                ))),
            };
        }
        sink.put(&buf[..n])?;
        if let Some(l) = left.as_mut() {
            *l -= n as u64;
        }
    }
}

/// A `Transfer-Encoding: chunked` body: hex size line, data, CRLF, until
/// a chunk of size 0 (trailers are skipped).
fn read_chunked<R: BufRead>(r: &mut R, sink: &mut Sink) -> Result<(), BodyError> {
    let mut line = Vec::new();
    loop {
        line.clear();
        r.by_ref()
            .take(1024)
            .read_until(b'\n', &mut line)
            .map_err(BodyError::Io)?;
        let text = String::from_utf8_lossy(&line);
        let size_txt = text.trim().split(';').next().unwrap_or("").trim();
        let size = u64::from_str_radix(size_txt, 16)
            .map_err(|_| BodyError::Bad(format!("chunk size {:?}", text.trim())))?;
        if size == 0 {
            // Trailer lines up to an empty one.
            for _ in 0..64 {
                line.clear();
                let n = r
                    .by_ref()
                    .take(8192)
                    .read_until(b'\n', &mut line)
                    .map_err(BodyError::Io)?;
                if n == 0 || line.trim_ascii().is_empty() {
                    return Ok(());
                }
            }
            return Err(BodyError::Bad("too many trailer lines".into()));
        }
        if sink.written.saturating_add(size) > sink.max {
            return Err(BodyError::TooLarge);
        }
        copy_body(&mut r.by_ref().take(size), sink, Some(size))?;
        let mut crlf = [0u8; 2];
        r.read_exact(&mut crlf).map_err(BodyError::Io)?;
        if &crlf != b"\r\n" {
            return Err(BodyError::Bad("chunk not followed by CRLF".into()));
        }
    }
}

/// `https://` through the curl program: the status comes from
/// `--write-out`, the limits from its own options.
fn fetch_curl(
    cfg: &Config,
    url: &str,
    dest: &Path,
    deadline: Instant,
) -> Result<bool, DebuginfodError> {
    let left = deadline.saturating_duration_since(Instant::now()).as_secs();
    let out = std::process::Command::new("curl")
        .args(["--silent", "--show-error", "--location", "--max-redirs"])
        .arg(MAX_REDIRECTS.to_string())
        .arg("--connect-timeout")
        .arg(cfg.timeout.as_secs().to_string())
        .arg("--max-time")
        .arg(left.max(1).to_string())
        .arg("--max-filesize")
        .arg(cfg.max_size.to_string())
        .args(["--write-out", "%{http_code}", "--output"])
        .arg(dest)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| DebuginfodError::Curl {
            url: url.to_string(),
            why: format!("cannot run curl ({e}); it is needed for https:// servers"),
        })?;
    let code = String::from_utf8_lossy(&out.stdout).trim().to_string();
    match out.status.code() {
        Some(0) => {}
        // curl's exit codes for these two limits.
        Some(63) => {
            return Err(DebuginfodError::TooLarge {
                url: url.to_string(),
                limit: cfg.max_size,
            })
        }
        Some(28) => {
            return Err(DebuginfodError::TooSlow {
                url: url.to_string(),
                limit: cfg.max_time,
            })
        }
        _ => {
            return Err(DebuginfodError::Curl {
                url: url.to_string(),
                why: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            })
        }
    }
    match code.as_str() {
        "200" => Ok(true),
        "404" => {
            let _ = std::fs::remove_file(dest);
            Ok(false)
        }
        _ => {
            let _ = std::fs::remove_file(dest);
            Err(DebuginfodError::Status {
                url: url.to_string(),
                status: code,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_split_or_refused() {
        let ok = |u: &str| split_url(u).unwrap();
        assert_eq!(ok("http://h"), ("h".into(), 80, "/".into()));
        assert_eq!(
            ok("http://127.0.0.1:8002/a/b"),
            ("127.0.0.1".into(), 8002, "/a/b".into())
        );
        assert_eq!(ok("http://[::1]:9/x"), ("::1".into(), 9, "/x".into()));
        for bad in ["ftp://h/x", "http://:80/", "http://h:port/", "http://u@h/"] {
            let e = split_url(bad).unwrap_err().to_string();
            assert!(e.starts_with(bad), "{e}");
        }
    }

    fn sink(dir: &Path, max: u64) -> Sink {
        Sink {
            file: std::io::BufWriter::new(std::fs::File::create(dir.join("out")).unwrap()),
            written: 0,
            max,
            deadline: Instant::now() + Duration::from_secs(60),
        }
    }

    #[test]
    fn chunked_bodies_are_decoded_within_the_size_limit() {
        let dir = tempfile::tempdir().unwrap();
        let body = b"4\r\nELF!\r\n3;ext=1\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\n";
        let mut s = sink(dir.path(), 100);
        assert!(read_chunked(&mut &body[..], &mut s).is_ok());
        s.file.flush().unwrap();
        assert_eq!(std::fs::read(dir.path().join("out")).unwrap(), b"ELF!abc");
        let mut s = sink(dir.path(), 5);
        assert!(matches!(
            read_chunked(&mut &body[..], &mut s),
            Err(BodyError::TooLarge)
        ));
        let mut s = sink(dir.path(), 100);
        assert!(matches!(
            read_chunked(&mut &b"zz\r\n"[..], &mut s),
            Err(BodyError::Bad(_))
        ));
        // A body cut short of its Content-Length is an error, not a file.
        let mut s = sink(dir.path(), 100);
        assert!(matches!(
            copy_body(&mut &b"abc"[..], &mut s, Some(10)),
            Err(BodyError::Bad(_))
        ));
    }
}
