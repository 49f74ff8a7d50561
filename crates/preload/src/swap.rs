//! Mutexes replaced by `lockscope run --lock ALG` (`liblockscope_swap.so`,
//! preloaded after this library: `lockscope record -- lockscope run ...`
//! gives `LD_PRELOAD=liblockscope_preload.so:liblockscope_swap.so`, so
//! every mutex call reaches our hook first and our forwarded call reaches
//! the swapped lock).
//!
//! Two things change for such a mutex. Its words are the algorithm's, not
//! glibc's: whether a lock call is about to wait is asked of the swap
//! library (`lockscope_swap_mutex_busy`), since glibc's layout read on a
//! ticket or CLH lock says "held" for every acquisition. And it is named
//! with its algorithm: the process file's header carries the name
//! (`lockscope_swap_lock_name`), which the report shows as the kind
//! (`mutex (ttas)`). Its waiting, spinning and sleeping alike, is the mutex
//! call's, from the attempt to the return: the swap library sleeps with
//! raw futex system calls that never reach our `syscall` hook.
//!
//! The swap library is found with `dlsym(RTLD_DEFAULT)` once, from our
//! constructor (every preloaded library is loaded before any constructor
//! runs); without it (the usual case) the hooks pay one relaxed load.

use core::sync::atomic::{AtomicUsize, Ordering};
use libc::{c_char, c_int, pthread_mutex_t};
use lockscope_ring::session::SWAPPED_LOCK_BYTES;

type BusyFn = unsafe extern "C" fn(*mut pthread_mutex_t) -> c_int;
type NameFn = extern "C" fn() -> *const c_char;

/// `lockscope_swap_mutex_busy`, or 0 (no swap library, or not looked up
/// yet: before our constructor nothing is recorded).
static BUSY: AtomicUsize = AtomicUsize::new(0);
/// `lockscope_swap_lock_name`, or 0.
static NAME: AtomicUsize = AtomicUsize::new(0);

/// Looks the swap library up (constructor, or a runtime's `init`).
pub(crate) fn find() {
    // SAFETY: dlsym with NUL-terminated names; glibc 2.36's dlsym does not
    // allocate. errno is kept: the program must not see our lookups.
    unsafe {
        let e = *libc::__errno_location();
        let busy = libc::dlsym(libc::RTLD_DEFAULT, c"lockscope_swap_mutex_busy".as_ptr());
        let name = libc::dlsym(libc::RTLD_DEFAULT, c"lockscope_swap_lock_name".as_ptr());
        *libc::__errno_location() = e;
        // Both or neither: a library that exports one only is not ours.
        if !busy.is_null() && !name.is_null() {
            NAME.store(name as usize, Ordering::Relaxed);
            BUSY.store(busy as usize, Ordering::Release);
        }
    }
}

/// For a mutex the swap library replaced: whether a lock call now would
/// wait. `None` for glibc's mutexes (its words tell), and always without
/// a swap library.
///
/// # Safety
/// `m` points to the program's `pthread_mutex_t` (readable).
#[inline(always)]
pub(crate) unsafe fn mutex_busy(m: *mut pthread_mutex_t) -> Option<bool> {
    let f = BUSY.load(Ordering::Relaxed);
    if f == 0 {
        return None;
    }
    // SAFETY: BUSY holds 0 or the address dlsym gave for
    // `lockscope_swap_mutex_busy`, whose signature is BusyFn; its contract
    // (a readable mutex) is ours.
    let r = unsafe { core::mem::transmute::<usize, BusyFn>(f)(m) };
    (r >= 0).then_some(r == 1)
}

/// Writes the swapped lock's name into the process header's field
/// (all zero when the mutexes are glibc's); see
/// `lockscope_capture::process::set_lock_namer`.
pub(crate) fn lock_name(out: &mut [u8; SWAPPED_LOCK_BYTES]) {
    let f = NAME.load(Ordering::Relaxed);
    if f == 0 {
        return;
    }
    // SAFETY: NAME holds the address dlsym gave for
    // `lockscope_swap_lock_name` (signature NameFn), which returns null or
    // a static NUL-terminated string.
    let p = unsafe { core::mem::transmute::<usize, NameFn>(f)() };
    if p.is_null() {
        return;
    }
    // SAFETY: as above: a NUL-terminated static string.
    let name = unsafe { core::ffi::CStr::from_ptr(p) }.to_bytes();
    // Keep a NUL at the end: a name that does not fit is cut.
    let n = name.len().min(out.len() - 1);
    out[..n].copy_from_slice(&name[..n]);
}
