//! Per-thread recorder state and the guarded emit API.
//!
//! Every thread of the recorded program has one `ThreadState` in
//! initial-exec TLS: its ring [`Producer`], a re-entrancy flag, the number
//! of locks it holds, and the top of its stack (for frame-pointer walks).
//! The hooks of the preload library and the detailed (TSan-ABI) runtime
//! reach it only through [`recorder`], which returns a [`Guard`]:
//!
//! ```ignore
//! if let Some(mut g) = lockscope_capture::thread::recorder() {
//!     g.event(op, flags, tsc::now(), addr, site, 0);
//! } // None: recording is off, disabled, or this thread is already inside
//!   // the recorder (a hook reached from a hook): just forward.
//! ```
//!
//! # Why raw `.tbss` and not `thread_local!`
//! In a cdylib, `thread_local!` compiles to a `__tls_get_addr` call
//! (~2.3 ns, twice per lock/unlock pair), and a `thread_local!` with a
//! destructor breaks programs whose own key destructors lock at thread exit
//! (measured on the development VM). Stable Rust cannot ask for the initial-exec model,
//! so on x86-64 the state is a zero-filled `.tbss` symbol declared with
//! `global_asm!` and addressed with the initial-exec sequence
//! (`mov %fs:0` + `@gottpoff`): one load and one add, no call, no lazy
//! initialisation, no destructor. The alternative, a C file built by the
//! `cc` crate with `tls_model("initial-exec")`, would cost a
//! non-inlinable call per access. An all-zero `ThreadState` is the valid
//! initial state, which is what `.tbss` gives every new thread.
//! On other targets a `const`-initialised `thread_local!` (no `Drop`) is
//! used instead.

use core::sync::atomic::{compiler_fence, AtomicU8, AtomicUsize, Ordering};

use crate::process;
use lockscope_ring::raw::{Head, MAX_FRAMES};
use lockscope_ring::ring::Producer;
use lockscope_ring::session::{RingHeader, POOL_OPEN, POOL_POOLED};

/// Ring state of a thread: no ring yet (created on the first event).
const RING_NONE: u8 = 0;
/// The thread has a ring.
const RING_OK: u8 = 1;
/// Creating the ring failed: events are counted as lost.
const RING_FAILED: u8 = 2;

/// Recording state of the process: off (no session, or not yet
/// initialised, or between fork and the child's re-initialisation).
pub(crate) const REC_OFF: u8 = 0;
/// Recording.
pub(crate) const REC_ON: u8 = 1;
/// Disabled for good after a caught panic.
pub(crate) const REC_DISABLED: u8 = 2;

/// The process-wide recording switch, checked first by every hook.
pub(crate) static RECORDING: AtomicU8 = AtomicU8::new(REC_OFF);

/// One thread's recorder state. All-zero is the valid initial value.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct ThreadState {
    pub(crate) prod: Producer,
    /// 1 while the thread is inside the recorder (a [`Guard`] is alive).
    busy: u8,
    /// RING_NONE / RING_OK / RING_FAILED.
    ring: u8,
    /// OS thread id, known once the ring is created.
    pub(crate) tid: u32,
    /// Locks currently held (acquisitions minus releases, saturating).
    locks_held: u32,
    /// tid of the creating thread, set by the thread trampoline.
    parent_tid: u32,
    /// Highest address of the thread's stack (0: unknown, no walks).
    stack_hi: u64,
    /// Sequence number of the current ring (0: the first one).
    seq: u32,
    /// 1 once growing the ring failed or reached the maximum: no more
    /// attempts (the thread waits for the recorder instead).
    no_grow: u8,
    /// Clock of the thread's last lock-call start ([`Guard::sample_run_delay`]).
    last_t: u64,
    /// Clock of the thread's last run-queue delay sample.
    cpu_t: u64,
    /// Clock read just before that sample's statistics were read: the
    /// moment they describe, for [`Guard::preempted_in_call`] (`cpu_t`,
    /// read after, is where the replay puts the sample; a preemption
    /// between the two is in the statistics but not before `cpu_t`).
    stat_t: u64,
    /// Clock units this thread has spent waiting for the recorder to make
    /// room in its ring (back-pressure), all rings together.
    waited: u64,
    /// The kernel's run-queue delay of the thread at its last sample, ns
    /// (without `waited`; see [`Guard::preempted_in_call`]).
    last_rq: u64,
    /// The thread's time on a CPU at its last sample, ns (the same).
    last_oncpu: u64,
}

impl ThreadState {
    const EMPTY: ThreadState = ThreadState {
        prod: Producer::EMPTY,
        busy: 0,
        ring: RING_NONE,
        tid: 0,
        locks_held: 0,
        parent_tid: 0,
        stack_hi: 0,
        seq: 0,
        no_grow: 0,
        last_t: 0,
        cpu_t: 0,
        stat_t: 0,
        waited: 0,
        last_rq: 0,
        last_oncpu: 0,
    };
}

/// Bytes reserved in `.tbss` for the state (checked at compile time).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
const TLS_BYTES: usize = 192;

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
const _: () = assert!(core::mem::size_of::<ThreadState>() <= TLS_BYTES);

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
core::arch::global_asm!(
    ".pushsection .tbss.lockscope_thread_state,\"awT\",@nobits",
    ".p2align 6",
    ".globl lockscope_thread_state",
    ".hidden lockscope_thread_state",
    ".type lockscope_thread_state,@object",
    ".size lockscope_thread_state,{size}",
    "lockscope_thread_state:",
    ".zero {size}",
    ".popsection",
    size = const TLS_BYTES,
);

/// The calling thread's state.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[inline(always)]
fn state() -> *mut ThreadState {
    let p: *mut ThreadState;
    // SAFETY: the initial-exec TLS access sequence for the symbol above;
    // the result is this thread's copy, valid for the thread's lifetime.
    // `pure, readonly`: the address never changes within a thread, so the
    // compiler may reuse it.
    unsafe {
        core::arch::asm!(
            "mov {p}, qword ptr fs:[0]",
            "add {p}, qword ptr [rip + lockscope_thread_state@GOTTPOFF]",
            p = out(reg) p,
            options(pure, readonly, nostack),
        );
    }
    p
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
std::thread_local! {
    static STATE: core::cell::UnsafeCell<ThreadState> =
        const { core::cell::UnsafeCell::new(ThreadState::EMPTY) };
}

/// The calling thread's state.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
#[inline(always)]
fn state() -> *mut ThreadState {
    STATE.with(|s| s.get())
}

/// The calling thread's recorder, or `None` when the hook must just
/// forward: recording is off (no session, not initialised yet, disabled
/// after a panic) or the thread is already inside the recorder.
///
/// The first call on a thread creates its ring (open, ftruncate, mmap,
/// pre-fault): the only time the event path makes system calls. If that
/// fails the guard is still returned and its events are counted in
/// `ProcessHeader::lost_no_ring`.
#[inline(always)]
pub fn recorder() -> Option<Guard> {
    if RECORDING.load(Ordering::Relaxed) != REC_ON {
        return None;
    }
    let st = state();
    // SAFETY: `st` is this thread's state; only this thread (and signal
    // handlers running on it, which see `busy`) touches it.
    unsafe {
        if (*st).busy != 0 {
            // A hook reached while this thread is inside the recorder: a
            // signal handler that interrupted the recording code (the
            // guard is released around the real blocking calls, see
            // Guard::unguarded). Not recorded, but counted: never a
            // silent loss. Unless the recorder itself made the call
            // ([`quietly`]): not the program's, nothing lost.
            if (*st).busy != BUSY_QUIET {
                process::count_nested_skipped();
            }
            return None;
        }
        (*st).busy = 1;
        // A signal handler on this thread must see `busy` before we touch
        // the ring.
        compiler_fence(Ordering::SeqCst);
        if (*st).ring == RING_NONE {
            attach(st);
        }
        // Room for what follows, before the hooked call and only outside
        // critical sections: grow the ring or wait (see
        // Producer::headroom_slow).
        if (*st).prod.low_on_room() {
            headroom(&mut *st);
        }
    }
    Some(Guard { st })
}

/// The slow half of [`Guard::sample_run_delay`].
#[cold]
#[inline(never)]
fn sample_run_delay_now(g: &mut Guard) {
    // The time the thread could not run for reasons that are not the
    // program's: preempted (the kernel's run-queue delay; 0 where the
    // kernel does not keep it), plus waiting for the recorder to make
    // room in its ring. Without the second, the replay kept a detailed
    // recording's back-pressure waits (255 ms in one 0.8 s run of
    // `ulcp_table`) as the program's work.
    let before = lockscope_ring::tsc::now();
    emit_run_delay(g, schedstat().unwrap_or_default(), before);
}

/// Records a run-queue delay sample from `stat` (the kernel's figures,
/// read just after the clock said `before`: see [`schedstat`]) plus the
/// thread's waits for the recorder, stamped now.
fn emit_run_delay(g: &mut Guard, stat: Schedstat, before: u64) {
    let waited = process::ticks_to_ns(g.st().waited);
    g.st().stat_t = before;
    let rq = stat.run_delay;
    g.st().last_rq = rq;
    g.st().last_oncpu = stat.on_cpu;
    let ns = rq.saturating_add(waited);
    // Stamped after the system calls, not at `t`: returning from one is
    // where the kernel switches to another runnable thread, and a
    // preemption there must fall before the sample (in the segment it
    // measures), not after it (4 of 38 preemptions of the `preempted`
    // fixture were missed that way).
    let t = lockscope_ring::tsc::now();
    g.st().cpu_t = t;
    // A sample also restarts the gap that makes a creation or a join take
    // one (`Guard::boundary_stamp`).
    g.st().last_t = t;
    let head = Head {
        tsc: t,
        op: lockscope_ring::raw::OP_RUN_DELAY,
        ..Head::default()
    };
    g.emit(head, Some((ns, 0)), &[]);
}

/// The calling thread's scheduler statistics so far (ns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Schedstat {
    /// Time on a CPU.
    on_cpu: u64,
    /// Time runnable but waiting for a CPU (the run-queue delay).
    run_delay: u64,
}

