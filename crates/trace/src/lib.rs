//! Reading a lockscope trace for analysis, and the lock protocol
//! interpreted once.
//!
//! # Entry points
//! - [`input`]: one indexing pass over a trace that collects every record
//!   other than events ([`input::Meta`]: processes, threads, maps, call
//!   paths, strings, losses), then the time-ordered merge of all threads'
//!   events in bounded memory ([`input::index_with`], [`input::Meta`]).
//! - [`sync`]: the sync layer. Raw events in (a BEGIN, its completion,
//!   the arguments the recorder wrote), typed steps out
//!   ([`sync::Step`]: acquired after waiting so long, released, waited on
//!   a condition, timed out, crossed a barrier...), with the locks each
//!   thread holds after each step and the waits still open at the end.
//! - [`AnalysisError`]: why a trace could not be analysed.
//!
//! # Design constraints
//! Every analysis above this crate (the timing report, hangs, spinlocks,
//! the detailed-mode analyses, the replay) consumes [`sync`]'s steps; none
//! pairs a BEGIN with its completion itself. That is the point of the
//! layer: the argument conventions of the recorder (a timed-out condition
//! wait reports `errno` first and the mutex second, a failed trylock holds
//! nothing, an owner that died leaves EOWNERDEAD) are decoded in one
//! place, tested by a table of event sequences (`tests/sync_contract.rs`).
//! The crate knows nothing of symbols, reports or printing, and reads
//! traces only through `lockscope-format`. Memory is bounded by the number
//! of threads and locks, never by the number of events.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod error;
pub mod input;
pub mod sync;

pub use error::AnalysisError;

/// HashMap with rustc's Fx hasher: keys here are integers, and SipHash
/// costs more than the rest of the per-event work (a maintained crate
/// replaces the hand-written multiplicative hasher this used to be).
pub type FastMap<K, V> = rustc_hash::FxHashMap<K, V>;
