//! The timing report of a lockscope trace: which locks make threads wait,
//! where, for how long, whose fault it is, and what to try.
//!
//! # Entry points
//! - [`analyze`] (trace path + [`ReportConfig`] -> [`Report`]): one
//!   indexing pass and one time-ordered stream of the sync layer's steps
//!   through the timing [`model`] (per-thread state machine, per-lock
//!   state, blame) and the [`hangs`] tracker; locks named by
//!   `lockscope-symbols`.
//! - [`advice`]: recommendations (which lock algorithm or code change to
//!   try, with the numbers behind it); [`condlock`] the evidence for "a
//!   condition variable used as a lock".
//! - [`gpu`]: CPU-GPU idleness by blame shifting; [`fleet`]: one report
//!   over many traces, with each lock's spread between them.
//! - [`render`]: the report as terminal tables and CSV (JSON is the
//!   report serialized).
//!
//! # Design constraints
//! Reads events only as steps of `lockscope-trace`'s sync layer, never raw
//! lock calls. Memory is bounded by threads, locks and call sites, not by
//! events (percentiles come from bounded [`hist`]ograms). The report is
//! data: [`render`] prints it, `lockscope-export` draws it, and neither
//! computes a figure of its own. Knows nothing of the detailed-mode
//! analyses or the replay, which sit above it.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod advice;
pub mod condlock;
pub mod fleet;
pub mod gpu;
pub mod hangs;
pub mod hist;
pub mod model;
pub mod render;
pub mod report;

pub use report::{analyze, analyze_observed, Report, ReportConfig, SortKey, SCHEMA};
