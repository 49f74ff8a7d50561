//! The ThreadSanitizer callback ABI: memory accesses, function entry and
//! exit, and the memory intrinsics clang routes through the runtime.
//!
//! # Why assembly trampolines
//! An access must be recorded with the pc that made it. Stable Rust has no
//! `__builtin_return_address`, so each `__tsan_*` entry point is a two-
//! instruction trampoline that loads the return address (at `[rsp]` on
//! entry) into the next free argument register and tail-jumps to the Rust
//! implementation, which then sees `(args..., pc)`. The alternative, reading
//! the top of the shadow stack, gives the caller's call site rather than the
//! access, and the function entry pc is useless for "which line".

use core::ffi::c_void;
use core::mem::MaybeUninit;
use lockscope_format::{repeat, Op};
use lockscope_ring::raw::{Head, MAX_FRAMES};

use crate::{backend, config, record, tls};

/// Defines a global function `$name` that passes its return address in
/// `$reg` (the first argument register the ABI function leaves free) to
/// `$imp`.
macro_rules! trampoline {
    ($name:expr, $reg:literal, $imp:path) => {
        core::arch::global_asm!(
            concat!(
                ".pushsection .text.lockscope_tsan_tramp,\"ax\",@progbits\n",
                ".globl ", $name, "\n",
                ".type ", $name, ",@function\n",
                ".p2align 4\n",
                $name, ":\n",
                "    mov ", $reg, ", qword ptr [rsp]\n",
                "    jmp {f}\n",
                ".size ", $name, ", . - ", $name, "\n",
                ".popsection\n"
            ),
            f = sym $imp,
        );
    };
}
pub(crate) use trampoline;

// ---------------------------------------------------------------------------
// Shadow call stack
// ---------------------------------------------------------------------------

/// Function entry: `pc` is the instrumented function's return address.
#[no_mangle]
pub extern "C" fn __tsan_func_entry(pc: *mut c_void) {
    tls::with(|t| {
        let d = t.depth.get();
        if (d as usize) < tls::STACK_CAP {
            // SAFETY: this thread's own array, index checked.
            unsafe { (*t.stack.get())[d as usize] = pc as u64 };
        }
        t.depth.set(d.wrapping_add(1));
    })
}

/// Function exit. Never underflows: a longjmp or an exception path the
/// compiler did not instrument can leave entries behind, but not take more
/// than were pushed.
#[no_mangle]
pub extern "C" fn __tsan_func_exit() {
    tls::with(|t| {
        let d = t.depth.get();
        if d > 0 {
            t.depth.set(d - 1);
        }
    })
}

/// Program start (called from a constructor in every instrumented
/// translation unit; clang's runs from `.init_array.0`, possibly before
/// other constructors, so nothing here may depend on them).
#[no_mangle]
pub extern "C" fn __tsan_init() {
    config::init();
    // Starts the capture layer now (if under `lockscope record`) so that
    // the main thread's first events are not late.
    record::mode();
}

/// Ignore accesses of this thread until the matching end.
#[no_mangle]
pub extern "C" fn __tsan_ignore_thread_begin() {
    tls::with(|t| t.ignore.set(t.ignore.get().saturating_add(1)))
}

/// See [`__tsan_ignore_thread_begin`].
#[no_mangle]
pub extern "C" fn __tsan_ignore_thread_end() {
    tls::with(|t| t.ignore.set(t.ignore.get().saturating_sub(1)))
}

// ---------------------------------------------------------------------------
// Plain accesses
// ---------------------------------------------------------------------------

/// The hot path of every instrumented load and store.
#[inline(always)]
fn access(addr: u64, size: u64, pc: u64, write: bool) {
    let mode = record::mode();
    if mode == record::MODE_OFF {
        return;
    }
    let held = backend::held();
    if held == 0 && mode != record::MODE_ALL {
        return;
    }
    record_access(addr, size, pc, write, held);
}

