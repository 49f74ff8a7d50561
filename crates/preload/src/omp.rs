//! Hooks for what an OpenMP program does through GCC's runtime (libgomp):
//! its locks (`#pragma omp critical`, named or not, and `omp_set_lock`,
//! `omp_unset_lock`, `omp_test_lock`), its parallel regions
//! (`GOMP_parallel`) and its explicit barriers (`GOMP_barrier`).
//!
//! libgomp's locks and barriers are its own futex words, used with inline
//! atomics and a raw `syscall` instruction: none of them reaches
//! `pthread_mutex_lock` or libc's `syscall`, so without these hooks an
//! OpenMP program leaves almost no trace (ImageMagick's `convert`, two
//! threads for 2.7 s: six events). The calls the compiler emits go through
//! the PLT, so they can be interposed like the pthread calls. Locks are
//! recorded as the mutex operations they are (`MutexLock`, `MutexTrylock`,
//! `MutexUnlock`, with the protocol of a pthread mutex, `locks::acquire`);
//! barriers as `BarrierWait`s (see [`parallel_impl`]).
//!
//! What each lock is, in the trace:
//! - `#pragma omp critical (NAME)`: the compiler's zero-initialised
//!   pointer `.gomp_critical_user_NAME`, whose first 4 bytes libgomp uses
//!   as the lock word on Linux: the lock's address is that variable, and
//!   `report` names it after it.
//! - `#pragma omp critical` without a name: one lock inside libgomp,
//!   which it does not export. It is recorded under the address of
//!   libgomp's `GOMP_critical_start` (one stable identity, named after that
//!   function), and contention is told from the call's duration only
//!   (the word cannot be read).
//! - `omp_lock_t`: the lock itself (an `int` futex word in both of
//!   libgomp's lock ABIs, 2.5 and 3.0, so the hooks cannot mistake one
//!   for the other).
//!
//! Not hooked, and why: nestable locks (`omp_nest_lock_t` differs
//! between the two ABIs, and a hook bound to an old binary's 2.5-ABI call
//! would forward it to the 3.0 function: a wrong program is worse than an
//! unseen lock); the pre-GCC 4.9 region entry points
//! (`GOMP_parallel_start` and `_end`, and their loop and sections
//! variants) and `GOMP_parallel_reductions`; LLVM's OpenMP runtime
//! (`__kmpc_*`, clang's `-fopenmp`).
//!
//! libgomp's word (`gomp_mutex_t`, config/linux): 0 free, 1 locked, -1
//! locked with waiters (set by a thread that gave up spinning and sleeps
//! on the futex). A thread that spun and then got the lock leaves 1.

// The interposed symbols must carry libgomp's names (`GOMP_critical_start`).
#![allow(non_snake_case)]

use core::sync::atomic::{AtomicI32, AtomicU8, Ordering};

use core::sync::atomic::AtomicU32;
use libc::{c_int, c_void};

use lockscope_capture::thread;
use lockscope_format::{barrier, phase, Op};
use lockscope_ring::ring::{futex_wait_private, futex_wake_all_private};
use lockscope_ring::tsc;

use crate::common::{emit, guarded, tramp};
use crate::locks::{self, acquire, try_acquire};
use crate::real::Real;

/// libgomp's soname: where the real functions are looked up when they are
/// not in the global scope (a `dlopen`ed library linked with libgomp).
///
/// Every function is looked up with its libgomp symbol version: a
/// program built with `lockscope cc` has these hooks linked in and the
/// preload library loaded too, whose unversioned definitions come next
/// in the search order. `dlvsym` passes over them (an unversioned
/// definition does not match a versioned request); a plain `dlsym` found
/// the preload library's `GOMP_critical_start`, which is not libgomp's,
/// and the critical sections of detailed-mode programs went unrecorded.
const GOMP: &[u8] = b"libgomp.so.1\0";

