//! The layout of an event in a ring: one 32-byte head slot, optionally
//! followed by extension slots.
//!
//! ```text
//! head:  tsc u64 | addr u64 | site u64 | op u8 | flags u8 | nframes u8 | xflags u8 | aux u32
//! ext:   if xflags & XF_ARGS:   arg u64 | arg2 u64 | 0 u64 | 0 u64
//!        then if nframes > 0 and not xflags & XF_PATH_TAIL:
//!                                ceil(nframes / 4) slots of 4 return addresses each
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
/// `xflags` bit: the event's call path is not in its slots. It is the
/// head's `site` followed by frames `1..nframes` of the last call path
/// written in full to the same ring (see [`LastPath`]).
///
/// Why: a thread's events come in runs from one function (a spin loop's
/// load, exchange and store; a lock and its unlock; a loop over
/// accesses), whose call paths differ only in the innermost frame, the
/// call site, which the head carries anyway. Detailed mode stamps an
/// atomic with its path: on a spinlock fixture an event was a head, an
/// args slot and a frame slot (96 bytes) where 64 say the same, and a
/// 32-frame path costs eight frame slots per event. Written only for
/// call paths (ops below [`OP_THREAD_NAME`], whose "frames" are a
/// payload), and only when the path's first frame is the site. The
/// alternative, a path id chosen by the program, would need a table
/// shared with the recorder (a lock or a hash insert on the hot path);
/// this needs only the producer's copy of its last path, in its ring's
/// header ([`crate::session::RingHeader::path`]).
pub const XF_PATH_TAIL: u8 = 2;

/// One 32-byte slot as written to the ring.
#[repr(C, align(32))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Slot(pub [u64; 4]);

/// The words of consecutive slots, in order: a call path's frames span
/// the slots after the head (and args), four to a slot, and a consumer
/// reads them in place instead of copying them out.
#[inline]
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
        let frames = if self.xflags & XF_PATH_TAIL != 0 {
            0
        } else {
            usize::from(self.nframes).div_ceil(4)
        };
        1 + usize::from(self.xflags & XF_ARGS != 0) + frames
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
    /// claims more slots than given (a torn or corrupt ring). An event
    /// whose path is a [`XF_PATH_TAIL`] gets the site alone as its
    /// path: [`RawEvent::decode_with`] resolves it.
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
        let frames = if head.xflags & XF_PATH_TAIL != 0 {
            (n > 0).then_some(head.site).into_iter().collect()
        } else {
            slots[i..].iter().flat_map(|s| s.0).take(n).collect()
        };
        Some(RawEvent {
            head,
            arg,
            arg2,
            frames,
        })
    }

    /// [`RawEvent::decode`] for a consumer that reads a ring's events in
    /// order: `last` is the ring's [`LastPath`], which resolves (and
    /// learns from) call paths. A path that cannot be resolved (its full
    /// copy was never seen) is left empty.
    pub fn decode_with(slots: &[Slot], last: &mut LastPath) -> Option<RawEvent> {
        let mut ev = RawEvent::decode(slots)?;
        // A pseudo-op's "frames" are its payload, as `decode` gives them.
        if ev.head.nframes > 0 && ev.head.op < OP_THREAD_NAME {
            let start = 1 + usize::from(ev.head.xflags & XF_ARGS != 0);
            let words = slot_words(&slots[start..]);
            ev.frames = last
                .resolve(&ev.head, words)
                .map(<[u64]>::to_vec)
                .unwrap_or_default();
        }
        Some(ev)
    }
}

/// What a consumer of one ring remembers to resolve [`XF_PATH_TAIL`]
/// paths: the last call path it read in full from that ring. One per
/// ring and reader, fed every event of the ring in order; a new ring (a
/// thread's larger one, or a recycled one after its hand-over event)
/// starts with an empty one, as its producer's copy does.
#[derive(Clone, Debug)]
pub struct LastPath {
    len: usize,
    frames: [u64; MAX_FRAMES],
}

impl Default for LastPath {
    fn default() -> LastPath {
        LastPath {
            len: 0,
            frames: [0; MAX_FRAMES],
        }
    }
}

