//! The capture side of lockscope: the in-process state of a recorded
//! program.
//!
//! This crate is shared by the LD_PRELOAD library (timing mode) and the
//! ThreadSanitizer-ABI runtime (detailed mode): every thread's recorder
//! state, the process's session, call paths. What it writes goes through
//! the ring protocol of `lockscope-ring` (rings, slot layout, op table,
//! session files), which is all the recorder (`lockscope record`) shares
//! with it: the recorder does not link this crate.
//!
//! # Entry points
//! - [`thread`]: per-thread state in initial-exec TLS (the thread's ring
//!   producer, a re-entrancy flag, held-lock count, clocks) and the
//!   guarded emit API ([`thread::recorder`]) used by every hook.
//! - [`process`]: once-per-image work: session start ([`process::init`]),
//!   ring creation and growth, fork child, maps snapshots, exit.
//! - `unwind` (x86-64 Linux): call paths from the loaded objects' CFI
//!   (`.eh_frame`) for [`thread::Guard::call_path`], so that code built
//!   without frame pointers gets whole paths.
//!
//! # Design constraints (HaLock's lesson: the recorder must not disturb
//! what it measures; figures in docs/figures.md)
//! - No locks, no syscalls, no allocation, no page faults on the event
//!   path. A ring is pre-faulted when created and reused forever.
//! - Thread state lives in raw initial-exec TLS (`.tbss`, all-zero is the
//!   valid initial value): no `thread_local!` constructor or
//!   `__tls_get_addr` call on the hot path.
//! - Every hook runs inside a [`thread::Guard`]: re-entrant calls (a hook
//!   reached from the recorder's own code or a signal handler) are
//!   forwarded unrecorded and counted, never recursed into.
//! - What it may not touch: the layout of anything in shared memory (that
//!   is the ring crate's, so that both sides change together) and the
//!   trace format (the recorder's).
#![deny(missing_docs)]

pub mod process;
pub mod thread;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod unwind;
