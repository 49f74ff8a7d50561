//! `lockscope spin TRACE`: hand-written spinlocks found from the atomics
//! and memory accesses of a detailed-mode or imported hardware trace.

use std::path::PathBuf;

use lockscope_analysis::spin;

use crate::cmd::util;

/// Spinlocks nobody named: find hand-written locks from their atomics.
///
/// A location written by atomic read-modify-writes that only ever holds two
/// values, and is set free only by the thread that set it busy, is a
/// spinlock. Reports acquisitions, failed attempts, waiting and holding
/// times per lock, thread and site, what each lock protects, and warnings.
/// Works on traces of programs built with `lockscope cc`/`c++` (record with
/// `lockscope record --all-accesses` to see what the locks protect) and on hardware
/// traces brought in with `lockscope import`.
#[derive(clap::Args)]
pub struct Args {
    /// Detailed-mode or imported trace.
    pub trace: PathBuf,
    /// Print JSON (schema `lockscope.spin/1`) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Do not read binaries for symbols (names stay addresses).
    #[arg(long)]
    pub no_symbols: bool,
    /// Also write a copy of the trace in which every spinlock acquisition
    /// and release is a pthread-spinlock event, so that `report` (as
    /// `spin` locks), the replay and every other lock analysis see them.
    #[arg(long, value_name = "OUT")]
    pub annotate: Option<PathBuf>,
}

/// Runs the subcommand; returns the exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let t = util::open_trace(&args.trace)?;
    let r = spin::analyze(&t, !args.no_symbols);
    if let Some(out) = &args.annotate {
        use anyhow::Context;
        let a = spin::annotate(&t, &r);
        let f = std::fs::File::create(out)
            .with_context(|| format!("cannot create {}", out.display()))?;
        lockscope_hwtrace::write_trace(&a, std::io::BufWriter::new(f))
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", out.display()))?;
    }
    util::print_result(&r, args.json, spin::render_text)
}

fn ns(v: u64) -> String {
    match v {
        0..=999 => format!("{v}ns"),
        1_000..=999_999 => format!("{:.1}us", v as f64 / 1e3),
        1_000_000..=999_999_999 => format!("{:.1}ms", v as f64 / 1e6),
        _ => format!("{:.2}s", v as f64 / 1e9),
    }
}

/// The spinlock section of `lockscope report --json` (key `spin`): the
/// whole `lockscope.spin/1` document, or `None` when the trace has no
/// candidate (no atomic read-modify-write at all).
pub fn report_json(t: &lockscope_format::Trace, symbolize: bool) -> Option<spin::SpinReport> {
    spin::has_candidates(t).then(|| spin::analyze(t, symbolize))
}

/// The spinlocks section `lockscope report` prints after the pthread
/// locks: empty when the trace has none (or is too large to search).
pub fn report_section(
    trace: &std::path::Path,
    t: &lockscope_format::Trace,
    d: &mut lockscope_analysis::detailed::Detailed,
) -> String {
    use std::fmt::Write;
    if !spin::has_candidates(t) {
        return String::new();
    }
    let r = spin::analyze_with(t, d);
    if r.spinlocks.is_empty() {
        return String::new();
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nHand-written spinlocks (found from atomics; details: lockscope spin {})",
        trace.display()
    );
    let _ = writeln!(
        s,
        "  {:<24} {:<5} {:>9} {:>8} {:>7} {:>9} {:>9}  warnings",
        "lock", "kind", "acquired", "failed", "1st-try", "wait", "hold"
    );
    for l in &r.spinlocks {
        let w: Vec<&str> = l.warnings.iter().map(|w| w.kind).collect();
        let _ = writeln!(
            s,
            "  {:<24} {:<5} {:>9} {:>8} {:>7.2} {:>9} {:>9}  {}",
            l.symbol,
            l.kind,
            l.acquisitions,
            l.failed_attempts,
            l.first_try_ratio,
            ns(l.wait_ns),
            ns(l.hold_ns),
            if w.is_empty() {
                "-".to_string()
            } else {
                w.join(", ")
            }
        );
    }
    s
}
