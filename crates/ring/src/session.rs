//! The session directory shared by the recorder and the recorded program.
//!
//! `lockscope record` creates a directory on tmpfs and passes it to the
//! program in [`ENV_SESSION`]. Inside it:
//!
//! ```text
//! P<pid>-<gen>.proc          one per process image (gen = exec generation):
//!                            a ProcessHeader page, then argv text
//! P<pid>-<gen>.maps<k>       copies of /proc/self/maps taken by the program
//!                            (k = 0 at start, 1.. later, e.g. before exec/exit)
//! T<pid>-<gen>-<tid>.ring    one per thread: a RingHeader page, then slots
//! wake                       one SessionWake page, created by the recorder
//! ```
//!
//! Files rather than one big shared region: a thread that starts claims its
//! own file with no coordination with any other thread or process, a fork
//! child simply creates new files, and the recorder discovers new buffers by
//! listing the directory. The exec generation is claimed by creating the
//! `.proc` file with `O_EXCL` for gen = 0, 1, 2... so that an image that
//! replaced another one under the same pid gets fresh names.

use core::sync::atomic::{AtomicU32, AtomicU64};

/// Environment variable naming the session directory.
pub const ENV_SESSION: &str = "LOCKSCOPE_SESSION";
/// Environment variable: ring size per thread in KiB.
pub const ENV_RING_KB: &str = "LOCKSCOPE_RING_KB";
/// Environment variable: `drop` (default) or `wait`: what a thread does
/// when its ring is full.
pub const ENV_ON_FULL: &str = "LOCKSCOPE_ON_FULL";
/// Environment variable: `contended`, `all` or `none` (call paths).
pub const ENV_STACKS: &str = "LOCKSCOPE_STACKS";
/// Environment variable: largest ring a hot thread may grow to, KiB.
pub const ENV_RING_MAX_KB: &str = "LOCKSCOPE_RING_MAX_KB";
/// Size of a thread's first ring, KiB. Small: 1000 threads
/// with 4 MiB rings took 4 GB and 1.8 ms each to create; a thread that
/// runs hot gets a larger ring on demand (see [`DEFAULT_RING_MAX_KB`]).
pub const DEFAULT_RING_KB: u64 = 64;
/// Largest ring a hot thread grows to, KiB: at ~6M events/s per thread
/// a 16 MiB ring holds ~80 ms of events, longer than the drain is
/// descheduled on a busy 2-CPU machine (gaps up to ~45 ms measured).
pub const DEFAULT_RING_MAX_KB: u64 = 16384;
/// Size of the header page of a ring or process file.
pub const HEADER_BYTES: usize = 4096;
/// Magic of a ring file ("LSRING01").
pub const RING_MAGIC: u64 = u64::from_le_bytes(*b"LSRING01");
/// Magic of a process file ("LSPROC01").
pub const PROC_MAGIC: u64 = u64::from_le_bytes(*b"LSPROC01");

/// Name of the session's wake file: one [`SessionWake`] page, created by
/// the recorder before it starts the program, mapped by every process of
/// the program.
pub const WAKE_FILE: &str = "wake";

/// Bytes of the wake file.
pub const WAKE_BYTES: usize = 4096;

/// The page through which the program wakes the sleeping drain (an
/// eventcount). The drain sleeps on [`SessionWake::seq`] (a
/// process-shared futex: the page is a `MAP_SHARED` file) only after it
/// announced it in [`SessionWake::sleeping`] and looked at every ring
/// once more; the program looks at `sleeping` only when a ring crosses
/// its watermark, when a thread ends, or when a thread must wait for
/// room, so the common event pays nothing.
///
/// Why a file of its own rather than a word in each process file: the
/// drain waits on one word for every process of the session (a fork
/// child, an exec'd image), and a futex waits on one address.
#[repr(C, align(64))]
pub struct SessionWake {
    /// Futex word of the drain's sleep: every wake adds one.
    pub seq: AtomicU32,
    /// 1 while the drain sleeps or is about to (stored before its last
    /// look at the rings); cleared by the one waker that wakes it.
    pub sleeping: AtomicU32,
}

const _: () = assert!(core::mem::size_of::<SessionWake>() <= WAKE_BYTES);

