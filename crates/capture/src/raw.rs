//! The layout of an event in a ring: one 32-byte head slot, optionally
//! followed by extension slots.
//!
//! ```text
//! head:  tsc u64 | addr u64 | site u64 | op u8 | flags u8 | nframes u8 | xflags u8 | aux u32
//! ext:   if xflags & XF_ARGS:   arg u64 | arg2 u64 | 0 u64 | 0 u64
//!        then if nframes > 0:    ceil(nframes / 4) slots of 4 return addresses each
//! ```
//!
//! Why 32 bytes: a lock event needs a timestamp, the object and the call
//! site (24 bytes) plus op and flags; rounding to 32 keeps slots aligned to
//! half a cache line so a slot never straddles two lines. Values that do
//! not fit the 32-bit `aux` (atomic old/new values, futex arguments) and
//! call paths go into extension slots, paid only by the events that need
//! them. The alternative, one 64-byte slot for everything, would double the
//! memory traffic of the common lock/unlock event.

/// Size of one slot in bytes.
pub const SLOT_BYTES: usize = 32;
/// Most frames a call path may carry.
pub const MAX_FRAMES: usize = 64;
/// `xflags` bit: an args slot follows the head.
pub const XF_ARGS: u8 = 1;

/// One 32-byte slot as written to the ring.
#[repr(C, align(32))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Slot(pub [u64; 4]);

/// The words of consecutive slots, in order: a call path's frames span
/// the slots after the head (and args), four to a slot, and a consumer
/// reads them in place instead of copying them out.
pub fn slot_words(s: &[Slot]) -> &[u64] {
    // SAFETY: `Slot` is `repr(C)` over `[u64; 4]`: 32 bytes, no padding,
    // aligned for u64, so `s.len()` slots are `4 * s.len()` initialized
    // u64s in order, borrowed for as long as `s`.
    unsafe { core::slice::from_raw_parts(s.as_ptr().cast::<u64>(), s.len() * 4) }
}

/// The head slot of an event.
#[repr(C, align(32))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Head {
    /// Raw TSC ticks ([`crate::tsc::now`]).
    pub tsc: u64,
    /// Object address (lock, futex word, memory location).
    pub addr: u64,
    /// Call site (return address) or PC.
    pub site: u64,
    /// `lockscope_format::Op` as u8.
    pub op: u8,
    /// Op-specific flags (`lockscope_format::phase` for sync ops).
    pub flags: u8,
    /// Number of call-path frames in the extension slots.
    pub nframes: u8,
    /// Extension flags ([`XF_ARGS`]).
    pub xflags: u8,
    /// Small argument, used as `arg` when there is no args slot.
    pub aux: u32,
}

const _: () = assert!(core::mem::size_of::<Head>() == SLOT_BYTES);
const _: () = assert!(core::mem::size_of::<Slot>() == SLOT_BYTES);
// `Head::pack` relies on little-endian byte order.
#[cfg(not(target_endian = "little"))]
compile_error!("Head::pack assumes a little-endian target");

impl Head {
    /// Number of slots the whole event takes (head included).
    #[inline]
    pub fn slots(&self) -> usize {
        1 + usize::from(self.xflags & XF_ARGS != 0) + usize::from(self.nframes).div_ceil(4)
    }
    /// Reinterprets the head as a plain slot.
    #[inline]
    pub fn to_slot(&self) -> Slot {
        // SAFETY: both are 32-byte POD types with the same alignment.
        unsafe { core::mem::transmute::<Head, Slot>(*self) }
    }
    /// The head as a slot, built from its fields in registers (the same
    /// bytes as [`Head::to_slot`]: `op`, `flags`, `nframes`, `xflags`,
    /// `aux` are the little-endian bytes 24..32).
    #[inline(always)]
    pub fn pack(&self) -> Slot {
        let last = u64::from(self.op)
            | u64::from(self.flags) << 8
            | u64::from(self.nframes) << 16
            | u64::from(self.xflags) << 24
            | u64::from(self.aux) << 32;
        Slot([self.tsc, self.addr, self.site, last])
    }
    /// Reads a head from a slot.
    #[inline]
    pub fn from_slot(s: &Slot) -> Head {
        // SAFETY: every bit pattern is a valid Head.
        unsafe { core::mem::transmute::<Slot, Head>(*s) }
    }
}

