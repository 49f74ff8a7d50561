//! The session directory: created private (0700) on tmpfs, removed with
//! everything in it when the recording ends (also on error paths). When
//! the recorder was killed before it could remove it, the rings in it
//! still hold what the program had published and the recorder had not
//! yet copied: the next recorder that starts there keeps such an
//! orphaned session for [`KEEP_ORPHANED`] and names it (`lockscope
//! recover` turns it into a trace), and removes it after that
//! ([`sweep_stale`]).

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use lockscope_ring::session::{SessionWake, WAKE_BYTES, WAKE_FILE};

use crate::RecordError;

/// The session's wake page ([`SessionWake`]), created before the program
/// starts so that every process of it finds it, mapped here for the
/// drain's sleep.
pub(crate) struct WakePage {
    base: *mut libc::c_void,
}

impl WakePage {
    /// Creates `dir/wake` (zeroed: nobody sleeps) and maps it.
    pub(crate) fn create(dir: &Path) -> std::io::Result<WakePage> {
        use std::os::unix::io::AsRawFd;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join(WAKE_FILE))?;
        f.set_len(WAKE_BYTES as u64)?;
        // SAFETY: one page of a regular file we created and sized to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                WAKE_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(WakePage { base })
    }

    pub(crate) fn get(&self) -> &SessionWake {
        // SAFETY: a live page-aligned mapping of WAKE_BYTES, which holds a
        // SessionWake (atomics only, any bit pattern valid).
        unsafe { &*(self.base as *const SessionWake) }
    }
}

impl Drop for WakePage {
    fn drop(&mut self) {
        // SAFETY: unmapping what create mapped.
        unsafe { libc::munmap(self.base, WAKE_BYTES) };
    }
}

/// Owns the session directory; removes it when dropped.
pub(crate) struct SessionDir {
    path: PathBuf,
    /// `recorder.lock` inside it, flock'ed for as long as the recorder
    /// lives: the kernel drops the lock when the recorder dies, however it
    /// dies, which is how the next recorder tells a stale session.
    _lock: Option<std::fs::File>,
}

/// Name of the lock file in a session directory.
pub(crate) const LOCK_NAME: &str = "recorder.lock";

/// Name of the file that says whose session it is ([`SessionInfo`]).
pub(crate) const INFO_NAME: &str = "session.info";

/// How long an orphaned session (its recorder died) is kept for `lockscope
/// recover` before the next recorder removes it. A day: long enough for
/// somebody to notice the next morning that a night's recording died,
/// short enough that forgotten rings do not hold tmpfs memory for weeks.
/// Not taken: removing them at once (what was recorded is lost, the
/// behaviour before), keeping them until removed by hand (/dev/shm is
/// memory, and nobody looks there).
pub const KEEP_ORPHANED: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// What a session directory says about its recording, written when it is
/// created: enough for `lockscope recover` to find the trace the dead
/// recorder was writing and for a message to name the command.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionInfo {
    /// The trace the recorder was writing (absolute when it could be
    /// made so).
    pub output: PathBuf,
    /// The recorded command line, for messages.
    pub command: String,
    /// OS pid of the recorder.
    pub recorder_pid: u32,
    /// When the recording started, seconds since the Unix epoch.
    pub started_unix: u64,
    /// The clock the rings' ticks come from (`tsc` or `monotonic`).
    pub clock: String,
    /// The start of the trace's time on that clock (the trace header's
    /// `tsc_at_start` and `monotonic_ns_at_start`).
    pub start: Option<lockscope_ring::tsc::ClockPair>,
}

/// Largest `session.info` read: it is written by the recorder, but the
/// directory is a file system path anybody with the same uid can fill.
const MAX_INFO_BYTES: u64 = 1 << 16;

impl SessionInfo {
    /// Key and value pairs separated by NUL bytes: a path may hold any
    /// byte but NUL, a newline included.
    fn encode(&self) -> Vec<u8> {
        use std::os::unix::ffi::OsStrExt;
        let mut v = b"lockscope-session\x001\x00".to_vec();
        let mut put = |k: &[u8], val: &[u8]| {
            v.extend_from_slice(k);
            v.push(0);
            v.extend(val.iter().copied().filter(|&b| b != 0));
            v.push(0);
        };
        put(b"output", self.output.as_os_str().as_bytes());
        put(b"command", self.command.as_bytes());
        put(b"recorder", self.recorder_pid.to_string().as_bytes());
        put(b"started", self.started_unix.to_string().as_bytes());
        put(b"clock", self.clock.as_bytes());
        if let Some(p) = self.start {
            put(b"start", format!("{} {}", p.tsc, p.mono_ns).as_bytes());
        }
        v
    }

