//! Thread lifecycle hooks: create (with a start trampoline that emits
//! ThreadStart/ThreadExit in the new thread), exit, join, and names.

use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use libc::{c_char, c_int, c_void, pthread_attr_t, pthread_t};
use lockscope_capture::thread;
use lockscope_format::{phase, Op};
use lockscope_ring::raw::{Head, OP_THREAD_NAME};
use lockscope_ring::tsc;

use crate::common::{emit, guarded, tramp};
use crate::real::real;

extern "C" {
    fn pthread_attr_getdetachstate(a: *const pthread_attr_t, s: *mut c_int) -> c_int;
}

type StartFn = unsafe extern "C-unwind" fn(*mut c_void) -> *mut c_void;

real!(real_create = "pthread_create": fn(t: *mut pthread_t, a: *const pthread_attr_t, f: StartFn, arg: *mut c_void) -> c_int);
real!(real_join = "pthread_join": fn(t: pthread_t, r: *mut *mut c_void) -> c_int);
real!(real_exit = "pthread_exit": fn(r: *mut c_void) -> ());
real!(real_setname = "pthread_setname_np": fn(t: pthread_t, n: *const c_char) -> c_int);

/// What the start trampoline needs; malloc'd by the creating thread,
/// freed by the new one.
struct Start {
    f: StartFn,
    arg: *mut c_void,
    parent_tid: u32,
    /// Created joinable: its ring is unmapped by whoever joins it.
    joinable: bool,
}

/// Offset of `tid` inside glibc's `struct pthread`, from the descriptor
/// glibc exports for libthread_db (`_thread_db_pthread_tid`: bit size,
/// count, offset). u32::MAX: unknown (then tids of other threads are 0).
static TID_OFFSET: AtomicU32 = AtomicU32::new(0);

fn tid_offset() -> Option<usize> {
    let mut off = TID_OFFSET.load(Ordering::Relaxed);
    if off == 0 {
        // SAFETY: dlvsym with NUL-terminated names; the symbol, if
        // present, is a 3 x u32 read-only array.
        off = unsafe {
            let d = libc::dlvsym(
                libc::RTLD_DEFAULT,
                c"_thread_db_pthread_tid".as_ptr(),
                c"GLIBC_PRIVATE".as_ptr(),
            ) as *const u32;
            if !d.is_null() && *d == 32 && *d.add(1) == 1 && *d.add(2) < 4096 {
                *d.add(2) + 1
            } else {
                u32::MAX
            }
        };
        TID_OFFSET.store(off, Ordering::Relaxed);
    }
    (off != u32::MAX).then(|| off as usize - 1)
}

/// Slots of the pthread_t -> kernel tid table (power of two).
const TID_SLOTS: usize = 4096;
/// Probes before the table counts as full for a key.
const TID_PROBES: usize = 32;
/// Keys (`pthread_t` values, 0 = free) and the kernel tid of the thread
/// that last started under each. Filled by every thread at its start, read
/// by joins. Why a table: the kernel clears the tid in glibc's descriptor
/// when the thread exits (CLONE_CHILD_CLEARTID, which is how join waits),
/// so a join of a thread that has already exited read 0 from the
/// descriptor (every join after the first was once recorded as tid 0).
/// Lock-free and allocation-free: open addressing, entries are only ever
/// added or overwritten (a reused `pthread_t` maps to its newest thread).
static TID_KEYS: [AtomicUsize; TID_SLOTS] = [const { AtomicUsize::new(0) }; TID_SLOTS];
static TID_VALS: [AtomicU32; TID_SLOTS] = [const { AtomicU32::new(0) }; TID_SLOTS];

fn tid_slot(key: usize, k: usize) -> usize {
    // Fibonacci hashing of the descriptor address (its low bits are
    // alignment).
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_left(20)
        .wrapping_add(k))
        & (TID_SLOTS - 1)
}