#[inline(never)]
fn record_access(addr: u64, size: u64, pc: u64, write: bool, held: u32) {
    tls::with(|t| {
        if t.guard.get() || t.ignore.get() != 0 || size == 0 {
            return;
        }
        if t.stack_hi.get() == 0 {
            init_stack_bounds(t);
        }
        // The thread's own stack is private: PerfPlay's read and write sets
        // hold shared accesses only (its Fig. 3 `local_variable` must not
        // make a critical section look like it touched data).
        if addr >= t.stack_lo.get() && addr < t.stack_hi.get() {
            return;
        }
        if config::coalesce() {
            // Only accesses of a fixed width coalesce (their value is known
            // for reads); ranges and 16-byte accesses are always recorded.
            // The value is read only for those: an 8-byte read for a
            // 3-byte range could cross into an unmapped page.
            if fold_ok(size) {
                let (kind, value) = if write {
                    (repeat::WRITE, 0)
                } else {
                    (repeat::READ, read_value(addr, size))
                };
                if record::fold(t, addr, size | kind << 32, value, pc, held) {
                    return;
                }
            } else {
                record::flush_run_in(t);
            }
        }
        if write && held > 0 {
            // SAFETY: this thread's own log; no other reference is live.
            unsafe { (*t.wlog.get()).insert(addr, size.min(u64::from(u32::MAX)) as u32) };
        }
        let mut fr = [MaybeUninit::<u64>::uninit(); MAX_FRAMES];
        // Outside critical sections (lockset mode) the site is enough for
        // lockset and the call path would double the volume; dead writes
        // and barriers name call paths when asked to.
        let limit = if held > 0 {
            config::access_frames()
        } else {
            config::outside_frames()
        };
        let frames = tls::frames_into(t, pc, &mut fr[..limit.min(MAX_FRAMES)]);
        let (flags, args) = if size <= 255 {
            (size as u8, None)
        } else {
            (0, Some((0, size)))
        };
        let head = Head {
            tsc: lockscope_ring::tsc::now(),
            addr,
            site: pc,
            op: if write { Op::Write } else { Op::Read } as u8,
            flags,
            ..Head::default()
        };
        t.guard.set(true);
        backend::emit_sampled(head, args, frames);
        t.guard.set(false);
    })
}

#[inline(always)]
fn fold_ok(size: u64) -> bool {
    matches!(size, 1 | 2 | 4 | 8)
}

/// The value at `addr` (1, 2, 4 or 8 bytes), read just before the
/// program reads it (so the location is mapped and readable).
#[inline(always)]
fn read_value(addr: u64, size: u64) -> u64 {
    // SAFETY: the program is about to read these bytes (the callback comes
    // right before its load); unaligned volatile reads of at most 8 bytes.
    unsafe {
        let p = addr as *const u8;
        match size {
            1 => u64::from(p.read_volatile()),
            2 => u64::from((p as *const u16).read_unaligned()),
            4 => u64::from((p as *const u32).read_unaligned()),
            _ => (p as *const u64).read_unaligned(),
        }
    }
}

/// Reads this thread's stack bounds (once per thread, on its first
/// recorded access). `pthread_getattr_np` may allocate (it reads
/// /proc/self/maps for the main thread): the guard keeps that out of the
/// trace.
#[cold]
fn init_stack_bounds(t: &tls::Tls) {
    t.guard.set(true);
    let (mut lo, mut hi) = (1u64, 1u64); // "known, empty" if the query fails
                                         // SAFETY: plain libc calls on a zeroed attr object we own.
    unsafe {
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) == 0 {
            let mut base: *mut c_void = core::ptr::null_mut();
            let mut size: libc::size_t = 0;
            if libc::pthread_attr_getstack(&attr, &mut base, &mut size) == 0 {
                lo = base as u64;
                hi = lo + size as u64;
            }
            libc::pthread_attr_destroy(&mut attr);
        }
    }
    t.stack_lo.set(lo);
    t.stack_hi.set(hi);
    t.guard.set(false);
}

macro_rules! sized_access {
    ($( $name:literal, $imp:ident, $size:literal, $write:literal; )*) => {$(
        extern "C" fn $imp(addr: *const c_void, pc: u64) {
            access(addr as u64, $size, pc, $write);
        }
        trampoline!($name, "rsi", $imp);
    )*};
}