/// One of libgomp's functions, resolved as the pthread ones are (at load
/// time and lazily, see [`Real`]), and whether libgomp is what provides
/// it: another OpenMP runtime exporting the same names (LLVM's libomp has
/// GOMP-compatible entry points) keeps other words in its locks, which
/// the probes below would misread, so its calls are forwarded unrecorded.
struct GompFn {
    real: Real,
    /// 0 not known yet, 1 libgomp's, 2 another object's.
    gomp: AtomicU8,
}

impl GompFn {
    const fn versioned(name: &'static [u8], version: &'static [u8]) -> GompFn {
        GompFn {
            real: Real::versioned(name, version).with_lib(GOMP),
            gomp: AtomicU8::new(0),
        }
    }

    /// The real function's address (aborts, saying which, if there is none).
    #[inline(always)]
    fn addr(&self) -> usize {
        self.real.get()
    }

    /// True if the real function is libgomp's.
    #[inline(always)]
    fn is_libgomps(&self) -> bool {
        match self.gomp.load(Ordering::Relaxed) {
            1 => true,
            2 => false,
            _ => self.classify(),
        }
    }

    #[cold]
    #[inline(never)]
    fn classify(&self) -> bool {
        let mut info: libc::Dl_info = empty_dl_info();
        // SAFETY: dladdr fills `info` for an address inside a loaded
        // object (the real function) and returns 0 otherwise; the file
        // name it points to stays valid while that object is loaded (we
        // read it at once).
        let ok = unsafe {
            let saved = *libc::__errno_location();
            let r = libc::dladdr(self.addr() as *const c_void, &mut info);
            *libc::__errno_location() = saved;
            r != 0
                && !info.dli_fname.is_null()
                && core::ffi::CStr::from_ptr(info.dli_fname)
                    .to_bytes()
                    .windows(7)
                    .any(|w| w == b"libgomp")
        };
        self.gomp.store(if ok { 1 } else { 2 }, Ordering::Relaxed);
        ok
    }
}

/// A zeroed `Dl_info` (all pointers null).
fn empty_dl_info() -> libc::Dl_info {
    libc::Dl_info {
        dli_fname: core::ptr::null(),
        dli_fbase: core::ptr::null_mut(),
        dli_sname: core::ptr::null(),
        dli_saddr: core::ptr::null_mut(),
    }
}

/// Defines each libgomp function the hooks call (name and symbol
/// version, once) and [`ALL`], the list the load-time lookup walks.
macro_rules! gomp_fns {
    ($($name:ident = $sym:literal @ $ver:literal;)*) => {
        $(static $name: GompFn =
            GompFn::versioned(concat!($sym, "\0").as_bytes(), concat!($ver, "\0").as_bytes());)*
        /// Every libgomp function the hooks call.
        static ALL: &[&GompFn] = &[$(&$name),*];
    };
}

gomp_fns! {
    SET_LOCK = "omp_set_lock" @ "OMP_3.0";
    UNSET_LOCK = "omp_unset_lock" @ "OMP_3.0";
    TEST_LOCK = "omp_test_lock" @ "OMP_3.0";
    CRITICAL_START = "GOMP_critical_start" @ "GOMP_1.0";
    CRITICAL_END = "GOMP_critical_end" @ "GOMP_1.0";
    CRITICAL_NAME_START = "GOMP_critical_name_start" @ "GOMP_1.0";
    CRITICAL_NAME_END = "GOMP_critical_name_end" @ "GOMP_1.0";
    PARALLEL = "GOMP_parallel" @ "GOMP_4.0";
    PARALLEL_SECTIONS = "GOMP_parallel_sections" @ "GOMP_4.0";
    LOOP_STATIC = "GOMP_parallel_loop_static" @ "GOMP_4.0";
    LOOP_DYNAMIC = "GOMP_parallel_loop_dynamic" @ "GOMP_4.0";
    LOOP_GUIDED = "GOMP_parallel_loop_guided" @ "GOMP_4.0";
    LOOP_RUNTIME = "GOMP_parallel_loop_runtime" @ "GOMP_4.0";
    LOOP_NM_DYNAMIC = "GOMP_parallel_loop_nonmonotonic_dynamic" @ "GOMP_4.5";
    LOOP_NM_GUIDED = "GOMP_parallel_loop_nonmonotonic_guided" @ "GOMP_4.5";
    LOOP_NM_RUNTIME = "GOMP_parallel_loop_nonmonotonic_runtime" @ "GOMP_5.0";
    LOOP_MNM_RUNTIME = "GOMP_parallel_loop_maybe_nonmonotonic_runtime" @ "GOMP_5.0";
    BARRIER = "GOMP_barrier" @ "GOMP_1.0";
    NUM_THREADS = "omp_get_num_threads" @ "OMP_1.0";
}

