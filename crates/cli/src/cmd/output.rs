//! Output files (HTML pages, exports, imported and annotated traces)
//! written so that nothing the user had is damaged: the bytes go to a
//! temporary file beside the destination, which replaces it only once
//! everything was written and flushed to the disk. A command that fails
//! (an unreadable trace, a full file system, Ctrl-C) leaves an existing
//! file byte for byte as it was and no half-written one.
//!
//! Not taken: creating the destination and deleting it on failure. That
//! still truncates the file the user wanted to keep the moment the
//! command starts (`export -o keep.pb.gz BAD.lstrace` left 0 bytes), and a
//! killed command leaves the truncated file behind. The temporary lives in
//! the destination's directory because a rename is atomic only within one
//! file system.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// An output being written; [`Output::commit`] puts it in place. Dropped
/// without a commit (an error, a panic), its temporary file is removed.
pub struct Output {
    dest: PathBuf,
    /// Removes the temporary file when dropped uncommitted. None when the
    /// destination is not a regular file (`-o /dev/null`, a FIFO, a
    /// terminal): that is written in place, since renaming over it would
    /// replace the device itself.
    tmp: Option<tempfile::NamedTempFile>,
    /// The same file, written through a plain handle: its errors are the
    /// system's own (the temporary's wrapper adds its path, which means
    /// nothing to the user).
    file: std::io::BufWriter<std::fs::File>,
    written: u64,
    /// Whether the destination existed (what a failure says of it).
    existed: bool,
}

impl Output {
    /// Starts writing `dest`. Its permissions are those of `like` (the
    /// trace it is made from: a trace is private to its user, 0600, and
    /// so is what is made of it, since both carry the same command line
    /// and paths), else the usual 0644 less the umask.
    pub fn create(dest: &Path, like: Option<&Path>) -> anyhow::Result<Output> {
        // A symbolic link is followed: the file it points to is replaced,
        // not the link (renaming over the link would turn it into a file).
        let real;
        let dest = match std::fs::symlink_metadata(dest) {
            Ok(m) if m.file_type().is_symlink() => match std::fs::canonicalize(dest) {
                Ok(p) => {
                    real = p;
                    real.as_path()
                }
                Err(_) => dest,
            },
            _ => dest,
        };
        let dir = match dest.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.is_empty() || dest.is_dir() {
            anyhow::bail!("cannot write {}: it is a directory", dest.display());
        }
        if std::fs::metadata(dest).is_ok_and(|m| !m.is_file()) {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(dest)
                .with_context(|| format!("cannot open {}", dest.display()))?;
            return Ok(Output {
                dest: dest.to_path_buf(),
                tmp: None,
                file: std::io::BufWriter::with_capacity(1 << 16, file),
                written: 0,
                existed: true,
            });
        }
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".partial")
            .tempfile_in(dir)
            .with_context(|| format!("cannot create {}", dest.display()))?;
        let mode = match like.and_then(|p| std::fs::metadata(p).ok()) {
            Some(m) => m.permissions().mode() & 0o777,
            None => 0o666 & !umask(),
        };
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("cannot create {}", dest.display()))?;
        let file = tmp
            .as_file()
            .try_clone()
            .with_context(|| format!("cannot create {}", dest.display()))?;
        Ok(Output {
            dest: dest.to_path_buf(),
            tmp: Some(tmp),
            file: std::io::BufWriter::with_capacity(1 << 16, file),
            written: 0,
            existed: dest.exists(),
        })
    }

    /// Flushes, syncs and renames the temporary over the destination.
    /// A write error names its cause and how much was written.
    pub fn commit(mut self) -> anyhow::Result<()> {
        self.file.flush().map_err(|e| self.failed(e))?;
        let Output {
            dest, tmp, file, ..
        } = self;
        let Some(tmp) = tmp else {
            return Ok(());
        };
        // Delayed allocation: a full disk may only show when the data
        // goes out, which must happen before the rename makes it the
        // user's file.
        file.get_ref()
            .sync_all()
            .map_err(|e| anyhow::anyhow!("cannot write {}: {}", dest.display(), describe(&e)))?;
        tmp.persist(&dest).map_err(|e| {
            anyhow::anyhow!("cannot write {}: {}", dest.display(), describe(&e.error))
        })?;
        Ok(())
    }

    /// A write error, in words: its cause, how much was written, and that
    /// the destination was left alone.
    fn failed(&self, e: std::io::Error) -> std::io::Error {
        std::io::Error::new(
            e.kind(),
            format!(
                "cannot write {}: {} (after {} bytes; {} {})",
                self.dest.display(),
                describe(&e),
                self.written,
                self.dest.display(),
                if self.existed {
                    "is unchanged"
                } else {
                    "was not created"
                }
            ),
        )
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.file.write(buf) {
            Ok(n) => {
                self.written += n as u64;
                Ok(n)
            }
            Err(e) => Err(self.failed(e)),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush().map_err(|e| self.failed(e))
    }
}

