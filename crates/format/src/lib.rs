//! The lockscope trace file format.
//!
//! One file per recorded run. It is self-describing and versioned:
//!
//! ```text
//! file    := MAGIC(8) MAJOR(u16 LE) MINOR(u16 LE) record*
//! record  := KIND(u8) LEN(u32 LE) PAYLOAD(LEN bytes) CRC32(u32 LE, of KIND+PAYLOAD)
//! ```
//!
//! The first record is always the [`Header`]; the last one of a complete
//! file is the [`Footer`]. Everything else ([`Record`]) may come in any
//! order, except that a table entry (process, thread, stack, string) is
//! written before the first record that refers to it, so that a reader can
//! stream the file once, front to back, in bounded memory.
//!
//! # Entry points
//! - [`TraceWriter`]: used by the recorder; encodes event chunks.
//! - [`TraceReader`]: streams records; [`EventChunk::decode`] yields
//!   [`Event`]s.
//! - [`Trace::open`]: reads a whole file into memory (small traces, tests).
//! - [`index`]: the chunk index ([`index::TraceIndex`]), random access to
//!   one chunk ([`index::ChunkReader`]) and the time-ordered merge of all
//!   threads' events ([`index::Merge`]).
//!
//! # Design constraints
//! - Input is untrusted: every read is bounds-checked, every length is
//!   validated against what is left, and every failure is a
//!   [`FormatError`] that names the byte offset. No panics, no unbounded
//!   allocation driven by a length field.
//! - Compact: events are delta- and cache-encoded (see [`codec`]) so that a
//!   lock operation costs 3-5 bytes on disk.
//! - Forward compatible within a major version: unknown record kinds are
//!   returned as [`Record::Unknown`] and can be skipped; a newer *major*
//!   version is refused with a message saying which versions this build
//!   reads.
#![deny(missing_docs)]

pub mod codec;
mod error;
mod event;
pub mod index;
mod reader;
mod record;
mod wire;
mod writer;

pub use error::FormatError;
pub use event::{barrier, phase, repeat, Event, Op};
pub use reader::{Skipped, Trace, TraceReader};
pub use record::{
    CodeName, EventChunk, Footer, Header, LockInfo, Loss, LossReason, MapEntry, Overhead, Process,
    ProcessEnd, Record, StackTrace, StringEntry, Thread, ThreadEnd, ThreadName,
};
pub use writer::TraceWriter;

/// The 8 bytes every trace file starts with.
pub const MAGIC: [u8; 8] = *b"\x7fLSTRACE";
/// Major format version written by this build. A reader refuses a file
/// whose major version is higher.
pub const FORMAT_MAJOR: u16 = 1;
/// Minor format version written by this build. Minor versions only add
/// record kinds or trailing fields, which older readers skip.
pub const FORMAT_MINOR: u16 = 3;

/// Prefix of a user label's key among [`Header::extra`]'s pairs
/// (`label:service` = `db`), from format 1.3 (`record --label`).
pub const LABEL_PREFIX: &str = "label:";

/// The labels of a trace: the user's (`label:KEY` pairs of
/// [`Header::extra`]) over the defaults every trace has, `host` (the
/// recording machine) and `command` (the program's file name), sorted
/// by key.
pub fn labels(h: &Header) -> std::collections::BTreeMap<String, String> {
    let mut m = std::collections::BTreeMap::new();
    if !h.host.is_empty() {
        m.insert("host".to_string(), h.host.clone());
    }
    if let Some(p) = h.command.first() {
        let name = p.rsplit('/').next().unwrap_or(p);
        m.insert("command".to_string(), name.to_string());
    }
    for (k, v) in &h.extra {
        if let Some(k) = k.strip_prefix(LABEL_PREFIX) {
            m.insert(k.to_string(), v.clone());
        }
    }
    m
}
/// Conventional file extension of a trace.
pub const FILE_EXTENSION: &str = "lstrace";