/// Resolved at load time, as the pthread functions are (no `dlsym` later
/// on a path a signal handler could take); a library loaded later is
/// found by the lazy path.
#[used]
#[link_section = ".init_array"]
static RESOLVE: extern "C" fn() = {
    extern "C" fn resolve() {
        // SAFETY: getenv in a load-time constructor (single-threaded: no
        // setenv can race); the result, if any, is a NUL-terminated string
        // read at once.
        unsafe {
            let v = libc::getenv(c"LOCKSCOPE_OMP_WAIT_MS".as_ptr());
            if !v.is_null() {
                if let Some(ms) = core::ffi::CStr::from_ptr(v)
                    .to_str()
                    .ok()
                    .and_then(|s| s.parse::<u32>().ok())
                    .filter(|&ms| ms > 0)
                {
                    GIVE_UP_MS.store(ms, Ordering::Relaxed);
                }
            }
        }
        for f in ALL {
            f.real.prefetch();
        }
    }
    resolve
};

/// The real `void f(void *)` or `void f(void)` behind `f`.
///
/// # Safety
/// `f` is one of the functions above whose C signature is `void (void *)`
/// or `void (void)` (an extra argument register is ignored by the
/// latter), and `l` is what the program passed.
#[inline(always)]
unsafe fn call_void(f: &GompFn, l: *mut c_void) {
    // SAFETY: `addr` is the real function's address (never 0: it aborts
    // when there is none), whose C signature is `void (void *)` or
    // `void (void)` (the caller's contract); a usize and a fn pointer
    // have the same size. Calling it forwards the program's argument.
    unsafe {
        let g: unsafe extern "C-unwind" fn(*mut c_void) =
            core::mem::transmute::<usize, unsafe extern "C-unwind" fn(*mut c_void)>(f.addr());
        g(l)
    }
}

/// `int omp_test_lock(omp_lock_t *)`.
///
/// # Safety
/// `l` is what the program passed.
unsafe fn real_omp_test_lock(l: *mut c_int) -> c_int {
    // SAFETY: as in `call_void`, for `int (omp_lock_t *)`.
    unsafe {
        let g: unsafe extern "C-unwind" fn(*mut c_int) -> c_int = core::mem::transmute::<
            usize,
            unsafe extern "C-unwind" fn(*mut c_int) -> c_int,
        >(TEST_LOCK.addr());
        g(l)
    }
}

/// The lock word of `l`, if it has one we can read (null: the unnamed
/// critical section, whose word libgomp keeps to itself).
#[inline(always)]
unsafe fn word(l: *mut c_void) -> Option<i32> {
    if l.is_null() {
        return None;
    }
    // SAFETY: `l` is the program's lock (an `omp_lock_t` or a
    // `.gomp_critical_user_*` pointer variable), valid and 4-aligned for
    // the real call too; read with a relaxed atomic load, since other
    // threads change it concurrently (a stale value only misjudges
    // contention).
    Some(unsafe { (*(l as *const AtomicI32)).load(Ordering::Relaxed) })
}