    /// Parses what [`SessionInfo::encode`] wrote; `None` for anything else
    /// (unknown keys are ignored: a newer recorder may add some).
    fn decode(b: &[u8]) -> Option<SessionInfo> {
        use std::os::unix::ffi::OsStrExt;
        let mut parts = b.split(|&c| c == 0);
        if parts.next()? != b"lockscope-session" || parts.next()? != b"1" {
            return None;
        }
        let mut info = SessionInfo::default();
        while let (Some(k), Some(v)) = (parts.next(), parts.next()) {
            let text = || String::from_utf8_lossy(v).into_owned();
            match k {
                b"output" => info.output = PathBuf::from(std::ffi::OsStr::from_bytes(v)),
                b"command" => info.command = text(),
                b"recorder" => info.recorder_pid = text().parse().ok()?,
                b"started" => info.started_unix = text().parse().ok()?,
                b"clock" => info.clock = text(),
                b"start" => {
                    let t = text();
                    let (a, b) = t.split_once(' ')?;
                    info.start = Some(lockscope_ring::tsc::ClockPair {
                        tsc: a.parse().ok()?,
                        mono_ns: b.parse().ok()?,
                    });
                }
                _ => {}
            }
        }
        Some(info)
    }

    /// Reads `dir/session.info`; `None` when it is missing, too large or
    /// not one.
    pub fn read(dir: &Path) -> Option<SessionInfo> {
        use std::io::Read;
        let f = std::fs::File::open(dir.join(INFO_NAME)).ok()?;
        let mut b = Vec::new();
        f.take(MAX_INFO_BYTES).read_to_end(&mut b).ok()?;
        SessionInfo::decode(&b)
    }
}

/// A session whose recorder died, kept for `lockscope recover`.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct OrphanedSession {
    /// The session directory.
    pub dir: PathBuf,
    /// What it says about its recording (`None`: a recorder older than
    /// the file, or a damaged one).
    pub info: Option<SessionInfo>,
    /// Time since anything in it last changed.
    pub age: std::time::Duration,
    /// Ring files in it (one per thread that was recording, more for
    /// threads whose ring grew).
    pub rings: usize,
    /// Bytes of its files.
    pub bytes: u64,
}

/// Takes `flock(LOCK_EX | LOCK_NB)` on `f`: true if we got it.
fn try_lock(f: &std::fs::File) -> bool {
    use std::os::unix::io::AsRawFd;
    // SAFETY: flock on a descriptor we own.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// The session directories under `parent`, with whether their recorder
/// is gone: a directory `lockscope-<pid>-...` whose `recorder.lock` nobody
/// holds, or, for sessions of recorders that predate the lock file, whose
/// pid no longer exists. A session of a live recorder (or of a `recover`
/// at work on it, which holds the same lock) is never stale.
fn sessions(parent: &Path) -> Vec<(PathBuf, bool)> {
    let Ok(rd) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    let mut v = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(pid) = name
            .strip_prefix("lockscope-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let dir = e.path();
        if !e.file_type().is_ok_and(|t| t.is_dir()) || pid <= 0 {
            continue;
        }
        let stale = match std::fs::File::open(dir.join(LOCK_NAME)) {
            // Locked by a live recorder, or free: its recorder is gone.
            // The probe's lock is dropped with `f` at once.
            Ok(f) => try_lock(&f),
            // No lock file: an older recorder, or one still creating it.
            // SAFETY: kill with signal 0 only checks existence.
            Err(_) => unsafe {
                libc::kill(pid, 0) != 0
                    && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
            },
        };
        v.push((dir, stale));
    }
    v
}

/// Describes a stale session: its ring files, size and age (since its
/// newest file last changed).
fn describe(dir: &Path) -> OrphanedSession {
    let mut o = OrphanedSession {
        dir: dir.to_path_buf(),
        info: SessionInfo::read(dir),
        age: std::time::Duration::ZERO,
        rings: 0,
        bytes: 0,
    };
    let mut newest = std::fs::metadata(dir).and_then(|m| m.modified()).ok();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(m) = e.metadata() else { continue };
        o.bytes += m.len();
        if e.file_name().to_string_lossy().ends_with(".ring") {
            o.rings += 1;
        }
        if let Ok(t) = m.modified() {
            newest = Some(newest.map_or(t, |n| n.max(t)));
        }
    }
    o.age = newest
        .and_then(|t| t.elapsed().ok())
        .unwrap_or(std::time::Duration::ZERO);
    o
}

/// The orphaned sessions under `parent` (`None`: the places a recording
/// creates its session by default: `/dev/shm`, `$TMPDIR`, `/tmp`), oldest
/// first. Nothing is removed.
pub fn orphaned_sessions(parent: Option<&Path>) -> Vec<OrphanedSession> {
    let mut v: Vec<OrphanedSession> = parents(parent)
        .iter()
        .flat_map(|p| sessions(p))
        .filter(|(_, stale)| *stale)
        .map(|(d, _)| describe(&d))
        .collect();
    v.sort_by_key(|o| std::cmp::Reverse(o.age));
    v
}

