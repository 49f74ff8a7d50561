//! Buffers of raw slots between the drain and the writer, in memory
//! mapped for them and backed by huge pages where the kernel allows it.
//!
//! Why not `Vec<Slot>`: while the writer lags behind a fast program, every
//! batch the drain copies lands in fresh memory, and with 4 KiB pages the
//! drain spent more time in page faults (one per 128 events) than copying:
//! a 4 MiB ring took milliseconds to empty, during which it overflowed
//! again (measured with `perf` on `lockscope-bench-capture`). A `Vec`
//! cannot ask for 2 MiB alignment or `MADV_HUGEPAGE`; with them a batch
//! faults once per 65,536 events. Buffers are recycled through the pool
//! and unmapped only at the end.

use lockscope_ring::raw::Slot;

const HUGE: usize = 2 << 20;

/// A fixed-capacity buffer of slots; `len` of them are valid.
pub(crate) struct SlotBuf {
    ptr: *mut Slot,
    cap: usize,
    len: usize,
    map_len: usize,
}

// SAFETY: owns its mapping exclusively; moved between the drain and the
// writer.
unsafe impl Send for SlotBuf {}
// SAFETY: shared (behind an `Arc`) only for reading, by the converter
// workers that each convert their own runs of one batch; `&SlotBuf` gives
// no way to write (`whole_mut` and `set_len` need `&mut`).
unsafe impl Sync for SlotBuf {}

impl SlotBuf {
    /// A buffer of at least `cap` slots, or `None` if the memory cannot be
    /// mapped. From 2 MiB up: whole huge pages, aligned, with
    /// `MADV_HUGEPAGE`; below: whole small pages (a small buffer must not
    /// cost a huge page's zeroing: see `drain::SMALL_COPY_SLOTS`).
    pub(crate) fn new(cap: usize) -> Option<SlotBuf> {
        let want = cap.max(1) * std::mem::size_of::<Slot>();
        if want < HUGE {
            return Self::new_small(want.next_multiple_of(4096));
        }
        let bytes = want.next_multiple_of(HUGE);
        // Over-map by one huge page to align the start.
        // SAFETY: anonymous private mapping; checked below.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes + HUGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return None;
        }
        let raw = raw as usize;
        let start = raw.next_multiple_of(HUGE);
        // SAFETY: trimming the unaligned head and the tail of our own
        // mapping; advice on the rest. Failures leave small pages.
        unsafe {
            if start > raw {
                libc::munmap(raw as *mut libc::c_void, start - raw);
            }
            let tail = raw + bytes + HUGE - (start + bytes);
            if tail > 0 {
                libc::munmap((start + bytes) as *mut libc::c_void, tail);
            }
            libc::madvise(start as *mut libc::c_void, bytes, libc::MADV_HUGEPAGE);
        }
        Some(SlotBuf {
            ptr: start as *mut Slot,
            cap: bytes / std::mem::size_of::<Slot>(),
            len: 0,
            map_len: bytes,
        })
    }

    /// `bytes` (a multiple of the page size) of small pages.
    fn new_small(bytes: usize) -> Option<SlotBuf> {
        // SAFETY: anonymous private mapping; checked below.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return None;
        }
        Some(SlotBuf {
            ptr: raw as *mut Slot,
            cap: bytes / std::mem::size_of::<Slot>(),
            len: 0,
            map_len: bytes,
        })
    }

    /// Slots it can hold.
    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }

    /// All of it, for filling; then [`SlotBuf::set_len`].
    pub(crate) fn whole_mut(&mut self) -> &mut [Slot] {
        // SAFETY: `cap` slots mapped read-write, zero-filled or written
        // before (every bit pattern is a valid Slot).
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.cap) }
    }

    /// Marks the first `len` slots valid.
    pub(crate) fn set_len(&mut self, len: usize) {
        self.len = len.min(self.cap);
    }
}

impl std::ops::Deref for SlotBuf {
    type Target = [Slot];
    fn deref(&self) -> &[Slot] {
        // SAFETY: the first `len` slots are initialised memory we own.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for SlotBuf {
    fn drop(&mut self) {
        // SAFETY: unmapping what `new` mapped (after trimming).
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.map_len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_what_was_asked_aligned_and_keeps_contents() {
        let mut b = SlotBuf::new(100_000).unwrap();
        assert!(b.capacity() >= 100_000);
        assert_eq!(b.ptr as usize % HUGE, 0);
        assert!(b.is_empty());
        for (i, s) in b.whole_mut().iter_mut().enumerate().take(1000) {
            s.0[0] = i as u64;
        }
        b.set_len(1000);
        assert_eq!(b.len(), 1000);
        assert!(b.iter().enumerate().all(|(i, s)| s.0[0] == i as u64));
        b.set_len(usize::MAX);
        assert_eq!(b.len(), b.capacity());
    }

    #[test]
    fn a_small_buffer_takes_small_pages_only() {
        let mut b = SlotBuf::new(4096).unwrap();
        assert_eq!(b.capacity(), 4096);
        assert_eq!(b.map_len, 4096 * std::mem::size_of::<Slot>());
        b.whole_mut()[4095].0[3] = 7;
        b.set_len(4096);
        assert_eq!(b[4095].0[3], 7);
        let odd = SlotBuf::new(1000).unwrap();
        assert_eq!(odd.map_len % 4096, 0);
        assert!(odd.capacity() >= 1000 && odd.map_len < HUGE);
    }
}