/// The identity of a lock in the trace: its address, or for the unnamed
/// critical section the address of libgomp's `GOMP_critical_start`.
#[inline(always)]
fn lock_addr(l: *mut c_void) -> u64 {
    if l.is_null() {
        critical_identity()
    } else {
        l as u64
    }
}

/// The address of libgomp's `GOMP_critical_start`.
fn critical_identity() -> u64 {
    CRITICAL_START.addr() as u64
}

/// Records an acquisition (`release` false: a blocking one) or a release
/// of an OpenMP lock around the real `f` (a function that is not
/// libgomp's is only called).
///
/// # Safety
/// `f` is `omp_set_lock`, `omp_unset_lock` or one of the
/// `GOMP_critical_*`s, and `l` what the program passed it (null for the
/// unnamed critical section). A plain argument rather than a closure, so
/// that the real call can be made a second time when recording failed
/// before it.
#[inline(never)]
unsafe fn lock_rec(f: &GompFn, l: *mut c_void, site: u64, fp: u64, release: bool) {
    // SAFETY: the real function gets the program's argument unchanged
    // (its C contract is the program's to uphold); `word` reads the lock
    // word of a valid libgomp lock.
    unsafe {
        if !f.is_libgomps() {
            return call_void(f, l);
        }
        let Some(mut g) = thread::recorder() else {
            return call_void(f, l);
        };
        let mut ret = None;
        let real = || {
            call_void(f, l);
            0
        };
        guarded(|| {
            if release {
                locks::release(
                    &mut g,
                    &mut ret,
                    Op::MutexUnlock,
                    lock_addr(l),
                    site,
                    fp,
                    real,
                );
                return;
            }
            // Held by anyone when we look: libgomp's simple locks and
            // critical sections are not recursive, so a set word is
            // another thread's (re-locking one's own would deadlock in the
            // real call anyway).
            let held = word(l).is_some_and(|w| w != 0);
            acquire(
                &mut g,
                &mut ret,
                Op::MutexLock,
                lock_addr(l),
                site,
                fp,
                held,
                real,
                // -1: a thread slept on the futex (maybe this one). No
                // word: only the call's duration can tell (see `acquire`).
                || word(l).is_none_or(|w| w < 0),
            )
        });
        if ret.is_none() {
            call_void(f, l);
        }
    }
}

/// Generates the hook body of a void OpenMP lock call: forwards at once
/// when not recording, else records around it with `lock_rec`.
macro_rules! omp_hook {
    ($imp:ident ( $l:ident : $lt:ty ) $f:ident, release = $release:expr) => {
        unsafe extern "C-unwind" fn $imp($l: $lt, site: u64, fp: u64) {
            // SAFETY: the real `$f` (directly or through `lock_rec`) gets
            // the program's argument unchanged; the interposed function's
            // C contract is the program's to uphold.
            unsafe {
                if !thread::is_recording() {
                    return call_void(&$f, $l as *mut c_void);
                }
                lock_rec(&$f, $l as *mut c_void, site, fp, $release)
            }
        }
    };
    ($imp:ident () $f:ident, release = $release:expr) => {
        unsafe extern "C-unwind" fn $imp(site: u64, fp: u64) {
            // SAFETY: as above; no arguments (a null one is ignored).
            unsafe {
                if !thread::is_recording() {
                    return call_void(&$f, core::ptr::null_mut());
                }
                lock_rec(&$f, core::ptr::null_mut(), site, fp, $release)
            }
        }
    };
}

omp_hook!(omp_set_lock_impl(l: *mut c_int) SET_LOCK, release = false);
omp_hook!(omp_unset_lock_impl(l: *mut c_int) UNSET_LOCK, release = true);
omp_hook!(critical_start_impl() CRITICAL_START, release = false);
omp_hook!(critical_end_impl() CRITICAL_END, release = true);
omp_hook!(critical_name_start_impl(p: *mut *mut c_void) CRITICAL_NAME_START, release = false);
omp_hook!(critical_name_end_impl(p: *mut *mut c_void) CRITICAL_NAME_END, release = true);

