//! Reading a trace.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use crate::record::{decode_header, kind};
use crate::wire::Cursor;
use crate::{Event, Footer, FormatError, Header, Record, FORMAT_MAJOR, MAGIC};

/// Largest record payload accepted. The writer never produces more than a
/// few MiB; anything larger is corruption, and refusing it bounds memory.
pub const MAX_RECORD_BYTES: u32 = 256 << 20;

/// Streams the records of a trace, front to back, in bounded memory.
pub struct TraceReader<R: Read> {
    r: R,
    offset: u64,
    header: Header,
    version: (u16, u16),
    footer: Option<Footer>,
    done: bool,
}

/// Reads exactly `buf.len()` bytes; distinguishes a clean EOF before the
/// first byte (Ok(false)) from one in the middle (Truncated).
fn read_full<R: Read>(
    r: &mut R,
    buf: &mut [u8],
    offset: u64,
    what: &'static str,
) -> Result<bool, FormatError> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => {
                return Err(FormatError::Truncated {
                    offset: offset + got as u64,
                    what,
                })
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

impl<R: Read> TraceReader<R> {
    /// Checks the magic and version and reads the header.
    pub fn new(mut r: R) -> Result<Self, FormatError> {
        let mut pre = [0u8; 12];
        let mut got = 0;
        while got < 12 {
            match r.read(&mut pre[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        if got < 8 || pre[..8] != MAGIC {
            if got >= 1 && MAGIC.starts_with(&pre[..got.min(8)]) {
                return Err(FormatError::Truncated {
                    offset: got as u64,
                    what: "the file signature",
                });
            }
            return Err(FormatError::NotATrace {
                found: pre[..got.min(8)].to_vec(),
            });
        }
        if got < 12 {
            return Err(FormatError::Truncated {
                offset: got as u64,
                what: "the format version",
            });
        }
        let major = u16::from_le_bytes([pre[8], pre[9]]);
        let minor = u16::from_le_bytes([pre[10], pre[11]]);
        if major > FORMAT_MAJOR {
            return Err(FormatError::NewerVersion {
                found: (major, minor),
                supported: FORMAT_MAJOR,
            });
        }
        if major == 0 {
            return Err(FormatError::Corrupt {
                offset: 8,
                what: "format major version 0 does not exist".into(),
            });
        }
        let mut tr = TraceReader {
            r,
            offset: 12,
            header: Header::default(),
            version: (major, minor),
            footer: None,
            done: false,
        };
        match tr.next_raw()? {
            Some((kind::HEADER, payload, at)) => {
                let mut c = Cursor::new(&payload, at + 5);
                tr.header = decode_header(&mut c)?;
            }
            Some((k, _, at)) => {
                return Err(FormatError::Corrupt {
                    offset: at,
                    what: format!("first record has kind {k}, expected the header (0)"),
                })
            }
            None => {
                return Err(FormatError::Truncated {
                    offset: 12,
                    what: "the header record",
                })
            }
        }
        Ok(tr)
    }

    /// The trace header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// (major, minor) format version of the file.
    pub fn version(&self) -> (u16, u16) {
        self.version
    }

    /// The footer, once [`TraceReader::next`] has returned `None` for a
    /// complete trace. `None` means the recording was cut short.
    pub fn footer(&self) -> Option<&Footer> {
        self.footer.as_ref()
    }

    /// Byte offset of the next record.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Reads one framed record: (kind, payload, offset of the record).
    fn next_raw(&mut self) -> Result<Option<(u8, Vec<u8>, u64)>, FormatError> {
        let at = self.offset;
        let mut head = [0u8; 5];
        if !read_full(&mut self.r, &mut head, at, "a record header")? {
            return Ok(None);
        }
        let k = head[0];
        let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]);
        if len > MAX_RECORD_BYTES {
            return Err(FormatError::Corrupt {
                offset: at,
                what: format!("record of kind {k} claims {len} bytes (more than the {MAX_RECORD_BYTES} allowed)"),
            });
        }
        // Grow the buffer as bytes arrive instead of allocating `len` up
        // front: a corrupt length on a short file must not allocate 256 MiB.
        let mut payload = Vec::new();
        let got = (&mut self.r)
            .take(u64::from(len))
            .read_to_end(&mut payload)?;
        if got < len as usize {
            return Err(FormatError::Truncated {
                offset: at + 5 + got as u64,
                what: "a record payload",
            });
        }
        let mut crc = [0u8; 4];
        if !read_full(
            &mut self.r,
            &mut crc,
            at + 5 + u64::from(len),
            "a record checksum",
        )? {
            return Err(FormatError::Truncated {
                offset: at + 5 + u64::from(len),
                what: "a record checksum",
            });
        }
        if crate::writer::record_crc(k, &payload) != u32::from_le_bytes(crc) {
            return Err(FormatError::Corrupt {
                offset: at,
                what: format!("checksum mismatch in a record of kind {k} ({len} bytes)"),
            });
        }
        self.offset = at + 9 + u64::from(len);
        Ok(Some((k, payload, at)))
    }

    /// The next record, or `None` at the end of the file. After the
    /// footer, nothing more is read.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Record>, FormatError> {
        if self.done {
            return Ok(None);
        }
        let Some((k, payload, at)) = self.next_raw()? else {
            self.done = true;
            return Ok(None);
        };
        let mut c = Cursor::new(&payload, at + 5);
        let rec = Record::decode(k, &mut c, at)?;
        if let Record::Footer(f) = &rec {
            self.footer = Some(f.clone());
            self.done = true;
        }
        Ok(Some(rec))
    }
}

/// A whole trace in memory: convenient for tests and small traces.
#[derive(Debug, Default)]
pub struct Trace {
    /// The header.
    pub header: Header,
    /// Every record other than event chunks and the footer, in file order.
    pub records: Vec<Record>,
    /// Decoded events per trace thread id, in file order.
    pub events: BTreeMap<u32, Vec<Event>>,
    /// The footer, if the trace is complete.
    pub footer: Option<Footer>,
}

impl Trace {
    /// The call paths of the trace's `Stack` records by id (ids are
    /// unique across processes), innermost frame first.
    pub fn call_paths(&self) -> std::collections::HashMap<u32, &[u64]> {
        self.records
            .iter()
            .filter_map(|r| match r {
                Record::Stack(s) => Some((s.id, s.frames.as_slice())),
                _ => None,
            })
            .collect()
    }

    /// Reads and decodes a whole trace from a reader.
    pub fn read<R: Read>(r: R) -> Result<Trace, FormatError> {
        let mut tr = TraceReader::new(r)?;
        let mut t = Trace {
            header: tr.header().clone(),
            ..Trace::default()
        };
        while let Some(rec) = tr.next()? {
            match rec {
                Record::Events(c) => {
                    let v = t.events.entry(c.thread).or_default();
                    c.for_each(|e| v.push(e))?;
                }
                Record::Footer(f) => t.footer = Some(f),
                r => t.records.push(r),
            }
        }
        Ok(t)
    }

    /// Reads and decodes a whole trace file.
    pub fn open(path: impl AsRef<Path>) -> Result<Trace, FormatError> {
        let f = std::fs::File::open(path)?;
        Trace::read(std::io::BufReader::new(f))
    }

    /// [`Trace::read`] of a trace that may have been cut short (a
    /// recorder killed, a full disk): the records before the cut, and the
    /// [`FormatError::Truncated`] that ended them (None for a whole file).
    /// Every other error (not a trace, corruption) is returned as such.
    pub fn read_salvaging<R: Read>(r: R) -> Result<(Trace, Option<FormatError>), FormatError> {
        let mut tr = TraceReader::new(r)?;
        let mut t = Trace {
            header: tr.header().clone(),
            ..Trace::default()
        };
        loop {
            let rec = match tr.next() {
                Ok(Some(rec)) => rec,
                Ok(None) => return Ok((t, None)),
                Err(e @ FormatError::Truncated { .. }) => return Ok((t, Some(e))),
                Err(e) => return Err(e),
            };
            match rec {
                Record::Events(c) => {
                    let v = t.events.entry(c.thread).or_default();
                    c.for_each(|e| v.push(e))?;
                }
                Record::Footer(f) => t.footer = Some(f),
                r => t.records.push(r),
            }
        }
    }

    /// [`Trace::read_salvaging`] of a file.
    pub fn open_salvaging(
        path: impl AsRef<Path>,
    ) -> Result<(Trace, Option<FormatError>), FormatError> {
        let f = std::fs::File::open(path)?;
        Trace::read_salvaging(std::io::BufReader::new(f))
    }

    /// Total number of events.
    pub fn event_count(&self) -> usize {
        self.events.values().map(Vec::len).sum()
    }
}