/// Removes the sessions under `parent` whose recorder is gone and that
/// either hold no ring (nothing to recover) or are older than
/// [`KEEP_ORPHANED`]; keeps the others (see [`orphaned_sessions`]).
/// Returns the number removed.
pub(crate) fn sweep_stale(parent: &Path) -> usize {
    let mut removed = 0;
    for (dir, stale) in sessions(parent) {
        if !stale {
            continue;
        }
        let o = describe(&dir);
        if (o.rings == 0 || o.age > KEEP_ORPHANED) && std::fs::remove_dir_all(&dir).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The directories a session may be created in, in order of preference.
fn parents(parent: Option<&Path>) -> Vec<PathBuf> {
    match parent {
        Some(p) => vec![p.to_path_buf()],
        None => {
            let mut v = vec![PathBuf::from("/dev/shm")];
            if let Some(t) = std::env::var_os("TMPDIR") {
                v.push(PathBuf::from(t));
            }
            v.push(PathBuf::from("/tmp"));
            v
        }
    }
}

impl SessionDir {
    /// Creates `lockscope-<pid>-<n>` under `parent`, or under `/dev/shm`
    /// (tmpfs: the rings are page cache that never touches a disk), falling
    /// back to `$TMPDIR` and `/tmp` when /dev/shm is missing or not
    /// writable (some containers). A disk-backed directory works, only with
    /// more page-fault cost inside the program.
    pub(crate) fn create(
        parent: Option<&Path>,
        info: &SessionInfo,
    ) -> Result<SessionDir, RecordError> {
        let candidates = parents(parent);
        let mut last = None;
        for dir in &candidates {
            for attempt in 0..100u32 {
                let path = dir.join(format!(
                    "lockscope-{}-{}-{attempt}",
                    std::process::id(),
                    lockscope_ring::tsc::now() % 1_000_000
                ));
                match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                    Ok(()) => {
                        // Take the lock first, then sweep: two recorders
                        // starting together never remove each other's.
                        // Locked under another name, then renamed: a
                        // sweeper never sees an unlocked lock file.
                        let tmp = path.join("recorder.lock.new");
                        let lock = std::fs::OpenOptions::new()
                            .create(true)
                            .truncate(true)
                            .write(true)
                            .open(&tmp)
                            .ok()
                            .filter(try_lock)
                            .filter(|_| std::fs::rename(&tmp, path.join(LOCK_NAME)).is_ok());
                        // Best effort: without it `recover` needs the
                        // trace named on its command line.
                        let _ = std::fs::write(path.join(INFO_NAME), info.encode());
                        sweep_stale(dir);
                        return Ok(SessionDir { path, _lock: lock });
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                    Err(e) => {
                        last = Some((path, e));
                        break;
                    }
                }
            }
        }
        let (path, source) = last.unwrap_or_else(|| {
            (
                candidates[0].clone(),
                std::io::Error::new(std::io::ErrorKind::AlreadyExists, "no free name"),
            )
        });
        Err(RecordError::Session { path, source })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SessionDir {
    fn drop(&mut self) {
        // Best effort: a failure leaves a directory in /dev/shm, which the
        // next boot clears; nothing else can be done from a destructor.
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_info_round_trips_a_path_with_a_newline() {
        let i = SessionInfo {
            output: PathBuf::from("/tmp/a\nb.lstrace"),
            command: "./prog -x".into(),
            recorder_pid: 42,
            started_unix: 1_700_000_000,
            clock: "tsc".into(),
            start: Some(lockscope_ring::tsc::ClockPair {
                tsc: 123,
                mono_ns: 456,
            }),
        };
        assert_eq!(SessionInfo::decode(&i.encode()), Some(i));
        assert_eq!(SessionInfo::decode(b"garbage"), None);
        assert_eq!(SessionInfo::decode(b""), None);
    }

    #[test]
    fn a_dead_recorders_session_with_rings_is_kept_and_one_without_is_removed() {
        let parent = tempfile::tempdir().unwrap();
        let with = parent.path().join("lockscope-1-2-0");
        let without = parent.path().join("lockscope-1-3-0");
        for d in [&with, &without] {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join(LOCK_NAME), b"").unwrap();
        }
        std::fs::write(with.join("T1-0-1.ring"), b"x").unwrap();
        assert_eq!(sweep_stale(parent.path()), 1);
        assert!(with.exists() && !without.exists());
        let o = orphaned_sessions(Some(parent.path()));
        assert_eq!(o.len(), 1);
        assert_eq!((o[0].dir.as_path(), o[0].rings), (with.as_path(), 1));
        // A live recorder's session (its lock held) is neither listed nor
        // removed.
        let f = std::fs::File::open(with.join(LOCK_NAME)).unwrap();
        assert!(try_lock(&f));
        assert!(orphaned_sessions(Some(parent.path())).is_empty());
        assert_eq!(sweep_stale(parent.path()), 0);
    }
}