/// `omp_test_lock`: returns non-zero when it took the lock. Recorded as a
/// trylock: DONE when taken, FAIL (EBUSY) when not.
unsafe extern "C-unwind" fn omp_test_lock_impl(l: *mut c_int, site: u64, fp: u64) -> c_int {
    // SAFETY: the real function gets the program's lock unchanged.
    unsafe {
        if !thread::is_recording() || !TEST_LOCK.is_libgomps() {
            return real_omp_test_lock(l);
        }
        omp_test_lock_rec(l, site, fp)
    }
}

/// # Safety
/// `l` is what the program passed to `omp_test_lock`.
#[inline(never)]
unsafe fn omp_test_lock_rec(l: *mut c_int, site: u64, fp: u64) -> c_int {
    // SAFETY: the real function gets the program's lock unchanged.
    unsafe {
        let Some(mut g) = thread::recorder() else {
            return real_omp_test_lock(l);
        };
        let mut ret = None;
        let mut took = None;
        guarded(|| {
            try_acquire(
                &mut g,
                &mut ret,
                Op::MutexTrylock,
                l as u64,
                site,
                fp,
                || {
                    let r = real_omp_test_lock(l);
                    took = Some(r);
                    // The pthread convention `try_acquire` reads: 0 taken.
                    if r != 0 {
                        0
                    } else {
                        libc::EBUSY
                    }
                },
            )
        });
        match took {
            Some(r) => r,
            None => real_omp_test_lock(l),
        }
    }
}

tramp!(omp_set_lock(l: *mut c_int) -> () = omp_set_lock_impl ["rsi", "rdx"]);
tramp!(omp_unset_lock(l: *mut c_int) -> () = omp_unset_lock_impl ["rsi", "rdx"]);
tramp!(omp_test_lock(l: *mut c_int) -> c_int = omp_test_lock_impl ["rsi", "rdx"]);
tramp!(GOMP_critical_start() -> () = critical_start_impl ["rdi", "rsi"]);
tramp!(GOMP_critical_end() -> () = critical_end_impl ["rdi", "rsi"]);
tramp!(GOMP_critical_name_start(p: *mut *mut c_void) -> () = critical_name_start_impl ["rsi", "rdx"]);
tramp!(GOMP_critical_name_end(p: *mut *mut c_void) -> () = critical_name_end_impl ["rsi", "rdx"]);

// ---- parallel regions and barriers ----

/// The outlined body of a parallel region, as the compiler passes it to
/// `GOMP_parallel`.
type Body = unsafe extern "C" fn(*mut c_void);

/// A parallel region started under recording: what `region_body` runs on
/// every thread of the team, and the barrier at its end that lockscope
/// makes visible. Lives on the stack of the thread that called
/// `GOMP_parallel`, which returns only after every thread of the team has
/// left `region_body` (libgomp's own barrier at the region's end).
#[repr(C)]
struct Region {
    body: Body,
    data: *mut c_void,
    /// Call site of `GOMP_parallel`: the barrier's site in the trace.
    site: u64,
    /// Threads that finished the body (a futex word).
    arrived: AtomicU32,
    /// Threads asleep on `arrived` (or about to be): the last arriver
    /// makes the wake-up system call only when there is one. Most
    /// regions end within the waiters' spin, and the call cost 0.3-0.5 us
    /// per region in this VM.
    sleepers: AtomicU32,
}

thread_local! {
    /// The body of the innermost recorded region this thread runs (0:
    /// none): the identity of the team's barriers, explicit ones included.
    static REGION: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
}

/// `omp_get_num_threads()`: the size of the calling thread's team.
fn team_size() -> u32 {
    // SAFETY: `int omp_get_num_threads(void)`, resolved like the others
    // (aborts, saying so, if no object defines it).
    unsafe {
        let f: unsafe extern "C-unwind" fn() -> c_int = core::mem::transmute::<
            usize,
            unsafe extern "C-unwind" fn() -> c_int,
        >(NUM_THREADS.addr());
        f().max(1) as u32
    }
}