impl LastPath {
    /// Forgets the path (after a gap in the events read: corruption, a
    /// hand-over), so that a later [`XF_PATH_TAIL`] event is left without
    /// a path rather than given a wrong one.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// The call path of the event with head `head`, `words` being the
    /// words after its head and args slot (its frames, when written in
    /// full); `None` when the event has no call path (no frames, or a
    /// pseudo-op whose frames are a payload) or its tail is unknown. A
    /// path written in full is remembered.
    #[inline]
    pub fn resolve<'a>(&'a mut self, head: &Head, words: &'a [u64]) -> Option<&'a [u64]> {
        let n = usize::from(head.nframes);
        if n == 0 || n > MAX_FRAMES || head.op >= OP_THREAD_NAME {
            return None;
        }
        if head.xflags & XF_PATH_TAIL != 0 {
            if n > 1 && n > self.len {
                return None;
            }
            // Frame 0 of the remembered path is never read as a tail:
            // it becomes this event's site, and the path is lent in place.
            self.frames[0] = head.site;
            return Some(&self.frames[..n]);
        }
        let w = words.get(..n)?;
        self.frames[..n].copy_from_slice(w);
        self.len = n;
        Some(w)
    }
}

// The op table of the rings: the op values that the hooks do not take
// from `lockscope_format::Op` where they write them, in one place. Below
// 250, values of the trace format's `Op` (the table of record), written
// by the capture crate itself: mirrored here because the ring protocol
// does not depend on the trace format (the preload tests check that the
// values agree). 250 and up: pseudo-ops that the recorder consumes or
// turns into other records, never trace events.

/// `lockscope_format::Op::ThreadStart`: the thread's first event.
pub const OP_THREAD_START: u8 = 28;
/// `lockscope_format::Op::ThreadExit`: the thread's last event.
pub const OP_THREAD_EXIT: u8 = 29;
/// `lockscope_format::Op::RunDelay` (run-queue delay of the thread so
/// far, in the args slot): written by the capture crate's
/// `Guard::sample_run_delay` and passed through to the trace as it is.
pub const OP_RUN_DELAY: u8 = 83;

/// Capture-internal pseudo-op (not a `lockscope_format::Op`): the thread
/// was named; the name's 16 bytes (NUL-padded) are in `arg`, `arg2`
/// (little-endian). The recorder turns it into a ThreadName record.
pub const OP_THREAD_NAME: u8 = 250;

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

    /// A path written in full is remembered; a tail takes its frames
    /// after the first and the event's own site; a tail of a path never
    /// seen, and a pseudo-op's payload, are not paths.
    #[test]
    fn last_path_resolves_tails_from_the_last_full_path() {
        let mut last = LastPath::default();
        let head = |site, nframes, xflags, op| Head {
            site,
            nframes,
            xflags,
            op,
            ..Head::default()
        };
        assert_eq!(
            last.resolve(&head(1, 3, XF_PATH_TAIL, 1), &[]),
            None,
            "nothing seen yet"
        );
        assert_eq!(
            last.resolve(&head(1, 1, XF_PATH_TAIL, 1), &[]),
            Some(&[1u64][..])
        );
        let full = [7, 8, 9];
        assert_eq!(last.resolve(&head(7, 3, 0, 1), &full), Some(&full[..]));
        assert_eq!(
            last.resolve(&head(5, 3, XF_PATH_TAIL, 1), &[]),
            Some(&[5u64, 8, 9][..])
        );
        assert_eq!(
            last.resolve(&head(6, 3, XF_PATH_TAIL | XF_ARGS, 1), &[]),
            Some(&[6u64, 8, 9][..])
        );
        assert_eq!(
            last.resolve(&head(6, 4, XF_PATH_TAIL, 1), &[]),
            None,
            "longer than the last"
        );
        assert_eq!(
            last.resolve(&head(6, 2, 0, OP_CODE_NAME), &[1, 2]),
            None,
            "a payload"
        );
        assert_eq!(last.resolve(&head(6, 0, 0, 1), &[]), None, "no path");
        assert_eq!(
            last.resolve(&head(6, 2, 0, 1), &[1]),
            None,
            "frames missing"
        );
        last.clear();
        assert_eq!(
            last.resolve(&head(5, 3, XF_PATH_TAIL, 1), &[]),
            None,
            "cleared"
        );
        let h = head(5, 3, XF_PATH_TAIL | XF_ARGS, 1);
        assert_eq!(h.slots(), 2, "a tail has no frame slots");
        assert_eq!(head(5, 3, XF_ARGS, 1).slots(), 3);
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