/// Remembers that the thread `t` has kernel tid `tid` (called by the
/// thread itself at its start). A full table keeps nothing: joins then
/// read the descriptor as before.
fn remember_tid(t: pthread_t, tid: u32) {
    let key = t as usize;
    if key == 0 {
        return;
    }
    for k in 0..TID_PROBES {
        let i = tid_slot(key, k);
        let cur = TID_KEYS[i].load(Ordering::Acquire);
        let mine = cur == key
            || (cur == 0
                && TID_KEYS[i]
                    .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
                    .map_or_else(|now| now == key, |_| true));
        if mine {
            TID_VALS[i].store(tid, Ordering::Release);
            return;
        }
    }
}

/// The tid `remember_tid` stored for `t`, if any.
fn remembered_tid(t: pthread_t) -> Option<u32> {
    let key = t as usize;
    for k in 0..TID_PROBES {
        let i = tid_slot(key, k);
        match TID_KEYS[i].load(Ordering::Acquire) {
            0 => return None,
            cur if cur == key => return Some(TID_VALS[i].load(Ordering::Acquire)),
            _ => {}
        }
    }
    None
}

/// Kernel tid of the thread `t` before joining it: glibc's descriptor
/// holds it while the thread runs (CLONE_PARENT_SETTID); once it has
/// exited the descriptor says 0 and the tid the thread remembered at its
/// start is used. The descriptor comes first: a `pthread_t` reused by a
/// thread that has not run its start yet still has the previous thread's
/// entry in the table.
unsafe fn join_tid(t: pthread_t) -> u32 {
    // SAFETY: the caller passes a joinable thread's handle, whose
    // descriptor stays mapped until the join returns.
    let live = unsafe { tid_of(t) };
    if live != 0 {
        return live;
    }
    remembered_tid(t).unwrap_or(0)
}

/// Kernel tid of a thread that is known to be alive (not yet joined):
/// glibc's descriptor holds it from the moment clone returns
/// (CLONE_PARENT_SETTID).
///
/// # Safety
/// `t` must be the handle of a thread that has not been joined (or
/// detached and gone): its descriptor must still be mapped.
unsafe fn tid_of(t: pthread_t) -> u32 {
    // SAFETY: pthread_self and gettid have no preconditions. `t` is the
    // handle of a thread not yet joined (contract), so its glibc
    // descriptor (`t` is its address) is mapped; `tid_offset` is the
    // offset of its 4-byte `tid` field that glibc itself publishes for
    // libthread_db (checked: a 32-bit field, offset below 4096), so the
    // read stays inside the descriptor. A plain read of a field the
    // kernel may clear concurrently: at worst we read 0 (then the caller
    // uses the tid remembered at the thread's start).
    unsafe {
        if t == libc::pthread_self() {
            return libc::gettid() as u32;
        }
        match tid_offset() {
            Some(off) => *((t as usize + off) as *const i32) as u32,
            None => 0,
        }
    }
}

unsafe extern "C-unwind" fn start_trampoline(p: *mut c_void) -> *mut c_void {
    // SAFETY: `p` is the `Start` that create_impl malloc'ed, wrote and
    // passed to the real pthread_create for this thread alone: read once
    // here, then freed once (no other reference exists). pthread_self and
    // gettid have no preconditions. `s.f(s.arg)` is the program's own start
    // routine with its own argument, called exactly as pthread_create would
    // have.
    unsafe {
        let s = core::ptr::read(p as *const Start);
        libc::free(p);
        remember_tid(libc::pthread_self(), libc::gettid() as u32);
        thread::thread_started(s.parent_tid);
        if let Some(mut g) = thread::recorder() {
            let t = tsc::now();
            guarded(|| {
                g.event(
                    Op::ThreadStart as u8,
                    phase::DONE,
                    t,
                    0,
                    s.f as usize as u64,
                    s.parent_tid,
                )
            });
        }
        // The start routine runs outside any guard and catch_unwind: it may
        // end in pthread_exit or cancellation, which unwind through this
        // frame (hence "C-unwind" and no destructors here).
        let r = (s.f)(s.arg);
        thread_exit_event(0, s.joinable);
        r
    }
}