/// `GOMP_parallel(fn, data, num_threads, flags)`: the region runs
/// `region_body` instead of `fn` when recording, so that the end of the
/// body on each thread, and the team's wait for its slowest thread, are
/// seen. libgomp makes that wait inside its own functions, out of reach:
/// `region_body` waits in a barrier of its own first (BarrierWait BEGIN
/// when a thread's body returns, DONE when the last one's has, that one
/// marked as the serial thread; both flagged [`barrier::REGION_END`]),
/// after which libgomp's passes at once.
/// The barrier object is the outlined body (`main._omp_fn.0`), which
/// names the region. The cost is one more barrier per region (a
/// spin, then a futex wait), and what the program computes is unchanged.
unsafe extern "C-unwind" fn parallel_impl(
    body: Body,
    data: *mut c_void,
    num_threads: libc::c_uint,
    flags: libc::c_uint,
    site: u64,
    _fp: u64,
) {
    // SAFETY: the real GOMP_parallel gets the program's arguments, or the
    // same team size and flags with `region_body` and a `Region` that
    // outlives the call (see `Region`) in place of the body and its data.
    unsafe {
        let real: unsafe extern "C-unwind" fn(Body, *mut c_void, libc::c_uint, libc::c_uint) =
            core::mem::transmute::<
                usize,
                unsafe extern "C-unwind" fn(Body, *mut c_void, libc::c_uint, libc::c_uint),
            >(PARALLEL.addr());
        if !wrap_region(&PARALLEL) {
            return real(body, data, num_threads, flags);
        }
        let r = Region {
            body,
            data,
            site,
            arrived: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
        };
        real(
            region_body,
            &r as *const Region as *mut c_void,
            num_threads,
            flags,
        )
    }
}

/// Runs the region's body on one thread of the team, then its end barrier.
unsafe extern "C" fn region_body(arg: *mut c_void) {
    // SAFETY: `arg` is the `Region` parallel_impl passed, alive until
    // every thread has returned from here; the body gets the program's
    // data.
    unsafe {
        let r = &*(arg as *const Region);
        let outer = REGION.with(|c| c.replace(r.body as usize as u64));
        (r.body)(r.data);
        region_end(r);
        REGION.with(|c| c.set(outer));
    }
}

/// The end-of-region barrier. Every thread of the team must pass it,
/// recorder or not (one that skipped it would leave the others waiting
/// for good): only the events depend on the recorder.
fn region_end(r: &Region) {
    let n = team_size();
    if n <= 1 {
        // A team of one (an `if (0)` region, a nested one) waits for
        // nobody: no barrier, no events.
        return;
    }
    let addr = r.body as usize as u64;
    let t0 = tsc::now();
    barrier_event(phase::BEGIN, t0, addr, r.site, barrier::REGION_END, false);
    // The guard is released here, before waiting: a signal handler that
    // runs meanwhile records its own events.
    // SeqCst on both counters, on both sides (Dekker): either the last
    // arriver sees a sleeper and wakes it, or the sleeper, counted after
    // the last arrival, sees `arrived` complete and does not sleep.
    let last = r.arrived.fetch_add(1, Ordering::SeqCst) + 1 >= n;
    let mut gave_up = 0;
    if last {
        if r.sleepers.load(Ordering::SeqCst) != 0 {
            futex_wake_all_private(&r.arrived);
        }
    } else if !wait_for(r, n) {
        gave_up = barrier::GAVE_UP;
    }
    let t1 = tsc::now_after();
    let serial = if last { barrier::SERIAL } else { 0 } | gave_up;
    // No call path, even for a thread that waited: below `region_body`
    // there are only libgomp's frames (the region is named by its body).
    barrier_event(
        phase::DONE,
        t1,
        addr,
        r.site,
        barrier::REGION_END | serial,
        false,
    );
}