/// The calling thread's run-queue delay so far, ns (see [`schedstat`]).
fn run_delay_ns() -> Option<u64> {
    schedstat().map(|s| s.run_delay)
}

/// The first two fields of `/proc/thread-self/schedstat`: time on a CPU
/// and time runnable but waiting for one. `None` when the kernel has no
/// such file (built without scheduler statistics) or it cannot be read.
/// Why the run-queue delay and not the thread's CPU time alone
/// (`CLOCK_THREAD_CPUTIME_ID`, one vDSO-less system call): wall minus CPU
/// time also counts the time a thread sleeps in a call lockscope does not
/// hook (disk I/O, `poll`), which is not preemption. Cost: open, read,
/// close, ~1.5-10 us in a VM, at most once per 500 us of the thread's lock
/// calls (under 2 %) and typically once per 2 ms. All three calls are
/// async-signal-safe; errno is kept.
fn schedstat() -> Option<Schedstat> {
    let mut buf = [0u8; 128];
    // SAFETY: a NUL-terminated path; `buf` is ours and `read` writes at
    // most its length; the descriptor is closed before returning; errno's
    // location is this thread's.
    let n = unsafe {
        let saved = *libc::__errno_location();
        let fd = libc::open(
            c"/proc/thread-self/schedstat".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        let n = if fd >= 0 {
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            libc::close(fd);
            n
        } else {
            -1
        };
        *libc::__errno_location() = saved;
        n
    };
    if n <= 0 {
        return None;
    }
    parse_schedstat(&buf[..n as usize])
}

/// The first two numbers of a `schedstat` line (`run_ns wait_ns slices`).
fn parse_schedstat(text: &[u8]) -> Option<Schedstat> {
    let mut fields = text
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty())
        .map(|f| {
            if f.len() > 20 || !f.iter().all(u8::is_ascii_digit) {
                return None;
            }
            f.iter().try_fold(0u64, |acc, &d| {
                acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
            })
        });
    let on_cpu = fields.next()??;
    let run_delay = fields.next()??;
    Some(Schedstat { on_cpu, run_delay })
}

/// `ThreadState::busy` while the recorder makes a call of its own into
/// the C library ([`quietly`]).
const BUSY_QUIET: u8 = 2;

/// Runs `f`, a call the recorder itself makes into the C library, with
/// the thread's hooks silent: what `f` does is the recorder's, not the
/// program's, so it is neither recorded nor counted as skipped. Why:
/// `pthread_getattr_np` (the thread's stack bounds, whether it is
/// joinable) allocates, and the detailed runtime records allocations:
/// inside a guard they were counted as the program's events lost (12 per
/// run of a 2-thread program, "the trace is incomplete"), outside one they
/// would be recorded as the program's allocations. `busy` is restored
/// afterwards, so this works inside a guard too.
pub fn quietly<R>(f: impl FnOnce() -> R) -> R {
    let st = state();
    // SAFETY: this thread's state; `busy` is saved and put back around
    // `f`, which runs on this thread.
    unsafe {
        let before = (*st).busy;
        (*st).busy = BUSY_QUIET;
        compiler_fence(Ordering::SeqCst);
        let r = f();
        compiler_fence(Ordering::SeqCst);
        (*st).busy = before;
        r
    }
}

/// Runs `f` with the calling thread's events going to a private scratch
/// ring that is thrown away afterwards, and returns what `f` returned;
/// `None` (and `f` not run) when the thread is inside the recorder or the
/// scratch memory cannot be had. For measuring the hooks' own cost at
/// start-up (the preload library's constructor) without the measurement
/// reaching the trace.
///
/// The scratch ring (132 KiB, 4,096 slots, pre-faulted: 33 pages, tens
/// of microseconds, paid by every recorded process at start-up, so kept
/// small; 2 MiB cost ~0.5 ms, a third of a 1.4 ms program) never waits
/// when full and is sized so that `f` never needs to grow it: growing
/// would create a ring file in the session. `f` must stay under 3,072
/// slots (the ring's reserve is a quarter) and must not create threads.
/// The thread's real ring, its held-lock count and its CPU-sample clocks
/// are restored.
pub fn with_scratch_ring<R>(f: impl FnOnce() -> R) -> Option<R> {
    const CAP: u64 = 1 << 12;
    let len = lockscope_ring::ring::file_bytes(CAP);
    let st = state();
    // SAFETY: `st` is this thread's state, not in use (busy is 0, checked
    // first; nothing else runs on this thread meanwhile except signal
    // handlers, whose hooks see the scratch ring like any ring). The
    // mapping is private and anonymous, sized by file_bytes for CAP
    // slots, zeroed by the kernel as Producer::init requires, and
    // unmapped only after the saved producer is back in place.
    unsafe {
        if (*st).busy != 0 {
            return None;
        }
        let m = lockscope_ring::ring::scratch_map(len)?;
        let Some(mut scratch) =
            Producer::init(m, len, &lockscope_ring::ring::RingIdentity::default())
        else {
            libc::munmap(m.cast(), len);
            return None;
        };
        scratch.set_wait_when_full(false);
        let saved = core::ptr::read(&(*st).prod);
        let (ring, held, no_grow) = ((*st).ring, (*st).locks_held, (*st).no_grow);
        let (last_t, cpu_t, stat_t) = ((*st).last_t, (*st).cpu_t, (*st).stat_t);
        core::ptr::write(&mut (*st).prod, scratch);
        (*st).ring = RING_OK;
        (*st).no_grow = 1;
        compiler_fence(Ordering::SeqCst);
        let r = f();
        compiler_fence(Ordering::SeqCst);
        core::ptr::write(&mut (*st).prod, saved);
        (*st).ring = ring;
        (*st).locks_held = held;
        (*st).no_grow = no_grow;
        (*st).last_t = last_t;
        (*st).cpu_t = cpu_t;
        (*st).stat_t = stat_t;
        compiler_fence(Ordering::SeqCst);
        libc::munmap(m.cast(), len);
        Some(r)
    }
}

