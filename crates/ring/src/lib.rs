//! The ring protocol between a recorded program and the lockscope
//! recorder: what both sides of a session's shared memory agree on.
//!
//! The program's side (the producer) is the capture crate, linked into
//! the preload library and the ThreadSanitizer-ABI runtime; the
//! recorder's side (the consumer) is `lockscope-record`, which drains
//! the rings while the program runs and after it ended. This crate is
//! all the recorder needs of the capture side, and all the two sides
//! share: a change of the layout here is a change of the protocol, made
//! once for both.
//!
//! # Entry points
//! - [`ring`]: a single-producer single-consumer ring of 32-byte slots in
//!   shared memory. [`ring::Producer`] is the program's hot path;
//!   [`ring::Consumer`] is the recorder's side.
//! - [`raw`]: the slot layout of an event ([`raw::Head`],
//!   [`raw::RawEvent`]) and the op table of what only the rings carry
//!   (the capture pseudo-ops, and the trace-format op values the capture
//!   side writes itself).
//! - [`session`]: the session directory: file names, environment
//!   variables and the layout of the ring, process and wake headers.
//! - [`tsc`]: the clock the events are stamped with, chosen by the
//!   recorder and read by the program.
//!
//! # Design constraints (HaLock's lesson: the recorder must not disturb
//! what it measures; figures in docs/figures.md)
//! - The layout is shared memory between two processes built from the
//!   same commit: `repr(C)` headers and slots, atomics for every field
//!   that one side writes while the other reads, a `version` in each
//!   header. Nothing here is serialised with a format library.
//! - The producer's path ([`ring::Producer`]) takes no lock, makes no
//!   system call and allocates nothing: fixed-size slots written with
//!   plain stores and published with one release store of the write
//!   index, so an event is wholly visible to the consumer or not at all.
//!   A full ring never blocks the program for good: the event is dropped
//!   and counted ([`session::RingHeader::lost`]), or the producer waits
//!   a bounded time for the recorder. That a producer's ring stays mapped
//!   is established once, by its `unsafe` constructors
//!   ([`ring::Producer::init`], [`ring::Producer::resume`]), and held by a
//!   handle type after them; the only `unsafe` left on the push path is
//!   the slot stores, which the protocol (not the mapping) makes sound.
//!   Its small functions are
//!   `#[inline]`: the producer is instantiated in other crates, and the
//!   release profile has no LTO.
//! - The rings are `MAP_SHARED` mappings of files on tmpfs: whatever was
//!   published survives a crash or SIGKILL of the program, and the
//!   recorder drains it afterwards.
//! - What it may not touch: thread-local state, the process's recording
//!   switch, the call-path unwinder, the trace format. Those belong to
//!   the capture crate (in-process state) and the format crate (the trace
//!   file); the ring protocol is the same whoever produces or consumes.
#![deny(missing_docs)]

pub mod raw;
pub mod ring;
pub mod session;
pub mod tsc;
