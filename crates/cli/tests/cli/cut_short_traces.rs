//! One salvage policy for every command: a trace cut short (a recorder
//! killed, a full disk) is read up to its last whole record, every
//! command prints the same warning on stderr and goes on, exiting 0; a
//! flipped byte is an error naming its offset, from every command alike,
//! and with `--skip-corrupt` every command reads past it the same way.

use crate::record_util;

use lockscope_test_support::build_c;
use record_util::{lockscope, record, temp};

/// Every command that reads a timing trace, with its arguments (the
/// trace is appended, except for diff's second).
fn commands(dir: &std::path::Path, whole: &str) -> Vec<Vec<String>> {
    let out = |f: &str| dir.join(f).to_string_lossy().into_owned();
    [
        vec!["report".to_string()],
        vec!["report".into(), "--json".into()],
        vec![
            "export".into(),
            "--format".into(),
            "pprof".into(),
            "-o".into(),
            out("x.pb.gz"),
        ],
        vec![
            "export".into(),
            "--format".into(),
            "folded".into(),
            "-o".into(),
            out("x.folded"),
        ],
        vec![
            "export".into(),
            "--format".into(),
            "perfetto".into(),
            "-o".into(),
            out("x.json"),
        ],
        vec![
            "export".into(),
            "--format".into(),
            "speedscope".into(),
            "-o".into(),
            out("x.ss.json"),
        ],
        vec!["html".into(), "-o".into(), out("x.html")],
        vec!["replay".into()],
        vec!["whatif".into()],
        vec!["critical-path".into()],
        vec!["dump".into(), "--summary".into()],
        vec!["diff".into(), whole.to_string()],
    ]
    .into_iter()
    .collect()
}

/// Runs every command of [`commands`] on `trace` (diff's first trace),
/// with `flags` before the command's own arguments; each command with its
/// exit status and stderr.
fn run_every_command(
    dir: &std::path::Path,
    whole: &str,
    trace: &std::path::Path,
    flags: &[&str],
) -> Vec<(Vec<String>, Option<i32>, String)> {
    commands(dir, whole)
        .into_iter()
        .map(|mut cmd| {
            let at = if cmd[0] == "diff" { 1 } else { cmd.len() };
            cmd.insert(at, trace.to_string_lossy().into_owned());
            for (i, f) in flags.iter().enumerate() {
                cmd.insert(1 + i, f.to_string());
            }
            let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
            let o = lockscope(&args, None);
            let err = String::from_utf8_lossy(&o.stderr).into_owned();
            (cmd, o.status.code(), err)
        })
        .collect()
}

// See issue 32: export, replay, whatif, critical-path, diff and html used
// a truncated trace silently; dump rejected it.
#[test]
fn every_command_reads_a_trace_cut_short_with_the_same_warning() {
    let dir = temp("cut-short");
    let bin = build_c("mutex", &dir);
    let run = record(&dir, &[], &bin, &[], b"");
    assert_eq!(run.code, 3, "mutex.c exits with 3: {}", run.stderr);
    let bytes = std::fs::read(&run.trace_path).unwrap();
    assert!(bytes.len() > 200_000, "{} bytes", bytes.len());
    let cut = dir.join("cut.lstrace");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let whole = run.trace_path.to_str().unwrap().to_string();
    let want = format!(
        "lockscope: WARNING: {} ends early at byte {}",
        cut.display(),
        bytes.len() / 2
    );
    for (cmd, code, err) in run_every_command(&dir, &whole, &cut, &[]) {
        assert_eq!(code, Some(0), "{cmd:?}: {err}");
        assert_eq!(
            err.lines().filter(|l| l.starts_with(&want)).count(),
            1,
            "{cmd:?} says it once: {err}"
        );
    }
    // The HTML page says it too.
    let page = std::fs::read_to_string(dir.join("x.html")).unwrap();
    assert!(
        page.contains("the trace ends early at byte"),
        "no warning in the page"
    );
}

#[test]
fn every_command_rejects_a_flipped_byte_naming_its_offset() {
    let dir = temp("flipped");
    let bin = build_c("mutex", &dir);
    let run = record(&dir, &[], &bin, &[], b"");
    let mut bytes = std::fs::read(&run.trace_path).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x5a;
    let bad = dir.join("flipped.lstrace");
    std::fs::write(&bad, &bytes).unwrap();
    let whole = run.trace_path.to_str().unwrap().to_string();
    for (cmd, code, err) in run_every_command(&dir, &whole, &bad, &[]) {
        assert_eq!(code, Some(2), "{cmd:?}: {err}");
        assert!(
            err.contains("byte offset") || err.contains("at byte"),
            "{cmd:?}: {err}"
        );
    }
}

// See issue 32: a flipped byte rejected the whole trace, with no way to
// skip the damaged record.
#[test]
fn every_command_reads_past_a_flipped_byte_with_skip_corrupt() {
    let dir = temp("skip-corrupt");
    let bin = build_c("mutex", &dir);
    let run = record(&dir, &[], &bin, &[], b"");
    let mut bytes = std::fs::read(&run.trace_path).unwrap();
    // The event chunk holding the middle byte, found by reading the good
    // trace: its offset, length and event count are the ground truth.
    let mid = (bytes.len() / 2) as u64;
    let mut r = lockscope_format::TraceReader::new(&bytes[..]).unwrap();
    let (mut total, mut victim) = (0u64, None);
    while let Some(rec) = r.next().unwrap() {
        if let lockscope_format::Record::Events(c) = rec {
            total += u64::from(c.count);
            let (at, end) = (r.record_offset(), r.offset());
            if (at..end).contains(&mid) {
                victim = Some((at, end - at, u64::from(c.count)));
            }
        }
    }
    let (at, len, lost) = victim.expect("the middle byte is in an event chunk");
    bytes[mid as usize] ^= 0x5a;
    let bad = dir.join("flipped.lstrace");
    std::fs::write(&bad, &bytes).unwrap();
    let want = format!(
        "lockscope: WARNING: {}: 1 damaged stretch of the trace ({len} bytes, the first at byte {at}) was skipped",
        bad.display()
    );
    let whole = run.trace_path.to_str().unwrap().to_string();
    for (cmd, code, err) in run_every_command(&dir, &whole, &bad, &["--skip-corrupt"]) {
        assert_eq!(code, Some(0), "{cmd:?}: {err}");
        assert_eq!(
            err.lines().filter(|l| l.starts_with(&want)).count(),
            1,
            "{cmd:?} says it once: {err}"
        );
    }
    let page = std::fs::read_to_string(dir.join("x.html")).unwrap();
    assert!(
        page.contains("1 damaged stretch of the trace"),
        "no warning in the page"
    );
    // Exactly the damaged chunk's events are missing, and the JSON says so.
    let o = lockscope(
        &["report", "--json", "--skip-corrupt", bad.to_str().unwrap()],
        None,
    );
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["events"].as_u64(), Some(total - lost), "{}", j["damaged"]);
    assert!(j["damaged"]
        .as_str()
        .is_some_and(|d| d.contains(&format!("at byte {at}"))));
    // Without the flag, the error says how to read past the damage.
    let o = lockscope(&["report", bad.to_str().unwrap()], None);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--skip-corrupt"), "{err}");
}