/// Locks the calling thread holds right now (0 when not recording). Cheap:
/// one TLS load, no guard; the detailed runtime checks it before
/// recording a memory access.
#[inline(always)]
pub fn locks_held() -> u32 {
    // SAFETY: this thread's state.
    unsafe { (*state()).locks_held }
}

/// True while the process is recording (session set, initialised, not
/// disabled).
#[inline]
pub fn is_recording() -> bool {
    RECORDING.load(Ordering::Relaxed) == REC_ON
}

/// Records which thread created the calling one; call it first thing in a
/// new thread, before [`recorder`] creates the ring (it goes in the ring
/// header's `parent_tid`).
pub fn set_parent_tid(tid: u32) {
    // SAFETY: this thread's state.
    unsafe { (*state()).parent_tid = tid };
}

/// Call first thing in a new thread (the start trampoline), outside any
/// lock: records the creating thread's tid and reads this thread's stack
/// bounds (pthread_getattr_np, which allocates: done here, once, at a safe
/// point, rather than on the thread's first event).
pub fn thread_started(parent_tid: u32) {
    // SAFETY: this thread's state.
    unsafe {
        let st = state();
        (*st).parent_tid = parent_tid;
        (*st).stack_hi = quietly(|| thread_stack_top());
    }
    // One more unwind cache per thread, up to the pool's size: allocated
    // here, at a safe point, never inside a hook. Not where a path
    // provider (the detailed runtime's shadow stack) replaces unwinding.
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    if process::stacks_mode() != StacksMode::None && PATH_PROVIDER.load(Ordering::Relaxed) == 0 {
        quietly(crate::unwind::add_cache);
    }
}

/// A supplier of call paths: fills `out` with return addresses, innermost
/// first, and returns how many it wrote. It runs inside the recorder
/// (re-entrant hooks forward), must not allocate or block.
pub type PathProvider = fn(out: &mut [u64]) -> usize;

static PATH_PROVIDER: AtomicUsize = AtomicUsize::new(0);

/// Installs (or with `None` removes) the call-path provider used by
/// [`Guard::call_path`] instead of walking frame pointers. The detailed
/// runtime installs one that copies its shadow stack.
pub fn set_path_provider(p: Option<PathProvider>) {
    PATH_PROVIDER.store(p.map_or(0, |f| f as usize), Ordering::Release);
}

/// Which events carry a call path (`LOCKSCOPE_STACKS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum StacksMode {
    /// Only acquisitions and waits that blocked (the default).
    Contended = 0,
    /// Every event with a call site.
    All = 1,
    /// None: the call site only.
    None = 2,
}

impl StacksMode {
    /// Parses the environment value; unknown text gives the default.
    pub fn parse(s: &[u8]) -> StacksMode {
        match s {
            b"all" => StacksMode::All,
            b"none" => StacksMode::None,
            _ => StacksMode::Contended,
        }
    }
}

/// The current [`StacksMode`].
#[inline(always)]
pub fn stacks_mode() -> StacksMode {
    process::stacks_mode()
}

/// Proof that the calling thread is inside the recorder. Not `Send`: it
/// points to this thread's state. Dropping it leaves the recorder.
pub struct Guard {
    st: *mut ThreadState,
}

impl Drop for Guard {
    #[inline(always)]
    fn drop(&mut self) {
        compiler_fence(Ordering::SeqCst);
        // SAFETY: this thread's state.
        unsafe { (*self.st).busy = 0 };
    }
}

impl Guard {
    #[inline(always)]
    fn st(&mut self) -> &mut ThreadState {
        // SAFETY: this thread's state; the guard is the only live
        // reference while `busy` is set.
        unsafe { &mut *self.st }
    }

    /// Appends an event: the head (its `nframes`/`xflags` are set from
    /// `args`/`frames`), an optional (arg, arg2) extension slot, and up to
    /// [`MAX_FRAMES`] frames. Returns false if it was dropped (ring full:
    /// counted in the ring; no ring: counted in the process header).
    #[inline(always)]
    pub fn emit(&mut self, head: Head, args: Option<(u64, u64)>, frames: &[u64]) -> bool {
        let st = self.st();
        // A deferred event ([`Guard::defer`]) came first: it goes first.
        publish_deferred(st);
        if st.prod.try_push(head, args, frames) {
            return true;
        }
        emit_full(st, head, args, frames)
    }

    /// [`Guard::emit`] for a one-slot event (no args, no call path) that
    /// opens a critical section (an acquisition): it is held
    /// back in the ring header and published with the thread's next event,
    /// normally the release, which is recorded after the real unlock (see
    /// `Producer::defer` for why and what it measured). The thread's order
    /// is kept: every emit publishes a deferred event first. A thread
    /// whose process ends before it records again leaves the event in its
    /// ring header, and the recorder publishes it then
    /// (`Consumer::salvage_deferred`): an acquisition whose holder blocks
    /// in a call lockscope does not hook until the program is killed is
    /// still in the trace.
    #[inline(always)]
    pub fn defer(&mut self, head: Head) -> bool {
        let st = self.st();
        publish_deferred(st);
        if st.prod.defer(head) {
            return true;
        }
        self.emit(head, None, &[])
    }

    /// The compact form of [`Guard::emit`]: one 32-byte slot, `arg` in
    /// the head's 32-bit `aux`.
    #[inline(always)]
    pub fn event(&mut self, op: u8, flags: u8, tsc: u64, addr: u64, site: u64, arg: u32) -> bool {
        self.emit(
            Head {
                tsc,
                addr,
                site,
                op,
                flags,
                nframes: 0,
                xflags: 0,
                aux: arg,
            },
            None,
            &[],
        )
    }

    /// Call at the start of a lock call, with its first stamp `t`: when
    /// the thread made no lock call for a while
    /// ([`process::delay_gap_ticks`], 500 us) or took no sample for
    /// [`process::delay_period_ticks`] (2 ms), records the time it has
    /// spent so far runnable but without a CPU (an `Op::RunDelay` event,
    /// before the call's own events; see `run_delay_ns`). From two
    /// samples the replay tells time the thread was preempted (by the
    /// recorder's own threads or any other load), which it otherwise
    /// replays as the program's work: measured on `ulcp_table` (2 threads
    /// on 2 CPUs), a handful of multi-millisecond gaps made the work of a
    /// thread vary from 14 to 35 ms between runs. The common case is two
    /// compares and a store on this thread's own line; the sample (three
    /// system calls, ~5-10 us) is stamped when they return. Never call it
    /// inside a blocking call: the sample must fall between calls.
    /// Returns true if it took a sample: the caller then takes its
    /// call's first stamp again, after the system call.
    #[inline(always)]
    pub fn sample_run_delay(&mut self, t: u64) -> bool {
        let st = self.st();
        let due = t.wrapping_sub(st.last_t) > process::delay_gap_ticks()
            || t.wrapping_sub(st.cpu_t) > process::delay_period_ticks();
        st.last_t = t;
        if due {
            sample_run_delay_now(self);
        }
        due
    }

    /// The stamp, read with `clock`, of a thread creation (read before
    /// it) or the start of a join: when the thread made no lock call for
    /// [`process::delay_gap_ticks`] (500 us), or was never sampled, a
    /// run-queue delay sample comes first (see
    /// [`Guard::sample_run_delay`]) and the stamp is read after its
    /// system calls.
    ///
    /// Why: the replay puts a sample's growth on the segment that ends at
    /// the sample, and samples were taken only at lock calls: a thread
    /// that makes no lock call (a main thread that only creates and joins
    /// threads) was never sampled, and its preemptions were replayed as
    /// work (the mutex fixture on a loaded machine replayed up to 18 %
    /// short). Taking the same sample at releases and `trylock`s (a
    /// preemption inside a critical section ends its segment there) was
    /// tried and not kept: on `contended.c` it lowered the contended
    /// fraction about fourfold at 8 threads on 2 CPUs, for reasons not
    /// established.
    #[inline(always)]
    pub fn boundary_stamp(&mut self, clock: impl Fn() -> u64) -> u64 {
        let t = clock();
        let st = self.st();
        if st.cpu_t != 0 && t.wrapping_sub(st.last_t) <= process::delay_gap_ticks() {
            return t;
        }
        sample_run_delay_now(self);
        clock()
    }

