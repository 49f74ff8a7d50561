//! Analyses of detailed-mode traces, which hold memory accesses beside the
//! lock calls (recorded by the ThreadSanitizer-ABI runtime).
//!
//! # Entry points
//! - [`detailed::Detailed`]: the shared view: critical-section instances
//!   with their read and write sets, every access with the locks held,
//!   heap blocks; built once per trace from the sync layer's steps.
//! - On it: [`ulcp`] (unnecessary lock contention pairs, PerfPlay §2.1),
//!   [`lockset`] (Eraser with [`hb`] happens-before), [`occ`]
//!   (optimistic-concurrency potential, PinCS), [`spin`] (hand-written
//!   spinlocks from accesses alone), [`barriers`] (imbalance and redundant
//!   instances) and [`deadwrites`] (DeadSpy).
//!
//! # Design constraints
//! Reads events through `lockscope-trace` (locks only as its steps) and
//! names through `lockscope-symbols`; knows nothing of the timing report
//! or the replay. Each analysis returns a serializable result and prints
//! its own text with `lockscope-text`'s helpers. The detailed view holds a
//! whole trace's accesses, so callers bound the trace size they hand it.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod barriers;
pub mod deadwrites;
pub mod detailed;
pub mod hb;
pub mod lockset;
pub mod occ;
pub mod spin;
pub mod ulcp;
