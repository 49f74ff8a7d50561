//! `lockscope diff A B [--json]`: two recordings of the same program
//! compared, lock by lock.

use std::io::Write;
use std::path::PathBuf;

/// Compare two traces of the same program (before/after a fix, or
/// `lockscope run --lock mcs` against plain).
///
/// Locks are matched by symbol, else by the place they were first used
/// (never by address); per lock: acquisitions, wait, hold and contended
/// fraction before and after, with the change. The first line is the
/// verdict, e.g. `queue_lock wait -92%, program -31%`.
///
/// A and B may be directories of traces (runs before and after): each
/// lock's mean wait per run is compared, with its standard deviation
/// between runs, and a change is marked `beyond` the run-to-run spread
/// when it exceeds twice its standard error (schema
/// `lockscope.groupdiff/1`).
#[derive(clap::Args)]
pub struct Args {
    /// The trace before (A), or a directory of traces.
    pub a: PathBuf,
    /// The trace after (B), or a directory of traces.
    pub b: PathBuf,
    /// JSON (schema `lockscope.diff/1`) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs the subcommand; returns the exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    if args.a.is_dir() || args.b.is_dir() {
        return groups(&args);
    }
    let a = super::export_formats::report(&args.a)?;
    let b = super::export_formats::report(&args.b)?;
    let d = lockscope_export::diff::diff(&a, &b);
    let out = if args.json {
        let mut s = serde_json::to_string_pretty(&d)?;
        s.push('\n');
        s
    } else {
        lockscope_export::diff::text(&d)
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(0)
}

/// `diff DIR_A DIR_B`: two groups of runs, lock by lock.
fn groups(args: &Args) -> anyhow::Result<i32> {
    let load = |p: &PathBuf| -> anyhow::Result<Vec<(String, lockscope_report::Report)>> {
        crate::cmd::util::expand_traces(std::slice::from_ref(p))?
            .iter()
            .map(|t| Ok((t.display().to_string(), super::export_formats::report(t)?)))
            .collect()
    };
    let (a, b) = (load(&args.a)?, load(&args.b)?);
    let d = lockscope_report::fleet::diff_groups(&a, &b);
    let out = if args.json {
        let mut s = serde_json::to_string_pretty(&d)?;
        s.push('\n');
        s
    } else {
        lockscope_report::fleet::diff_text(&d, 20)
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(0)
}
