//! The session directory: created private (0700) on tmpfs, removed with
//! everything in it when the recording ends (also on error paths), and,
//! when the recorder was killed before it could remove it, by the next
//! recorder that starts there ([`sweep_stale`]).

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use lockscope_capture::session::{SessionWake, WAKE_BYTES, WAKE_FILE};

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
const LOCK_NAME: &str = "recorder.lock";

/// Takes `flock(LOCK_EX | LOCK_NB)` on `f`: true if we got it.
fn try_lock(f: &std::fs::File) -> bool {
    use std::os::unix::io::AsRawFd;
    // SAFETY: flock on a descriptor we own.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// Removes the sessions under `parent` whose recorder is gone (killed
/// with SIGKILL, or the machine's power...): a directory
/// `lockscope-<pid>-...` whose `recorder.lock` nobody holds, or, for
/// sessions of recorders that predate the lock file, whose pid no longer
/// exists. A session of a live recorder is never touched. Returns the
/// number removed.
pub(crate) fn sweep_stale(parent: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(parent) else {
        return 0;
    };
    let mut removed = 0;
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
            Ok(f) => try_lock(&f),
            // No lock file: an older recorder, or one still creating it.
            // SAFETY: kill with signal 0 only checks existence.
            Err(_) => unsafe {
                libc::kill(pid, 0) != 0
                    && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
            },
        };
        if stale && std::fs::remove_dir_all(&dir).is_ok() {
            removed += 1;
        }
    }
    removed
}

impl SessionDir {
    /// Creates `lockscope-<pid>-<n>` under `parent`, or under `/dev/shm`
    /// (tmpfs: the rings are page cache that never touches a disk), falling
    /// back to `$TMPDIR` and `/tmp` when /dev/shm is missing or not
    /// writable (some containers). A disk-backed directory works, only with
    /// more page-fault cost inside the program.
    pub(crate) fn create(parent: Option<&Path>) -> Result<SessionDir, RecordError> {
        let candidates: Vec<PathBuf> = match parent {
            Some(p) => vec![p.to_path_buf()],
            None => {
                let mut v = vec![PathBuf::from("/dev/shm")];
                if let Some(t) = std::env::var_os("TMPDIR") {
                    v.push(PathBuf::from(t));
                }
                v.push(PathBuf::from("/tmp"));
                v
            }
        };
        let mut last = None;
        for dir in &candidates {
            for attempt in 0..100u32 {
                let path = dir.join(format!(
                    "lockscope-{}-{}-{attempt}",
                    std::process::id(),
                    lockscope_capture::tsc::now() % 1_000_000
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
