//! Primitive encodings: LEB128 varints, zigzag, length-prefixed bytes.
//!
//! [`Cursor`] reads from a payload slice and knows the file offset of the
//! slice, so that every error names an absolute byte offset.

use crate::FormatError;

/// Appends `v` as an unsigned LEB128 varint.
#[inline]
pub fn put_varint(out: &mut Vec<u8>, v: u64) {
    leb128(v, |b| out.push(b));
}

/// The bytes of `v` as an unsigned LEB128 varint, low group first, each
/// handed to `put`: the one encoding of [`put_varint`] and of the event
/// encoder, which writes into reserved capacity instead of pushing.
#[inline(always)]
pub(crate) fn leb128(mut v: u64, mut put: impl FnMut(u8)) {
    while v >= 0x80 {
        put((v as u8) | 0x80);
        v >>= 7;
    }
    put(v as u8);
}

/// Zigzag-maps a signed value so that small magnitudes encode small.
#[inline]
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Inverse of [`zigzag`].
#[inline]
pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Appends a length-prefixed byte string.
pub fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Appends a length-prefixed UTF-8 string.
pub fn put_str(out: &mut Vec<u8>, s: &str) {
    put_bytes(out, s.as_bytes());
}

/// A bounds-checked reader over one record payload.
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    /// File offset of `buf[0]`.
    base: u64,
}

impl<'a> Cursor<'a> {
    /// A cursor over `buf`, which starts at file offset `base`.
    pub fn new(buf: &'a [u8], base: u64) -> Self {
        Cursor { buf, pos: 0, base }
    }
    /// Absolute file offset of the next byte.
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }
    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    /// True when everything was consumed.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }
    fn truncated(&self, what: &'static str) -> FormatError {
        FormatError::Corrupt {
            offset: self.offset(),
            what: format!("record payload ends while reading {what}"),
        }
    }
    /// Reads one byte.
    #[inline]
    pub fn u8(&mut self, what: &'static str) -> Result<u8, FormatError> {
        let b = *self.buf.get(self.pos).ok_or_else(|| self.truncated(what))?;
        self.pos += 1;
        Ok(b)
    }
    /// Reads an unsigned LEB128 varint (at most 10 bytes).
    #[inline]
    pub fn varint(&mut self, what: &'static str) -> Result<u64, FormatError> {
        let start = self.offset();
        let mut v: u64 = 0;
        let mut shift = 0u32;
        loop {
            let b = self.u8(what)?;
            if shift == 63 && b > 1 {
                return Err(FormatError::Corrupt {
                    offset: start,
                    what: format!("varint overflows 64 bits while reading {what}"),
                });
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
            shift += 7;
            if shift > 63 {
                return Err(FormatError::Corrupt {
                    offset: start,
                    what: format!("varint longer than 10 bytes while reading {what}"),
                });
            }
        }
    }
    /// Reads a varint that must fit in u32.
    pub fn varint_u32(&mut self, what: &'static str) -> Result<u32, FormatError> {
        let at = self.offset();
        let v = self.varint(what)?;
        u32::try_from(v).map_err(|_| FormatError::Corrupt {
            offset: at,
            what: format!("{what} = {v} does not fit in 32 bits"),
        })
    }
    /// Reads a little-endian u64.
    pub fn u64_le(&mut self, what: &'static str) -> Result<u64, FormatError> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }
    /// Reads `n` raw bytes.
    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], FormatError> {
        if n > self.remaining() {
            return Err(self.truncated(what));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    /// Reads a length-prefixed byte string. The length is checked against
    /// what is left before anything is allocated.
    pub fn bytes(&mut self, what: &'static str) -> Result<&'a [u8], FormatError> {
        let n = self.varint(what)?;
        if n > self.remaining() as u64 {
            return Err(FormatError::Corrupt {
                offset: self.offset(),
                what: format!(
                    "{what} claims {n} bytes but only {} remain",
                    self.remaining()
                ),
            });
        }
        self.take(n as usize, what)
    }
    /// Reads a length-prefixed string. Invalid UTF-8 is replaced rather
    /// than rejected: a thread name with a stray byte should not make the
    /// whole trace unreadable.
    pub fn string(&mut self, what: &'static str) -> Result<String, FormatError> {
        Ok(String::from_utf8_lossy(self.bytes(what)?).into_owned())
    }
    /// Reads a count that will size a collection of items of at least
    /// `min_item_bytes` each; rejects counts the payload cannot hold.
    pub fn count(
        &mut self,
        min_item_bytes: usize,
        what: &'static str,
    ) -> Result<usize, FormatError> {
        let at = self.offset();
        let n = self.varint(what)?;
        let max = (self.remaining() / min_item_bytes.max(1)) as u64;
        if n > max {
            return Err(FormatError::Corrupt {
                offset: at,
                what: format!(
                    "{what} = {n} is more than the {} bytes left can hold",
                    self.remaining()
                ),
            });
        }
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_roundtrip_edges() {
        for v in [
            0u64,
            1,
            127,
            128,
            300,
            u32::MAX as u64,
            u64::MAX - 1,
            u64::MAX,
        ] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            let mut c = Cursor::new(&b, 0);
            assert_eq!(c.varint("v").unwrap(), v);
            assert!(c.is_empty());
        }
    }

    #[test]
    fn varint_overlong_is_an_error_not_a_panic() {
        let b = [0xffu8; 11];
        assert!(Cursor::new(&b, 10).varint("v").is_err());
        let b = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
        assert!(Cursor::new(&b, 0).varint("v").is_err());
    }

    #[test]
    fn zigzag_roundtrip() {
        for v in [0i64, 1, -1, 63, -64, i64::MAX, i64::MIN] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }
}
