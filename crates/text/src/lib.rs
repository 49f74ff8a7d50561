//! Number, unit and terminal-text formatting shared by every lockscope
//! printer.
//!
//! # Entry points
//! - [`units`]: durations (`ns`, `ms`, `short_ns`), percentages and
//!   counts with thousands separators, one style each.
//! - [`text`]: names elided in the middle to fit a column
//!   ([`text::elide_name`] never cuts the `(file:line)` or the function
//!   that tells two rows apart), prose wrapped at a width, control
//!   characters escaped ([`text::term`]).
//!
//! # Design constraints
//! The bottom of the printing stack: pure functions from values to
//! strings, no dependency, no knowledge of traces or reports. A figure or
//! a name is written the same way in the text report, the detailed-mode
//! analyses, the critical path, `diff` and the fleet tables because they
//! all call this crate; a printer that formats a duration by hand is a
//! bug. JSON and CSV carry raw numbers and are not formatted here.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod text;
pub mod units;
