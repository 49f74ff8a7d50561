//! The session directory: created private (0700) on tmpfs, removed with
//! everything in it when the recording ends (also on error paths).

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use crate::RecordError;

/// Owns the session directory; removes it when dropped.
pub(crate) struct SessionDir {
    path: PathBuf,
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
                    Ok(()) => return Ok(SessionDir { path }),
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
