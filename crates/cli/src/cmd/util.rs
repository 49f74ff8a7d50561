//! Helpers shared by subcommands.

use std::path::PathBuf;

/// Finds a shared library shipped with lockscope (e.g.
/// `liblockscope_preload.so`). Looked up, in order: the environment
/// variable `env_var`, the directory of the running executable, its
/// `deps/` subdirectory (cargo's layout) and `../lib/lockscope/` (an
/// installed layout). Returns an error naming every place tried.
pub fn find_library(file_name: &str, env_var: &str) -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os(env_var) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        anyhow::bail!("{env_var}={} does not name a file", p.display());
    }
    let exe = std::env::current_exe()?;
    let dir = exe.parent().map(|d| d.to_path_buf()).unwrap_or_default();
    let candidates = [
        dir.join(file_name),
        dir.join("deps").join(file_name),
        dir.join("../lib/lockscope").join(file_name),
    ];
    for c in &candidates {
        if c.is_file() {
            return Ok(c.canonicalize().unwrap_or_else(|_| c.clone()));
        }
    }
    let tried: Vec<String> = candidates.iter().map(|c| c.display().to_string()).collect();
    anyhow::bail!(
        "cannot find {file_name} (tried {}); build the whole workspace with \
         `cargo build --release`, or set {env_var}",
        tried.join(", ")
    )
}

/// Checks that `path` can be a trace before reading it, so that the
/// common mistakes get a message that says what is wrong in words: no
/// such file, a directory, or an empty file (a recording that was killed
/// before it wrote its header; "not a lockscope trace" would mislead).
pub fn check_trace_file(path: &std::path::Path) -> anyhow::Result<()> {
    let m = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => anyhow::bail!(
            "{}: no such file (record one with `lockscope record -- PROGRAM`)",
            path.display()
        ),
        Err(e) => anyhow::bail!("cannot read {}: {e}", path.display()),
    };
    if m.is_dir() {
        anyhow::bail!("{}: is a directory, not a trace file", path.display());
    }
    if m.len() == 0 {
        anyhow::bail!(
            "{}: the file is empty (0 bytes); the recording wrote nothing \
             (was `lockscope record` killed before the program started?)",
            path.display()
        );
    }
    Ok(())
}

/// The one salvage policy of every command that reads a trace: a trace
/// cut short (a recorder killed, a full disk: [`FormatError::Truncated`])
/// is read up to its last whole record, and this warning, the same for
/// every command, goes to stderr; the command goes on and exits as it
/// would have (0 when it succeeds). Any other damage (a flipped byte, not
/// a trace) is an error naming the byte offset.
///
/// [`FormatError::Truncated`]: lockscope_format::FormatError::Truncated
pub fn warn_cut_short(path: &std::path::Path, e: &lockscope_format::FormatError) {
    let at = match e {
        lockscope_format::FormatError::Truncated { offset, what } => {
            format!(" at byte {offset} (while reading {what})")
        }
        _ => String::new(),
    };
    eprintln!(
        "lockscope: WARNING: {} ends early{at}: what follows covers what was recorded \
         before (the recording was cut short: a killed recorder, a full disk)",
        path.display()
    );
}

/// [`warn_cut_short`] for a command that has only the report of a trace
/// (and [`warn_skipped`]).
pub fn warn_cut_short_report(path: &std::path::Path, r: &lockscope_report::Report) {
    warn_skipped(path, &r.skipped);
    if let Some((offset, what)) = r.cut_short {
        warn_cut_short(
            path,
            &lockscope_format::FormatError::Truncated { offset, what },
        );
    }
}