/// A decoded event as the consumer sees it (ticks not yet converted).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawEvent {
    /// The head.
    pub head: Head,
    /// `arg` (from the args slot, else `aux`).
    pub arg: u64,
    /// `arg2` (from the args slot, else 0).
    pub arg2: u64,
    /// Call path, innermost first (empty if none).
    pub frames: Vec<u64>,
}

impl RawEvent {
    /// Decodes one event from `slots` (which must hold at least
    /// `Head::slots()` entries, the head first). Returns `None` when the head
    /// claims more slots than given (a torn or corrupt ring).
    pub fn decode(slots: &[Slot]) -> Option<RawEvent> {
        let head = Head::from_slot(slots.first()?);
        if slots.len() < head.slots() || usize::from(head.nframes) > MAX_FRAMES {
            return None;
        }
        let mut i = 1;
        let (mut arg, mut arg2) = (u64::from(head.aux), 0);
        if head.xflags & XF_ARGS != 0 {
            arg = slots[1].0[0];
            arg2 = slots[1].0[1];
            i = 2;
        }
        let n = usize::from(head.nframes);
        let frames = slots[i..].iter().flat_map(|s| s.0).take(n).collect();
        Some(RawEvent {
            head,
            arg,
            arg2,
            frames,
        })
    }
}

/// Capture-internal pseudo-op (not a `lockscope_format::Op`): the thread
/// was named; the name's 16 bytes (NUL-padded) are in `arg`, `arg2`
/// (little-endian). The recorder turns it into a ThreadName record.
pub const OP_THREAD_NAME: u8 = 250;

/// `Op::RunDelay` of the trace format (run-queue delay of the thread so
/// far, in the args slot): written by [`crate::thread::Guard::sample_run_delay`]
/// and passed through to the trace as it is.
pub const OP_RUN_DELAY: u8 = 83;

/// Capture-internal pseudo-op (not a `lockscope_format::Op`): a ring
/// changes owner. Written by a new thread as the first event into the
/// ring of a joined thread it takes over; the recorder consumes it itself
/// (it never reaches the trace writer): what precedes it belongs to the
/// previous owner, what follows to the new one. Layout (3 slots): head
/// `tsc` = the new thread's start, `addr` = the previous owner's exit
/// stamp, `site` = the ring's `lost` count at the hand-over, `aux` = the
/// new tid; args = (parent tid, 0); two "frames" = the 16-byte name.
pub const OP_RING_HANDOFF: u8 = 251;

/// Capture-internal pseudo-op (not a `lockscope_format::Op`): a name for
/// the code address `addr` that the program's files cannot give (a GPU
/// kernel's runtime handle, named by CUPTI at its launch). The name's
/// bytes are packed little-endian into the "frames", NUL-padded, at most
/// `MAX_FRAMES * 8` bytes. The recorder turns it into a CodeName record.
pub const OP_CODE_NAME: u8 = 252;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_gives_the_same_bytes_as_the_struct() {
        let h = Head {
            tsc: 0x0102_0304_0506_0708,
            addr: 0x1112_1314_1516_1718,
            site: 0x2122_2324_2526_2728,
            op: 0x31,
            flags: 0x32,
            nframes: 0x33,
            xflags: 0x34,
            aux: 0x3536_3738,
        };
        assert_eq!(h.pack(), h.to_slot());
        assert_eq!(Head::from_slot(&h.pack()), h);
    }

    /// The frames of a call path, read in place: the slots' words in
    /// order, four to a slot (run under Miri by CI: the cast is the
    /// crate's).
    #[test]
    fn slot_words_are_the_slots_words_in_order() {
        let s = [Slot([1, 2, 3, 4]), Slot([5, 6, 7, 0])];
        assert_eq!(slot_words(&s), &[1, 2, 3, 4, 5, 6, 7, 0]);
        assert_eq!(slot_words(&s[1..]), &[5, 6, 7, 0]);
        assert!(slot_words(&[]).is_empty());
    }
}