/// Header page of a ring file. Each group of fields written by one side
/// sits on its own cache line so that producer and consumer never share a
/// line that either writes (no false sharing on the hot path).
#[repr(C, align(64))]
pub struct RingHeader {
    // ---- line 0: written once at creation by the program ----
    /// [`RING_MAGIC`].
    pub magic: u64,
    /// Layout version (1).
    pub version: u32,
    /// Bytes per slot (32).
    pub slot_bytes: u32,
    /// Capacity in slots (a power of two).
    pub capacity: u64,
    /// OS process id.
    pub pid: u32,
    /// OS thread id.
    pub tid: u32,
    /// Exec generation of the process image.
    pub exec_generation: u32,
    /// tid of the thread that created this one (0: main thread / unknown).
    pub parent_tid: u32,
    /// TSC when the thread started.
    pub start_tsc: u64,
    /// Initial thread name, NUL-padded.
    pub name: [u8; 16],
    // ---- line 1: written by the producer ----
    /// Slots published (monotonic; index = write & (capacity-1)).
    pub write: AtomicU64,
    /// Events dropped because the ring was full.
    pub lost: AtomicU64,
    /// TSC when the thread exited, 0 while it runs.
    pub end_tsc: AtomicU64,
    /// Times the thread waited for the recorder to make room (back-pressure:
    /// perturbation of the program's timing, reported).
    pub full_waits: AtomicU64,
    /// TSC ticks spent in those waits.
    pub full_wait_ticks: AtomicU64,
    /// 0 while this ring is the thread's current one; else the sequence
    /// number of the larger ring the thread moved to when this one ran
    /// short (`T<pid>-<gen>-<tid>-<seq>.ring`). Published (Release) after
    /// the producer's last write here and after the successor exists.
    pub next_seq: AtomicU64,
    /// 1 + the slot index of the latest hand-over event (a new thread took
    /// this recycled ring over, see `Producer::hand_over`), 0: none. Stored
    /// before the event is published, so a consumer that sees the event's
    /// slots published knows where it is and copies only up to it; a ring
    /// is handed on again only once the consumer is past it (at most one
    /// hand-over pending).
    pub handoff: AtomicU64,
    _pad1: [u64; 1],
    // ---- line 2: written by the consumer ----
    /// Slots consumed.
    pub read: AtomicU64,
    /// Slots whose events are in the trace file (written to the kernel,
    /// so they survive the recorder's death): `read` as it was before the
    /// last of the recorder's periodic flushes. What lies between
    /// `durable` and `read` was taken by the recorder and may be lost if
    /// it dies; the program overwrites it only once `write` passes
    /// `durable + capacity`. `lockscope recover` starts reading from
    /// here. 0 in rings of recorders older than the field.
    pub durable: AtomicU64,
    _pad2: [u64; 6],
    // ---- line 3: written by both sides, only while the producer waits ----
    /// Futex word: 1 while the producer sleeps waiting for room; the
    /// consumer clears it and wakes the producer after freeing slots.
    /// (A process-shared futex: the ring is a `MAP_SHARED` file.)
    pub waiting: AtomicU32,
    _pad3: [u32; 15],
    // ---- line 4: ring recycling, see `POOL_*` ----
    /// Who may reuse this ring once its thread is gone: [`POOL_OPEN`]
    /// (its thread's, or nobody's yet), [`POOL_POOLED`] (joined; in the
    /// process's free list, a new thread may take it over), [`POOL_CLOSED`]
    /// (the recorder closed it; never reused). Changed only by
    /// compare-and-swap, from [`POOL_OPEN`], by the joiner (to pooled) or
    /// the recorder (to closed); a new owner stores [`POOL_OPEN`] back after
    /// its hand-over event.
    pub pool: AtomicU32,
    _pad4: [u32; 15],
    // ---- line 5: unused, so that line 6 is not the neighbour of line 4,
    // which the consumer reads on every pass (`pool`): the hardware
    // prefetches lines in 128-byte pairs ----
    _gap5: [u64; 8],
    // ---- line 6: the deferred event, written by the producer only ----
    /// 1 + the slot index at which [`RingHeader::deferred`] belongs (the
    /// producer's `write` when it deferred it); the event is waiting to be
    /// published only while this equals `write + 1`. 0: none. See
    /// `Producer::defer`: an acquisition is written here, a
    /// line nobody else reads, and published after the critical section,
    /// so that the section is not lengthened by a write to a ring line the
    /// consumer has read (measured: the recorded program's own contended
    /// fraction fell to a fraction of its unrecorded one). If the
    /// producer's process dies before publishing it, the recorder
    /// publishes it (`Consumer::salvage_deferred`).
    pub deferred_at: AtomicU64,
    /// The deferred event's head slot, as four words.
    pub deferred: [AtomicU64; 4],
    /// Frames in [`RingHeader::path`] (0: none; producer only).
    pub path_len: AtomicU64,
    _pad6: [u64; 2],
    // ---- line 7: unused (line 6's pair) ----
    _gap7: [u64; 8],
    // ---- lines 8-15: written and read by the producer only ----
    /// The last call path the producer wrote in full to this ring: an
    /// event whose path has the same frames after its site is written
    /// without them ([`crate::raw::XF_PATH_TAIL`]). In the header, not
    /// the thread's state: a new ring (a larger one, a recycled one
    /// after its hand-over, which clears it) starts without one, as its
    /// consumer does; and the thread's TLS block stays small.
    pub path: [AtomicU64; crate::raw::MAX_FRAMES],
}