/// Last event of the calling thread, and the ring's end stamp. A joinable
/// thread also hands its ring to the joiner for unmapping.
fn thread_exit_event(site: u64, joinable: bool) {
    if let Some(mut g) = thread::recorder() {
        guarded(|| {
            let t = g.exit_stamp();
            g.event(Op::ThreadExit as u8, phase::DONE, t, 0, site, 0);
            g.stamp_exit(t);
            // Asked now, not at creation: `pthread_detach` may have
            // detached a thread created joinable.
            if joinable && thread::quietly(self_joinable) {
                g.retire_ring();
            } else {
                g.retire_detached_ring();
            }
        });
    }
}

/// True if the calling thread is joinable (pthread_exit does not know how
/// the thread was created).
fn self_joinable() -> bool {
    // SAFETY: pthread_getattr_np fills a zeroed attr we then destroy.
    unsafe {
        let mut a: pthread_attr_t = core::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut a) != 0 {
            return false;
        }
        let mut d = 0;
        pthread_attr_getdetachstate(&a, &mut d);
        libc::pthread_attr_destroy(&mut a);
        d == libc::PTHREAD_CREATE_JOINABLE
    }
}

unsafe extern "C-unwind" fn create_impl(
    t: *mut pthread_t,
    attr: *const pthread_attr_t,
    f: StartFn,
    arg: *mut c_void,
    site: u64,
    fp: u64,
) -> c_int {
    // SAFETY: real_create is the real pthread_create, called with the
    // program's arguments (its contract is upheld by the program) or with
    // our trampoline and a `Start` we malloc'ed (ownership passes to the
    // new thread, or back to us when creation fails: freed once either
    // way). `attr`, when not null, is the program's initialised attribute
    // (pthread_create's contract), only read by getdetachstate. `*t` is
    // read after a successful create, which wrote it.
    unsafe {
        let parent_tid = match thread::recorder() {
            None => return real_create(t, attr, f, arg),
            Some(mut g) => {
                // A run-queue sample before the call, when due (see
                // Guard::boundary_stamp): a thread that only
                // creates and joins threads, often the main thread, is
                // otherwise never sampled. Before the call, not after:
                // the new thread may start during it, and the replay
                // places that start inside the segment that ends at the
                // creation; a sample after the call cut that segment to a
                // few microseconds and moved the start of every thread
                // created late (8 ms in one recording of the mutex
                // fixture).
                guarded(|| g.boundary_stamp(tsc::now));
                g.tid()
            }
        };
        // One small allocation per thread creation, outside the event path
        // (pthread_create allocates a stack anyway).
        let s = libc::malloc(core::mem::size_of::<Start>()) as *mut Start;
        if s.is_null() {
            return real_create(t, attr, f, arg);
        }
        let mut detached = 0;
        if !attr.is_null() {
            pthread_attr_getdetachstate(attr, &mut detached);
        }
        let joinable = detached != libc::PTHREAD_CREATE_DETACHED;
        s.write(Start {
            f,
            arg,
            parent_tid,
            joinable,
        });
        let rc = real_create(t, attr, start_trampoline, s as *mut c_void);
        if rc != 0 {
            libc::free(s as *mut c_void);
            return rc;
        }
        if let Some(mut g) = thread::recorder() {
            let now = tsc::now();
            guarded(|| {
                // A detached thread may already be gone and its descriptor
                // reused: read the tid only of joinable threads.
                let tid = if joinable { tid_of(*t) } else { 0 };
                emit(
                    &mut g,
                    Op::ThreadCreate,
                    phase::DONE,
                    now,
                    *t,
                    site,
                    fp,
                    u64::from(tid),
                    0,
                    false,
                );
            });
        }
        rc
    }
}

