//! Replay of a recorded run, and what it would take with its locks
//! changed (PerfPlay §5).
//!
//! # Entry points
//! - [`replay`]: the trace turned into a program of compute and
//!   synchronization actions, replayed by a discrete-event simulation on a
//!   model of the CPUs; [`replay::build_and_report`] is `lockscope replay`.
//! - [`whatif`]: scenarios on that program (a lock removed, shared among
//!   readers, its sections shortened, made finer from the detailed view's
//!   read and write sets) with a range over the model's uncertain inputs.
//! - [`critical`]: the chain of work that decided the replayed wall time.
//!
//! # Design constraints
//! The unchanged replay keeps the recorded order of every hand-over, so
//! it reproduces the recording; a scenario grants the locks it keeps in
//! arrival order, with the lock's waiting policy, because the recorded
//! order of a convoy would otherwise survive the change (docs/replay.md).
//! Reads the trace through `lockscope-trace`, names through
//! `lockscope-symbols`, read and write sets through `lockscope-detailed`;
//! knows nothing of the timing report. The replay program spills to disk
//! past a bound, so memory does not grow with the trace.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod critical;
pub mod replay;
pub mod whatif;
