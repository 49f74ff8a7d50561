//! Output files are never damaged: an export, page or imported trace
//! replaces its destination only once it was completely written; a
//! failure (an unreadable trace, a full file system) leaves an existing
//! file byte for byte as it was, names its cause, and leaves no temporary
//! file behind. Outputs carry the permissions of the trace they come from.

use crate::record_util;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use lockscope_test_support::build_c;
use record_util::{lockscope, record, temp};

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A tmpfs of `size` mounted at `dir/tiny` (a full file system on
/// demand), or None with a notice where mounting needs root. The caller
/// unmounts it.
fn tiny_tmpfs(dir: &Path, size: &str) -> Option<std::path::PathBuf> {
    let mnt = dir.join("tiny");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(&mnt)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("NOTICE: cannot mount a tmpfs here (not root): test skipped");
        return None;
    }
    Some(mnt)
}

// See issue 32: `export -o keep.pb.gz BAD.lstrace` truncated keep.pb.gz.
#[test]
fn a_failed_export_or_page_keeps_the_existing_output_file_as_it_was() {
    let dir = temp("outputs-kept");
    let bad = dir.join("bad.lstrace");
    std::fs::write(&bad, b"\x7fLSTRACE but nothing after it").unwrap();
    let out = dir.join("out");
    std::fs::create_dir(&out).unwrap();
    let keep = b"the user's good output, not to be touched";
    for (cmd, file) in [
        (vec!["export", "--format", "pprof"], "keep.pb.gz"),
        (vec!["export", "--format", "perfetto"], "keep.json"),
        (
            vec!["export", "--format", "speedscope"],
            "keep.speedscope.json",
        ),
        (vec!["export", "--format", "folded"], "keep.folded"),
        (vec!["html"], "keep.html"),
    ] {
        let dest = out.join(file);
        std::fs::write(&dest, keep).unwrap();
        let mut args = cmd.clone();
        args.extend(["-o", dest.to_str().unwrap(), bad.to_str().unwrap()]);
        let o = lockscope(&args, None);
        assert!(!o.status.success(), "{cmd:?} read a bad trace");
        assert_eq!(
            std::fs::read(&dest).unwrap(),
            keep,
            "{cmd:?} damaged {file}"
        );
    }
    assert_eq!(
        names(&out),
        [
            "keep.folded",
            "keep.html",
            "keep.json",
            "keep.pb.gz",
            "keep.speedscope.json"
        ],
        "no temporary file is left"
    );
}

#[test]
fn an_output_replaces_the_old_file_and_is_as_private_as_its_trace() {
    let dir = temp("outputs-mode");
    let bin = build_c("mutex", &dir);
    let run = record(&dir, &[], &bin, &[], b"");
    assert_eq!(run.code, 3, "mutex.c exits with 3: {}", run.stderr);
    let t = run.trace_path.to_str().unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&run.trace_path), 0o600, "a trace is private");
    for (cmd, file) in [
        (vec!["export", "--format", "pprof"], "p.pb.gz"),
        (vec!["html"], "p.html"),
    ] {
        let dest = dir.join(file);
        std::fs::write(&dest, b"old").unwrap();
        std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut args = cmd.clone();
        args.extend(["-o", dest.to_str().unwrap(), t]);
        let o = lockscope(&args, None);
        assert!(
            o.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let bytes = std::fs::read(&dest).unwrap();
        assert!(
            bytes.len() > 100 && bytes != b"old",
            "{cmd:?} wrote {} bytes",
            bytes.len()
        );
        assert_eq!(mode(&dest), 0o600, "{cmd:?}: the output of a private trace");
    }
}

// A full file system: a tiny tmpfs (needs root to mount; CI runs as root).
#[test]
fn a_full_file_system_is_named_and_the_old_file_survives() {
    let dir = temp("outputs-full");
    let bin = build_c("mutex", &dir);
    let run = record(&dir, &[], &bin, &[], b"");
    assert_eq!(run.code, 3, "mutex.c exits with 3: {}", run.stderr);
    let Some(mnt) = tiny_tmpfs(&dir, "64k") else {
        return;
    };
    let dest = mnt.join("page.html");
    std::fs::write(&dest, b"the old page").unwrap();
    let o = lockscope(
        &[
            "html",
            "-o",
            dest.to_str().unwrap(),
            run.trace_path.to_str().unwrap(),
        ],
        None,
    );
    let left = names(&mnt);
    let kept = std::fs::read(&dest).unwrap();
    let _ = std::process::Command::new("umount").arg(&mnt).status();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "a page larger than 64 KiB was written: {err}"
    );
    assert!(err.contains("file system is full (ENOSPC)"), "{err}");
    assert!(err.contains("bytes; "), "how much was written: {err}");
    assert!(err.contains("page.html is unchanged"), "{err}");
    assert_eq!(kept, b"the old page");
    assert_eq!(left, ["page.html"], "no temporary file is left");
}

// See issue 32: `record -o` on a full file system said "the trace's output
// thread stopped" and exited 2 although the program had exited 0.
#[test]
fn a_full_disk_under_record_is_named_and_the_programs_status_comes_back() {
    let dir = temp("record-full");
    let bin = build_c("mutex", &dir);
    let Some(mnt) = tiny_tmpfs(&dir, "128k") else {
        return;
    };
    let trace = mnt.join("t.lstrace");
    let t = trace.to_str().unwrap();
    let b = bin.to_str().unwrap();
    // mutex.c exits with 3 and writes about 1 MB of trace: the program's
    // status comes back. Through `sh -c '...; exit 0'` the program
    // succeeds: the trace's failure is the exit status, 2.
    let plain = lockscope(&["record", "-q", "-o", t, "--", b], None);
    let kept = std::fs::metadata(&trace).map(|m| m.len()).unwrap_or(0);
    let report = lockscope(&["report", t], None);
    std::fs::remove_file(&trace).unwrap();
    let script = format!("{b} >/dev/null; exit 0");
    let ok_prog = lockscope(&["record", "-q", "-o", t, "--", "sh", "-c", &script], None);
    let _ = std::process::Command::new("umount").arg(&mnt).status();
    for (o, code) in [(&plain, 3), (&ok_prog, 2)] {
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{err}");
        assert!(
            err.contains("is incomplete: the file system is full (ENOSPC)"),
            "{err}"
        );
        assert!(err.contains("bytes (they are kept"), "{err}");
    }
    assert!(kept > 64 * 1024, "what was written is kept: {kept} bytes");
    let r = String::from_utf8_lossy(&report.stdout);
    assert!(
        r.contains("lockscope report"),
        "the partial trace is read: {r}"
    );
}