    /// The stamp of the thread's exit (or the process's, for its main
    /// thread), for its last events: when the thread's last run-queue
    /// delay sample is older than [`process::delay_gap_ticks`] (500 us),
    /// a sample comes first, so that a preemption after the thread's last
    /// lock call is measured too, and the stamp is read after it.
    ///
    /// Why: samples were taken only at lock calls, and the time a thread
    /// was preempted between its last lock call and its end was replayed
    /// as work (test: `time_preempted_after_the_last_lock_call_is_measured`).
    /// A thread never sampled has no baseline and is not sampled here
    /// either. A short thread, sampled at its first lock call less than
    /// 500 us before, is not sampled again: 1000 short threads pay
    /// nothing.
    pub fn exit_stamp(&mut self) -> u64 {
        let t = lockscope_ring::tsc::now();
        let st = self.st();
        if st.cpu_t == 0 || t.wrapping_sub(st.cpu_t) <= process::delay_gap_ticks() {
            return t;
        }
        sample_run_delay_now(self);
        lockscope_ring::tsc::now()
    }

    /// For a lock call that took longer than any uncontended one can
    /// although the lock looked free (`call_ticks`, its duration): true if
    /// the thread was preempted inside the call rather than asleep waiting
    /// for the lock. Then a run-queue delay sample is recorded now, so that
    /// the replay counts the call's time as preempted work. False (and
    /// nothing recorded) otherwise, or when the kernel keeps no statistics
    /// or the thread has no sample yet. One read of
    /// `/proc/thread-self/schedstat` (~1.5 us), only on such slow calls.
    ///
    /// Preempted means both: its run-queue delay grew by at least half the
    /// call, and since its last sample the thread slept (wall time less
    /// time on a CPU less time waiting for one) less than an eighth of the
    /// call (and less than 1 ms when that sample was this call's own). The second is what tells a wait apart: a thread that slept on
    /// the futex and, once woken, waited for a CPU also shows a delay
    /// grown by most of the call. With the first test alone, such waits
    /// were taken for preemptions: on `contended.c` the contended fraction
    /// fell from 5.3 % to 0.7 % at 8 threads on 2 CPUs (the counting shim:
    /// 12 %).
    ///
    /// Why: a thread preempted just after its compare-and-swap took the
    /// lock holds it while off the CPU; another thread that queues
    /// meanwhile leaves the lock word saying "waiters", and the call then
    /// looked exactly like a hidden wait (a lock that was free at the look
    /// and slept in the call). It was recorded as milliseconds of waiting
    /// for a lock that nobody else held, and the replay, which grants the
    /// lock at once, lost that time (the mutex fixture under heavy load:
    /// one recording in six replayed 4-21 % short).
    pub fn preempted_in_call(&mut self, call_ticks: u64, sampled_at_start: bool) -> bool {
        let st = self.st();
        if st.cpu_t == 0 || st.stat_t == 0 {
            return false;
        }
        // Both ends of the window are clocks read just before the
        // statistics: the kernel switches threads when a system call
        // returns, so a preemption at the end of a sample's read falls
        // after both the clock and the figures, in this window on both
        // sides. Measured from `cpu_t` (read after), such a preemption
        // was in the run-queue growth but not in the wall time, and hid
        // a 2 ms futex sleep (`slept` 0) on two busy CPUs.
        let before = lockscope_ring::tsc::now();
        let Some(stat) = schedstat() else {
            return false;
        };
        let call_ns = process::ticks_to_ns(call_ticks);
        let grew = stat.run_delay.saturating_sub(st.last_rq);
        let wall = process::ticks_to_ns(before.wrapping_sub(st.stat_t));
        let slept = wall
            .saturating_sub(stat.on_cpu.saturating_sub(st.last_oncpu))
            .saturating_sub(grew);
        // When the last sample was taken at this call's start (a gap
        // before it, or none for 2 ms), the window holds only the call
        // and the hook's own code, and `slept` is what the thread slept
        // inside the call: then a real sleep (1 ms, far above the
        // counters' disagreement and a shim's short pauses) makes it a
        // wait, however long the
        // thread then waited for a CPU (2 ms asleep on the futex, then
        // more than 14 ms runnable, on two busy CPUs). Otherwise the
        // window also holds what the program did since the sample (up to
        // 2 ms, sleeps included), and only the share is telling.
        if grew.saturating_mul(2) < call_ns
            || slept.saturating_mul(8) >= call_ns
            || (sampled_at_start && slept >= 1_000_000)
        {
            return false;
        }
        emit_run_delay(self, stat, before);
        true
    }

    /// Runs `f`, a call to the real function, with the guard released:
    /// a signal handler that runs on this thread during the call (the
    /// real call may block for long) records its own events instead of
    /// having them skipped. Safe because nothing of the ring is in the
    /// middle of an update while `f` runs.
    #[inline(always)]
    pub fn unguarded<R>(&mut self, f: impl FnOnce() -> R) -> R {
        compiler_fence(Ordering::SeqCst);
        // SAFETY: this thread's state.
        unsafe { (*self.st).busy = 0 };
        compiler_fence(Ordering::SeqCst);
        let r = f();
        compiler_fence(Ordering::SeqCst);
        // SAFETY: this thread's state; a nested hook has left it again.
        unsafe { (*self.st).busy = 1 };
        compiler_fence(Ordering::SeqCst);
        r
    }

    /// OS thread id of the calling thread (0 if its ring could not be
    /// created before the tid was read).
    #[inline]
    pub fn tid(&mut self) -> u32 {
        self.st().tid
    }

    /// Locks the thread holds right now.
    #[inline]
    pub fn locks_held(&mut self) -> u32 {
        self.st().locks_held
    }

    /// Counts a successful acquisition (mutex, rwlock, spinlock).
    #[inline(always)]
    pub fn acquired(&mut self) {
        let st = self.st();
        st.locks_held = st.locks_held.wrapping_add(1);
    }

    /// Counts a release (saturating: a lock taken before recording started
    /// may be released while recording).
    #[inline(always)]
    pub fn released(&mut self) {
        let st = self.st();
        st.locks_held = st.locks_held.saturating_sub(1);
    }

    /// True if an event should carry a call path under the current
    /// [`StacksMode`] (`blocked`: the call had to wait).
    #[inline(always)]
    pub fn wants_path(&mut self, blocked: bool) -> bool {
        match process::stacks_mode() {
            StacksMode::All => true,
            StacksMode::Contended => blocked,
            StacksMode::None => false,
        }
    }

