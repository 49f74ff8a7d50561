//! Compact encoding of a chunk of one thread's events.
//!
//! Each event is:
//!
//! ```text
//! op(u8) ctl(u8) dt(varint) [addr] [site] [extras]
//! ctl bits 0-2: addr code: 0..=6 index in the address move-to-front cache,
//!               7 = literal follows (varint zigzag delta to the last literal)
//! ctl bits 3-5: site code: 0..=6 index in the site move-to-front cache,
//!               7 = literal follows (varint zigzag delta to the last literal)
//! ctl bit 6:    dt is negative (time went backwards: TSC skew across CPUs);
//!               dt itself is the magnitude, so the usual forward step of
//!               under 128 ns costs one byte instead of two with zigzag
//! ctl bit 7:    extras follow: mask(u8) then, in order, flags(u8) if bit 0,
//!               stack(varint) if bit 1, arg(varint) if bit 2, arg2(varint) if bit 3
//! ```
//!
//! Why move-to-front caches: a thread touches few locks and call sites at a
//! time, so almost every lock event names an object and a site seen in the
//! last 15 / 7 events and costs 4 bits each instead of a 6-byte pointer. A
//! plain delta to the previous address (the alternative) costs 5-6 bytes
//! whenever a thread alternates between a heap and a static lock. Every
//! chunk starts from empty caches and time 0, so chunks decode
//! independently (a truncated trace loses only its last chunk).

use crate::wire::{leb128, unzigzag, zigzag, Cursor};
use crate::{Event, FormatError};

const ADDR_CACHE: usize = 7;
const SITE_CACHE: usize = 7;

/// A small move-to-front cache of recently used values.
struct Mtf<const N: usize> {
    vals: [u64; N],
    len: usize,
}

impl<const N: usize> Mtf<N> {
    fn new() -> Self {
        Mtf {
            vals: [0; N],
            len: 0,
        }
    }
    fn find(&self, v: u64) -> Option<usize> {
        self.vals[..self.len].iter().position(|&x| x == v)
    }
    /// Moves entry `i` to the front and returns it.
    ///
    /// Entries 0 and 1 first: a thread's events mostly name the object or
    /// site of its previous event or of the one before (a lock, then its
    /// unlock; an acquisition site, then the release site), and the
    /// general case's `copy_within` of a variable range is a `memmove`
    /// call (two per event were a quarter of the encoder's instructions,
    /// callgrind on `contended.c`).
    #[inline(always)]
    fn take(&mut self, i: usize) -> u64 {
        let v = self.vals[i];
        match i {
            0 => {}
            1 => self.vals.swap(0, 1),
            _ => {
                self.vals.copy_within(0..i, 1);
                self.vals[0] = v;
            }
        }
        v
    }
    fn push(&mut self, v: u64) {
        let n = self.len.min(N - 1);
        self.vals.copy_within(0..n, 1);
        self.vals[0] = v;
        self.len = (self.len + 1).min(N);
    }
}

/// Encoder state for one chunk.
pub struct Encoder {
    addrs: Mtf<ADDR_CACHE>,
    sites: Mtf<SITE_CACHE>,
    last_addr: u64,
    last_site: u64,
    last_time: u64,
    count: u32,
}

impl Default for Encoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Encoder {
    /// A fresh encoder (empty caches, time base 0).
    pub fn new() -> Self {
        Encoder {
            addrs: Mtf::new(),
            sites: Mtf::new(),
            last_addr: 0,
            last_site: 0,
            last_time: 0,
            count: 0,
        }
    }

