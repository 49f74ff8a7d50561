//! Reading a trace.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
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
    /// Set by [`TraceReader::skipping_corrupt`]: how to move in the file
    /// to look for the next whole record after a damaged one. A plain
    /// `Read` cannot go back, and the scan must (a candidate frame that
    /// fails its checksum is read and then abandoned), so skipping is
    /// offered only for seekable readers, through this function pointer
    /// rather than a `Seek` bound on every reader.
    seek: Option<fn(&mut R, u64) -> std::io::Result<()>>,
    /// Length of the file (known in skip mode only).
    file_len: u64,
    /// Byte offset of the record [`TraceReader::next`] returned last.
    last_at: u64,
    /// Bytes a resynchronising scan holds in memory at once
    /// ([`SCAN_WINDOW`]; smaller in tests, to cross windows).
    scan_window: u64,
    /// The damaged stretches stepped over, in file order.
    skipped: Vec<Skipped>,
}

/// A damaged stretch of a trace that a reader in skip mode
/// ([`TraceReader::skipping_corrupt`]) stepped over: from `offset`, the
/// start of the record that failed, to the next record that is whole
/// (its frame, length and checksum right), `bytes` later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// Byte offset of the damaged record.
    pub offset: u64,
    /// Bytes stepped over.
    pub bytes: u64,
}

/// Bytes of the file a resynchronising scan holds in memory at once.
const SCAN_WINDOW: u64 = 4 << 20;

/// A record header's kind and payload length (its first 5 bytes).
fn head_fields(head: &[u8]) -> (u8, u32) {
    (
        head[0],
        u32::from_le_bytes([head[1], head[2], head[3], head[4]]),
    )
}

