//! Writing a trace.

use std::io::Write;

use crate::codec::Encoder;
use crate::record::{encode_header, kind};
use crate::{
    Event, EventChunk, Footer, FormatError, Header, Record, FORMAT_MAJOR, FORMAT_MINOR, MAGIC,
};

/// Most events in one chunk. Bounded so that a reader never needs more
/// than a few MiB for one record, and a truncated file loses little.
pub const MAX_CHUNK_EVENTS: usize = 1 << 16;

/// Writes a trace: header first, then records, then [`TraceWriter::finish`]
/// writes the footer. Buffering is the caller's choice (wrap a `File` in a
/// `BufWriter`).
pub struct TraceWriter<W: Write> {
    w: W,
    offset: u64,
    payload: Vec<u8>,
    events: u64,
}

impl<W: Write> TraceWriter<W> {
    /// Writes the magic, version and header.
    pub fn new(mut w: W, header: &Header) -> Result<Self, FormatError> {
        w.write_all(&MAGIC)?;
        w.write_all(&FORMAT_MAJOR.to_le_bytes())?;
        w.write_all(&FORMAT_MINOR.to_le_bytes())?;
        let mut tw = TraceWriter {
            w,
            offset: 12,
            payload: Vec::new(),
            events: 0,
        };
        let mut p = std::mem::take(&mut tw.payload);
        encode_header(header, &mut p);
        tw.frame(kind::HEADER, &p)?;
        p.clear();
        tw.payload = p;
        Ok(tw)
    }

    fn frame(&mut self, kind: u8, payload: &[u8]) -> Result<(), FormatError> {
        let len = u32::try_from(payload.len()).map_err(|_| FormatError::Corrupt {
            offset: self.offset,
            what: format!("record of {} bytes is too large to write", payload.len()),
        })?;
        self.w.write_all(&[kind])?;
        self.w.write_all(&len.to_le_bytes())?;
        self.w.write_all(payload)?;
        self.w.write_all(&record_crc(kind, payload).to_le_bytes())?;
        self.offset += 9 + payload.len() as u64;
        Ok(())
    }

    /// Writes one record. Event chunks are better written with
    /// [`TraceWriter::write_events`], which encodes them.
    pub fn write(&mut self, rec: &Record) -> Result<(), FormatError> {
        let mut p = std::mem::take(&mut self.payload);
        p.clear();
        let k = rec.encode(&mut p);
        if let Record::Events(c) = rec {
            self.events += u64::from(c.count);
        }
        let r = self.frame(k, &p);
        self.payload = p;
        r
    }

    /// Encodes and writes events of one thread, in chunks of at most
    /// `MAX_CHUNK_EVENTS`.
    pub fn write_events(&mut self, thread: u32, events: &[Event]) -> Result<(), FormatError> {
        for part in events.chunks(MAX_CHUNK_EVENTS) {
            let mut enc = Encoder::new();
            let mut data = Vec::with_capacity(part.len() * 5);
            for e in part {
                enc.encode(e, &mut data);
            }
            let chunk = EventChunk {
                thread,
                count: enc.count(),
                data,
                offset: 0,
            };
            self.write(&Record::Events(chunk))?;
        }
        Ok(())
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.offset
    }

    /// Events written so far.
    pub fn events_written(&self) -> u64 {
        self.events
    }

    /// Passes what is buffered on to the inner writer's destination (the
    /// file): what is there is a readable, footer-less trace up to here.
    pub fn flush(&mut self) -> Result<(), FormatError> {
        self.w.flush()?;
        Ok(())
    }

    /// Writes the footer, flushes, and returns the inner writer.
    pub fn finish(mut self, footer: &Footer) -> Result<W, FormatError> {
        self.write(&Record::Footer(footer.clone()))?;
        self.w.flush()?;
        Ok(self.w)
    }
}

/// CRC-32 of a record: its kind byte and payload, so that a flipped kind
/// byte is caught too (it would otherwise turn a record into an "unknown"
/// one that is silently skipped).
pub(crate) fn record_crc(kind: u8, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&[kind]);
    h.update(payload);
    h.finalize()
}