    /// Number of events encoded so far.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Appends the encoding of `e` to `out`.
    ///
    /// The bytes are written straight into `out`'s spare capacity, which
    /// is made room for once per event: a `Vec::push` per byte (the first
    /// version) checked the capacity and stored the length at every byte,
    /// and encoding was a third of the recorder's converter instructions
    /// in detailed mode (callgrind, the spinlock fixture); a buffer on the
    /// stack copied into `out` was no cheaper (a zeroed array and a
    /// `memcpy` call per event). Always inlined: the recorder's converter
    /// calls it once per event, and the call's prologue and epilogue were
    /// 17 of its ~126 instructions (inlined, the converter's instructions
    /// per event fell from 253 to 218, callgrind on `contended.c`).
    #[inline(always)]
    pub fn encode(&mut self, e: &Event, out: &mut Vec<u8>) {
        self.count += 1;
        out.reserve(MAX_EVENT_BYTES);
        let start = out.len();
        let mut b = Buf {
            out: out.spare_capacity_mut(),
            len: 0,
        };
        b.byte(e.op);
        b.byte(0);
        let mut ctl: u8 = if e.time >= self.last_time {
            b.varint(e.time - self.last_time);
            0
        } else {
            b.varint(self.last_time - e.time);
            0x40
        };
        self.last_time = e.time;
        ctl |= match self.addrs.find(e.addr) {
            Some(i) => {
                self.addrs.take(i);
                i as u8
            }
            None => {
                b.varint(zigzag(e.addr.wrapping_sub(self.last_addr) as i64));
                self.last_addr = e.addr;
                self.addrs.push(e.addr);
                7
            }
        };
        ctl |= match self.sites.find(e.site) {
            Some(i) => {
                self.sites.take(i);
                (i as u8) << 3
            }
            None => {
                b.varint(zigzag(e.site.wrapping_sub(self.last_site) as i64));
                self.last_site = e.site;
                self.sites.push(e.site);
                7 << 3
            }
        };
        let mask = u8::from(e.flags != 0)
            | u8::from(e.stack != 0) << 1
            | u8::from(e.arg != 0) << 2
            | u8::from(e.arg2 != 0) << 3;
        if mask != 0 {
            ctl |= 0x80;
            b.byte(mask);
            if e.flags != 0 {
                b.byte(e.flags);
            }
            if e.stack != 0 {
                b.varint(u64::from(e.stack));
            }
            if e.arg != 0 {
                b.varint(e.arg);
            }
            if e.arg2 != 0 {
                b.varint(e.arg2);
            }
        }
        b.out[1].write(ctl);
        let n = b.len;
        // SAFETY: `Buf` wrote the first `n` bytes of the spare capacity,
        // each index below `n` once (the control byte, index 1, twice),
        // and `reserve` made at least MAX_EVENT_BYTES >= n of them.
        unsafe { out.set_len(start + n) };
    }
}

/// Most bytes one event takes: op, ctl, mask and flags (4), five varints
/// of at most 10 bytes (time, address, site, arg, arg2) and one of 5
/// (stack): 59.
const MAX_EVENT_BYTES: usize = 64;

/// The encoder's cursor in the spare capacity of the output.
struct Buf<'a> {
    out: &'a mut [core::mem::MaybeUninit<u8>],
    len: usize,
}

impl Buf<'_> {
    #[inline(always)]
    fn byte(&mut self, v: u8) {
        debug_assert!(self.len < self.out.len());
        // SAFETY: `encode` reserved MAX_EVENT_BYTES of spare capacity,
        // more than the most bytes one event takes (59, see there), and
        // writes one event per `Buf`. Unchecked because the bounds check
        // was a compare and a branch per byte written, about 10 of the
        // ~54 instructions an event's encoding took (callgrind, the
        // recorder on `uncontended.c`).
        unsafe { self.out.get_unchecked_mut(self.len).write(v) };
        self.len += 1;
    }
    /// LEB128 ([`crate::wire::leb128`]).
    #[inline(always)]
    fn varint(&mut self, v: u64) {
        leb128(v, |b| self.byte(b));
    }
}