    /// Fills `out` with the call path of the hooked call: `site` first,
    /// then either what the registered [`PathProvider`] supplies, or the
    /// frames above the site. Those come from the loaded objects' CFI on
    /// x86-64 Linux (the `unwind` module says why CFI for every frame),
    /// else from a frame-pointer walk starting at `fp` (the caller's frame
    /// pointer, as seen at the hook's entry; the CFI walk also starts the
    /// caller's frame with it). Returns the number of frames.
    ///
    /// Neither walk faults: stack reads stay between the current stack
    /// pointer and the top of this thread's stack. The CFI walk emits only
    /// return addresses inside a loaded object's executable segment; the
    /// frame-pointer walk (the fallback: no unwind cache free, no CFI for
    /// the recorder's own frames) requires frame addresses 8-aligned and
    /// strictly increasing, so a binary built without frame pointers
    /// yields a short (possibly bogus) path instead of a crash.
    pub fn call_path(&mut self, site: u64, fp: u64, out: &mut [u64; MAX_FRAMES]) -> usize {
        out[0] = site;
        let prov = PATH_PROVIDER.load(Ordering::Acquire);
        if prov != 0 {
            // SAFETY: only `set_path_provider` stores here, from a fn
            // pointer of this exact type.
            let f: PathProvider = unsafe { core::mem::transmute::<usize, PathProvider>(prov) };
            let n = f(&mut out[1..]);
            return 1 + n.min(MAX_FRAMES - 1);
        }
        let hi = self.st().stack_hi;
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        {
            // A panic inside the unwinder turns it off; the hook goes on
            // with the frame-pointer walk (and the program with it).
            let rest = &mut out[1..];
            match std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| {
                crate::unwind::cfi_path(site, fp, hi, rest)
            })) {
                Ok(Some(n)) => return 1 + n,
                Ok(None) => {}
                Err(_) => crate::unwind::break_off(),
            }
        }
        // The lowest address we may read: our own frame. Everything between
        // it and the stack top is live stack, hence mapped.
        let marker = 0u8;
        let lo = core::ptr::addr_of!(marker) as u64;
        // SAFETY: [lo, hi) is the live part of this thread's stack: from
        // our own frame to the top read from pthread_getattr_np (0 when
        // unknown: an empty range, no reads).
        1 + unsafe { walk_frames(fp, lo, hi, &mut out[1..]) }
    }

    /// Offers this thread's ring for unmapping by whoever joins it (see
    /// [`release_joined`]); call it at thread exit of a joinable thread,
    /// after [`Guard::stamp_exit`]. The ring stays usable until the join.
    pub fn retire_ring(&mut self) {
        let st = self.st();
        // The header is the start of the ring's mapping.
        let Some(base) = st.prod.header().map(|h| h as *const _ as usize) else {
            return;
        };
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() } as usize;
        park_ring(&RETIRED_KEY, &RETIRED_RING, slot_start(me), me, base);
    }

    /// Offers this thread's ring for reuse once the thread is gone; call it
    /// at thread exit of a thread nobody will join (detached), after
    /// [`Guard::stamp_exit`]. No join will prove that the thread has
    /// finished (destructors that run after this may still record), so
    /// the proof is the kernel's: a later new thread sweeps the table and
    /// takes a ring only once `tgkill(pid, tid, 0)` fails with `ESRCH`
    /// (see `sweep_detached`). A full table leaves the ring mapped until
    /// the process ends, counted as not pooled.
    pub fn retire_detached_ring(&mut self) {
        let st = self.st();
        // The main thread's tid is the process's: it exists (a zombie
        // leader) until the process ends, so it would never be swept.
        if st.tid == 0 || st.tid == process::pid() {
            return;
        }
        // The header is the start of the ring's mapping.
        let Some(base) = st.prod.header().map(|h| h as *const _ as usize) else {
            return;
        };
        let tid = st.tid as usize;
        if park_ring(&DETACHED_TID, &DETACHED_RING, tid, tid, base) {
            DETACHED_COUNT.fetch_add(1, Ordering::Relaxed);
        } else {
            process::count_ring_not_pooled();
        }
    }

    /// Stamps the ring header's `end_tsc` (thread exit). Events may still
    /// follow (destructors at thread exit); the recorder keeps draining.
    pub fn stamp_exit(&mut self, tsc: u64) {
        let st = self.st();
        // The recorder may close the ring once it is stamped and empty.
        publish_deferred(st);
        if let Some(h) = st.prod.header() {
            h.end_tsc.store(tsc, Ordering::Release);
            // The drain sleeps until a ring crosses its mark or a thread
            // ends: this thread's last events may be below the mark, and
            // its ring should be closed (or its end written) soon, not
            // at the drain's next timeout.
            st.prod.wake_drain();
        }
    }
}

/// Publishes the deferred event ([`Guard::defer`]), if any, before
/// anything else the thread records. Inlined at each caller: the common
/// case is one test, or a copy of one slot ([`Producer::publish_deferred`]).
#[inline(always)]
fn publish_deferred(st: &mut ThreadState) {
    if st.prod.has_deferred() && !st.prod.publish_deferred() {
        flush_deferred(st);
    }
}

/// [`publish_deferred`] when the ring had no room for the slot: the ring
/// grows, or the thread waits, as for any event.
#[cold]
#[inline(never)]
fn flush_deferred(st: &mut ThreadState) {
    if let Some(h) = st.prod.take_deferred() {
        if !st.prod.try_push(h, None, &[]) {
            emit_full(st, h, None, &[]);
        }
    }
}

/// The ring is full (or missing): grow it if possible, else wait or drop
/// as configured (drops counted).
#[cold]
#[inline(never)]
fn emit_full(st: &mut ThreadState, head: Head, args: Option<(u64, u64)>, frames: &[u64]) -> bool {
    if st.ring == RING_OK && grow(st) && st.prod.try_push(head, args, frames) {
        return true;
    }
    let pushed = st.prod.push(head, args, frames);
    // A full ring may have made the push wait for the recorder: the
    // thread's run-queue delay samples include that wait.
    st.waited = st.waited.wrapping_add(st.prod.take_waited());
    if pushed {
        return true;
    }
    if st.ring != RING_OK {
        process::count_lost_no_ring();
    }
    false
}

/// Less than a reserve of room left in the ring at the start of a hooked
/// call: grow it, or wait for the recorder (outside critical sections).
#[cold]
#[inline(never)]
fn headroom(st: &mut ThreadState) {
    // Growing creates a ring: inside a panic guard (see `attach`).
    let p = st as *mut ThreadState as usize;
    // SAFETY: this thread's state, exclusively ours while busy.
    let ok = std::panic::catch_unwind(|| headroom_inner(unsafe { &mut *(p as *mut ThreadState) }));
    if ok.is_err() {
        process::disable();
    }
}

fn headroom_inner(st: &mut ThreadState) {
    let may_wait = st.locks_held == 0;
    let can_grow = st.ring == RING_OK && st.no_grow == 0;
    if st.prod.headroom_slow(may_wait, can_grow) && !grow(st) {
        // Could not grow: wait (or skip) as for a ring at its maximum.
        st.prod.headroom_slow(may_wait, false);
    }
    // The thread's run-queue delay samples include its waits for room.
    st.waited = st.waited.wrapping_add(st.prod.take_waited());
}

/// Moves the thread to a ring four times larger (up to the configured
/// maximum): creates `T<pid>-<gen>-<tid>-<seq+1>.ring`, then tells the
/// recorder through the old header's `next_seq`, then unmaps the old
/// ring (the recorder drains it through its own mapping and removes the
/// file). A thread that runs hot pays a few such growths once; a thread
/// that never does keeps its small first ring. Returns false when the
/// ring cannot grow (at the maximum, or no space: counted in the process
/// header), and then never tries again.
fn grow(st: &mut ThreadState) -> bool {
    if st.no_grow != 0 {
        return false;
    }
    let cur = st.prod.capacity();
    let Some(cap) = process::next_ring_capacity(cur) else {
        st.no_grow = 1;
        return false;
    };
    let rq0 = run_delay_ns();
    let t0 = lockscope_ring::tsc::now();
    // SAFETY: errno is saved around the file operations (the program must
    // not see them); create_ring has no other precondition.
    let new = unsafe {
        let saved_errno = *libc::__errno_location();
        let p = process::create_ring(st.tid, st.parent_tid, st.seq + 1, cap);
        *libc::__errno_location() = saved_errno;
        p
    };
    // Creating and pre-faulting the larger ring is the recorder's time,
    // not the program's: counted with the waits for room, which the
    // thread's run-queue delay samples include, and a sample is made due
    // at once (this call's), so that the replay takes it out of the
    // segment it fell in. Growing to 16 MiB took 41 ms in one detailed
    // recording of `ulcp_table` (pre-faulting 4,096 tmpfs pages), and
    // the replay had kept it as work: with the other growths, a twelfth
    // of the program's replayed time (the `--ulcp-free`
    // predictions at 2 threads were 8-17 % low). Less the part of it the
    // kernel counted as run-queue delay (the thread preempted while
    // growing), which the samples include already: reading the delay
    // twice costs ~10 us, next to milliseconds of growing, a few times
    // per thread.
    let spent = lockscope_ring::tsc::now().wrapping_sub(t0);
    let preempted_ns = match (rq0, run_delay_ns()) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        _ => 0,
    };
    let preempted = process::ns_to_ticks(preempted_ns);
    st.waited = st.waited.wrapping_add(spent.saturating_sub(preempted));
    st.cpu_t = 0;
    st.stat_t = 0;
    let Some(new) = new else {
        st.no_grow = 1;
        return false;
    };
    // A deferred event follows every event of the old ring: it stays
    // deferred, in the new ring's header (and off the old one's, which
    // the recorder must not publish).
    let carried = st.prod.take_deferred();
    let old = core::mem::replace(&mut st.prod, new);
    if let Some(h) = carried {
        st.prod.defer(h);
    }
    st.seq += 1;
    // `old` has a ring (RING_OK); nothing writes its slots after this
    // point, so the Release store publishes every event in it. Its header
    // is the start of the mapping unmapped here; `old` is not used again.
    let base = old.header().map(|h| {
        h.next_seq.store(u64::from(st.seq), Ordering::Release);
        h as *const _ as usize
    });
    process::count_ring_grown();
    if let Some(base) = base {
        unmap_ring(base);
    }
    true
}