/// `--skip-corrupt`, set once by `main` before any command runs. A
/// process-wide setting of the front end, not of the libraries: they take
/// it as a parameter (`index_with`, `ReportConfig::skip_corrupt`,
/// `Trace::open_salvaging_with`); a field in every command's arguments
/// would only be copied here.
static SKIP_CORRUPT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets `--skip-corrupt` (see [`SKIP_CORRUPT`]).
pub fn set_skip_corrupt(on: bool) {
    SKIP_CORRUPT.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Whether `--skip-corrupt` was given.
pub fn skip_corrupt() -> bool {
    SKIP_CORRUPT.load(std::sync::atomic::Ordering::Relaxed)
}

/// The second half of the salvage policy: with `--skip-corrupt`, damaged
/// records were stepped over; this warning, the same for every command,
/// says how much and where (nothing when none was).
pub fn warn_skipped(path: &std::path::Path, skipped: &[lockscope_format::Skipped]) {
    if let Some(line) = lockscope_trace::input::damaged_line(skipped) {
        eprintln!("lockscope: WARNING: {}: {line}", path.display());
    }
}

/// What to add to an error line that names a corrupt trace: the flag that
/// reads past the damage (empty for other errors, or when it was given).
pub fn corrupt_hint(line: &str) -> &'static str {
    if line.contains("trace is corrupt at byte offset") && !skip_corrupt() {
        " (to read the rest of the trace, skipping what is damaged: --skip-corrupt)"
    } else {
        ""
    }
}

/// The index of the trace at `path` (every command that streams a trace
/// starts here), with the file checked first and the warning of
/// [`warn_cut_short`] when the trace was cut short.
pub fn index_trace(path: &std::path::Path) -> anyhow::Result<lockscope_trace::input::Meta> {
    check_trace_file(path)?;
    let meta = lockscope_trace::input::index_with(path, skip_corrupt(), &mut |_, _| {})
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    warn_skipped(path, &meta.skipped);
    if let Some((offset, what)) = &meta.cut_short {
        warn_cut_short(
            path,
            &lockscope_format::FormatError::Truncated {
                offset: *offset,
                what,
            },
        );
    }
    Ok(meta)
}

/// Prints an error and its causes on one line, each cause once: a
/// wrapped error whose message already contains its source's text (a
/// common style: "I/O error: {source}") would otherwise repeat it, once
/// per level of wrapping.
pub fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let msg = cause.to_string();
        if line.contains(&msg) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&msg);
    }
    line
}

/// Opens a detailed-mode trace for `ulcp`, `lockset` and `occ`. The error
/// is flattened into one message: the format error's own text already names
/// its cause and byte offset, and a context chain would repeat it.
///
/// A timing-mode trace (from a program not built with `lockscope cc`) is
/// refused: it has no memory accesses, so these analyses would see every
/// critical section as empty and print confident, meaningless figures
/// (a "best case speedup" of a program they know nothing about).
pub fn open_trace(path: &std::path::Path) -> anyhow::Result<lockscope_format::Trace> {
    check_trace_file(path)?;
    let (t, cut) = lockscope_format::Trace::open_salvaging_with(path, skip_corrupt())
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    warn_skipped(path, &t.skipped);
    if let Some(e) = cut {
        warn_cut_short(path, &e);
    }
    if !is_detailed(&t) {
        anyhow::bail!(
            "{}: a timing-mode trace (no memory accesses recorded); this analysis needs a \
             detailed-mode trace: build the program with `lockscope cc` (or `lockscope c++`), \
             e.g. `lockscope cc -O2 -g -o prog prog.c`, then `lockscope record -- ./prog`",
            path.display()
        );
    }
    Ok(t)
}

/// True when the trace holds detailed-mode events: memory accesses,
/// atomics, allocations or release values (ops 40-62), which only the
/// runtime linked by `lockscope cc` records.
pub fn is_detailed(t: &lockscope_format::Trace) -> bool {
    let first = lockscope_format::Op::Read as u8;
    let last = lockscope_format::Op::ReleaseValue as u8;
    t.events
        .values()
        .any(|v| v.iter().any(|e| (first..=last).contains(&e.op)))
}

/// Prints an analysis result on stdout: pretty JSON with `json`, else the
/// analysis' own text rendering. Returns exit code 0.
pub fn print_result<T: serde::Serialize>(
    r: &T,
    json: bool,
    render_text: fn(&T, &mut dyn std::io::Write) -> std::io::Result<()>,
) -> anyhow::Result<i32> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if json {
        // As an io::Error (serde_json's keeps the original one), so that a
        // closed pipe (`lockscope ulcp --json T | head`) exits quietly.
        serde_json::to_writer_pretty(&mut out, r).map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else {
        render_text(r, &mut out)?;
    }
    out.flush()?;
    Ok(0)
}

