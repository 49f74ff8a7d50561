//! The whole `lockscope report`: the timing report and the sections every
//! other analysis adds to it, as one model that every printer prints.
//!
//! # Entry points
//! [`full::build`] (a trace's [`Report`] -> [`FullReport`]): adds the
//! hand-written spinlocks, barrier instances, dead writes, GPU blame
//! shifting and "what it would gain" to the lock report. Text, JSON and
//! HTML print this one value, so a section added here appears in all of
//! them.
//!
//! # Design constraints
//! The top of the analysis stack, and only composition: each section is
//! computed by the crate that owns it (`lockscope-report`,
//! `lockscope-detailed`, `lockscope-replay`) and bounded here by the
//! trace's size (a section too costly for a large trace is left out with
//! a note that names the command that prints it). The layers below, from
//! the bottom: `lockscope-trace` (reading, the sync layer),
//! `lockscope-symbols` (names), `lockscope-text` (formatting),
//! `lockscope-report`, `lockscope-detailed`, `lockscope-replay`.
//! The integration tests of those layers that need a whole report live
//! here, where every layer is a dependency (`tests/`).
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod full;

pub use full::{FullReport, Sections};
pub use lockscope_report::Report;
pub use lockscope_trace::AnalysisError;
