//! The process side of a recording session: what the injected library does
//! once per process image, outside the event path.
//!
//! - [`init`] (library constructor, or `__tsan_init` in detailed mode):
//!   reads the session from the environment, claims the exec generation by
//!   creating `P<pid>-<gen>.proc` with `O_EXCL`, writes the
//!   [`ProcessHeader`] and the argv text, copies `/proc/self/maps` to
//!   `maps0`, measures the recorder's own cost, registers the fork-child
//!   and exit handlers, and switches recording on.
//! - [`after_fork_child`] (atfork child handler): the child drops the
//!   parent's process file and thread ring, and starts its own
//!   `P<childpid>-0.proc` as if it had just started.
//! - [`snapshot_maps`]: `maps1`, `maps2`... before exec and at exit.
//! - [`disable`]: after a caught panic, recording stops for good.
//!
//! None of this allocates: paths are formatted into stack buffers and
//! files are copied through a stack buffer, because these functions run
//! inside hooks (fork, exec, exit) where the program may hold malloc's
//! locks or be in an unusual state.

use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use crate::thread::{self, StacksMode, RECORDING, REC_DISABLED, REC_OFF, REC_ON};
use lockscope_ring::raw::{OP_THREAD_EXIT, OP_THREAD_START};
use lockscope_ring::ring::{self, Producer};
use lockscope_ring::session::{
    ProcessHeader, SessionWake, DEFAULT_RING_KB, DEFAULT_RING_MAX_KB, HEADER_BYTES, PROC_MAGIC,
};
use lockscope_ring::tsc;

/// Longest session directory path we accept (stack-formatted paths).
const MAX_DIR: usize = 480;
/// Bytes kept for each environment entry saved for exec.
const MAX_ENV: usize = 4096;
/// Environment entries that must survive into exec'd images.
const ENV_KEYS: [&[u8]; 7] = [
    b"LD_PRELOAD",
    b"LOCKSCOPE_SESSION",
    b"LOCKSCOPE_RING_KB",
    b"LOCKSCOPE_RING_MAX_KB",
    b"LOCKSCOPE_STACKS",
    b"LOCKSCOPE_ON_FULL",
    b"LOCKSCOPE_CLOCK",
];

/// Number of environment entries [`saved_env`] returns.
pub const SAVED_ENV_KEYS: usize = ENV_KEYS.len();

/// Write-once configuration, filled by [`init`] before recording is
/// switched on (Release) and only read afterwards.
struct Config {
    dir: [u8; MAX_DIR],
    dir_len: usize,
    ring_kb: u64,
    /// Largest ring a hot thread grows to, KiB (>= ring_kb).
    ring_max_kb: u64,
    /// LOCKSCOPE_ON_FULL=wait: a full ring makes the thread wait for the
    /// recorder instead of dropping the event.
    wait_when_full: bool,
    env: [[u8; MAX_ENV]; ENV_KEYS.len()],
    env_len: [usize; ENV_KEYS.len()],
}

struct ConfigCell(core::cell::UnsafeCell<Config>);
// SAFETY: written only by `init` (once, single-threaded constructor, before
// RECORDING is published), read-only afterwards.
unsafe impl Sync for ConfigCell {}

static CONFIG: ConfigCell = ConfigCell(core::cell::UnsafeCell::new(Config {
    dir: [0; MAX_DIR],
    dir_len: 0,
    ring_kb: DEFAULT_RING_KB,
    ring_max_kb: DEFAULT_RING_MAX_KB,
    wait_when_full: true,
    env: [[0; MAX_ENV]; ENV_KEYS.len()],
    env_len: [0; ENV_KEYS.len()],
}));

/// 0 = never initialised, 1 = initialising, 2 = done.
static INIT: AtomicU8 = AtomicU8::new(0);
static STACKS: AtomicU8 = AtomicU8::new(StacksMode::Contended as u8);
static PID: AtomicU32 = AtomicU32::new(0);
static GEN: AtomicU32 = AtomicU32::new(0);
static MAPS_K: AtomicU32 = AtomicU32::new(0);
static MAIN_STACK_HI: AtomicU64 = AtomicU64::new(0);
/// pthread_self() of the main thread (whose stack MAIN_STACK_HI bounds).
static MAIN_PTHREAD: AtomicU64 = AtomicU64::new(0);
static HEADER: AtomicPtr<ProcessHeader> = AtomicPtr::new(core::ptr::null_mut());
/// The session's wake page (null: none, the drain then finds the rings
/// by its periodic pass alone). Mapped once per image; a fork child keeps
/// the parent's mapping, which is the same page.
static WAKE: AtomicPtr<SessionWake> = AtomicPtr::new(core::ptr::null_mut());

/// A lock call that took longer than this waited, even if the lock looked
/// free just before it, ns. No uncontended call comes near it (a
/// cross-socket cache miss on the lock word is ~0.3 us); a call that slept
/// on the futex takes several microseconds.
pub const SLOW_CALL_NS: u64 = 1_000;

/// [`SLOW_CALL_NS`] in clock units, set when the process header is opened
/// (from the clock rate measured across `measure_costs`). Until then, and
/// if that measurement fails: 2,500 units (about 1 us of a 2.5 GHz TSC).
static SLOW_TICKS: AtomicU64 = AtomicU64::new(2_500);