/// An I/O error in words a user acts on: the usual causes of a failed
/// write are named before the system's text.
pub fn describe(e: &std::io::Error) -> String {
    let cause = match e.raw_os_error() {
        Some(libc::ENOSPC) => "the file system is full (ENOSPC)",
        Some(libc::EDQUOT) => "the disk quota is exceeded (EDQUOT)",
        Some(libc::EIO) => "an I/O error of the device (EIO)",
        Some(libc::EROFS) => "the file system is read-only (EROFS)",
        Some(libc::EACCES) | Some(libc::EPERM) => "permission denied",
        _ => return e.to_string(),
    };
    format!("{cause}: {e}")
}

/// The process's umask (read by setting it and putting it back: there is
/// no call that only reads it; the CLI is single-threaded here).
fn umask() -> u32 {
    // SAFETY: umask(2) only swaps the process's file-mode mask; it cannot
    // fail and touches no memory.
    let old = unsafe { libc::umask(0o022) };
    // SAFETY: as above: the old mask is put back.
    unsafe { libc::umask(old) };
    old
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_dropped_without_commit_leaves_the_old_file_as_it_was() {
        let d = tempfile::tempdir().unwrap();
        let dest = d.path().join("keep.txt");
        std::fs::write(&dest, b"good").unwrap();
        let mut o = Output::create(&dest, None).unwrap();
        o.write_all(b"half").unwrap();
        drop(o);
        assert_eq!(std::fs::read(&dest).unwrap(), b"good");
        let left: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file is left: {left:?}");
    }

    #[test]
    fn a_committed_output_replaces_the_file_with_the_permissions_of_its_trace() {
        let d = tempfile::tempdir().unwrap();
        let trace = d.path().join("t.lstrace");
        std::fs::write(&trace, b"x").unwrap();
        std::fs::set_permissions(&trace, std::fs::Permissions::from_mode(0o600)).unwrap();
        let dest = d.path().join("out.html");
        std::fs::write(&dest, b"old").unwrap();
        let mut o = Output::create(&dest, Some(&trace)).unwrap();
        o.write_all(b"new page").unwrap();
        o.commit().unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"new page");
        let mode = std::fs::metadata(&dest).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 2);
    }

    #[test]
    fn a_device_is_written_in_place_never_replaced() {
        let mut o = Output::create(Path::new("/dev/null"), None).unwrap();
        o.write_all(&[7u8; 100_000]).unwrap();
        o.commit().unwrap();
        let m = std::fs::metadata("/dev/null").unwrap();
        assert!(!m.is_file(), "/dev/null is still the device");
    }

    #[test]
    fn a_symbolic_link_keeps_pointing_at_the_new_output() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("real.html");
        std::fs::write(&target, b"old").unwrap();
        let link = d.path().join("link.html");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let mut o = Output::create(&link, None).unwrap();
        o.write_all(b"new").unwrap();
        o.commit().unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
    }

    #[test]
    fn a_directory_is_not_an_output() {
        let d = tempfile::tempdir().unwrap();
        let e = Output::create(d.path(), None).err().unwrap().to_string();
        assert!(e.contains("is a directory"), "{e}");
    }
}