impl RingHeader {
    /// The deferred event's slot ([`RingHeader::deferred`]), as written.
    #[inline]
    pub fn deferred_slot(&self) -> crate::raw::Slot {
        crate::raw::Slot(
            self.deferred
                .each_ref()
                .map(|w| w.load(core::sync::atomic::Ordering::Relaxed)),
        )
    }
}

/// [`RingHeader::pool`]: owned by its thread (or by nobody yet).
pub const POOL_OPEN: u32 = 0;
/// [`RingHeader::pool`]: its thread was joined and the ring waits in the
/// program's free list for a new thread.
pub const POOL_POOLED: u32 = 1;
/// [`RingHeader::pool`]: the recorder closed the ring (removed its file).
pub const POOL_CLOSED: u32 = 2;

const _: () = assert!(core::mem::size_of::<RingHeader>() <= HEADER_BYTES);

/// Header page of a process file.
#[repr(C, align(64))]
pub struct ProcessHeader {
    /// [`PROC_MAGIC`].
    pub magic: u64,
    /// Layout version (1).
    pub version: u32,
    /// OS process id.
    pub pid: u32,
    /// Parent OS process id.
    pub ppid: u32,
    /// Exec generation (0 for the first image of this pid).
    pub exec_generation: u32,
    /// TSC at process start (library constructor).
    pub start_tsc: u64,
    /// Bytes of argv text after the header page: NUL-separated, the
    /// executable path first, then argv[0..].
    pub argv_bytes: u32,
    /// Set by the fork child: generation of the parent image.
    pub parent_generation: u32,
    /// Measured cost of recording one acquire, in TSC ticks (PinCS §2.2).
    pub acquire_cost_ticks: AtomicU64,
    /// Measured cost of recording one release, in TSC ticks.
    pub release_cost_ticks: AtomicU64,
    // ---- counters written by any thread of the program ----
    /// Events dropped because a thread could not get a ring (creation
    /// failed, e.g. tmpfs full).
    pub lost_no_ring: AtomicU64,
    /// Threads that could not get a ring.
    pub threads_without_ring: AtomicU32,
    /// Set to 1 when the recorder disabled itself after a caught panic.
    pub disabled: AtomicU32,
    /// TSC at normal process exit (atexit), 0 if not seen.
    pub end_tsc: AtomicU64,
    /// Exit code passed to exit(), valid when `end_tsc` != 0.
    pub exit_code: AtomicU32,
    /// Ring files that could not be created or grown because the session
    /// file system was full (ENOSPC: /dev/shm is often only 64 MB in
    /// containers). The thread then got a smaller ring, or kept its
    /// current one and waited for the recorder.
    pub space_exhausted: AtomicU32,
    /// Rings that were grown because their thread ran hot.
    pub rings_grown: AtomicU32,
    /// Hooked calls made while the same thread was already inside the
    /// recorder (a signal handler interrupting the recording code): not
    /// recorded, counted here as lost.
    pub nested_skipped: AtomicU64,
    /// New threads that took over the ring of a joined thread instead of
    /// creating a file (mapping a fresh ring per thread cost TLB
    /// shootdowns and `mmap_lock` contention in the program).
    pub rings_reused: AtomicU32,
    /// Rings of joined threads that could not be kept for reuse (the free
    /// list was full, or the ring too large) and were unmapped.
    pub rings_not_pooled: AtomicU32,
    /// New threads that created a fresh ring although rings waited in the
    /// free list (none of them was drained yet).
    pub pool_not_ready: AtomicU32,
    /// The lock algorithm that replaced the process's pthread mutexes
    /// (`lockscope run --lock ALG`: `ttas`, `mcs, spin`), NUL-padded text;
    /// all zero when they are glibc's. Written before `magic` is
    /// published (see `process::set_lock_namer`).
    pub swapped_lock: [u8; SWAPPED_LOCK_BYTES],
}

/// Size of [`ProcessHeader::swapped_lock`].
pub const SWAPPED_LOCK_BYTES: usize = 32;

const _: () = assert!(core::mem::size_of::<ProcessHeader>() <= HEADER_BYTES);

/// File name of a process file.
pub fn proc_file_name(pid: u32, gen: u32) -> String {
    format!("P{pid}-{gen}.proc")
}

/// File name of a ring file.
pub fn ring_file_name(pid: u32, gen: u32, tid: u32) -> String {
    format!("T{pid}-{gen}-{tid}.ring")
}

/// File name of a thread's `seq`-th ring (0: its first one).
pub fn ring_seq_file_name(pid: u32, gen: u32, tid: u32, seq: u32) -> String {
    if seq == 0 {
        ring_file_name(pid, gen, tid)
    } else {
        format!("T{pid}-{gen}-{tid}-{seq}.ring")
    }
}