/// Rings of threads whose start routine has returned, keyed by
/// `pthread_t`, waiting for a join to prove the thread is gone. A ring
/// cannot be unmapped by its own thread at exit: destructors that run
/// later (TLS, pthread keys) may still lock and record. Without this, every
/// thread ever created would keep its pre-faulted ring (4 MiB by default)
/// mapped until the process ends. Detached threads are never joined and
/// keep theirs (bounded: a full table just leaves rings mapped).
const RETIRED_SLOTS: usize = 1024;
static RETIRED_KEY: [AtomicUsize; RETIRED_SLOTS] = [const { AtomicUsize::new(0) }; RETIRED_SLOTS];
static RETIRED_RING: [AtomicUsize; RETIRED_SLOTS] = [const { AtomicUsize::new(0) }; RETIRED_SLOTS];
/// Key of a slot being filled or emptied.
const CLAIMED: usize = usize::MAX;

/// Puts ring `base` under `key` in the first free slot of a keyed table
/// (`keys` and `rings` side by side), probing from `start`: the slot is
/// claimed by compare-and-swap, the ring stored, then the key published.
/// False if the table is full.
fn park_ring(
    keys: &[AtomicUsize],
    rings: &[AtomicUsize],
    start: usize,
    key: usize,
    base: usize,
) -> bool {
    let n = keys.len();
    for k in 0..n {
        let i = (start + k) % n;
        if keys[i]
            .compare_exchange(0, CLAIMED, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            rings[i].store(base, Ordering::Release);
            keys[i].store(key, Ordering::Release);
            return true;
        }
    }
    false
}

fn slot_start(t: usize) -> usize {
    (t >> 12) % RETIRED_SLOTS
}

/// Unmaps the ring of thread `t`, which a successful `pthread_join` has
/// just proved to be gone (call it after the real join returned 0). No-op
/// if the thread did not retire its ring.
pub fn release_joined(t: libc::pthread_t) {
    let t = t as usize;
    if t == 0 || t == CLAIMED {
        return;
    }
    let start = slot_start(t);
    for k in 0..RETIRED_SLOTS {
        let i = (start + k) % RETIRED_SLOTS;
        if RETIRED_KEY[i]
            .compare_exchange(t, CLAIMED, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            let base = RETIRED_RING[i].swap(0, Ordering::AcqRel);
            if base != 0 && !pool_ring(base) {
                unmap_ring(base);
            }
            RETIRED_KEY[i].store(0, Ordering::Release);
            return;
        }
    }
}

/// Rings of exited detached threads, keyed by kernel tid, waiting for
/// the kernel to say the thread is gone (a server that detaches
/// a thread per connection otherwise maps a fresh ring per connection and
/// keeps every one mapped until it exits). Filled by
/// [`Guard::retire_detached_ring`], emptied by [`sweep_detached`].
const DETACHED_SLOTS: usize = 256;
static DETACHED_TID: [AtomicUsize; DETACHED_SLOTS] =
    [const { AtomicUsize::new(0) }; DETACHED_SLOTS];
static DETACHED_RING: [AtomicUsize; DETACHED_SLOTS] =
    [const { AtomicUsize::new(0) }; DETACHED_SLOTS];
/// Slots in use: lets a new thread skip the sweep when there are none
/// (the common case: programs that join their threads).
static DETACHED_COUNT: AtomicUsize = AtomicUsize::new(0);
/// Where the next sweep starts (a sweep looks at a bounded number of
/// slots, so that 256 long-lived detached threads do not cost every new
/// thread 256 system calls).
static DETACHED_CURSOR: AtomicUsize = AtomicUsize::new(0);
/// Slots one sweep examines at most.
const SWEEP_SLOTS: usize = 32;

/// Moves the rings of detached threads that the kernel no longer knows to
/// the free list (or unmaps them when the list will not take them).
///
/// Why `tgkill(pid, tid, 0)` is a proof: it fails with `ESRCH` only when
/// no thread `tid` exists in this process, and a thread exists until its
/// last user instruction (destructors included) has run. A tid reused by
/// a newer thread makes the check fail safe: the ring waits longer. The
/// alternative, the descriptor's tid that the kernel clears at exit
/// (`CLONE_CHILD_CLEARTID`), would read glibc's private `struct pthread`,
/// whose memory a detached thread's exit also gives back to glibc's stack
/// cache, to be reused by the next thread.
fn sweep_detached() {
    if DETACHED_COUNT.load(Ordering::Relaxed) == 0 {
        return;
    }
    let pid = process::pid() as libc::c_long;
    let start = DETACHED_CURSOR.fetch_add(SWEEP_SLOTS, Ordering::Relaxed);
    for k in 0..SWEEP_SLOTS {
        let i = (start + k) % DETACHED_SLOTS;
        let tid = DETACHED_TID[i].load(Ordering::Acquire);
        if tid == 0
            || tid == CLAIMED
            || DETACHED_TID[i]
                .compare_exchange(tid, CLAIMED, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            continue;
        }
        // SAFETY: a signal-0 tgkill only checks that the thread exists and
        // may be signalled; it delivers nothing.
        let gone = unsafe {
            libc::syscall(libc::SYS_tgkill, pid, tid as libc::c_long, 0) == -1
                && *libc::__errno_location() == libc::ESRCH
        };
        if !gone {
            DETACHED_TID[i].store(tid, Ordering::Release);
            continue;
        }
        let base = DETACHED_RING[i].swap(0, Ordering::AcqRel);
        DETACHED_TID[i].store(0, Ordering::Release);
        DETACHED_COUNT.fetch_sub(1, Ordering::Relaxed);
        if base != 0 && !pool_ring(base) {
            unmap_ring(base);
        }
    }
}

/// Rings of joined threads, kept mapped for new threads (1000
/// short threads cost 3x their unrecorded time, most of it the program's
/// kernel time mapping a fresh ring per thread and unmapping it at join:
/// TLB-shootdown IPIs and `mmap_lock` contention in a multithreaded
/// process). A slot holds the address of a ring header, 0 when empty.
/// Entries are claimed by compare-and-swap before the ring is looked at:
/// a claimed ring may be grown out of and unmapped by its new owner.
const POOL_SLOTS: usize = 128;
static POOL: [AtomicUsize; POOL_SLOTS] = [const { AtomicUsize::new(0) }; POOL_SLOTS];