/// Records a `BarrierWait` event if this thread records; `blocked`: the
/// call waited (its call path is wanted in the default stacks mode).
fn barrier_event(ph: u8, t: u64, addr: u64, site: u64, arg: u64, blocked: bool) {
    if let Some(mut g) = thread::recorder() {
        guarded(|| {
            emit(
                &mut g,
                Op::BarrierWait,
                ph,
                t,
                addr,
                site,
                0,
                arg,
                0,
                blocked,
            )
        });
    }
}

/// Waits until `r.arrived` reaches `n`: spins a little first (a team's
/// threads usually finish close together, and a futex sleep and wake-up
/// costs microseconds per region), then sleeps on the futex. Returns
/// false if it gave up after [`give_up_ms`] (the trace says so).
///
/// Why a limit: this barrier is lockscope's, not the program's. A thread
/// waiting in libgomp's own barrier runs the team's pending tasks; one
/// waiting here does not. A program whose thread busy-waits, inside the
/// region, for a task that only another thread's barrier would run (not
/// a conforming wait, but it works without lockscope) would hang here
/// for good. After the limit the thread goes on into libgomp's barrier,
/// and its wait is recorded as ending then, flagged
/// [`barrier::GAVE_UP`]: a limit that fails loud, not a hang.
fn wait_for(r: &Region, n: u32) -> bool {
    for _ in 0..2_000 {
        if r.arrived.load(Ordering::Acquire) >= n {
            return true;
        }
        core::hint::spin_loop();
    }
    let limit = give_up_ms();
    let t0 = std::time::Instant::now();
    r.sleepers.fetch_add(1, Ordering::SeqCst);
    let done = loop {
        let v = r.arrived.load(Ordering::SeqCst);
        if v >= n {
            break true;
        }
        let waited = t0.elapsed().as_millis();
        if waited >= u128::from(limit) {
            break false;
        }
        futex_wait_private(&r.arrived, v, (u128::from(limit) - waited).min(1000) as u32);
    };
    r.sleepers.fetch_sub(1, Ordering::SeqCst);
    done
}

/// How long a thread waits in lockscope's region barrier before it gives
/// up (see [`wait_for`]): `LOCKSCOPE_OMP_WAIT_MS`, read once at load
/// time, default 10 s (longer than the imbalance of any region measured
/// here; a region whose threads really finish seconds apart is recorded
/// with its waits cut at the limit and flagged).
fn give_up_ms() -> u32 {
    let v = GIVE_UP_MS.load(Ordering::Relaxed);
    if v == 0 {
        DEFAULT_GIVE_UP_MS
    } else {
        v
    }
}

const DEFAULT_GIVE_UP_MS: u32 = 10_000;
static GIVE_UP_MS: AtomicU32 = AtomicU32::new(0);

/// `GOMP_barrier()`: an explicit `#pragma omp barrier`, recorded as a
/// wait on the innermost recorded region's barrier object (libgomp's
/// own address for one outside any), BEGIN at the call and DONE at the
/// return. Its last arriver is found by the analyses from the arrival
/// times (libgomp does not say which thread it was).
unsafe extern "C-unwind" fn barrier_impl(site: u64, _fp: u64) {
    // SAFETY: `void GOMP_barrier(void)`, resolved like the others.
    unsafe {
        let real: unsafe extern "C-unwind" fn() =
            core::mem::transmute::<usize, unsafe extern "C-unwind" fn()>(BARRIER.addr());
        if !wrap_region(&BARRIER) || team_size() <= 1 {
            return real();
        }
        let region = REGION.with(|c| c.get());
        let addr = if region != 0 {
            region
        } else {
            BARRIER.addr() as u64
        };
        let t0 = tsc::now();
        barrier_event(phase::BEGIN, t0, addr, site, 0, false);
        real();
        let t1 = tsc::now_after();
        barrier_event(phase::DONE, t1, addr, site, 0, true);
    }
}

