//! `lockscope barriers TRACE`: barrier waiting blamed on the last
//! arriver, and redundant barrier instances (no dependence across them).

use std::path::PathBuf;

use lockscope_analysis::{barriers, detailed::Detailed};

use crate::cmd::util;

/// Barrier imbalance and redundant barriers.
///
/// Per pthread barrier and per instance (round): each thread's wait,
/// blamed on the last arriver; whether the instance was redundant (no
/// thread wrote before it anything another reads or writes after it, nor
/// read anything another writes after it), with the fraction of redundant
/// instances per calling context of the barrier call. Redundancy needs a
/// trace of a program built with `lockscope cc` and recorded with
/// `lockscope record --all-accesses`.
#[derive(clap::Args)]
pub struct Args {
    /// Trace recorded from a program built with `lockscope cc`/`c++`
    /// with `lockscope record --all-accesses`.
    pub trace: PathBuf,
    /// Print JSON (schema `lockscope.barriers/1`) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Do not read binaries for symbols (names stay addresses).
    #[arg(long)]
    pub no_symbols: bool,
}

/// Runs the subcommand; returns the exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let t = util::open_trace(&args.trace)?;
    let mut d = Detailed::from_trace(&t, !args.no_symbols);
    let r = barriers::analyze(&t, &mut d);
    util::print_result(&r, args.json, barriers::render_text)
}

/// The barrier and dead-write sections `lockscope report` prints after
/// the pthread locks, for a detailed trace: empty for a timing trace, a
/// trace too large to load, or one with neither barriers nor dead writes.
/// Dead writes need every access (`record --all-accesses`): without
/// them the section is left out rather than shown with false positives.
pub fn report_section(
    trace: &std::path::Path,
    t: &lockscope_format::Trace,
    d: &mut Detailed,
) -> String {
    use lockscope_analysis::deadwrites;
    use std::fmt::Write;
    if !util::is_detailed(t) {
        return String::new();
    }
    let mut s = String::new();
    let b = barriers::analyze(t, d);
    if b.instances > 0 {
        let _ = writeln!(
            s,
            "\nBarriers: {} instance(s){} (details: lockscope barriers {})",
            b.instances,
            if b.all_accesses {
                format!(", {} redundant", b.redundant)
            } else {
                ", redundancy undecided (needs `lockscope record --all-accesses`)".to_string()
            },
            trace.display()
        );
        for x in &b.barriers {
            // No count when undecided: "0 redundant" would read as "needed".
            let redundant = if x.redundancy_decided {
                format!(" {:>6} redundant", x.redundant)
            } else if b.all_accesses {
                " redundancy undecided".to_string()
            } else {
                String::new()
            };
            let _ = writeln!(
                s,
                "  {:<24} {:>6} instance(s) {:>10.3} ms waiting{redundant}",
                x.barrier,
                x.instances,
                x.wait_ns as f64 / 1e6,
            );
        }
        for a in barriers::advice(&b) {
            let _ = writeln!(s, "  - {a}");
        }
    }
    let w = deadwrites::analyze(t, d);
    if w.all_accesses && w.dead_bytes > 0 {
        let _ = writeln!(
            s,
            "\nDead writes: {} of {} bytes written ({:.1}%) overwritten before any read \
             (details: lockscope deadwrites {})",
            w.dead_bytes,
            w.bytes_written,
            w.dead_fraction * 100.0,
            trace.display()
        );
        for a in deadwrites::advice(&w) {
            let _ = writeln!(s, "  - {a}");
        }
    }
    s
}
