//! Pieces shared by all hooks: the call-site trampolines, panic
//! containment, and event emission with optional call paths.

use core::panic::AssertUnwindSafe;

use lockscope_capture::process;
use lockscope_capture::thread::Guard;
use lockscope_format::Op;
use lockscope_ring::raw::{Head, MAX_FRAMES};

/// Defines an interposed symbol as a naked trampoline that appends the
/// call site (its own return address, read at `[rsp]`) and the caller's
/// frame pointer (`rbp`) as two extra arguments, then tail-jumps to the
/// Rust hook. Stable Rust has no `__builtin_return_address`; this costs
/// two register moves, and the hook's frame sits directly on the
/// caller's, so unwinding (thread cancellation inside `pthread_cond_wait`)
/// sees an ordinary call. `$site`/`$fp` name the registers after the real
/// arguments (SysV order rdi, rsi, rdx, rcx, r8, r9).
macro_rules! tramp {
    ($name:ident ( $($a:ident : $t:ty),* ) -> $r:ty = $imp:ident [$site:literal, $fp:literal]) => {
        #[doc = concat!("Interposed `", stringify!($name), "`: records, then calls the real one.")]
        #[cfg_attr(not(test), no_mangle)]
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
            core::arch::naked_asm!(
                concat!("mov ", $site, ", qword ptr [rsp]"),
                concat!("mov ", $fp, ", rbp"),
                "jmp {imp}",
                imp = sym $imp,
            )
        }
    };
}
pub(crate) use tramp;

/// Runs recording code; a panic disables the recorder for good (and says
/// so in the process header) instead of unwinding into C or aborting.
#[inline(always)]
pub(crate) fn guarded<R>(f: impl FnOnce() -> R) -> Option<R> {
    match std::panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => Some(r),
        Err(_) => {
            process::disable();
            None
        }
    }
}

/// Emits a synchronization event. `arg` goes in the head's `aux` when it
/// fits in 32 bits and there is no `arg2`, else in an args slot. The call
/// path is attached when the stacks mode asks for it (`blocked`: the call
/// had to wait).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn emit(
    g: &mut Guard,
    op: Op,
    flags: u8,
    tsc: u64,
    addr: u64,
    site: u64,
    fp: u64,
    arg: u64,
    arg2: u64,
    blocked: bool,
) {
    let (head, args) = pack(op, flags, tsc, addr, site, arg, arg2);
    if g.wants_path(blocked) {
        emit_with_path(g, head, args, site, fp);
    } else {
        g.emit(head, args, &[]);
    }
}

/// [`emit`] for the acquisition that opens a critical section: a
/// one-slot event (no args slot, no call path) is held back and published
/// with the thread's next event (the release, recorded after the real
/// unlock), so that the section itself is not lengthened by the ring
/// write (`Guard::defer` says why and what it measured). An event that
/// needs more (an argument over 32 bits, or a call path: a wait's can
/// only be walked now, while the caller's frame is live) is written at
/// once, as [`emit`] writes it.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn emit_opening(
    g: &mut Guard,
    op: Op,
    flags: u8,
    tsc: u64,
    addr: u64,
    site: u64,
    fp: u64,
    arg: u64,
    blocked: bool,
) {
    let (head, args) = pack(op, flags, tsc, addr, site, arg, 0);
    if g.wants_path(blocked) {
        emit_with_path(g, head, args, site, fp);
    } else if args.is_some() {
        g.emit(head, args, &[]);
    } else {
        g.defer(head);
    }
}

/// Emits an event with a call path the caller already has (`frames`, the
/// site first): packed as [`emit`] packs its events.
#[allow(clippy::too_many_arguments)]
pub(crate) fn emit_frames(
    g: &mut Guard,
    op: Op,
    flags: u8,
    tsc: u64,
    addr: u64,
    arg: u64,
    arg2: u64,
    frames: &[u64],
) {
    let site = frames.first().copied().unwrap_or(0);
    let (head, args) = pack(op, flags, tsc, addr, site, arg, arg2);
    g.emit(head, args, frames);
}

/// The head of an event and its args slot: `arg` goes in the head's `aux`
/// when it fits in 32 bits and there is no `arg2`.
#[inline(always)]
fn pack(
    op: Op,
    flags: u8,
    tsc: u64,
    addr: u64,
    site: u64,
    arg: u64,
    arg2: u64,
) -> (Head, Option<(u64, u64)>) {
    let head = Head {
        tsc,
        addr,
        site,
        op: op as u8,
        flags,
        aux: arg as u32,
        ..Head::default()
    };
    let args = (arg > u64::from(u32::MAX) || arg2 != 0).then_some((arg, arg2));
    (head, args)
}

#[cold]
#[inline(never)]
fn emit_with_path(g: &mut Guard, head: Head, args: Option<(u64, u64)>, site: u64, fp: u64) {
    let mut frames = [0u64; MAX_FRAMES];
    let n = g.call_path(site, fp, &mut frames);
    g.emit(head, args, &frames[..n]);
}

/// The calling thread's errno.
#[inline(always)]
pub(crate) fn errno() -> i32 {
    // SAFETY: errno's location is always valid for the calling thread.
    unsafe { *libc::__errno_location() }
}

/// Sets the calling thread's errno.
#[inline(always)]
pub(crate) fn set_errno(e: i32) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e };
}