/// Offers the ring of a joined thread to the free list. False if it must
/// be unmapped instead: the recorder already closed it, it is larger than
/// new threads need, or the list is full (both counted).
fn pool_ring(base: usize) -> bool {
    // SAFETY: `base` is the start of a live ring mapping whose thread has
    // been joined (release_joined): nobody writes it but the recorder
    // (atomics) and, once pooled, the thread that takes it over.
    let h = unsafe { &*(base as *const RingHeader) };
    if h.capacity > process::pool_max_capacity() {
        process::count_ring_not_pooled();
        return false;
    }
    // From open to pooled, unless the recorder closed it first (it then
    // removed the file: a new owner's events would go nowhere).
    if h.pool
        .compare_exchange(POOL_OPEN, POOL_POOLED, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return false;
    }
    for slot in &POOL {
        if slot
            .compare_exchange(0, base, Ordering::Release, Ordering::Relaxed)
            .is_ok()
        {
            return true;
        }
    }
    // Full: back to open (the recorder closes it as any exited thread's).
    h.pool.store(POOL_OPEN, Ordering::Release);
    process::count_ring_not_pooled();
    false
}

/// Empties the free list (the session file system is full): each ring
/// goes back to open and is unmapped, so that the recorder closes it and
/// removes its file like any exited thread's, and the space comes back
/// for new rings. Counted as not pooled.
pub(crate) fn release_pool() {
    for slot in &POOL {
        let base = slot.swap(0, Ordering::Acquire);
        if base == 0 {
            continue;
        }
        // SAFETY: claimed from the list: a live ring mapping nobody else
        // holds (pooled rings are unmapped only by whoever claims them).
        let h = unsafe { &*(base as *const RingHeader) };
        h.pool.store(POOL_OPEN, Ordering::Release);
        process::count_ring_not_pooled();
        unmap_ring(base);
    }
}

/// A ring from the free list for a new thread, taken over in the ring
/// itself (a hand-over event, see `Producer::hand_over`), or `None`: the
/// list is empty, or none of its rings is usable yet (the recorder has not
/// read its previous hand-over, or it is more than half full).
fn reuse_ring(tid: u32, parent_tid: u32) -> Option<Producer> {
    sweep_detached();
    let mut waiting = false;
    for slot in &POOL {
        let base = slot.load(Ordering::Relaxed);
        if base == 0
            || slot
                .compare_exchange(base, 0, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            continue;
        }
        // SAFETY: claimed from the list: a live ring mapping (pooled rings
        // are unmapped only by the thread that claims them) whose previous
        // owner was joined; ours alone now.
        let h = unsafe { &*(base as *const RingHeader) };
        // Usable once the recorder is past the previous hand-over (at most
        // one pending, see RingHeader::handoff) and half of it is free: the
        // previous owner's last events may still be in it, they are read
        // first. (Requiring an empty ring made 4 of 10 threads miss a ring
        // on this 2-CPU machine: the drain runs every 0.5 ms or later.)
        let read = h.read.load(Ordering::Acquire);
        let write = h.write.load(Ordering::Acquire);
        let usable =
            read >= h.handoff.load(Ordering::Acquire) && write.wrapping_sub(read) <= h.capacity / 2;
        if usable {
            // SAFETY: as above: a whole ring mapping, its producer gone
            // (joined, then handed to us through the list's Release/Acquire).
            if let Some(mut p) = unsafe { Producer::resume(base as *mut u8) } {
                p.set_wait_when_full(process::wait_when_full());
                // SAFETY: null or the image's wake page, never unmapped.
                unsafe { p.set_wake(process::session_wake()) };
                // SAFETY: no preconditions beyond a live thread.
                let id = unsafe { process::ring_identity(tid, parent_tid) };
                if p.hand_over(&id) {
                    process::count_ring_reused();
                    return Some(p);
                }
            }
        }
        waiting = true;
        // Not usable yet: back into the list, or unmapped
        // if it filled up meanwhile.
        if !POOL.iter().any(|s| {
            s.compare_exchange(0, base, Ordering::Release, Ordering::Relaxed)
                .is_ok()
        }) {
            h.pool.store(POOL_OPEN, Ordering::Release);
            process::count_ring_not_pooled();
            unmap_ring(base);
        }
    }
    if waiting {
        process::count_pool_not_ready();
    }
    None
}

/// Unmaps a whole ring mapping given its header address.
fn unmap_ring(base: usize) {
    // SAFETY: `base` is the start of a live ring mapping that nobody will
    // use again (its thread is gone); its header gives the length.
    unsafe {
        let cap = (*(base as *const lockscope_ring::session::RingHeader)).capacity;
        libc::munmap(
            base as *mut libc::c_void,
            lockscope_ring::ring::file_bytes(cap),
        );
    }
}

/// Fork child: the retired rings are the parent's threads', inherited
/// mappings nobody here will join; unmap them all.
pub(crate) fn forget_retired_after_fork() {
    for i in 0..RETIRED_SLOTS {
        let base = RETIRED_RING[i].swap(0, Ordering::AcqRel);
        RETIRED_KEY[i].store(0, Ordering::Release);
        if base != 0 {
            unmap_ring(base);
        }
    }
    for i in 0..DETACHED_SLOTS {
        let base = DETACHED_RING[i].swap(0, Ordering::AcqRel);
        DETACHED_TID[i].store(0, Ordering::Release);
        if base != 0 {
            unmap_ring(base);
        }
    }
    DETACHED_COUNT.store(0, Ordering::Relaxed);
    // Pooled rings are the parent's too (its recorder state follows their
    // owners): unmapped here, their headers left as they are.
    for slot in &POOL {
        let base = slot.swap(0, Ordering::AcqRel);
        if base != 0 {
            unmap_ring(base);
        }
    }
}

/// Walks a frame-pointer chain starting at `fp`, writing return addresses
/// to `out`; only reads 16-byte frame records inside `[lo, hi)`.
///
/// # Safety
/// Every address in `[lo, hi)` must be readable for the whole call (in
/// practice: the live part of the calling thread's stack, from the current
/// stack pointer to its top, which is what [`Guard::call_path`] passes).
/// The chain itself may be garbage: records outside the range, misaligned
/// or not increasing end the walk.
pub unsafe fn walk_frames(mut fp: u64, lo: u64, hi: u64, out: &mut [u64]) -> usize {
    let mut n = 0;
    while n < out.len() {
        if fp < lo || fp & 7 != 0 || fp.saturating_add(16) > hi {
            break;
        }
        // SAFETY: [fp, fp+16) lies inside [lo, hi) (checked above), which
        // the caller guarantees readable.
        let (next, ret) = unsafe { (*(fp as *const u64), *((fp + 8) as *const u64)) };
        if ret < 4096 {
            break;
        }
        out[n] = ret;
        n += 1;
        if next <= fp {
            break;
        }
        fp = next;
    }
    n
}

/// Creates the calling thread's ring (cold path, first event), inside a
/// panic guard: it runs before the hook's own `catch_unwind`, and a panic
/// must disable the recorder, never unwind into the program.
#[cold]
#[inline(never)]
unsafe fn attach(st: *mut ThreadState) {
    // The program must not see our file operations in errno.
    // SAFETY: errno's location is valid for the calling thread.
    let saved_errno = unsafe { *libc::__errno_location() };
    let st = st as usize;
    // SAFETY: `st` is this thread's state, exclusively ours while busy.
    let ok = std::panic::catch_unwind(|| unsafe { attach_inner(st as *mut ThreadState) });
    if ok.is_err() {
        process::disable();
        // SAFETY: as above; no ring: events are counted, not written.
        unsafe { (*(st as *mut ThreadState)).ring = RING_FAILED };
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved_errno };
}