/// [`Guard`](crate::thread::Guard)`::sample_run_delay` thresholds in
/// clock units: a gap of 500 us between two lock calls of a thread, and
/// 2 ms since its last sample. Set with [`SLOW_TICKS`]; until then, for a
/// 2.5 GHz TSC.
static DELAY_GAP_TICKS: AtomicU64 = AtomicU64::new(1_250_000);
static DELAY_PERIOD_TICKS: AtomicU64 = AtomicU64::new(5_000_000);

/// Clock units between two lock calls of a thread after which the second
/// records the thread's run-queue delay (500 us).
#[inline(always)]
pub fn delay_gap_ticks() -> u64 {
    DELAY_GAP_TICKS.load(Ordering::Relaxed)
}

/// Clock units after which a thread records its run-queue delay at its
/// next lock call in any case (2 ms).
#[inline(always)]
pub fn delay_period_ticks() -> u64 {
    DELAY_PERIOD_TICKS.load(Ordering::Relaxed)
}

/// `ticks` of the clock in ns, at the rate measured when the process
/// header was opened (2.5 GHz until then).
pub fn ticks_to_ns(ticks: u64) -> u64 {
    let per_us = SLOW_TICKS.load(Ordering::Relaxed).max(1);
    (u128::from(ticks) * u128::from(SLOW_CALL_NS) / u128::from(per_us)).min(u128::from(u64::MAX))
        as u64
}

/// `ns` in clock units, at the same rate as [`ticks_to_ns`].
pub fn ns_to_ticks(ns: u64) -> u64 {
    let per_us = SLOW_TICKS.load(Ordering::Relaxed);
    (u128::from(ns) * u128::from(per_us) / u128::from(SLOW_CALL_NS)).min(u128::from(u64::MAX))
        as u64
}

/// Clock units after which a lock call that looked uncontended is taken
/// to have waited ([`SLOW_CALL_NS`]).
#[inline(always)]
pub fn slow_call_ticks() -> u64 {
    SLOW_TICKS.load(Ordering::Relaxed)
}

fn config() -> &'static Config {
    // SAFETY: see ConfigCell.
    unsafe { &*CONFIG.0.get() }
}

/// pid of the process image being recorded (0 before [`init`]).
pub fn pid() -> u32 {
    PID.load(Ordering::Relaxed)
}

/// Exec generation of this process image.
pub fn generation() -> u32 {
    GEN.load(Ordering::Relaxed)
}

/// The process header, while recording.
pub fn header() -> Option<&'static ProcessHeader> {
    let p = HEADER.load(Ordering::Acquire);
    // SAFETY: HEADER points to a live shared mapping or is null; the
    // mapping is only replaced in the single-threaded fork child.
    unsafe { p.as_ref() }
}

/// A measurement of the recorder's real cost per event, run once by
/// [`init`] right after recording starts (on the initialising thread,
/// single-threaded in a constructor): see [`set_cost_probe`].
static COST_PROBE: AtomicUsize = AtomicUsize::new(0);

/// Registers `f` to run at the end of [`init`], once recording is on: the
/// preload library measures its hooks there and stores the result with
/// [`set_hook_costs`]. Register it before calling `init`.
pub fn set_cost_probe(f: fn()) {
    COST_PROBE.store(f as usize, Ordering::Release);
}

/// Names the lock algorithm that replaced the process's pthread mutexes
/// (see [`set_lock_namer`]); 0 when none is registered.
static LOCK_NAMER: AtomicUsize = AtomicUsize::new(0);

/// Registers `f`, which writes the name of the lock algorithm that
/// replaced the process's pthread mutexes into its buffer (NUL-padded,
/// all zero for glibc's). The process file's header is given it before it
/// is published, so that the recorder reads it with the process's first
/// record (the preload library asks `lockscope run`'s swap library).
/// Register it before calling [`init`].
pub fn set_lock_namer(f: fn(&mut [u8; lockscope_ring::session::SWAPPED_LOCK_BYTES])) {
    LOCK_NAMER.store(f as usize, Ordering::Release);
}

/// Replaces the recorder's cost per acquisition and per release (clock
/// units) in the process header, which the analysis subtracts from the
/// program's work. `open_process` stores a first figure from a loop of
/// bare ring pushes; the preload library measures its real hooks
/// (trampoline, guard, clock reads, push: about twice that) and stores
/// them here. Ignored when not recording.
pub fn set_hook_costs(acquire_ticks: u64, release_ticks: u64) {
    if let Some(h) = header() {
        h.acquire_cost_ticks.store(acquire_ticks, Ordering::Relaxed);
        h.release_cost_ticks.store(release_ticks, Ordering::Relaxed);
    }
}

#[inline(always)]
pub(crate) fn stacks_mode() -> StacksMode {
    match STACKS.load(Ordering::Relaxed) {
        1 => StacksMode::All,
        2 => StacksMode::None,
        _ => StacksMode::Contended,
    }
}

pub(crate) fn main_stack_top() -> u64 {
    MAIN_STACK_HI.load(Ordering::Relaxed)
}

pub(crate) fn count_lost_no_ring() {
    if let Some(h) = header() {
        h.lost_no_ring.fetch_add(1, Ordering::Relaxed);
    }
}

pub(crate) fn count_ring_grown() {
    if let Some(h) = header() {
        h.rings_grown.fetch_add(1, Ordering::Relaxed);
    }
}

pub(crate) fn count_nested_skipped() {
    if let Some(h) = header() {
        h.nested_skipped.fetch_add(1, Ordering::Relaxed);
    }
}

pub(crate) fn count_ring_reused() {
    if let Some(h) = header() {
        h.rings_reused.fetch_add(1, Ordering::Relaxed);
    }
}

