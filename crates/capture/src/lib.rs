//! The capture side of lockscope: what runs inside the recorded program.
//!
//! This crate is shared by the LD_PRELOAD library (timing mode) and the
//! ThreadSanitizer-ABI runtime (detailed mode), and read by the recorder
//! (`lockscope record`), which drains the buffers while the program runs.
//!
//! # Entry points
//! - [`ring`]: a single-producer single-consumer ring of 32-byte slots in
//!   shared memory. [`ring::Producer`] is the hot path; [`ring::Consumer`]
//!   is the recorder's side.
//! - [`raw`]: the slot layout of an event in the ring ([`raw::RawEvent`]).
//! - [`session`]: where buffers live (a session directory, one file per
//!   thread and per process) and the layout of their headers.
//! - [`tsc`]: the timestamp counter.
//! - [`thread`]: per-thread state in initial-exec TLS and the guarded
//!   emit API ([`thread::recorder`]) used by every hook.
//! - [`process`]: once-per-image work: session start ([`process::init`]),
//!   fork child, maps snapshots, exit.
//! - `unwind` (x86-64 Linux): call paths from the loaded objects' CFI
//!   (`.eh_frame`) for [`thread::Guard::call_path`], so that code built
//!   without frame pointers gets whole paths.
//!
//! # Design constraints (HaLock's lesson: the recorder must not disturb
//! what it measures; figures in docs/figures.md)
//! - No locks, no syscalls, no allocation, no page faults on the event
//!   path. A ring is pre-faulted when created and reused forever.
//! - Fixed-size slots written with plain stores and published with one
//!   release store of the write index: the event is either wholly visible
//!   to the consumer or not at all.
//! - The rings are `MAP_SHARED` mappings of files on tmpfs: whatever was
//!   published survives a crash or SIGKILL of the program, and the recorder
//!   drains it afterwards.
//! - A full ring never blocks the program: the event is dropped and counted
//!   in the ring header ([`session::RingHeader::lost`]).
#![deny(missing_docs)]

pub mod process;
pub mod raw;
pub mod ring;
pub mod session;
pub mod thread;
pub mod tsc;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod unwind;
