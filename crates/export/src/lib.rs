//! Exporters and the HTML report of lockscope traces, on top of
//! `lockscope-analysis`.
//!
//! Every export takes its weights from the same place as the text report:
//! the wait per lock, call path and holder comes from a
//! [`lockscope_report::Report`] (so an exported total equals the
//! report's total), and anything laid out in time (timelines, hand-offs)
//! comes from the one interpreter of the lock protocol,
//! [`lockscope_trace::sync`]. Nothing here reads an event's phase bits.
//!
//! - [`stacks`]: the report's wait as weighted call stacks (waiter paths
//!   and holder blame), the model of [`folded`] and [`pprof`];
//! - [`folded`]: collapsed stacks (flamegraph.pl, inferno);
//! - [`pprof`]: gzipped `profile.proto`, like Go's contention profile;
//! - [`timeline`]: spans, hand-offs and waiter counts in time, from the
//!   synchronization layer, and [`names`] for their locks and sites;
//! - [`perfetto`]: Chrome trace-event JSON (Perfetto, chrome://tracing);
//! - [`perfetto_proto`]: the same as Perfetto's native protobuf trace,
//!   smaller and faster, for long recordings;
//! - [`speedscope`]: speedscope's evented profiles, one per thread;
//! - [`html`]: the self-contained HTML report (timeline, flame graphs, tables);
//! - [`diff`]: two reports compared (`lockscope diff`);
//! - [`parquet`]: the reports of many traces as Parquet tables, for
//!   query engines (DuckDB, Spark).
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod diff;
pub mod folded;
pub mod html;
mod jsonout;
pub mod names;
pub mod parquet;
pub mod perfetto;
pub mod perfetto_proto;
pub mod pprof;
pub mod speedscope;
pub mod stacks;
pub mod timeline;

/// Why an export failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ExportError {
    /// Writing the output failed.
    Io(std::io::Error),
    /// Reading or analysing the trace failed.
    Analysis(lockscope_trace::AnalysisError),
}

impl std::fmt::Display for ExportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExportError::Io(e) => write!(f, "cannot write the export: {e}"),
            ExportError::Analysis(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ExportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ExportError::Io(e) => Some(e),
            ExportError::Analysis(e) => Some(e),
        }
    }
}

impl From<std::io::Error> for ExportError {
    fn from(e: std::io::Error) -> Self {
        ExportError::Io(e)
    }
}

impl From<lockscope_trace::AnalysisError> for ExportError {
    fn from(e: lockscope_trace::AnalysisError) -> Self {
        ExportError::Analysis(e)
    }
}