pub(crate) fn count_ring_not_pooled() {
    if let Some(h) = header() {
        h.rings_not_pooled.fetch_add(1, Ordering::Relaxed);
    }
}

pub(crate) fn count_pool_not_ready() {
    if let Some(h) = header() {
        h.pool_not_ready.fetch_add(1, Ordering::Relaxed);
    }
}

/// Largest ring kept for reuse by new threads: four times a first ring
/// (one growth). Larger rings (threads that ran hot) are unmapped at
/// join, so the free list holds at most 128 x 256 KiB by default.
pub(crate) fn pool_max_capacity() -> u64 {
    first_ring_capacity().saturating_mul(4)
}

/// True if full rings make threads wait (`LOCKSCOPE_ON_FULL`).
pub(crate) fn wait_when_full() -> bool {
    config().wait_when_full
}

/// The identity written for a ring of thread `tid` starting now: pid,
/// exec generation, creator, start stamp, and the thread's current name.
///
/// # Safety
/// None beyond being called on a live thread of this process (it reads
/// the calling thread's name with `prctl`).
pub(crate) unsafe fn ring_identity(tid: u32, parent_tid: u32) -> ring::RingIdentity {
    let mut name = [0u8; 16];
    // SAFETY: PR_GET_NAME writes at most 16 bytes (NUL included) to the
    // buffer, which has 16.
    unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) };
    ring::RingIdentity {
        pid: pid(),
        tid,
        exec_generation: generation(),
        parent_tid,
        start_tsc: tsc::now(),
        name,
    }
}

fn count_space_exhausted() {
    if let Some(h) = header() {
        h.space_exhausted.fetch_add(1, Ordering::Relaxed);
    }
}

/// Capacity in slots of a thread's first ring.
pub(crate) fn first_ring_capacity() -> u64 {
    ring::capacity_for_kib(config().ring_kb)
}

/// Capacity of the ring that replaces a full one of `cur` slots: four
/// times larger, at most the configured maximum; `None` at the maximum.
pub(crate) fn next_ring_capacity(cur: u64) -> Option<u64> {
    let max = ring::capacity_for_kib(config().ring_max_kb);
    let next = cur.saturating_mul(4).min(max);
    (next > cur).then_some(next)
}

pub(crate) fn count_thread_without_ring() {
    if let Some(h) = header() {
        h.threads_without_ring.fetch_add(1, Ordering::Relaxed);
    }
}

/// The `KEY=value` environment entries (LD_PRELOAD and LOCKSCOPE_*) that
/// were set when this image started, for exec hooks that must pass them
/// on. Empty slices for keys that were not set.
pub fn saved_env() -> [&'static [u8]; ENV_KEYS.len()] {
    let c = config();
    core::array::from_fn(|i| &c.env[i][..c.env_len[i]])
}

/// Stops recording for good (after a caught panic in a hook) and says so
/// in the process header. Hooks forward from now on.
pub fn disable() {
    RECORDING.store(REC_DISABLED, Ordering::Release);
    if let Some(h) = header() {
        h.disabled.store(1, Ordering::Release);
    }
}

/// A NUL-terminated path built on the stack.
struct PathBuf {
    buf: [u8; MAX_DIR + 64],
    len: usize,
}

