//! A JSON writer for the exports that write one small object per event
//! (Perfetto's trace-event JSON, speedscope's events): numbers formatted
//! with `itoa` into one large buffer, strings escaped once per distinct
//! name by the caller (see [`JsonOut::string`]) and then copied as bytes.
//!
//! Building a `serde_json::Value` per event (a map allocated and sorted,
//! then serialized) and `write!` through a `&mut dyn Write` per event
//! (a virtual call and a format string walked per number) were most of
//! those writers' time: 2-3x the timeline walk itself. Serializing
//! through serde's `Serialize` derive per event would avoid the map but
//! not the per-call formatting machinery; this writer keeps the output
//! byte for byte what serde_json wrote (the same key order, the same
//! float formatting, which is still serde_json's), only faster.

use std::io::Write;

/// Bytes buffered before they are handed to the output.
const FLUSH_AT: usize = 256 << 10;

/// Buffered JSON output.
pub(crate) struct JsonOut<'a> {
    buf: Vec<u8>,
    out: &'a mut dyn Write,
    /// Bytes handed to `out` so far.
    written: u64,
}

impl<'a> JsonOut<'a> {
    /// Writes to `out` in blocks of [`FLUSH_AT`] bytes.
    pub(crate) fn new(out: &'a mut dyn Write) -> Self {
        JsonOut {
            buf: Vec::with_capacity(FLUSH_AT + 4096),
            out,
            written: 0,
        }
    }

    /// Raw bytes (punctuation, keys, pre-escaped strings).
    #[inline]
    pub(crate) fn raw(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    /// An unsigned integer.
    #[inline]
    pub(crate) fn u64(&mut self, v: u64) {
        let mut b = itoa::Buffer::new();
        self.buf.extend_from_slice(b.format(v).as_bytes());
    }

    /// Nanoseconds as microseconds with exactly three decimals
    /// (`1234567` -> `1234.567`): exact, unlike a float.
    #[inline]
    pub(crate) fn us3(&mut self, ns: u64) {
        self.u64(ns / 1000);
        let f = (ns % 1000) as u32;
        self.buf.extend_from_slice(&[
            b'.',
            b'0' + (f / 100) as u8,
            b'0' + (f / 10 % 10) as u8,
            b'0' + (f % 10) as u8,
        ]);
    }

    /// A float, formatted by serde_json (its shortest round-trip form,
    /// `1.0`, `1.136`): the figures written as floats before keep their
    /// exact text.
    #[inline]
    pub(crate) fn f64(&mut self, v: f64) {
        // Writing into a Vec cannot fail; a non-finite value is `null`.
        let _ = serde_json::to_writer(&mut self.buf, &v);
    }

    /// Any serializable value, through serde_json (for the rare events:
    /// metadata, names).
    pub(crate) fn value<T: serde::Serialize + ?Sized>(&mut self, v: &T) {
        if serde_json::to_writer(&mut self.buf, v).is_err() {
            // Only a map with non-string keys fails; none is written.
            self.buf.extend_from_slice(b"null");
        }
    }

    /// Hands the buffer to the output once it is large enough: call after
    /// each event.
    #[inline]
    pub(crate) fn maybe_flush(&mut self) -> std::io::Result<()> {
        if self.buf.len() >= FLUSH_AT {
            self.flush_buf()?;
        }
        Ok(())
    }

    fn flush_buf(&mut self) -> std::io::Result<()> {
        self.out.write_all(&self.buf)?;
        self.written += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Writes what is buffered; returns the bytes written in all.
    pub(crate) fn finish(mut self) -> std::io::Result<u64> {
        self.flush_buf()?;
        Ok(self.written)
    }

    /// `s` as a JSON string (quoted, escaped), to keep and pass to
    /// [`JsonOut::raw`] for every event that names it.
    pub(crate) fn string(s: &str) -> Vec<u8> {
        serde_json::to_vec(s).unwrap_or_else(|_| b"\"\"".to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(f: impl FnOnce(&mut JsonOut)) -> String {
        let mut v = Vec::new();
        let mut o = JsonOut::new(&mut v);
        f(&mut o);
        o.finish().unwrap();
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn numbers_are_written_as_serde_json_writes_them() {
        for v in [0u64, 1, 9, 10, 999, 1000, 123_456_789, u64::MAX] {
            assert_eq!(text(|o| o.u64(v)), serde_json::to_string(&v).unwrap());
        }
        for ns in [
            0u64,
            1,
            999,
            1000,
            1136,
            1255,
            1_000_000_007,
            86_400_000_000_123,
        ] {
            assert_eq!(
                text(|o| o.f64(ns as f64 / 1000.0)),
                serde_json::to_string(&(ns as f64 / 1000.0)).unwrap()
            );
        }
        assert_eq!(text(|o| o.us3(0)), "0.000");
        assert_eq!(text(|o| o.us3(1_234_567)), "1234.567");
        assert_eq!(text(|o| o.us3(1_000_050)), "1000.050");
        assert_eq!(text(|o| o.us3(33_238_491)), "33238.491");
        assert_eq!(text(|o| o.us3(u64::MAX)), "18446744073709551.615");
    }

    #[test]
    fn strings_are_escaped_once() {
        let s = JsonOut::string("a\"b\\c\n\u{1}é");
        assert_eq!(
            String::from_utf8(s.clone()).unwrap(),
            serde_json::to_string("a\"b\\c\n\u{1}é").unwrap()
        );
        assert_eq!(
            text(|o| o.raw(&s)),
            serde_json::to_string("a\"b\\c\n\u{1}é").unwrap()
        );
    }

    #[test]
    fn large_outputs_are_flushed_in_blocks_and_whole() {
        let mut v = Vec::new();
        let mut o = JsonOut::new(&mut v);
        for i in 0..200_000u64 {
            o.u64(i);
            o.raw(b",");
            o.maybe_flush().unwrap();
        }
        let n = o.finish().unwrap();
        assert_eq!(n as usize, v.len());
        let want: String = (0..200_000u64).map(|i| format!("{i},")).collect();
        assert_eq!(String::from_utf8(v).unwrap(), want);
    }
}