tramp!(GOMP_parallel(body: Body, data: *mut c_void, num_threads: libc::c_uint, flags: libc::c_uint) -> ()
    = parallel_impl ["r8", "r9"]);
tramp!(GOMP_barrier() -> () = barrier_impl ["rdi", "rsi"]);

/// True if a region started through `f` (or a barrier, `GOMP_barrier`)
/// is to be recorded: recording, and `f` and `omp_get_num_threads` are
/// libgomp's.
#[inline(always)]
fn wrap_region(f: &GompFn) -> bool {
    thread::is_recording() && f.is_libgomps() && NUM_THREADS.is_libgomps()
}

/// The other entry points of a parallel region, which GCC emits for a
/// combined `parallel for` (`GOMP_parallel_loop_*`, the loop's bounds
/// and schedule after the team size) and `parallel sections`: wrapped as
/// [`parallel_impl`] wraps `GOMP_parallel`. Plain functions, not
/// trampolines: with seven or eight arguments there is no free register
/// for the call site, so the region's site is its outlined body (a code
/// address in the function the region is in: its name and the region's
/// line).
macro_rules! parallel_variant {
    ($name:ident = $f:ident ($($a:ident : $t:ty),*)) => {
        #[doc = concat!("Interposed `", stringify!($name), "`: a parallel region (see `parallel_impl`).")]
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C-unwind" fn $name(body: Body, data: *mut c_void, $($a: $t),*) {
            // SAFETY: the real function gets the program's arguments, or
            // `region_body` and a `Region` that outlives the call (see
            // `Region`) in place of the body and its data.
            unsafe {
                let real = core::mem::transmute::<
                    usize,
                    unsafe extern "C-unwind" fn(Body, *mut c_void, $($t),*),
                >($f.addr());
                if !wrap_region(&$f) {
                    return real(body, data, $($a),*);
                }
                let r = Region {
                    body,
                    data,
                    site: body as usize as u64,
                    arrived: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
                };
                real(region_body, &r as *const Region as *mut c_void, $($a),*)
            }
        }
    };
}

use libc::{c_long, c_uint};

parallel_variant!(GOMP_parallel_sections = PARALLEL_SECTIONS(n: c_uint, count: c_uint, flags: c_uint));
parallel_variant!(GOMP_parallel_loop_static = LOOP_STATIC(
    n: c_uint, start: c_long, end: c_long, incr: c_long, chunk: c_long, flags: c_uint));
parallel_variant!(GOMP_parallel_loop_dynamic = LOOP_DYNAMIC(
    n: c_uint, start: c_long, end: c_long, incr: c_long, chunk: c_long, flags: c_uint));
parallel_variant!(GOMP_parallel_loop_guided = LOOP_GUIDED(
    n: c_uint, start: c_long, end: c_long, incr: c_long, chunk: c_long, flags: c_uint));
parallel_variant!(GOMP_parallel_loop_nonmonotonic_dynamic = LOOP_NM_DYNAMIC(
    n: c_uint, start: c_long, end: c_long, incr: c_long, chunk: c_long, flags: c_uint));
parallel_variant!(GOMP_parallel_loop_nonmonotonic_guided = LOOP_NM_GUIDED(
    n: c_uint, start: c_long, end: c_long, incr: c_long, chunk: c_long, flags: c_uint));
parallel_variant!(GOMP_parallel_loop_runtime = LOOP_RUNTIME(
    n: c_uint, start: c_long, end: c_long, incr: c_long, flags: c_uint));
parallel_variant!(GOMP_parallel_loop_nonmonotonic_runtime = LOOP_NM_RUNTIME(
    n: c_uint, start: c_long, end: c_long, incr: c_long, flags: c_uint));
parallel_variant!(GOMP_parallel_loop_maybe_nonmonotonic_runtime = LOOP_MNM_RUNTIME(
    n: c_uint, start: c_long, end: c_long, incr: c_long, flags: c_uint));