sized_access! {
    "__tsan_read1", read1, 1, false;
    "__tsan_read2", read2, 2, false;
    "__tsan_read4", read4, 4, false;
    "__tsan_read8", read8, 8, false;
    "__tsan_read16", read16, 16, false;
    "__tsan_write1", write1, 1, true;
    "__tsan_write2", write2, 2, true;
    "__tsan_write4", write4, 4, true;
    "__tsan_write8", write8, 8, true;
    "__tsan_write16", write16, 16, true;
    "__tsan_unaligned_read1", uread1, 1, false;
    "__tsan_unaligned_read2", uread2, 2, false;
    "__tsan_unaligned_read4", uread4, 4, false;
    "__tsan_unaligned_read8", uread8, 8, false;
    "__tsan_unaligned_read16", uread16, 16, false;
    "__tsan_unaligned_write1", uwrite1, 1, true;
    "__tsan_unaligned_write2", uwrite2, 2, true;
    "__tsan_unaligned_write4", uwrite4, 4, true;
    "__tsan_unaligned_write8", uwrite8, 8, true;
    "__tsan_unaligned_write16", uwrite16, 16, true;
    "__tsan_vptr_read8", vptr_read8, 8, false;
    "__tsan_vptr_read", vptr_read, 8, false;
}

macro_rules! pc_access {
    ($( $name:ident, $size:literal, $write:literal; )*) => {$(
        /// Access with an explicit pc (`-tsan-instrument-func-entry-exit`
        /// variants).
        #[no_mangle]
        pub extern "C" fn $name(addr: *const c_void, pc: *const c_void) {
            access(addr as u64, $size, pc as u64, $write);
        }
    )*};
}

pc_access! {
    __tsan_read1_pc, 1, false;
    __tsan_read2_pc, 2, false;
    __tsan_read4_pc, 4, false;
    __tsan_read8_pc, 8, false;
    __tsan_read16_pc, 16, false;
    __tsan_write1_pc, 1, true;
    __tsan_write2_pc, 2, true;
    __tsan_write4_pc, 4, true;
    __tsan_write8_pc, 8, true;
    __tsan_write16_pc, 16, true;
}

extern "C" fn read_range(addr: *const c_void, size: usize, pc: u64) {
    access(addr as u64, size as u64, pc, false);
}
trampoline!("__tsan_read_range", "rdx", read_range);

extern "C" fn write_range(addr: *const c_void, size: usize, pc: u64) {
    access(addr as u64, size as u64, pc, true);
}
trampoline!("__tsan_write_range", "rdx", write_range);

/// A vtable pointer store: recorded as an 8-byte write.
extern "C" fn vptr_update(p: *mut *mut c_void, _new: *mut c_void, pc: u64) {
    access(p as u64, 8, pc, true);
}
trampoline!("__tsan_vptr_update", "rdx", vptr_update);

// ---------------------------------------------------------------------------
// Memory intrinsics (clang routes them through the runtime, which must do
// the work itself).
// ---------------------------------------------------------------------------

extern "C" fn memcpy_imp(dst: *mut c_void, src: *const c_void, n: usize, pc: u64) -> *mut c_void {
    access(src as u64, n as u64, pc, false);
    access(dst as u64, n as u64, pc, true);
    // SAFETY: the program's own memcpy call, forwarded unchanged.
    unsafe { libc::memcpy(dst, src, n) }
}
trampoline!("__tsan_memcpy", "rcx", memcpy_imp);

extern "C" fn memmove_imp(dst: *mut c_void, src: *const c_void, n: usize, pc: u64) -> *mut c_void {
    access(src as u64, n as u64, pc, false);
    access(dst as u64, n as u64, pc, true);
    // SAFETY: the program's own memmove call, forwarded unchanged.
    unsafe { libc::memmove(dst, src, n) }
}
trampoline!("__tsan_memmove", "rcx", memmove_imp);

extern "C" fn memset_imp(dst: *mut c_void, c: i32, n: usize, pc: u64) -> *mut c_void {
    access(dst as u64, n as u64, pc, true);
    // SAFETY: the program's own memset call, forwarded unchanged.
    unsafe { libc::memset(dst, c, n) }
}
trampoline!("__tsan_memset", "rcx", memset_imp);