unsafe extern "C-unwind" fn join_impl(
    t: pthread_t,
    r: *mut *mut c_void,
    site: u64,
    fp: u64,
) -> c_int {
    // SAFETY: `t` is the handle the program passes to pthread_join, i.e. a
    // joinable thread not yet joined (pthread_join's contract): join_tid
    // may read its descriptor before the real join. real_join forwards
    // the program's arguments unchanged. release_joined runs only after the
    // real join returned 0: the thread and its destructors are gone.
    unsafe {
        let tid;
        match thread::recorder() {
            None => return real_join(t, r),
            Some(mut g) => {
                // Read before the join: afterwards the descriptor is freed.
                tid = join_tid(t);
                guarded(|| {
                    let t0 = g.boundary_stamp(tsc::now);
                    emit(
                        &mut g,
                        Op::ThreadJoin,
                        phase::BEGIN,
                        t0,
                        t,
                        site,
                        fp,
                        u64::from(tid),
                        0,
                        // Keeps its call path: a join that never returns
                        // (a deadlock) has no other event.
                        true,
                    )
                });
            }
        }
        let rc = real_join(t, r);
        // Stamped before the joined thread's ring is unmapped: unmapping a
        // grown ring (up to 16 MiB, a TLB shootdown) is the recorder's
        // work, not the join's; stamped after it, every join looked
        // milliseconds longer than the thread it waited for, and a replay
        // could not reproduce that.
        let t1 = tsc::now();
        if rc == 0 {
            // The thread is gone, destructors and all: its ring can go too.
            thread::release_joined(t);
        }
        if let Some(mut g) = thread::recorder() {
            guarded(|| {
                if rc == 0 {
                    emit(
                        &mut g,
                        Op::ThreadJoin,
                        phase::DONE,
                        t1,
                        t,
                        site,
                        fp,
                        u64::from(tid),
                        0,
                        true,
                    )
                } else {
                    emit(
                        &mut g,
                        Op::ThreadJoin,
                        phase::FAIL,
                        t1,
                        t,
                        site,
                        fp,
                        rc as u64,
                        0,
                        true,
                    )
                }
            });
        }
        rc
    }
}

unsafe extern "C-unwind" fn exit_impl(r: *mut c_void, site: u64, _fp: u64) {
    // SAFETY: gettid has no preconditions; real_exit is the real
    // pthread_exit with the program's return value (its contract is the
    // program's); abort is never reached.
    unsafe {
        if thread::is_recording() {
            // The main thread's ring stays: the process may go on in other
            // threads and exit() will still record into it.
            let main = libc::gettid() as u32 == lockscope_capture::process::pid();
            thread_exit_event(site, !main && self_joinable());
        }
        real_exit(r);
        // pthread_exit does not return.
        libc::abort();
    }
}

unsafe extern "C-unwind" fn setname_impl(
    t: pthread_t,
    name: *const c_char,
    site: u64,
    _fp: u64,
) -> c_int {
    // SAFETY: real_setname forwards the program's arguments unchanged.
    // `name` is read (CStr::from_ptr) only after the real call succeeded,
    // which means it was a valid NUL-terminated string (the real function
    // read it; pthread_setname_np's contract), not null (checked), and the
    // program does not free it during its own call. `tid_of(t)`: `t`
    // named a live thread (the call succeeded), whose descriptor is mapped.
    unsafe {
        let rc = real_setname(t, name);
        if rc != 0 || name.is_null() {
            return rc;
        }
        if let Some(mut g) = thread::recorder() {
            let now = tsc::now();
            guarded(|| {
                let mut b = [0u8; 16];
                let s = core::ffi::CStr::from_ptr(name).to_bytes();
                let n = s.len().min(15);
                b[..n].copy_from_slice(&s[..n]);
                let lo = u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]));
                let hi = u64::from_le_bytes(b[8..].try_into().unwrap_or([0; 8]));
                // addr = tid of the thread that was named (a thread may name
                // another one, e.g. a parent naming its child).
                let head = Head {
                    tsc: now,
                    addr: u64::from(tid_of(t)),
                    site,
                    op: OP_THREAD_NAME,
                    ..Head::default()
                };
                g.emit(head, Some((lo, hi)), &[]);
            });
        }
        rc
    }
}

tramp!(pthread_create(t: *mut pthread_t, a: *const pthread_attr_t, f: StartFn, arg: *mut c_void) -> c_int
    = create_impl ["r8", "r9"]);
tramp!(pthread_join(t: pthread_t, r: *mut *mut c_void) -> c_int = join_impl ["rdx", "rcx"]);
tramp!(pthread_exit(r: *mut c_void) -> () = exit_impl ["rsi", "rdx"]);
tramp!(pthread_setname_np(t: pthread_t, n: *const c_char) -> c_int = setname_impl ["rdx", "rcx"]);