/// Record kinds a resynchronising scan accepts as the start of a record:
/// every kind written so far and the footer, plus room for kinds a newer
/// minor version may add (which older readers skip as `Unknown`). The
/// header (kind 0) appears only once, at the start.
fn plausible_kind(k: u8) -> bool {
    (1..64).contains(&k) || k == kind::FOOTER
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
            seek: None,
            file_len: 0,
            last_at: 0,
            scan_window: SCAN_WINDOW,
            skipped: Vec::new(),
        };
        match tr.frame()? {
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

    /// Byte offset of the record [`TraceReader::next`] returned last: the
    /// [`TraceReader::offset`] before that call, unless damage before it
    /// was stepped over (skip mode).
    pub fn record_offset(&self) -> u64 {
        self.last_at
    }

    /// The damaged stretches stepped over so far (skip mode only).
    pub fn skipped(&self) -> &[Skipped] {
        &self.skipped
    }

    /// Reads one framed record; in skip mode, steps over damage first.
    fn next_raw(&mut self) -> Result<Option<(u8, Vec<u8>, u64)>, FormatError> {
        let at = self.offset;
        match self.frame() {
            Err(e @ (FormatError::Corrupt { .. } | FormatError::Truncated { .. }))
                if self.seek.is_some() =>
            {
                self.step_over(at, e)
            }
            r => r,
        }
    }

    /// After the record at `at` failed with `e`: finds the next whole
    /// record and reads it, noting the stretch in between as skipped.
    ///
    /// The first offset after `at` where a frame starts whose kind is
    /// plausible, whose length fits in the file and whose checksum
    /// matches ([`TraceReader::scan_for_frame`]); CRC-32 makes a false
    /// start about one in 4 billion candidates, so a flipped byte in a
    /// payload (framing right) finds where the damaged record's own
    /// length says the next one starts: one record lost. Trying that
    /// offset first was a second path to the same answer, dropped. A `Truncated` error with nothing
    /// whole after it is a trace cut short (a length claiming more bytes
    /// than remain is also what a flipped length byte looks like, hence
    /// the scan), and is returned as such; damage with nothing whole
    /// after it is skipped to the end of the file.
    fn step_over(
        &mut self,
        at: u64,
        e: FormatError,
    ) -> Result<Option<(u8, Vec<u8>, u64)>, FormatError> {
        let Some(seek) = self.seek else {
            return Err(e);
        };
        let Some(p) = self.scan_for_frame(at + 1)? else {
            if matches!(e, FormatError::Truncated { .. }) {
                return Err(e);
            }
            self.skipped.push(Skipped {
                offset: at,
                bytes: self.file_len - at,
            });
            self.offset = self.file_len;
            return Ok(None);
        };
        self.skipped.push(Skipped {
            offset: at,
            bytes: p - at,
        });
        seek(&mut self.r, p)?;
        self.offset = p;
        self.frame()
    }

    /// The first offset at or after `from` where a whole record starts,
    /// scanning the file in windows held in memory: each offset's kind
    /// and length are read from the window, and only a plausible frame
    /// (one in a few hundred offsets of random bytes) has its checksum
    /// computed, from the window when the frame lies inside it, else by
    /// reading it ([`TraceReader::whole_frame_at`]). Reading the file at
    /// every offset instead took 7.6 s to step over one damaged length
    /// in a 1 MB trace.
    fn scan_for_frame(&mut self, from: u64) -> Result<Option<u64>, FormatError> {
        let window = self.scan_window.max(16);
        let Some(seek) = self.seek else {
            return Ok(None);
        };
        let mut base = from;
        while base + 9 <= self.file_len {
            let len = window.min(self.file_len - base);
            seek(&mut self.r, base)?;
            let mut win = Vec::with_capacity(len as usize);
            (&mut self.r).take(len).read_to_end(&mut win)?;
            let n = win.len();
            let mut i = 0usize;
            while i + 9 <= n {
                let p = base + i as u64;
                let (k, flen) = head_fields(&win[i..i + 5]);
                if self.plausible_frame(k, flen, p) {
                    let whole = if p + 9 + u64::from(flen) <= base + n as u64 {
                        let body = &win[i + 5..i + 5 + flen as usize];
                        let c = i + 5 + flen as usize;
                        let crc = u32::from_le_bytes([win[c], win[c + 1], win[c + 2], win[c + 3]]);
                        crate::writer::record_crc(k, body) == crc
                    } else {
                        self.whole_frame_at(p)?
                    };
                    if whole {
                        return Ok(Some(p));
                    }
                }
                i += 1;
            }
            if n == 0 {
                break;
            }
            // The next window starts where the last offset not tried is
            // (a frame header is 9 bytes at least).
            base += (n.saturating_sub(8)).max(1) as u64;
        }
        Ok(None)
    }

    /// True if a record of kind `k` and payload length `len` at `p` could
    /// be one: a kind a trace has, a length allowed and inside the file.
    fn plausible_frame(&self, k: u8, len: u32, p: u64) -> bool {
        plausible_kind(k) && len <= MAX_RECORD_BYTES && p + 9 + u64::from(len) <= self.file_len
    }

    /// True if a whole record (plausible kind, length within the file,
    /// matching checksum) starts at `p`. Moves the reader.
    fn whole_frame_at(&mut self, p: u64) -> Result<bool, FormatError> {
        let Some(seek) = self.seek else {
            return Ok(false);
        };
        seek(&mut self.r, p)?;
        let mut head = [0u8; 5];
        if !read_full(&mut self.r, &mut head, p, "a record header").unwrap_or(false) {
            return Ok(false);
        }
        let (k, len) = head_fields(&head);
        if !self.plausible_frame(k, len, p) {
            return Ok(false);
        }
        let mut payload = Vec::new();
        let got = (&mut self.r)
            .take(u64::from(len))
            .read_to_end(&mut payload)?;
        let mut crc = [0u8; 4];
        if got < len as usize || !read_full(&mut self.r, &mut crc, p, "a checksum").unwrap_or(false)
        {
            return Ok(false);
        }
        Ok(crate::writer::record_crc(k, &payload) == u32::from_le_bytes(crc))
    }

    /// Reads one framed record: (kind, payload, offset of the record).
    fn frame(&mut self) -> Result<Option<(u8, Vec<u8>, u64)>, FormatError> {
        let at = self.offset;
        let mut head = [0u8; 5];
        if !read_full(&mut self.r, &mut head, at, "a record header")? {
            return Ok(None);
        }
        let (k, len) = head_fields(&head);
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
        self.last_at = at;
        let mut c = Cursor::new(&payload, at + 5);
        let rec = Record::decode(k, &mut c, at)?;
        if let Record::Footer(f) = &rec {
            self.footer = Some(f.clone());
            self.done = true;
        }
        Ok(Some(rec))
    }
}

