//! `lockscope html [TRACE] [-o FILE]`: the report as one self-contained
//! HTML page (timeline, flame graphs, sortable tables), for a browser
//! without network access or a bug report attachment.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use lockscope_export::html::{self, HtmlOptions};

/// Write the report as a self-contained HTML page.
///
/// The page has the verdict and recommendations, a per-thread timeline
/// (wheel to zoom, drag to pan, hover for the lock, site, call path and
/// duration; arrows from a release to the acquisition it let in), flame
/// graphs of wait by waiter and by holder call path, and the report's
/// tables, sortable. Nothing is loaded from the network.
#[derive(clap::Args)]
pub struct Args {
    /// The trace (default: the newest `*.lstrace` in the current directory).
    pub trace: Option<PathBuf>,
    /// Write here (default: the trace's name with `.html`).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Time bins per thread in the timeline's overview.
    #[arg(long, default_value_t = 1500, value_name = "N")]
    pub bins: usize,
    /// Spans kept individually for hover details (the longest).
    #[arg(long, default_value_t = 20_000, value_name = "N")]
    pub spans: usize,
    /// Do not resolve symbols.
    #[arg(long)]
    pub no_symbols: bool,
}

/// The newest `*.lstrace` of the current directory (also `export`'s
/// default).
pub(crate) fn newest_trace() -> anyhow::Result<PathBuf> {
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    for e in std::fs::read_dir(".")
        .context("cannot list the current directory to find a trace")?
        .flatten()
    {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "lstrace") && p.is_file() {
            let t = e
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH);
            if best.as_ref().is_none_or(|(bt, bp)| (t, &p) > (*bt, bp)) {
                best = Some((t, p));
            }
        }
    }
    best.map(|(_, p)| p).context(
        "no trace given and no *.lstrace file in the current directory \
         (record one with `lockscope record -- PROGRAM`)",
    )
}

/// Runs the subcommand; returns the exit code.
pub fn run(a: Args) -> anyhow::Result<i32> {
    if a.bins == 0 || a.bins > 100_000 {
        anyhow::bail!("--bins {}: expected 1 to 100000", a.bins);
    }
    let trace = match a.trace {
        Some(t) => t,
        None => newest_trace()?,
    };
    let meta = crate::cmd::util::index_trace(&trace)?;
    let output = a.output.unwrap_or_else(|| trace.with_extension("html"));
    let opts = HtmlOptions {
        bins: a.bins,
        max_spans: a.spans,
        symbolize: !a.no_symbols,
    };
    // The report with the settings every export uses (the text report's
    // defaults, as `export_formats::report`), and the timeline, from one
    // read of the trace. The page (a few MB at most, whatever the trace)
    // is made in memory first, so that a trace that fails to read leaves
    // no output file behind, as when the report was computed before the
    // file was created.
    let cfg = lockscope_report::ReportConfig::default();
    let mut page = Vec::new();
    // The in-memory sections read the whole trace when it is small, as
    // `lockscope report` does.
    let mut open_whole = |events| crate::cmd::util::open_small_trace(&trace, events);
    let (_, s) = html::write_analyzed(&trace, &meta, &cfg, &opts, &mut open_whole, &mut page)
        .with_context(|| format!("cannot read {}", trace.display()))?;
    let mut out = super::output::Output::create(&output, Some(&trace))?;
    // The error says what and where (see `output`).
    out.write_all(&page)?;
    out.commit()?;
    eprintln!(
        "lockscope: wrote {} ({:.1} MB; {} of {} spans individually)",
        output.display(),
        s.bytes as f64 / 1e6,
        s.spans_kept,
        s.spans
    );
    Ok(0)
}