/// Most events the in-memory sections of `lockscope report` (spinlocks,
/// barriers, dead writes) load: the report took ~165 bytes per event of
/// such a trace (peaks of 167 MiB at 1M events, 635 MiB at 4M), nearly
/// all of it the trace in memory and their detailed view; at 500,000
/// events it peaks at 85 MiB (`examples/report_memory.rs`), under 128 MiB
/// with room for traces whose accesses spread over more addresses. A bound on the file's size, as before,
/// bounded nothing: a trace of 256 MB is 50-100M events, gigabytes in
/// memory. The alternative, the three analyses reading the trace chunk
/// by chunk through its index, is the lasting fix; until then a larger
/// trace gets these sections from their own commands.
const REPORT_SECTIONS_MAX_EVENTS: u64 = 500_000;

/// The whole trace in memory when it has at most
/// [`REPORT_SECTIONS_MAX_EVENTS`] events (`events`, from the report's
/// index) and is readable, else `None`: the report's extra sections are
/// then left out, and a note on stderr says so and names the commands
/// that print them.
pub fn open_small_trace(path: &std::path::Path, events: u64) -> Option<lockscope_format::Trace> {
    if events > REPORT_SECTIONS_MAX_EVENTS {
        // On stderr: the report on stdout stays what it was for the
        // same sections, and a script reading it sees no new line.
        eprintln!(
            "lockscope: spinlocks, barriers and dead writes left out of the report: \
             {events} events, over the {REPORT_SECTIONS_MAX_EVENTS} it loads in memory; \
             run `lockscope spin`, `lockscope barriers` or `lockscope deadwrites` on {}",
            path.display()
        );
        return None;
    }
    // A trace cut short gives its sections up to the cut (the report
    // has said so already).
    lockscope_format::Trace::open_salvaging_with(path, skip_corrupt())
        .ok()
        .map(|(t, _)| t)
}

/// The traces named on a command line: files as given, and for a
/// directory its `*.lstrace` files sorted by name (a directory without any
/// is an error, worded as for other commands given a directory).
pub fn expand_traces(paths: &[std::path::PathBuf]) -> anyhow::Result<Vec<std::path::PathBuf>> {
    use anyhow::Context;
    let mut traces = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut v: Vec<std::path::PathBuf> = std::fs::read_dir(p)
                .with_context(|| format!("cannot list {}", p.display()))?
                .flatten()
                .map(|e| e.path())
                .filter(|f| f.extension().is_some_and(|e| e == "lstrace") && f.is_file())
                .collect();
            if v.is_empty() {
                anyhow::bail!(
                    "{}: is a directory, with no *.lstrace file in it",
                    p.display()
                );
            }
            v.sort();
            traces.extend(v);
        } else {
            traces.push(p.clone());
        }
    }
    Ok(traces)
}

/// Parses `300ns`, `1.5us`, `2ms`, `1s` or a plain number of ns.
///
/// Hand-written on purpose, not humantime (the crate one would reach for):
/// humantime rejects fractions (`1.5us`) and bare numbers, both of which
/// `report --min-wait` has always accepted and its tests check. `opt` is
/// the option named in errors.
pub fn parse_duration(opt: &str, s: &str) -> anyhow::Result<u64> {
    use anyhow::Context as _;
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num
        .parse()
        .with_context(|| format!("{opt} {s:?}: expected a number with a unit, like 2ms"))?;
    let mul = match unit.trim() {
        "" | "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        u => anyhow::bail!("{opt} {s:?}: unknown unit {u:?} (use ns, us, ms or s)"),
    };
    Ok((v * mul).round() as u64)
}

#[cfg(test)]
mod duration_tests {
    use super::parse_duration;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("--min-wait", "300").unwrap(), 300);
        assert_eq!(parse_duration("--min-wait", "300ns").unwrap(), 300);
        assert_eq!(parse_duration("--min-wait", "1.5us").unwrap(), 1500);
        assert_eq!(parse_duration("--min-wait", "2ms").unwrap(), 2_000_000);
        assert_eq!(parse_duration("--min-wait", "1s").unwrap(), 1_000_000_000);
        assert!(parse_duration("--min-wait", "2 parsecs").is_err());
        assert!(parse_duration("--min-wait", "ms").is_err());
        let e = parse_duration("--duration", "2h").unwrap_err().to_string();
        assert!(e.starts_with("--duration \"2h\""), "{e}");
    }
}
