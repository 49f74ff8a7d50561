//! Analyses of lockscope traces.
//!
//! Independent of capture: everything here reads a trace through
//! `lockscope-format` and produces plain result structs (serde-serializable)
//! that the CLI renders as text, JSON or CSV. One module per analysis.
//!
//! Lock report (`lockscope report`): [`report::analyze`] (trace path +
//! [`ReportConfig`] -> [`Report`]), built from [`input`] (two-pass,
//! bounded-memory, time-ordered reading), [`model`] (per-thread state
//! machine, per-lock state, blame), [`symbols`] and [`render`];
//! [`advice`] turns it into recommendations (which lock to try).
//! [`full::build`] adds the sections of other analyses (spinlocks,
//! barrier instances, dead writes, GPU, what-if gains): the whole report
//! every output format prints. [`fleet::aggregate`] makes one report of
//! many traces' reports (`lockscope report A B C`, `--group-by`).
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod advice;
pub mod barriers;
pub mod condlock;
pub mod critical;
pub mod deadwrites;
pub mod debuginfod;
pub mod detailed;
mod error;
pub mod fleet;
pub mod full;
pub mod gpu;
pub mod hangs;
pub mod hb;
pub mod hist;
pub mod input;
pub mod locknames;
pub mod lockset;
pub mod model;
pub mod occ;
pub mod render;
pub mod replay;
pub mod report;
pub mod spin;
pub mod symbols;
pub mod sync;
pub mod ulcp;
pub mod units;
pub mod whatif;

pub use error::AnalysisError;
pub use full::{FullReport, Sections};
pub use report::{analyze, analyze_observed, Report, ReportConfig, SortKey, SCHEMA};
