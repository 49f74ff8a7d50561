//! The `export` formats built on the report and the synchronization layer
//! (`lockscope-export`): folded stacks, pprof, Perfetto, speedscope. The
//! `export` command dispatches here so that its own file stays small.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use lockscope_export::{folded, perfetto, perfetto_proto, pprof, speedscope, stacks};
use lockscope_report::ReportConfig;

/// The report of `trace` with the settings every export uses: the text
/// report's defaults (symbols, overhead correction, user frames), nothing
/// filtered, so the exported totals are the report's.
/// A trace cut short gets the warning every command gives.
pub fn report(trace: &Path) -> anyhow::Result<lockscope_report::Report> {
    crate::cmd::util::check_trace_file(trace)?;
    let cfg = ReportConfig {
        skip_corrupt: crate::cmd::util::skip_corrupt(),
        ..ReportConfig::default()
    };
    let r = lockscope_report::analyze(trace, &cfg, &mut |_, _, _| {})
        .with_context(|| format!("cannot read {}", trace.display()))?;
    crate::cmd::util::warn_cut_short_report(trace, &r);
    Ok(r)
}

/// `--format folded` and `--format pprof`.
pub fn stacks(trace: &Path, pprof: bool, blame: bool, out: &mut dyn Write) -> anyhow::Result<()> {
    let r = report(trace)?;
    let s = stacks::from_report(&r);
    if pprof {
        let info = pprof::ProfileInfo {
            command: r.command.clone(),
            duration_ns: r.duration_ns,
            labels: r.labels.clone().into_iter().collect(),
        };
        pprof::write(&s, &info, out)?;
    } else {
        let side = if blame {
            folded::Side::Holders
        } else {
            folded::Side::Waiters
        };
        folded::write(&s, side, out)?;
    }
    Ok(())
}

/// The trace's index and records (not its events).
fn meta(trace: &Path) -> anyhow::Result<lockscope_trace::input::Meta> {
    crate::cmd::util::index_trace(trace)
}

/// `--format perfetto` (JSON) and `--format perfetto-proto` (`proto`).
pub fn perfetto(trace: &Path, proto: bool, out: &mut dyn Write) -> anyhow::Result<()> {
    let m = meta(trace)?;
    let s = if proto {
        perfetto_proto::write(trace, &m, true, out)
    } else {
        perfetto::write(trace, &m, true, out)
    }
    .with_context(|| format!("cannot export {}", trace.display()))?;
    if s.extra_tracks > 0 {
        eprintln!(
            "lockscope: {} slices of locks released out of order went to extra tracks",
            s.extra_tracks
        );
    }
    Ok(())
}

/// `--format speedscope`.
pub fn speedscope(trace: &Path, out: &mut dyn Write) -> anyhow::Result<()> {
    let m = meta(trace)?;
    // The buffer size before spilling to temporary files; the tests set a
    // small one to cover the spill (undocumented on purpose).
    let spill = std::env::var("LOCKSCOPE_SPEEDSCOPE_SPILL_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(speedscope::SPILL_EVENTS);
    speedscope::write_with(trace, &m, true, spill, out)
        .with_context(|| format!("cannot export {}", trace.display()))?;
    Ok(())
}
