//! The libc `syscall` entry, for futex waits and wakes: how locks that
//! bypass pthreads (Rust's std::sync, custom futex locks) reach the
//! kernel. Only contended operations get here; a lock is known by its
//! futex word's address.
//!
//! `syscall` is C-variadic, which stable Rust cannot define. On x86-64
//! SysV a variadic callee receives integer arguments exactly like a
//! 7-argument function (six in registers, the seventh on the stack), so
//! the trampoline below passes them on unchanged and adds the call site
//! and frame pointer as arguments 8 and 9 (a known preload pitfall: Rust std
//! reaches `syscall@GLIBC_2.2.5` through the GOT).

use libc::c_long;
use lockscope_capture::thread;
use lockscope_format::{phase, Op};
use lockscope_ring::tsc;

use crate::common::{emit, errno, guarded, set_errno};
use crate::real::real;

real!(real_syscall = "syscall": fn(n: c_long, a1: c_long, a2: c_long, a3: c_long, a4: c_long, a5: c_long, a6: c_long) -> c_long);

const FUTEX_WAIT: i32 = 0;
const FUTEX_WAKE: i32 = 1;
const FUTEX_WAIT_BITSET: i32 = 9;
const FUTEX_WAKE_BITSET: i32 = 10;
/// FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME: not part of the command.
const FUTEX_FLAGS: i32 = 128 | 256;

/// Interposed `syscall`: forwards every call; records futex waits
/// (BEGIN with arg = expected value, arg2 = futex op; DONE, or FAIL with
/// arg = errno) and wakes (DONE with arg = threads woken, at the call
/// time). errno is exactly what the real call left.
#[cfg_attr(not(test), no_mangle)]
#[unsafe(naked)]
pub unsafe extern "C" fn syscall(
    n: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
) -> c_long {
    // Entry: [rsp] = return address, [rsp+8] = 7th argument. Build
    // [rsp] = 7th, [rsp+8] = site, [rsp+16] = rbp for the hook, keeping
    // rsp 16-byte aligned at the call (entry rsp = 8 mod 16, minus 40).
    core::arch::naked_asm!(
        ".cfi_startproc",
        "sub rsp, 40",
        ".cfi_adjust_cfa_offset 40",
        "mov rax, qword ptr [rsp + 48]",
        "mov qword ptr [rsp], rax",
        "mov rax, qword ptr [rsp + 40]",
        "mov qword ptr [rsp + 8], rax",
        "mov qword ptr [rsp + 16], rbp",
        "call {imp}",
        "add rsp, 40",
        ".cfi_adjust_cfa_offset -40",
        "ret",
        ".cfi_endproc",
        imp = sym syscall_impl,
    )
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn syscall_impl(
    n: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
    a6: c_long,
    site: u64,
    fp: u64,
) -> c_long {
    // SAFETY: the only unsafe operations are the calls of the real
    // `syscall(3)` with the program's arguments, unchanged: the caller
    // (the program, through the trampoline) upholds syscall's contract for
    // them. The recorder only copies the argument values (`a1` as the
    // futex word's address, never dereferenced here) into events.
    unsafe {
        if n != libc::SYS_futex || !thread::is_recording() {
            return real_syscall(n, a1, a2, a3, a4, a5, a6);
        }
        let op = a2 as i32;
        match op & !FUTEX_FLAGS {
            FUTEX_WAIT | FUTEX_WAIT_BITSET => {
                match thread::recorder() {
                    None => return real_syscall(n, a1, a2, a3, a4, a5, a6),
                    Some(mut g) => {
                        let t0 = tsc::now();
                        guarded(|| {
                            emit(
                                &mut g,
                                Op::FutexWait,
                                phase::BEGIN,
                                t0,
                                a1 as u64,
                                site,
                                fp,
                                u64::from(a3 as u32),
                                op as u32 as u64,
                                // Keeps its call path: a wait that never
                                // returns (a deadlocked Rust Mutex) has no
                                // other event.
                                true,
                            )
                        });
                    }
                }
                let r = real_syscall(n, a1, a2, a3, a4, a5, a6);
                let e = errno();
                if let Some(mut g) = thread::recorder() {
                    let t1 = tsc::now();
                    guarded(|| {
                        if r == 0 {
                            emit(
                                &mut g,
                                Op::FutexWait,
                                phase::DONE,
                                t1,
                                a1 as u64,
                                site,
                                fp,
                                0,
                                0,
                                true,
                            )
                        } else {
                            emit(
                                &mut g,
                                Op::FutexWait,
                                phase::FAIL,
                                t1,
                                a1 as u64,
                                site,
                                fp,
                                e as u64,
                                0,
                                true,
                            )
                        }
                    });
                }
                set_errno(e);
                r
            }
            FUTEX_WAKE | FUTEX_WAKE_BITSET => {
                let Some(mut g) = thread::recorder() else {
                    return real_syscall(n, a1, a2, a3, a4, a5, a6);
                };
                let t0 = tsc::now();
                let r = real_syscall(n, a1, a2, a3, a4, a5, a6);
                let e = errno();
                guarded(|| {
                    if r >= 0 {
                        emit(
                            &mut g,
                            Op::FutexWake,
                            phase::DONE,
                            t0,
                            a1 as u64,
                            site,
                            fp,
                            r as u64,
                            0,
                            // A wake that woke a thread is the release
                            // its wait is blamed on: its call path names
                            // the holder's code (the site is the runtime's
                            // futex wrapper, `[no user frame]` alone).
                            // A wake that found no sleeper is not
                            // contention and stays cheap.
                            r > 0,
                        )
                    } else {
                        emit(
                            &mut g,
                            Op::FutexWake,
                            phase::FAIL,
                            t0,
                            a1 as u64,
                            site,
                            fp,
                            e as u64,
                            0,
                            false,
                        )
                    }
                });
                set_errno(e);
                r
            }
            _ => real_syscall(n, a1, a2, a3, a4, a5, a6),
        }
    }
}