/// File name of the `k`-th maps snapshot of a process image.
pub fn maps_file_name(pid: u32, gen: u32, k: u32) -> String {
    format!("P{pid}-{gen}.maps{k}")
}

/// What a session file name denotes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionFile {
    /// `P<pid>-<gen>.proc`
    Proc {
        /// pid
        pid: u32,
        /// exec generation
        gen: u32,
    },
    /// `P<pid>-<gen>.maps<k>`
    Maps {
        /// pid
        pid: u32,
        /// exec generation
        gen: u32,
        /// snapshot number
        k: u32,
    },
    /// `T<pid>-<gen>-<tid>.ring`
    Ring {
        /// pid
        pid: u32,
        /// exec generation
        gen: u32,
        /// tid
        tid: u32,
    },
    /// `T<pid>-<gen>-<tid>-<seq>.ring` (seq >= 1): a larger ring the
    /// thread moved to; reached through the previous ring's
    /// [`RingHeader::next_seq`], not by listing.
    RingNext {
        /// pid
        pid: u32,
        /// exec generation
        gen: u32,
        /// tid
        tid: u32,
        /// sequence number
        seq: u32,
    },
}

/// Parses a session file name; `None` for anything else.
pub fn parse_file_name(name: &str) -> Option<SessionFile> {
    if let Some(rest) = name.strip_prefix('T').and_then(|r| r.strip_suffix(".ring")) {
        // `T<pid>-<gen>-<tid>.<k>.ring` (k >= 1): a first ring created
        // under another name because `T<pid>-<gen>-<tid>.ring` existed (the
        // kernel reused the tid of a thread whose ring file still lives,
        // e.g. recycled by later threads).
        if let Some((main, k)) = rest.split_once('.') {
            let k: u32 = k.parse().ok()?;
            return match parse_file_name(&format!("T{main}.ring"))? {
                r @ SessionFile::Ring { .. } if k > 0 => Some(r),
                _ => None,
            };
        }
        let mut it = rest.split('-');
        let (pid, gen, tid) = (
            it.next()?.parse().ok()?,
            it.next()?.parse().ok()?,
            it.next()?.parse().ok()?,
        );
        return match it.next() {
            None => Some(SessionFile::Ring { pid, gen, tid }),
            Some(seq) => {
                let seq: u32 = seq.parse().ok()?;
                (seq > 0 && it.next().is_none()).then_some(SessionFile::RingNext {
                    pid,
                    gen,
                    tid,
                    seq,
                })
            }
        };
    }
    let rest = name.strip_prefix('P')?;
    let (pg, kind) = rest.split_once('.')?;
    let (pid, gen) = pg.split_once('-')?;
    let (pid, gen) = (pid.parse().ok()?, gen.parse().ok()?);
    if kind == "proc" {
        return Some(SessionFile::Proc { pid, gen });
    }
    let k = kind.strip_prefix("maps")?.parse().ok()?;
    Some(SessionFile::Maps { pid, gen, k })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_roundtrip() {
        assert_eq!(
            parse_file_name(&ring_file_name(12, 1, 13)),
            Some(SessionFile::Ring {
                pid: 12,
                gen: 1,
                tid: 13
            })
        );
        assert_eq!(
            parse_file_name(&proc_file_name(12, 0)),
            Some(SessionFile::Proc { pid: 12, gen: 0 })
        );
        assert_eq!(
            parse_file_name(&maps_file_name(12, 0, 3)),
            Some(SessionFile::Maps {
                pid: 12,
                gen: 0,
                k: 3
            })
        );
        assert_eq!(parse_file_name("T1-2.ring"), None);
        assert_eq!(
            parse_file_name(&ring_seq_file_name(12, 1, 13, 2)),
            Some(SessionFile::RingNext {
                pid: 12,
                gen: 1,
                tid: 13,
                seq: 2
            })
        );
        assert_eq!(ring_seq_file_name(12, 1, 13, 0), ring_file_name(12, 1, 13));
        assert_eq!(parse_file_name("T1-2-3-0.ring"), None);
        assert_eq!(parse_file_name("T1-2-3-4-5.ring"), None);
        assert_eq!(parse_file_name("junk"), None);
        // A first ring under an alternative name (its tid's usual name
        // was taken): the same thread identity.
        assert_eq!(
            parse_file_name("T12-1-13.2.ring"),
            Some(SessionFile::Ring {
                pid: 12,
                gen: 1,
                tid: 13
            })
        );
        assert_eq!(parse_file_name("T12-1-13.0.ring"), None);
        assert_eq!(parse_file_name("T12-1-13-2.1.ring"), None);
        assert_eq!(parse_file_name("T12-1-13.x.ring"), None);
    }
}