impl PathBuf {
    fn in_session() -> PathBuf {
        let c = config();
        let mut p = PathBuf {
            buf: [0; MAX_DIR + 64],
            len: 0,
        };
        p.push(&c.dir[..c.dir_len]);
        p.push(b"/");
        p
    }
    fn push(&mut self, s: &[u8]) -> &mut Self {
        // Leave room for the NUL; the directory length was checked so that
        // our fixed names always fit.
        let n = s.len().min(self.buf.len() - 1 - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s[..n]);
        self.len += n;
        self
    }
    fn num(&mut self, v: u32) -> &mut Self {
        let mut d = [0u8; 10];
        let mut i = d.len();
        let mut v = v;
        loop {
            i -= 1;
            d[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.push(&d[i..])
    }
    fn c(&mut self) -> *const libc::c_char {
        self.buf[self.len] = 0;
        self.buf.as_ptr() as *const libc::c_char
    }
}

/// `errno` of the last failed libc call.
fn errno() -> i32 {
    // SAFETY: errno location is always valid.
    unsafe { *libc::__errno_location() }
}

/// Opens a new session file exclusively.
///
/// # Safety
/// None beyond `p` holding a path (it is NUL-terminated by `c()`).
unsafe fn create_excl(p: &mut PathBuf) -> Result<i32, i32> {
    // SAFETY: `p.c()` is a NUL-terminated path inside `p`'s buffer, alive
    // for the call; open(2) only reads it.
    unsafe {
        let fd = libc::open(
            p.c(),
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC,
            0o644,
        );
        if fd < 0 {
            Err(errno())
        } else {
            Ok(fd)
        }
    }
}

/// Copies the file at `src` (NUL-terminated) into `fd` from `off`, through
/// a stack buffer. Returns bytes copied (short on error).
///
/// # Safety
/// `src` must end with a NUL byte; `fd` must be a descriptor the caller
/// owns, open for writing.
unsafe fn copy_file_into(src: &[u8], fd: i32, mut off: i64) -> u64 {
    // SAFETY: `src` is NUL-terminated (contract), read by open(2) only;
    // read(2) writes at most `buf.len()` bytes into the local `buf`; pwrite
    // reads the `n` bytes read into it; `s` is our own descriptor, closed
    // once; `fd` is the caller's (contract).
    unsafe {
        let s = libc::open(
            src.as_ptr() as *const libc::c_char,
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if s < 0 {
            return 0;
        }
        let mut buf = [0u8; 4096];
        let mut total = 0u64;
        loop {
            let n = libc::read(s, buf.as_mut_ptr() as *mut libc::c_void, buf.len());
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            if n <= 0 {
                break;
            }
            if libc::pwrite(fd, buf.as_ptr() as *const libc::c_void, n as usize, off) != n {
                break;
            }
            off += n as i64;
            total += n as u64;
        }
        libc::close(s);
        total
    }
}

/// Writes `P<pid>-<gen>.maps<k>` (the next k) from /proc/self/maps.
/// Returns false if the file could not be written.
pub fn snapshot_maps() -> bool {
    if RECORDING.load(Ordering::Acquire) == REC_OFF && HEADER.load(Ordering::Relaxed).is_null() {
        return false;
    }
    let k = MAPS_K.fetch_add(1, Ordering::Relaxed);
    let mut p = PathBuf::in_session();
    p.push(b"P")
        .num(pid())
        .push(b"-")
        .num(generation())
        .push(b".maps")
        .num(k);
    // SAFETY: plain file I/O on descriptors we own.
    unsafe {
        let Ok(fd) = create_excl(&mut p) else {
            return false;
        };
        let n = copy_file_into(b"/proc/self/maps\0", fd, 0);
        libc::close(fd);
        n > 0
    }
}

/// The session's wake page, or null.
pub(crate) fn session_wake() -> *const SessionWake {
    WAKE.load(Ordering::Acquire)
}

/// Maps the session's wake file ([`lockscope_ring::session::WAKE_FILE`]), created
/// by the recorder. Without it (a recorder that made none, or a failure)
/// nothing wakes the drain early and it drains at its own period: never
/// an error.
///
/// # Safety
/// Single-threaded start-up (the library constructor), after CONFIG is
/// written.
unsafe fn map_wake() {
    let mut p = PathBuf::in_session();
    p.push(lockscope_ring::session::WAKE_FILE.as_bytes());
    // SAFETY: `p.c()` is a NUL-terminated stack path; the mapping is one
    // page of a file we checked is at least that long, our descriptor is
    // closed once; the page is never unmapped, so the pointer published
    // stays valid for the life of the image.
    unsafe {
        let fd = libc::open(p.c(), libc::O_RDWR | libc::O_CLOEXEC);
        if fd < 0 {
            return;
        }
        let mut st: libc::stat = core::mem::zeroed();
        let big_enough = libc::fstat(fd, &mut st) == 0
            && st.st_size as usize >= lockscope_ring::session::WAKE_BYTES;
        let m = if big_enough {
            libc::mmap(
                core::ptr::null_mut(),
                lockscope_ring::session::WAKE_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        } else {
            libc::MAP_FAILED
        };
        libc::close(fd);
        if m != libc::MAP_FAILED {
            WAKE.store(m as *mut SessionWake, Ordering::Release);
        }
    }
}

/// Creates and maps `P<pid>-<gen>.proc` for the next free generation.
///
/// # Safety
/// Call it single-threaded (the library constructor, or the fork child's
/// handler) after CONFIG is written: it publishes HEADER and PID/GEN.
unsafe fn open_process(ppid: u32, parent_generation: u32) -> Result<(), i32> {
    // SAFETY: getpid/ftruncate/readlink/pwrite/close work on our own new
    // descriptor and on local buffers (readlink writes at most
    // `exe.len() - 1` bytes, leaving room for the NUL stored after it).
    // The mmap'd page is HEADER_BYTES of a file we just sized to at least
    // that, so `h` (page-aligned) and every field written lie inside it;
    // no one else reads it before `magic`, written last after a Release
    // fence, and only this single thread writes it here (contract).
    unsafe {
        let pid = libc::getpid() as u32;
        let mut gen = 0u32;
        let (fd, path) = loop {
            let mut p = PathBuf::in_session();
            p.push(b"P").num(pid).push(b"-").num(gen).push(b".proc");
            match create_excl(&mut p) {
                Ok(fd) => break (fd, p),
                Err(libc::EEXIST) if gen < 100_000 => gen += 1,
                Err(e) => return Err(e),
            }
        };
        let _ = path;
        if libc::ftruncate(fd, HEADER_BYTES as i64) != 0 {
            let e = errno();
            libc::close(fd);
            return Err(e);
        }
        // argv text: executable path, NUL, then /proc/self/cmdline (already
        // NUL-separated).
        let mut exe = [0u8; 4096];
        let n = libc::readlink(
            c"/proc/self/exe".as_ptr(),
            exe.as_mut_ptr() as *mut libc::c_char,
            exe.len() - 1,
        );
        let n = if n < 0 { 0 } else { n as usize };
        exe[n] = 0;
        let mut argv_bytes = 0u64;
        if libc::pwrite(
            fd,
            exe.as_ptr() as *const libc::c_void,
            n + 1,
            HEADER_BYTES as i64,
        ) == (n + 1) as isize
        {
            argv_bytes = (n + 1) as u64;
            argv_bytes += copy_file_into(
                b"/proc/self/cmdline\0",
                fd,
                HEADER_BYTES as i64 + argv_bytes as i64,
            );
        }
        let m = libc::mmap(
            core::ptr::null_mut(),
            HEADER_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        );
        libc::close(fd);
        if m == libc::MAP_FAILED {
            return Err(errno());
        }
        let h = m as *mut ProcessHeader;
        (*h).version = 1;
        (*h).pid = pid;
        (*h).ppid = ppid;
        (*h).exec_generation = gen;
        (*h).start_tsc = tsc::now();
        (*h).argv_bytes = argv_bytes.min(u32::MAX as u64) as u32;
        (*h).parent_generation = parent_generation;
        let before = tsc::pair();
        let (acq, rel) = measure_costs();
        let after = tsc::pair();
        // The rate over the ~100 us of measure_costs: accurate to a few
        // percent, plenty for a threshold.
        if after.mono_ns.saturating_sub(before.mono_ns) >= 20_000 {
            let per_ns = tsc::hz_between(before, after) / 1e9;
            let ticks = (SLOW_CALL_NS as f64 * per_ns) as u64;
            if ticks > 0 {
                SLOW_TICKS.store(ticks, Ordering::Relaxed);
                DELAY_GAP_TICKS.store((500_000.0 * per_ns) as u64, Ordering::Relaxed);
                DELAY_PERIOD_TICKS.store((2_000_000.0 * per_ns) as u64, Ordering::Relaxed);
            }
        }
        (*h).acquire_cost_ticks.store(acq, Ordering::Relaxed);
        (*h).release_cost_ticks.store(rel, Ordering::Relaxed);
        let namer = LOCK_NAMER.load(Ordering::Acquire);
        if namer != 0 {
            // SAFETY: only set_lock_namer stores here, from a fn pointer
            // of this type.
            let f: fn(&mut [u8; lockscope_ring::session::SWAPPED_LOCK_BYTES]) =
                core::mem::transmute::<usize, _>(namer);
            f(&mut (*h).swapped_lock);
        }
        core::sync::atomic::fence(Ordering::Release);
        core::ptr::write_volatile(&mut (*h).magic, PROC_MAGIC);
        PID.store(pid, Ordering::Relaxed);
        GEN.store(gen, Ordering::Relaxed);
        MAPS_K.store(0, Ordering::Relaxed);
        HEADER.store(h, Ordering::Release);
        Ok(())
    }
}

/// Creates ring `seq` of thread `tid` with `cap` slots and returns its
/// producer (cold path: once per thread, plus once per growth). When the
/// session file system is full (ENOSPC), the first ring falls back to
/// smaller sizes down to 8 KiB before the thread is given up on, and
/// every shortage is counted in the process header (the recorder names
/// the file system and the remedy).
///
/// # Safety
/// None beyond a recording process (CONFIG written by `init`).
pub(crate) unsafe fn create_ring(
    tid: u32,
    parent_tid: u32,
    seq: u32,
    cap: u64,
) -> Option<Producer> {
    // SAFETY: create_ring_once has no contract beyond ours; nanosleep
    // reads a valid local timespec and is given a null remainder pointer.
    unsafe {
        let min = if seq == 0 {
            ring::capacity_for_kib(8)
        } else {
            cap
        };
        let mut cap = cap;
        let mut counted = false;
        let mut waited = 0u32;
        loop {
            match create_ring_once(tid, parent_tid, seq, cap) {
                Ok(p) => return Some(p),
                Err(libc::ENOSPC) => {
                    if !counted {
                        count_space_exhausted();
                        counted = true;
                        // Rings kept for reuse hold space too: give them
                        // back (the recorder removes their files).
                        thread::release_pool();
                    }
                    if cap / 2 >= min {
                        cap /= 2;
                        continue;
                    }
                    // Even the smallest ring does not fit. A growth keeps its
                    // current ring (the thread waits for the recorder instead);
                    // a new thread waits for space: the recorder frees the
                    // rings of threads that have exited (tens of ms after
                    // their exit), which is where the space went when many
                    // short threads come and go. Up to ~2 s, then the thread
                    // is given up on (counted, reported).
                    // Once one thread waited in vain, the space is not
                    // coming back (someone else filled the file system):
                    // later threads give up at once instead of each
                    // waiting 2 s.
                    if seq > 0 || !config().wait_when_full || SPACE_GAVE_UP.load(Ordering::Relaxed)
                    {
                        return None;
                    }
                    if waited >= SPACE_WAITS {
                        SPACE_GAVE_UP.store(true, Ordering::Relaxed);
                        return None;
                    }
                    waited += 1;
                    let ts = libc::timespec {
                        tv_sec: 0,
                        tv_nsec: 1_000_000,
                    };
                    libc::nanosleep(&ts, core::ptr::null_mut());
                }
                Err(_) => return None,
            }
        }
    }
}

/// Set when a thread waited for space in vain (see `create_ring`).
static SPACE_GAVE_UP: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// 1 ms sleeps a new thread waits for space for its first ring.
const SPACE_WAITS: u32 = 2000;

///
/// # Safety
/// None beyond a recording process (CONFIG written by `init`): the path
/// is built on the stack, the file and mapping are new and ours.
unsafe fn create_ring_once(tid: u32, parent_tid: u32, seq: u32, cap: u64) -> Result<Producer, i32> {
    // SAFETY: `p.c()` is a NUL-terminated stack path; fallocate/ftruncate/
    // close act on the descriptor we just created; the mapping is `len`
    // bytes of that file, sized to `len` first (fallocate or ftruncate),
    // page-aligned by mmap and zero-filled (a new file), which is what
    // `prefault` and `Producer::init` require; on failure it is unmapped
    // once and never used. `ring_identity` only reads our thread's name.
    unsafe {
        let len = ring::file_bytes(cap);
        let mut p = PathBuf::in_session();
        p.push(b"T")
            .num(pid())
            .push(b"-")
            .num(generation())
            .push(b"-")
            .num(tid);
        if seq > 0 {
            p.push(b"-").num(seq);
        }
        let stem = p.len;
        p.push(b".ring");
        let mut fd = create_excl(&mut p);
        // The kernel reuses tids (pid_max is often 32768): an earlier
        // thread with this tid may still own `T..-<tid>.ring`, its ring
        // recycled by later threads. A first ring then takes an
        // alternative name the recorder also lists (`.<k>.ring`). (A
        // growth that collides just fails: the thread waits instead.)
        let mut k = 1;
        while seq == 0 && fd == Err(libc::EEXIST) && k <= 64 {
            p.len = stem;
            p.push(b".").num(k).push(b".ring");
            fd = create_excl(&mut p);
            k += 1;
        }
        let fd = fd?;
        // fallocate first: on a full tmpfs it fails cleanly, where touching a
        // page of a sparse shared mapping would raise SIGBUS.
        let fa = libc::fallocate(fd, 0, 0, len as i64);
        let fa_err = if fa != 0 { errno() } else { 0 };
        if fa != 0 && fa_err != libc::EOPNOTSUPP {
            libc::close(fd);
            libc::unlink(p.c());
            return Err(fa_err);
        }
        if fa != 0 && libc::ftruncate(fd, len as i64) != 0 {
            let e = errno();
            libc::close(fd);
            libc::unlink(p.c());
            return Err(e);
        }
        let m = libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        );
        libc::close(fd);
        if m == libc::MAP_FAILED {
            let e = errno();
            libc::unlink(p.c());
            return Err(e);
        }
        prefault(m as *mut u8, len);
        let id = ring_identity(tid, parent_tid);
        let Some(mut prod) = Producer::init(m as *mut u8, len, &id) else {
            libc::munmap(m, len);
            libc::unlink(p.c());
            return Err(libc::EINVAL);
        };
        prod.set_wait_when_full(config().wait_when_full);
        // The page is mapped for the life of the image (never unmapped).
        prod.set_wake(session_wake());
        Ok(prod)
    }
}

/// Faults every page of a fresh mapping in now, so that the event path
/// never takes a page fault (3-6 us each on this kind of VM).
///
/// # Safety
/// `[p, p + len)` must be a live, writable mapping of a file at least
/// `len` bytes long whose content nobody needs yet (zeroes are written).
unsafe fn prefault(p: *mut u8, len: usize) {
    // SAFETY: madvise only touches the caller's mapping; the fallback
    // writes a zero byte at each page start `p + off`, `off < len`, inside
    // that mapping, which is file-backed up to `len` (no SIGBUS) and not
    // yet shared with a consumer (contract).
    unsafe {
        // MADV_POPULATE_WRITE (Linux 5.14); older kernels say EINVAL and we
        // touch each page instead (the file was fallocated, so no SIGBUS).
        const MADV_POPULATE_WRITE: i32 = 23;
        if libc::madvise(p as *mut libc::c_void, len, MADV_POPULATE_WRITE) == 0 {
            return;
        }
        let mut off = 0;
        while off < len {
            core::ptr::write_volatile(p.add(off), 0);
            off += 4096;
        }
    }
}

/// Median recorder cost per event in ticks: (acquire, release). Times
/// batches of what a hook adds around the real call (TLS state, guard
/// flag, a TSC read, a 32-byte event into a ring; the release also reads
/// the lock word) into a scratch ring in anonymous memory.
fn measure_costs() -> (u64, u64) {
    const BATCH: usize = 32;
    const BATCHES: usize = 63;
    let cap = 4096u64;
    let len = ring::file_bytes(cap);
    let Some(m) = ring::scratch_map(len) else {
        return (0, 0);
    };
    // SAFETY: `m` is our own anonymous mapping of `len` bytes, unmapped
    // below.
    unsafe {
        let mut res = [0u64; 2];
        let word = core::sync::atomic::AtomicU32::new(0);
        for (kind, out) in res.iter_mut().enumerate() {
            // A fresh ring per kind: 63*32 = 2016 events fit in 4096 slots.
            core::ptr::write_bytes(m, 0, HEADER_BYTES);
            let Some(mut prod) = Producer::init(m, len, &ring::RingIdentity::default()) else {
                break;
            };
            let mut samples = [0u64; BATCHES];
            for s in samples.iter_mut() {
                let t0 = tsc::now();
                for i in 0..BATCH {
                    let busy = core::hint::black_box(thread::locks_held());
                    let t = tsc::now();
                    let waiters = kind == 1 && word.load(Ordering::Relaxed) > 1;
                    let head = lockscope_ring::raw::Head {
                        tsc: t,
                        addr: core::hint::black_box(&word) as *const _ as u64,
                        site: i as u64,
                        op: 1 + 3 * kind as u8,
                        flags: waiters as u8,
                        aux: busy,
                        ..Default::default()
                    };
                    core::hint::black_box(prod.push(head, None, &[]));
                }
                *s = tsc::now().wrapping_sub(t0) / BATCH as u64;
            }
            samples.sort_unstable();
            *out = samples[BATCHES / 2];
        }
        libc::munmap(m.cast(), len);
        (res[0], res[1])
    }
}

/// Reads `KEY=value` from the environment into the saved slot `i`.
///
/// # Safety
/// Single-threaded (constructor): `getenv` must not race with `setenv`.
unsafe fn save_env(c: &mut Config, i: usize) {
    // SAFETY: `k` is a local, NUL-terminated copy of the key (keys are
    // shorter than 32 bytes); getenv returns null or a NUL-terminated
    // string in the environment, which no thread changes meanwhile
    // (contract), read once by CStr::from_ptr and copied.
    unsafe {
        let key = ENV_KEYS[i];
        let mut k = [0u8; 32];
        k[..key.len()].copy_from_slice(key);
        let v = libc::getenv(k.as_ptr() as *const libc::c_char);
        c.env_len[i] = 0;
        if v.is_null() {
            return;
        }
        let v = core::ffi::CStr::from_ptr(v).to_bytes();
        if key.len() + 1 + v.len() >= MAX_ENV {
            return;
        }
        c.env[i][..key.len()].copy_from_slice(key);
        c.env[i][key.len()] = b'=';
        c.env[i][key.len() + 1..key.len() + 1 + v.len()].copy_from_slice(v);
        c.env_len[i] = key.len() + 1 + v.len();
    }
}

/// Starts recording in this process image if `LOCKSCOPE_SESSION` is set.
/// Idempotent: the preload constructor and the detailed runtime's
/// `__tsan_init` may both call it; only the first call does anything.
/// Returns true if the process is recording afterwards.
pub fn init() -> bool {
    if INIT
        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return thread::is_recording();
    }
    // SAFETY: constructor context, single-threaded; CONFIG is written only
    // here, before RECORDING is published.
    let ok = unsafe { init_inner() };
    INIT.store(2, Ordering::Release);
    ok
}

///
/// # Safety
/// Call it once, single-threaded (the library constructor or
/// `__tsan_init`, guarded by INIT), before RECORDING is switched on.
unsafe fn init_inner() -> bool {
    // SAFETY: `&mut *CONFIG.0.get()` is the only reference to CONFIG:
    // nothing reads it before RECORDING is published (Release) at the end,
    // and this runs once (contract). getenv results are NUL-terminated
    // strings of an environment no other thread changes now, read by
    // CStr::from_ptr. gettid/getpid/pthread_self/getppid have no
    // preconditions; thread_stack_top allocates, which is fine here (no
    // malloc lock held in a constructor); open_process's contract is ours;
    // pthread_atfork and on_exit get `extern "C"` functions of the right
    // signature that live as long as the library (never unloaded while
    // recording: it is preloaded).
    unsafe {
        let c = &mut *CONFIG.0.get();
        let dir = libc::getenv(c"LOCKSCOPE_SESSION".as_ptr());
        if dir.is_null() {
            return false;
        }
        let dir = core::ffi::CStr::from_ptr(dir).to_bytes();
        if dir.is_empty() {
            return false;
        }
        if dir.len() > MAX_DIR {
            complain(b"session directory path too long; not recording\n");
            return false;
        }
        c.dir[..dir.len()].copy_from_slice(dir);
        c.dir_len = dir.len();
        for i in 0..ENV_KEYS.len() {
            save_env(c, i);
        }
        // The clock the recorder chose (and converts with): the same here.
        let clk = libc::getenv(c"LOCKSCOPE_CLOCK".as_ptr());
        lockscope_ring::tsc::use_monotonic(
            !clk.is_null() && core::ffi::CStr::from_ptr(clk).to_bytes() == b"monotonic",
        );
        let kb = libc::getenv(c"LOCKSCOPE_RING_KB".as_ptr());
        if !kb.is_null() {
            let s = core::ffi::CStr::from_ptr(kb).to_bytes();
            if let Some(v) = core::str::from_utf8(s)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
            {
                c.ring_kb = v.clamp(4, 1 << 20);
            }
        }
        c.ring_max_kb = DEFAULT_RING_MAX_KB;
        let kb = libc::getenv(c"LOCKSCOPE_RING_MAX_KB".as_ptr());
        if !kb.is_null() {
            let s = core::ffi::CStr::from_ptr(kb).to_bytes();
            if let Some(v) = core::str::from_utf8(s)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
            {
                c.ring_max_kb = v.min(1 << 22);
            }
        }
        // The first ring is never larger than the maximum (0 or a smaller
        // maximum: the rings never grow).
        c.ring_max_kb = c.ring_max_kb.max(c.ring_kb);
        let of = libc::getenv(c"LOCKSCOPE_ON_FULL".as_ptr());
        // Lossless by default: only an explicit `drop` lets a full
        // ring drop events instead of waiting for the recorder.
        c.wait_when_full = of.is_null() || core::ffi::CStr::from_ptr(of).to_bytes() != b"drop";
        let st = libc::getenv(c"LOCKSCOPE_STACKS".as_ptr());
        if !st.is_null() {
            let m = StacksMode::parse(core::ffi::CStr::from_ptr(st).to_bytes());
            STACKS.store(m as u8, Ordering::Relaxed);
        }
        // The objects loaded now, registered for CFI unwinding while
        // allocating is safe (a constructor), read in place: no copy.
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        if stacks_mode() != StacksMode::None {
            thread::quietly(crate::unwind::prepare);
        }
        // Only on the main thread: a runtime may initialise us lazily from
        // another thread, whose stack must not bound the main thread's walks.
        if libc::gettid() == libc::getpid() {
            MAIN_STACK_HI.store(
                thread::quietly(|| thread::thread_stack_top()),
                Ordering::Relaxed,
            );
            MAIN_PTHREAD.store(libc::pthread_self() as u64, Ordering::Relaxed);
        }
        if let Err(e) = open_process(libc::getppid() as u32, 0) {
            complain_errno(b"cannot create the process file; not recording", e);
            return false;
        }
        map_wake();
        snapshot_maps();
        libc::pthread_atfork(None, None, Some(fork_child_handler));
        on_exit(exit_handler, core::ptr::null_mut());
        RECORDING.store(REC_ON, Ordering::Release);
        let probe = COST_PROBE.load(Ordering::Acquire);
        if probe != 0 {
            // SAFETY: only set_cost_probe stores here, from a fn() pointer.
            let f: fn() = core::mem::transmute::<usize, fn()>(probe);
            f();
        }
        thread_start_event(0);
        true
    }
}

extern "C" {
    fn on_exit(
        f: extern "C" fn(status: libc::c_int, arg: *mut libc::c_void),
        arg: *mut libc::c_void,
    ) -> libc::c_int;
}

/// First event of the calling thread (the main thread, or the fork child).
fn thread_start_event(parent_tid: u32) {
    thread::set_parent_tid(parent_tid);
    if let Some(mut g) = thread::recorder() {
        g.event(OP_THREAD_START, 0, tsc::now(), 0, 0, 0);
    }
}

extern "C" fn fork_child_handler() {
    // fork() returns 0 in the child with errno as it was: keep it so.
    // SAFETY: errno's location is valid for the calling thread.
    let saved = unsafe { *libc::__errno_location() };
    after_fork_child();
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved };
}

/// The fork child's re-initialisation (atfork child handler; also callable
/// by a runtime that forks by other means). The child keeps recording into
/// its own `P<childpid>-0.proc` and rings; the inherited ring of the
/// forking thread and the parent's process header are unmapped.
pub fn after_fork_child() {
    if RECORDING.load(Ordering::Acquire) != REC_ON {
        return;
    }
    RECORDING.store(REC_OFF, Ordering::Relaxed);
    // SAFETY: single-threaded fork child; the mappings are the parent's
    // and nobody else in this process uses them.
    unsafe {
        let ring = thread::ring_header_addr();
        let (old_tid, stack_hi) = thread::reset_after_fork();
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        crate::unwind::after_fork_child();
        // The forking thread is the child's main thread (tid == pid). If it
        // was not the parent's main thread, its stack is a thread stack:
        // its bounds, not the parent main thread's, limit call-path walks
        // (0 if unknown: no walks).
        if libc::pthread_self() as u64 != MAIN_PTHREAD.load(Ordering::Relaxed) {
            MAIN_STACK_HI.store(stack_hi, Ordering::Relaxed);
            MAIN_PTHREAD.store(libc::pthread_self() as u64, Ordering::Relaxed);
        }
        if ring != 0 {
            // The whole ring mapping starts at its header.
            let len =
                ring::file_bytes((*(ring as *const lockscope_ring::session::RingHeader)).capacity);
            libc::munmap(ring as *mut libc::c_void, len);
        }
        thread::forget_retired_after_fork();
        let old = HEADER.swap(core::ptr::null_mut(), Ordering::AcqRel);
        // The parent's hook costs (measured by the cost probe at start-up)
        // hold for the child too: same library, same machine, and no
        // measuring in every child of a program that forks a lot.
        let mut costs = (0, 0);
        if !old.is_null() {
            costs = (
                (*old).acquire_cost_ticks.load(Ordering::Relaxed),
                (*old).release_cost_ticks.load(Ordering::Relaxed),
            );
            libc::munmap(old as *mut libc::c_void, HEADER_BYTES);
        }
        let (ppid, pgen) = (pid(), generation());
        if let Err(e) = open_process(ppid, pgen) {
            complain_errno(
                b"fork child: cannot create its process file; not recording",
                e,
            );
            return;
        }
        if costs.0 > 0 || costs.1 > 0 {
            set_hook_costs(costs.0, costs.1);
        }
        snapshot_maps();
        RECORDING.store(REC_ON, Ordering::Release);
        thread_start_event(old_tid);
    }
}

extern "C" fn exit_handler(status: libc::c_int, _arg: *mut libc::c_void) {
    // A vfork child exiting through exit() would share our memory: only
    // the process that owns the header records its exit.
    // SAFETY: getpid has no preconditions.
    if RECORDING.load(Ordering::Acquire) != REC_ON || unsafe { libc::getpid() } as u32 != pid() {
        return;
    }
    snapshot_maps();
    let now = match thread::recorder() {
        Some(mut g) => {
            let now = g.exit_stamp();
            g.event(OP_THREAD_EXIT, 0, now, 0, 0, 0);
            g.stamp_exit(now);
            now
        }
        None => tsc::now(),
    };
    if let Some(h) = header() {
        h.exit_code.store(status as u32, Ordering::Relaxed);
        h.end_tsc.store(now, Ordering::Release);
    }
}

/// One line on stderr: the recorder's failures are loud.
fn complain(msg: &[u8]) {
    // SAFETY: write(2) on stderr.
    unsafe {
        libc::write(2, b"lockscope: ".as_ptr() as *const libc::c_void, 11);
        libc::write(2, msg.as_ptr() as *const libc::c_void, msg.len());
    }
}

fn complain_errno(msg: &[u8], e: i32) {
    let mut p = PathBuf {
        buf: [0; MAX_DIR + 64],
        len: 0,
    };
    p.push(msg).push(b" (errno ").num(e as u32).push(b")\n");
    complain(&p.buf[..p.len]);
}