/// Decodes a chunk of `count` events from `buf`, which starts at file
/// offset `base`. Calls `f` for each event; stops at the first error.
pub fn decode_chunk(
    buf: &[u8],
    base: u64,
    count: u32,
    mut f: impl FnMut(Event),
) -> Result<(), FormatError> {
    let mut c = Cursor::new(buf, base);
    let mut addrs: Mtf<ADDR_CACHE> = Mtf::new();
    let mut sites: Mtf<SITE_CACHE> = Mtf::new();
    let (mut last_addr, mut last_site, mut last_time) = (0u64, 0u64, 0u64);
    for _ in 0..count {
        let at = c.offset();
        let op = c.u8("event op")?;
        let ctl = c.u8("event control byte")?;
        let dt = c.varint("event time")?;
        last_time = if ctl & 0x40 != 0 {
            last_time.wrapping_sub(dt)
        } else {
            last_time.wrapping_add(dt)
        };
        let acode = usize::from(ctl & 0x07);
        let addr = if acode == 7 {
            last_addr = last_addr.wrapping_add(unzigzag(c.varint("event address")?) as u64);
            addrs.push(last_addr);
            last_addr
        } else if acode < addrs.len {
            addrs.take(acode)
        } else {
            return Err(FormatError::Corrupt {
                offset: at,
                what: format!(
                    "event refers to address cache slot {acode}, only {} filled",
                    addrs.len
                ),
            });
        };
        let scode = usize::from((ctl >> 3) & 0x07);
        let site = if scode == 7 {
            last_site = last_site.wrapping_add(unzigzag(c.varint("event site")?) as u64);
            sites.push(last_site);
            last_site
        } else if scode < sites.len {
            sites.take(scode)
        } else {
            return Err(FormatError::Corrupt {
                offset: at,
                what: format!(
                    "event refers to site cache slot {scode}, only {} filled",
                    sites.len
                ),
            });
        };
        let mut e = Event {
            time: last_time,
            op,
            addr,
            site,
            ..Event::default()
        };
        if ctl & 0x80 != 0 {
            let mask = c.u8("event extras mask")?;
            if mask & !0x0f != 0 {
                return Err(FormatError::Corrupt {
                    offset: at,
                    what: format!("event extras mask {mask:#04x} has unknown bits"),
                });
            }
            if mask & 1 != 0 {
                e.flags = c.u8("event flags")?;
            }
            if mask & 2 != 0 {
                e.stack = c.varint_u32("event stack id")?;
            }
            if mask & 4 != 0 {
                e.arg = c.varint("event arg")?;
            }
            if mask & 8 != 0 {
                e.arg2 = c.varint("event arg2")?;
            }
        }
        f(e);
    }
    if !c.is_empty() {
        return Err(FormatError::Corrupt {
            offset: c.offset(),
            what: format!(
                "{} bytes left over after the chunk's {count} events",
                c.remaining()
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn roundtrip(events: &[Event]) -> Vec<Event> {
        let mut enc = Encoder::new();
        let mut buf = Vec::new();
        for e in events {
            enc.encode(e, &mut buf);
        }
        let mut out = Vec::new();
        decode_chunk(&buf, 0, enc.count(), |e| out.push(e)).unwrap();
        out
    }

    #[test]
    fn lock_loop_is_compact() {
        // Two locks, one site each, lock/unlock 1000 times, ~100 ns apart.
        let mut ev = Vec::new();
        let mut t = 1_000_000;
        for i in 0..1000u64 {
            let addr = if i % 2 == 0 {
                0x5555_0000_1040
            } else {
                0x7fff_1234_0000
            };
            ev.push(Event {
                time: t,
                op: 1,
                addr,
                site: 0x4011a0,
                ..Default::default()
            });
            t += 90;
            ev.push(Event {
                time: t,
                op: 4,
                addr,
                site: 0x4011c8,
                ..Default::default()
            });
            t += 110;
        }
        let mut enc = Encoder::new();
        let mut buf = Vec::new();
        for e in &ev {
            enc.encode(e, &mut buf);
        }
        assert!(
            buf.len() <= ev.len() * 3 + 32,
            "{} bytes for {} events",
            buf.len(),
            ev.len()
        );
        assert_eq!(roundtrip(&ev), ev);
    }

    #[test]
    fn bad_cache_slot_is_an_error() {
        // op=1, ctl: address cache slot 3 (empty cache), site literal; dt=0.
        let buf = [1u8, 0x3b, 0];
        let err = decode_chunk(&buf, 100, 1, |_| {}).unwrap_err();
        assert!(err.to_string().contains("byte offset 100"), "{err}");
    }

    proptest! {
        #[test]
        fn roundtrip_any(events in proptest::collection::vec(
            (any::<u64>(), any::<u8>(), any::<u8>(), 0u64..8, any::<u64>(), 0u64..4, any::<u32>(), any::<u64>(), any::<u64>()), 0..200)) {
            let ev: Vec<Event> = events.into_iter().map(|(time, op, flags, a, a2, s, stack, arg, arg2)| Event {
                time, op, flags, addr: if a < 4 { a * 64 } else { a2 }, site: s * 8, stack, arg, arg2,
            }).collect();
            prop_assert_eq!(roundtrip(&ev), ev);
        }

        #[test]
        fn decode_garbage_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..300), n in 0u32..50) {
            let _ = decode_chunk(&buf, 0, n, |_| {});
        }
    }
}