/// # Safety
/// `st` must be the calling thread's own state (from `state()`), with
/// `busy` set, so that nothing else (a signal handler's hook sees `busy`
/// and forwards) touches it during the call.
unsafe fn attach_inner(st: *mut ThreadState) {
    // SAFETY: `&mut *st` is the only live reference to this thread's
    // state (the contract above: own TLS, `busy` set, no Guard exists yet
    // on this thread). `gettid` has no preconditions. `create_ring` and
    // `reuse_ring` need nothing beyond a live, recording process; they
    // return a producer over a mapping they own.
    unsafe {
        let st = &mut *st;
        st.ring = RING_FAILED;
        let tid = libc::gettid() as u32;
        st.tid = tid;
        if st.stack_hi == 0 && tid == process::pid() {
            st.stack_hi = process::main_stack_top();
        }
        // Other threads got their stack top in `thread_started`, at a safe
        // point. Not here: pthread_getattr_np allocates (its cpuset), and this
        // may run inside a hook called by a malloc implementation that holds
        // its own lock (jemalloc, tcmalloc use pthread mutexes). A thread we
        // did not see start keeps stack_hi = 0: call sites only, no walks.
        if let Some(p) = reuse_ring(tid, st.parent_tid) {
            st.prod = p;
            st.ring = RING_OK;
        } else if let Some(p) =
            process::create_ring(tid, st.parent_tid, 0, process::first_ring_capacity())
        {
            st.prod = p;
            st.ring = RING_OK;
        } else {
            process::count_thread_without_ring();
        }
    }
}

/// Top of the calling thread's stack from pthread_getattr_np.
///
/// # Safety
/// Call it at a point where allocating is safe (`pthread_getattr_np`
/// allocates its cpuset): not inside a hook that a malloc implementation
/// may call with its own lock held.
pub(crate) unsafe fn thread_stack_top() -> u64 {
    // SAFETY: `attr` is a zeroed local that pthread_getattr_np initialises
    // for the calling thread (pthread_self is always valid); it is read by
    // pthread_attr_getstack into two locals and destroyed once, on the
    // path where it was initialised. Nothing else sees these locals.
    unsafe {
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return 0;
        }
        let mut addr: *mut libc::c_void = core::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let ok = libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        if ok {
            addr as u64 + size as u64
        } else {
            0
        }
    }
}

/// Forgets the calling thread's ring and counters (fork child: the ring
/// belongs to the parent). Returns the tid and stack top the thread had
/// (same thread, same stack in the child).
pub(crate) fn reset_after_fork() -> (u32, u64) {
    let st = state();
    // SAFETY: this thread's state; the child is single-threaded here.
    unsafe {
        let old = ((*st).tid, (*st).stack_hi);
        core::ptr::write(st, ThreadState::EMPTY);
        old
    }
}

/// The calling thread's ring mapping, if any: (address of the header).
pub(crate) fn ring_header_addr() -> usize {
    let st = state();
    // SAFETY: this thread's state.
    unsafe { (*st).prod.header() }.map_or(0, |h| h as *const _ as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_state_is_all_zero_bytes() {
        // `.tbss` hands every thread zeroes: that must be EMPTY. Compared
        // field by field (through Debug), not as bytes: reading EMPTY's
        // padding bytes was undefined behaviour (Miri: uninitialized
        // memory), and padding is not part of the value anyway.
        // SAFETY: ThreadState is integers, a bool and raw pointers, for
        // which all-zero bytes are valid values (null pointers, false).
        let zeroed: ThreadState = unsafe { core::mem::zeroed() };
        assert_eq!(format!("{zeroed:?}"), format!("{:?}", ThreadState::EMPTY));
    }

    #[test]
    fn run_delay_is_the_second_schedstat_field() {
        let delay = |t: &[u8]| parse_schedstat(t).map(|s| s.run_delay);
        assert_eq!(delay(b"1109500 2345 17\n"), Some(2345));
        assert_eq!(delay(b"0 0 1"), Some(0));
        assert_eq!(delay(b"12"), None);
        assert_eq!(delay(b"1 x 2"), None);
        assert_eq!(delay(b"1 99999999999999999999999 2"), None);
        assert_eq!(delay(b""), None);
        assert_eq!(
            parse_schedstat(b"1109500 2345 17\n"),
            Some(Schedstat {
                on_cpu: 1109500,
                run_delay: 2345
            })
        );
        assert_eq!(parse_schedstat(b"x 2345 17"), None);
        // This kernel's own file, if it has one: a number.
        if std::path::Path::new("/proc/thread-self/schedstat").exists() {
            assert!(run_delay_ns().is_some());
        }
    }

    #[test]
    fn tls_state_is_per_thread_and_zero_at_start() {
        set_parent_tid(77);
        let here = state() as usize;
        let (there, parent) = std::thread::spawn(|| {
            let p = state();
            // SAFETY: this thread's state.
            (p as usize, unsafe { (*p).parent_tid })
        })
        .join()
        .unwrap();
        assert_ne!(here, there);
        assert_eq!(parent, 0, "a new thread starts from zeroed state");
        // SAFETY: this thread's state.
        assert_eq!(unsafe { (*state()).parent_tid }, 77);
    }

    #[test]
    fn recorder_is_none_when_not_recording() {
        // No session in unit tests: hooks must forward.
        assert!(!is_recording());
        assert!(recorder().is_none());
    }

    #[inline(never)]
    fn walk_here(out: &mut [u64]) -> usize {
        let fp: u64;
        #[cfg(target_arch = "x86_64")]
        // SAFETY: reads a register, nothing else.
        unsafe {
            core::arch::asm!("mov {}, rbp", out(reg) fp)
        };
        #[cfg(not(target_arch = "x86_64"))]
        {
            fp = 0;
        }
        let marker = 0u8;
        let lo = core::ptr::addr_of!(marker) as u64;
        // SAFETY: called on a live thread, no other precondition.
        let hi = unsafe { thread_stack_top() };
        // SAFETY: from our frame to the top of this thread's stack.
        unsafe { walk_frames(fp, lo, hi, out) }
    }

    #[test]
    fn walk_never_faults_and_stays_in_bounds() {
        // Whether or not this test binary has frame pointers, the walk
        // must return without faulting and never exceed the buffer.
        let mut out = [0u64; 8];
        let n = walk_here(&mut out);
        assert!(n <= 8);
        // Garbage frame pointers: outside the range, misaligned, null.
        // SAFETY: the range [lo, hi) given is never read from (every fp
        // is rejected before a read), and is the readable stack below.
        unsafe {
            assert_eq!(walk_frames(0, 1, u64::MAX, &mut out), 0);
            assert_eq!(walk_frames(0x1001, 0x1000, 0x2000, &mut out), 0);
            assert_eq!(walk_frames(0xdead_0000, 0x1000, 0x2000, &mut out), 0);
        }
        // A garbage chain inside a readable range (this stack) ends
        // without faulting.
        let junk = [0x10u64, 7, 0xffff_ffff_0000, 3];
        let lo = junk.as_ptr() as u64;
        // SAFETY: [lo, lo+32) is `junk`, readable.
        let n = unsafe { walk_frames(lo, lo, lo + 32, &mut out) };
        assert!(n <= 1);
    }

    #[test]
    fn walk_follows_a_synthetic_chain() {
        // Three frame records laid out like a real stack, in one array.
        let mut stack = [0u64; 8];
        // Filled through the pointer whose address the walk is given, not
        // through `stack` itself: a write through the array would end the
        // pointer's permission to read it (Miri's Stacked Borrows), and
        // the walk reads through that address.
        let p = stack.as_mut_ptr();
        let base = p as u64;
        let words = [
            base + 16,
            0x40_1000,
            base + 32,
            0x40_2000,
            base + 8,
            0x40_3000,
        ];
        // frame 0 -> frame 1 -> frame 2, whose next (base + 8) goes
        // down: the walk stops after it.
        for (i, w) in words.into_iter().enumerate() {
            // SAFETY: i < 6 < 8: inside `stack`.
            unsafe { p.add(i).write(w) };
        }
        let mut out = [0u64; 8];
        // SAFETY: [base, base+64) is `stack`, readable.
        let n = unsafe { walk_frames(base, base, base + 64, &mut out) };
        assert_eq!(&out[..n], &[0x40_1000, 0x40_2000, 0x40_3000]);
        // Bounded by the output buffer.
        let mut two = [0u64; 2];
        // SAFETY: as above.
        assert_eq!(unsafe { walk_frames(base, base, base + 64, &mut two) }, 2);
        // Bounded by the stack top: frame 2 sits at base+32..48 > hi.
        // SAFETY: as above.
        assert_eq!(unsafe { walk_frames(base, base, base + 40, &mut out) }, 2);
    }
}