impl<R: Read + Seek> TraceReader<R> {
    /// Reads past damage instead of stopping at it (`--skip-corrupt`): a
    /// record that fails its checksum or framing is stepped over to the
    /// next whole record, and [`TraceReader::skipped`] lists what was
    /// lost. The header must be whole (it says how to read the rest). A
    /// trace cut short still ends with [`FormatError::Truncated`].
    pub fn skipping_corrupt(mut self) -> Result<Self, FormatError> {
        self.file_len = self.r.seek(SeekFrom::End(0))?;
        self.r.seek(SeekFrom::Start(self.offset))?;
        self.seek = Some(|r: &mut R, at: u64| r.seek(SeekFrom::Start(at)).map(|_| ()));
        Ok(self)
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
    /// Damaged stretches stepped over (read with `skip_corrupt` only).
    pub skipped: Vec<Skipped>,
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
        Trace::salvage_from(TraceReader::new(r)?)
    }

    fn salvage_from<R: Read>(
        mut tr: TraceReader<R>,
    ) -> Result<(Trace, Option<FormatError>), FormatError> {
        let mut t = Trace {
            header: tr.header().clone(),
            ..Trace::default()
        };
        loop {
            let rec = match tr.next() {
                Ok(Some(rec)) => rec,
                Ok(None) => {
                    t.skipped = tr.skipped().to_vec();
                    return Ok((t, None));
                }
                Err(e @ FormatError::Truncated { .. }) => {
                    t.skipped = tr.skipped().to_vec();
                    return Ok((t, Some(e)));
                }
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

    /// [`Trace::open_salvaging`], and with `skip_corrupt` past damaged
    /// records too ([`TraceReader::skipping_corrupt`]); the stretches
    /// stepped over are in [`Trace::skipped`].
    pub fn open_salvaging_with(
        path: impl AsRef<Path>,
        skip_corrupt: bool,
    ) -> Result<(Trace, Option<FormatError>), FormatError> {
        let f = std::io::BufReader::new(std::fs::File::open(path)?);
        let mut tr = TraceReader::new(f)?;
        if skip_corrupt {
            tr = tr.skipping_corrupt()?;
        }
        Trace::salvage_from(tr)
    }

    /// Total number of events.
    pub fn event_count(&self) -> usize {
        self.events.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Event, Footer, TraceWriter};

    /// A trace of 8 event chunks of 50 events, and each chunk's offset.
    fn chunks() -> (Vec<u8>, Vec<u64>) {
        let mut w = TraceWriter::new(Vec::new(), &Header::default()).unwrap();
        let ev: Vec<Event> = (0..50u64)
            .map(|i| Event {
                time: i * 10,
                op: 1,
                addr: 0x1000 + i * 64,
                ..Event::default()
            })
            .collect();
        let mut at = Vec::new();
        for t in 1..=8 {
            at.push(w.bytes_written());
            w.write_events(t, &ev).unwrap();
        }
        (w.finish(&Footer::default()).unwrap(), at)
    }

    fn threads_read(bytes: &[u8], window: u64) -> (Vec<u32>, Vec<Skipped>) {
        let mut r = TraceReader::new(std::io::Cursor::new(bytes))
            .unwrap()
            .skipping_corrupt()
            .unwrap();
        r.scan_window = window;
        let mut seen = Vec::new();
        while let Some(rec) = r.next().unwrap() {
            if let Record::Events(c) = rec {
                seen.push(c.thread);
            }
        }
        (seen, r.skipped().to_vec())
    }

    #[test]
    fn a_scan_in_small_windows_finds_the_same_record_as_one_in_a_large_one() {
        let (bytes, at) = chunks();
        // A length byte of chunk 3 (thread 3): its own length no longer
        // leads to a record, so the reader scans.
        let mut b = bytes.clone();
        b[at[2] as usize + 3] ^= 0x01;
        let big = threads_read(&b, SCAN_WINDOW);
        assert_eq!(big.0, vec![1, 2, 4, 5, 6, 7, 8]);
        assert_eq!(big.1.len(), 1);
        for window in [16, 17, 64, 100, 333] {
            assert_eq!(threads_read(&b, window), big, "window {window}");
        }
    }
}
