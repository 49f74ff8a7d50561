//! Atomic operations of the ThreadSanitizer ABI.
//!
//! The callbacks must perform the operation themselves. Every operation is
//! done with sequential consistency whatever order the program asked for:
//! stronger ordering is always correct, and on x86-64 it costs nothing for
//! loads and read-modify-writes (stores become `xchg`). Stores are done as
//! swaps so that the old value is exact (capture-facts.md). Weak
//! compare-exchange is done as strong, which a weak one is allowed to be.
//!
//! Each operation, when recording, becomes one event: `flags` = log2(width)
//! | order << 3 (| 0x40 when a compare-exchange failed, | 0x80 for a weak
//! one), `arg` = old value, `arg2` = new value (128-bit operations record
//! the low 64 bits of each). The failure bit is not in the phase bits
//! because those hold the width here.
//!
//! One block per width, all of the same shape.

#![allow(clippy::missing_safety_doc)]
// Every width has the same code: `v as u64` is a no-op for the 64-bit one.
#![allow(clippy::unnecessary_cast)]

use core::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering::SeqCst};

use lockscope_format::Op;

use crate::abi::trampoline;
use crate::record::atomic_event;

/// Flags bit of a failed compare-exchange.
pub const CAS_FAILED: u8 = 0x40;
/// Flags bit of a weak compare-exchange.
pub const CAS_WEAK: u8 = 0x80;

// ---- 8-bit ----

unsafe extern "C" fn a8_load(a: *const u8, mo: i32, pc: u64) -> u8 {
    let v = (*(a as *const AtomicU8)).load(SeqCst);
    atomic_event(Op::AtomicLoad, a as u64, 0, mo, 0, v as u64, v as u64, pc);
    v
}
trampoline!("__tsan_atomic8_load", "rdx", a8_load);

unsafe extern "C" fn a8_store(a: *mut u8, v: u8, mo: i32, pc: u64) {
    let old = (*(a as *const AtomicU8)).swap(v, SeqCst);
    atomic_event(
        Op::AtomicStore,
        a as u64,
        0,
        mo,
        0,
        old as u64,
        v as u64,
        pc,
    );
}
trampoline!("__tsan_atomic8_store", "rcx", a8_store);

unsafe extern "C" fn a8_exchange(a: *mut u8, v: u8, mo: i32, pc: u64) -> u8 {
    let x = &*(a as *const AtomicU8);
    let old = x.swap(v, SeqCst);
    let new = v;
    atomic_event(
        Op::AtomicExchange,
        a as u64,
        0,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic8_exchange", "rcx", a8_exchange);

unsafe extern "C" fn a8_fetch_add(a: *mut u8, v: u8, mo: i32, pc: u64) -> u8 {
    let x = &*(a as *const AtomicU8);
    let old = x.fetch_add(v, SeqCst);
    let new = old.wrapping_add(v);
    atomic_event(
        Op::AtomicFetchAdd,
        a as u64,
        0,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic8_fetch_add", "rcx", a8_fetch_add);

unsafe extern "C" fn a8_fetch_sub(a: *mut u8, v: u8, mo: i32, pc: u64) -> u8 {
    let x = &*(a as *const AtomicU8);
    let old = x.fetch_sub(v, SeqCst);
    let new = old.wrapping_sub(v);
    atomic_event(
        Op::AtomicFetchSub,
        a as u64,
        0,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic8_fetch_sub", "rcx", a8_fetch_sub);

unsafe extern "C" fn a8_fetch_and(a: *mut u8, v: u8, mo: i32, pc: u64) -> u8 {
    let x = &*(a as *const AtomicU8);
    let old = x.fetch_and(v, SeqCst);
    let new = old & v;
    atomic_event(
        Op::AtomicFetchAnd,
        a as u64,
        0,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic8_fetch_and", "rcx", a8_fetch_and);

unsafe extern "C" fn a8_fetch_or(a: *mut u8, v: u8, mo: i32, pc: u64) -> u8 {
    let x = &*(a as *const AtomicU8);
    let old = x.fetch_or(v, SeqCst);
    let new = old | v;
    atomic_event(
        Op::AtomicFetchOr,
        a as u64,
        0,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic8_fetch_or", "rcx", a8_fetch_or);

unsafe extern "C" fn a8_fetch_xor(a: *mut u8, v: u8, mo: i32, pc: u64) -> u8 {
    let x = &*(a as *const AtomicU8);
    let old = x.fetch_xor(v, SeqCst);
    let new = old ^ v;
    atomic_event(
        Op::AtomicFetchXor,
        a as u64,
        0,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic8_fetch_xor", "rcx", a8_fetch_xor);

unsafe extern "C" fn a8_fetch_nand(a: *mut u8, v: u8, mo: i32, pc: u64) -> u8 {
    let x = &*(a as *const AtomicU8);
    let old = x.fetch_nand(v, SeqCst);
    let new = !(old & v);
    atomic_event(
        Op::AtomicFetchNand,
        a as u64,
        0,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic8_fetch_nand", "rcx", a8_fetch_nand);

unsafe extern "C" fn a8_cas_strong(
    a: *mut u8,
    c: *mut u8,
    v: u8,
    mo: i32,
    _fmo: i32,
    pc: u64,
) -> i32 {
    let x = &*(a as *const AtomicU8);
    match x.compare_exchange(*c, v, SeqCst, SeqCst) {
        Ok(old) => {
            atomic_event(Op::AtomicCas, a as u64, 0, mo, 0, old as u64, v as u64, pc);
            1
        }
        Err(cur) => {
            *c = cur;
            atomic_event(
                Op::AtomicCas,
                a as u64,
                0,
                mo,
                CAS_FAILED,
                cur as u64,
                cur as u64,
                pc,
            );
            0
        }
    }
}
trampoline!(
    "__tsan_atomic8_compare_exchange_strong",
    "r9",
    a8_cas_strong
);

unsafe extern "C" fn a8_cas_weak(
    a: *mut u8,
    c: *mut u8,
    v: u8,
    mo: i32,
    _fmo: i32,
    pc: u64,
) -> i32 {
    let x = &*(a as *const AtomicU8);
    match x.compare_exchange(*c, v, SeqCst, SeqCst) {
        Ok(old) => {
            atomic_event(
                Op::AtomicCas,
                a as u64,
                0,
                mo,
                CAS_WEAK,
                old as u64,
                v as u64,
                pc,
            );
            1
        }
        Err(cur) => {
            *c = cur;
            atomic_event(
                Op::AtomicCas,
                a as u64,
                0,
                mo,
                CAS_WEAK | CAS_FAILED,
                cur as u64,
                cur as u64,
                pc,
            );
            0
        }
    }
}
trampoline!("__tsan_atomic8_compare_exchange_weak", "r9", a8_cas_weak);

unsafe extern "C" fn a8_cas_val(a: *mut u8, c: u8, v: u8, mo: i32, _fmo: i32, pc: u64) -> u8 {
    let x = &*(a as *const AtomicU8);
    match x.compare_exchange(c, v, SeqCst, SeqCst) {
        Ok(old) => {
            atomic_event(Op::AtomicCas, a as u64, 0, mo, 0, old as u64, v as u64, pc);
            old
        }
        Err(cur) => {
            atomic_event(
                Op::AtomicCas,
                a as u64,
                0,
                mo,
                CAS_FAILED,
                cur as u64,
                cur as u64,
                pc,
            );
            cur
        }
    }
}
trampoline!("__tsan_atomic8_compare_exchange_val", "r9", a8_cas_val);

// ---- 16-bit ----

unsafe extern "C" fn a16_load(a: *const u16, mo: i32, pc: u64) -> u16 {
    let v = (*(a as *const AtomicU16)).load(SeqCst);
    atomic_event(Op::AtomicLoad, a as u64, 1, mo, 0, v as u64, v as u64, pc);
    v
}
trampoline!("__tsan_atomic16_load", "rdx", a16_load);

unsafe extern "C" fn a16_store(a: *mut u16, v: u16, mo: i32, pc: u64) {
    let old = (*(a as *const AtomicU16)).swap(v, SeqCst);
    atomic_event(
        Op::AtomicStore,
        a as u64,
        1,
        mo,
        0,
        old as u64,
        v as u64,
        pc,
    );
}
trampoline!("__tsan_atomic16_store", "rcx", a16_store);

unsafe extern "C" fn a16_exchange(a: *mut u16, v: u16, mo: i32, pc: u64) -> u16 {
    let x = &*(a as *const AtomicU16);
    let old = x.swap(v, SeqCst);
    let new = v;
    atomic_event(
        Op::AtomicExchange,
        a as u64,
        1,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic16_exchange", "rcx", a16_exchange);

unsafe extern "C" fn a16_fetch_add(a: *mut u16, v: u16, mo: i32, pc: u64) -> u16 {
    let x = &*(a as *const AtomicU16);
    let old = x.fetch_add(v, SeqCst);
    let new = old.wrapping_add(v);
    atomic_event(
        Op::AtomicFetchAdd,
        a as u64,
        1,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic16_fetch_add", "rcx", a16_fetch_add);

unsafe extern "C" fn a16_fetch_sub(a: *mut u16, v: u16, mo: i32, pc: u64) -> u16 {
    let x = &*(a as *const AtomicU16);
    let old = x.fetch_sub(v, SeqCst);
    let new = old.wrapping_sub(v);
    atomic_event(
        Op::AtomicFetchSub,
        a as u64,
        1,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic16_fetch_sub", "rcx", a16_fetch_sub);

unsafe extern "C" fn a16_fetch_and(a: *mut u16, v: u16, mo: i32, pc: u64) -> u16 {
    let x = &*(a as *const AtomicU16);
    let old = x.fetch_and(v, SeqCst);
    let new = old & v;
    atomic_event(
        Op::AtomicFetchAnd,
        a as u64,
        1,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic16_fetch_and", "rcx", a16_fetch_and);

unsafe extern "C" fn a16_fetch_or(a: *mut u16, v: u16, mo: i32, pc: u64) -> u16 {
    let x = &*(a as *const AtomicU16);
    let old = x.fetch_or(v, SeqCst);
    let new = old | v;
    atomic_event(
        Op::AtomicFetchOr,
        a as u64,
        1,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic16_fetch_or", "rcx", a16_fetch_or);

unsafe extern "C" fn a16_fetch_xor(a: *mut u16, v: u16, mo: i32, pc: u64) -> u16 {
    let x = &*(a as *const AtomicU16);
    let old = x.fetch_xor(v, SeqCst);
    let new = old ^ v;
    atomic_event(
        Op::AtomicFetchXor,
        a as u64,
        1,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic16_fetch_xor", "rcx", a16_fetch_xor);

unsafe extern "C" fn a16_fetch_nand(a: *mut u16, v: u16, mo: i32, pc: u64) -> u16 {
    let x = &*(a as *const AtomicU16);
    let old = x.fetch_nand(v, SeqCst);
    let new = !(old & v);
    atomic_event(
        Op::AtomicFetchNand,
        a as u64,
        1,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic16_fetch_nand", "rcx", a16_fetch_nand);

unsafe extern "C" fn a16_cas_strong(
    a: *mut u16,
    c: *mut u16,
    v: u16,
    mo: i32,
    _fmo: i32,
    pc: u64,
) -> i32 {
    let x = &*(a as *const AtomicU16);
    match x.compare_exchange(*c, v, SeqCst, SeqCst) {
        Ok(old) => {
            atomic_event(Op::AtomicCas, a as u64, 1, mo, 0, old as u64, v as u64, pc);
            1
        }
        Err(cur) => {
            *c = cur;
            atomic_event(
                Op::AtomicCas,
                a as u64,
                1,
                mo,
                CAS_FAILED,
                cur as u64,
                cur as u64,
                pc,
            );
            0
        }
    }
}
trampoline!(
    "__tsan_atomic16_compare_exchange_strong",
    "r9",
    a16_cas_strong
);

unsafe extern "C" fn a16_cas_weak(
    a: *mut u16,
    c: *mut u16,
    v: u16,
    mo: i32,
    _fmo: i32,
    pc: u64,
) -> i32 {
    let x = &*(a as *const AtomicU16);
    match x.compare_exchange(*c, v, SeqCst, SeqCst) {
        Ok(old) => {
            atomic_event(
                Op::AtomicCas,
                a as u64,
                1,
                mo,
                CAS_WEAK,
                old as u64,
                v as u64,
                pc,
            );
            1
        }
        Err(cur) => {
            *c = cur;
            atomic_event(
                Op::AtomicCas,
                a as u64,
                1,
                mo,
                CAS_WEAK | CAS_FAILED,
                cur as u64,
                cur as u64,
                pc,
            );
            0
        }
    }
}
trampoline!("__tsan_atomic16_compare_exchange_weak", "r9", a16_cas_weak);

unsafe extern "C" fn a16_cas_val(a: *mut u16, c: u16, v: u16, mo: i32, _fmo: i32, pc: u64) -> u16 {
    let x = &*(a as *const AtomicU16);
    match x.compare_exchange(c, v, SeqCst, SeqCst) {
        Ok(old) => {
            atomic_event(Op::AtomicCas, a as u64, 1, mo, 0, old as u64, v as u64, pc);
            old
        }
        Err(cur) => {
            atomic_event(
                Op::AtomicCas,
                a as u64,
                1,
                mo,
                CAS_FAILED,
                cur as u64,
                cur as u64,
                pc,
            );
            cur
        }
    }
}
trampoline!("__tsan_atomic16_compare_exchange_val", "r9", a16_cas_val);

// ---- 32-bit ----

unsafe extern "C" fn a32_load(a: *const u32, mo: i32, pc: u64) -> u32 {
    let v = (*(a as *const AtomicU32)).load(SeqCst);
    atomic_event(Op::AtomicLoad, a as u64, 2, mo, 0, v as u64, v as u64, pc);
    v
}
trampoline!("__tsan_atomic32_load", "rdx", a32_load);

unsafe extern "C" fn a32_store(a: *mut u32, v: u32, mo: i32, pc: u64) {
    let old = (*(a as *const AtomicU32)).swap(v, SeqCst);
    atomic_event(
        Op::AtomicStore,
        a as u64,
        2,
        mo,
        0,
        old as u64,
        v as u64,
        pc,
    );
}
trampoline!("__tsan_atomic32_store", "rcx", a32_store);

unsafe extern "C" fn a32_exchange(a: *mut u32, v: u32, mo: i32, pc: u64) -> u32 {
    let x = &*(a as *const AtomicU32);
    let old = x.swap(v, SeqCst);
    let new = v;
    atomic_event(
        Op::AtomicExchange,
        a as u64,
        2,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic32_exchange", "rcx", a32_exchange);

unsafe extern "C" fn a32_fetch_add(a: *mut u32, v: u32, mo: i32, pc: u64) -> u32 {
    let x = &*(a as *const AtomicU32);
    let old = x.fetch_add(v, SeqCst);
    let new = old.wrapping_add(v);
    atomic_event(
        Op::AtomicFetchAdd,
        a as u64,
        2,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic32_fetch_add", "rcx", a32_fetch_add);

unsafe extern "C" fn a32_fetch_sub(a: *mut u32, v: u32, mo: i32, pc: u64) -> u32 {
    let x = &*(a as *const AtomicU32);
    let old = x.fetch_sub(v, SeqCst);
    let new = old.wrapping_sub(v);
    atomic_event(
        Op::AtomicFetchSub,
        a as u64,
        2,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic32_fetch_sub", "rcx", a32_fetch_sub);

unsafe extern "C" fn a32_fetch_and(a: *mut u32, v: u32, mo: i32, pc: u64) -> u32 {
    let x = &*(a as *const AtomicU32);
    let old = x.fetch_and(v, SeqCst);
    let new = old & v;
    atomic_event(
        Op::AtomicFetchAnd,
        a as u64,
        2,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic32_fetch_and", "rcx", a32_fetch_and);

unsafe extern "C" fn a32_fetch_or(a: *mut u32, v: u32, mo: i32, pc: u64) -> u32 {
    let x = &*(a as *const AtomicU32);
    let old = x.fetch_or(v, SeqCst);
    let new = old | v;
    atomic_event(
        Op::AtomicFetchOr,
        a as u64,
        2,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic32_fetch_or", "rcx", a32_fetch_or);

unsafe extern "C" fn a32_fetch_xor(a: *mut u32, v: u32, mo: i32, pc: u64) -> u32 {
    let x = &*(a as *const AtomicU32);
    let old = x.fetch_xor(v, SeqCst);
    let new = old ^ v;
    atomic_event(
        Op::AtomicFetchXor,
        a as u64,
        2,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic32_fetch_xor", "rcx", a32_fetch_xor);

unsafe extern "C" fn a32_fetch_nand(a: *mut u32, v: u32, mo: i32, pc: u64) -> u32 {
    let x = &*(a as *const AtomicU32);
    let old = x.fetch_nand(v, SeqCst);
    let new = !(old & v);
    atomic_event(
        Op::AtomicFetchNand,
        a as u64,
        2,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic32_fetch_nand", "rcx", a32_fetch_nand);

unsafe extern "C" fn a32_cas_strong(
    a: *mut u32,
    c: *mut u32,
    v: u32,
    mo: i32,
    _fmo: i32,
    pc: u64,
) -> i32 {
    let x = &*(a as *const AtomicU32);
    match x.compare_exchange(*c, v, SeqCst, SeqCst) {
        Ok(old) => {
            atomic_event(Op::AtomicCas, a as u64, 2, mo, 0, old as u64, v as u64, pc);
            1
        }
        Err(cur) => {
            *c = cur;
            atomic_event(
                Op::AtomicCas,
                a as u64,
                2,
                mo,
                CAS_FAILED,
                cur as u64,
                cur as u64,
                pc,
            );
            0
        }
    }
}
trampoline!(
    "__tsan_atomic32_compare_exchange_strong",
    "r9",
    a32_cas_strong
);

unsafe extern "C" fn a32_cas_weak(
    a: *mut u32,
    c: *mut u32,
    v: u32,
    mo: i32,
    _fmo: i32,
    pc: u64,
) -> i32 {
    let x = &*(a as *const AtomicU32);
    match x.compare_exchange(*c, v, SeqCst, SeqCst) {
        Ok(old) => {
            atomic_event(
                Op::AtomicCas,
                a as u64,
                2,
                mo,
                CAS_WEAK,
                old as u64,
                v as u64,
                pc,
            );
            1
        }
        Err(cur) => {
            *c = cur;
            atomic_event(
                Op::AtomicCas,
                a as u64,
                2,
                mo,
                CAS_WEAK | CAS_FAILED,
                cur as u64,
                cur as u64,
                pc,
            );
            0
        }
    }
}
trampoline!("__tsan_atomic32_compare_exchange_weak", "r9", a32_cas_weak);

unsafe extern "C" fn a32_cas_val(a: *mut u32, c: u32, v: u32, mo: i32, _fmo: i32, pc: u64) -> u32 {
    let x = &*(a as *const AtomicU32);
    match x.compare_exchange(c, v, SeqCst, SeqCst) {
        Ok(old) => {
            atomic_event(Op::AtomicCas, a as u64, 2, mo, 0, old as u64, v as u64, pc);
            old
        }
        Err(cur) => {
            atomic_event(
                Op::AtomicCas,
                a as u64,
                2,
                mo,
                CAS_FAILED,
                cur as u64,
                cur as u64,
                pc,
            );
            cur
        }
    }
}
trampoline!("__tsan_atomic32_compare_exchange_val", "r9", a32_cas_val);

// ---- 64-bit ----

unsafe extern "C" fn a64_load(a: *const u64, mo: i32, pc: u64) -> u64 {
    let v = (*(a as *const AtomicU64)).load(SeqCst);
    atomic_event(Op::AtomicLoad, a as u64, 3, mo, 0, v as u64, v as u64, pc);
    v
}
trampoline!("__tsan_atomic64_load", "rdx", a64_load);

unsafe extern "C" fn a64_store(a: *mut u64, v: u64, mo: i32, pc: u64) {
    let old = (*(a as *const AtomicU64)).swap(v, SeqCst);
    atomic_event(
        Op::AtomicStore,
        a as u64,
        3,
        mo,
        0,
        old as u64,
        v as u64,
        pc,
    );
}
trampoline!("__tsan_atomic64_store", "rcx", a64_store);

unsafe extern "C" fn a64_exchange(a: *mut u64, v: u64, mo: i32, pc: u64) -> u64 {
    let x = &*(a as *const AtomicU64);
    let old = x.swap(v, SeqCst);
    let new = v;
    atomic_event(
        Op::AtomicExchange,
        a as u64,
        3,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic64_exchange", "rcx", a64_exchange);

unsafe extern "C" fn a64_fetch_add(a: *mut u64, v: u64, mo: i32, pc: u64) -> u64 {
    let x = &*(a as *const AtomicU64);
    let old = x.fetch_add(v, SeqCst);
    let new = old.wrapping_add(v);
    atomic_event(
        Op::AtomicFetchAdd,
        a as u64,
        3,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic64_fetch_add", "rcx", a64_fetch_add);

unsafe extern "C" fn a64_fetch_sub(a: *mut u64, v: u64, mo: i32, pc: u64) -> u64 {
    let x = &*(a as *const AtomicU64);
    let old = x.fetch_sub(v, SeqCst);
    let new = old.wrapping_sub(v);
    atomic_event(
        Op::AtomicFetchSub,
        a as u64,
        3,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic64_fetch_sub", "rcx", a64_fetch_sub);

unsafe extern "C" fn a64_fetch_and(a: *mut u64, v: u64, mo: i32, pc: u64) -> u64 {
    let x = &*(a as *const AtomicU64);
    let old = x.fetch_and(v, SeqCst);
    let new = old & v;
    atomic_event(
        Op::AtomicFetchAnd,
        a as u64,
        3,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic64_fetch_and", "rcx", a64_fetch_and);

unsafe extern "C" fn a64_fetch_or(a: *mut u64, v: u64, mo: i32, pc: u64) -> u64 {
    let x = &*(a as *const AtomicU64);
    let old = x.fetch_or(v, SeqCst);
    let new = old | v;
    atomic_event(
        Op::AtomicFetchOr,
        a as u64,
        3,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic64_fetch_or", "rcx", a64_fetch_or);

unsafe extern "C" fn a64_fetch_xor(a: *mut u64, v: u64, mo: i32, pc: u64) -> u64 {
    let x = &*(a as *const AtomicU64);
    let old = x.fetch_xor(v, SeqCst);
    let new = old ^ v;
    atomic_event(
        Op::AtomicFetchXor,
        a as u64,
        3,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic64_fetch_xor", "rcx", a64_fetch_xor);

unsafe extern "C" fn a64_fetch_nand(a: *mut u64, v: u64, mo: i32, pc: u64) -> u64 {
    let x = &*(a as *const AtomicU64);
    let old = x.fetch_nand(v, SeqCst);
    let new = !(old & v);
    atomic_event(
        Op::AtomicFetchNand,
        a as u64,
        3,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic64_fetch_nand", "rcx", a64_fetch_nand);

unsafe extern "C" fn a64_cas_strong(
    a: *mut u64,
    c: *mut u64,
    v: u64,
    mo: i32,
    _fmo: i32,
    pc: u64,
) -> i32 {
    let x = &*(a as *const AtomicU64);
    match x.compare_exchange(*c, v, SeqCst, SeqCst) {
        Ok(old) => {
            atomic_event(Op::AtomicCas, a as u64, 3, mo, 0, old as u64, v as u64, pc);
            1
        }
        Err(cur) => {
            *c = cur;
            atomic_event(
                Op::AtomicCas,
                a as u64,
                3,
                mo,
                CAS_FAILED,
                cur as u64,
                cur as u64,
                pc,
            );
            0
        }
    }
}
trampoline!(
    "__tsan_atomic64_compare_exchange_strong",
    "r9",
    a64_cas_strong
);

unsafe extern "C" fn a64_cas_weak(
    a: *mut u64,
    c: *mut u64,
    v: u64,
    mo: i32,
    _fmo: i32,
    pc: u64,
) -> i32 {
    let x = &*(a as *const AtomicU64);
    match x.compare_exchange(*c, v, SeqCst, SeqCst) {
        Ok(old) => {
            atomic_event(
                Op::AtomicCas,
                a as u64,
                3,
                mo,
                CAS_WEAK,
                old as u64,
                v as u64,
                pc,
            );
            1
        }
        Err(cur) => {
            *c = cur;
            atomic_event(
                Op::AtomicCas,
                a as u64,
                3,
                mo,
                CAS_WEAK | CAS_FAILED,
                cur as u64,
                cur as u64,
                pc,
            );
            0
        }
    }
}
trampoline!("__tsan_atomic64_compare_exchange_weak", "r9", a64_cas_weak);

unsafe extern "C" fn a64_cas_val(a: *mut u64, c: u64, v: u64, mo: i32, _fmo: i32, pc: u64) -> u64 {
    let x = &*(a as *const AtomicU64);
    match x.compare_exchange(c, v, SeqCst, SeqCst) {
        Ok(old) => {
            atomic_event(Op::AtomicCas, a as u64, 3, mo, 0, old as u64, v as u64, pc);
            old
        }
        Err(cur) => {
            atomic_event(
                Op::AtomicCas,
                a as u64,
                3,
                mo,
                CAS_FAILED,
                cur as u64,
                cur as u64,
                pc,
            );
            cur
        }
    }
}
trampoline!("__tsan_atomic64_compare_exchange_val", "r9", a64_cas_val);

// ---- 128-bit (cmpxchg16b; every x86-64 CPU of the last 15 years has it) ----

/// Compare-and-swap of 16 bytes; returns the previous value and success.
///
/// # Safety
/// `p` must be valid and 16-byte aligned.
#[inline]
unsafe fn cas16(p: *mut u128, expected: u128, new: u128) -> (u128, bool) {
    let (mut lo, mut hi) = (expected as u64, (expected >> 64) as u64);
    let ok: u8;
    // rbx cannot be named as an operand (LLVM uses it internally) but may
    // still be picked for a `reg` operand: every operand gets an explicit
    // register, and the low half of `new` is swapped into rbx around the
    // instruction.
    core::arch::asm!(
        "xchg rsi, rbx",
        "lock cmpxchg16b xmmword ptr [rdi]",
        "sete r8b",
        "mov rbx, rsi",
        in("rdi") p,
        inout("rsi") new as u64 => _,
        out("r8b") ok,
        inout("rax") lo,
        inout("rdx") hi,
        in("rcx") (new >> 64) as u64,
        options(nostack),
    );
    ((u128::from(hi) << 64) | u128::from(lo), ok != 0)
}

/// Applies `f` atomically; returns (old, new).
#[inline]
unsafe fn rmw16(p: *mut u128, f: impl Fn(u128) -> u128) -> (u128, u128) {
    let mut cur = cas16(p, 0, 0).0;
    loop {
        let new = f(cur);
        match cas16(p, cur, new) {
            (_, true) => return (cur, new),
            (seen, false) => cur = seen,
        }
    }
}

unsafe extern "C" fn a128_load(a: *const u128, mo: i32, pc: u64) -> u128 {
    // A compare-and-swap of 0 with 0 reads atomically (and writes back the
    // same value if it was 0).
    let v = cas16(a as *mut u128, 0, 0).0;
    atomic_event(Op::AtomicLoad, a as u64, 4, mo, 0, v as u64, v as u64, pc);
    v
}
trampoline!("__tsan_atomic128_load", "rdx", a128_load);

unsafe extern "C" fn a128_store(a: *mut u128, v: u128, mo: i32, pc: u64) {
    let (old, _) = rmw16(a, |_| v);
    atomic_event(
        Op::AtomicStore,
        a as u64,
        4,
        mo,
        0,
        old as u64,
        v as u64,
        pc,
    );
}
trampoline!("__tsan_atomic128_store", "r8", a128_store);

unsafe extern "C" fn a128_exchange(a: *mut u128, v: u128, mo: i32, pc: u64) -> u128 {
    let (old, new) = rmw16(a, |_| v);
    atomic_event(
        Op::AtomicExchange,
        a as u64,
        4,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic128_exchange", "r8", a128_exchange);

unsafe extern "C" fn a128_fetch_add(a: *mut u128, v: u128, mo: i32, pc: u64) -> u128 {
    let (old, new) = rmw16(a, |o| o.wrapping_add(v));
    atomic_event(
        Op::AtomicFetchAdd,
        a as u64,
        4,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic128_fetch_add", "r8", a128_fetch_add);

unsafe extern "C" fn a128_fetch_sub(a: *mut u128, v: u128, mo: i32, pc: u64) -> u128 {
    let (old, new) = rmw16(a, |o| o.wrapping_sub(v));
    atomic_event(
        Op::AtomicFetchSub,
        a as u64,
        4,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic128_fetch_sub", "r8", a128_fetch_sub);

unsafe extern "C" fn a128_fetch_and(a: *mut u128, v: u128, mo: i32, pc: u64) -> u128 {
    let (old, new) = rmw16(a, |o| o & v);
    atomic_event(
        Op::AtomicFetchAnd,
        a as u64,
        4,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic128_fetch_and", "r8", a128_fetch_and);

unsafe extern "C" fn a128_fetch_or(a: *mut u128, v: u128, mo: i32, pc: u64) -> u128 {
    let (old, new) = rmw16(a, |o| o | v);
    atomic_event(
        Op::AtomicFetchOr,
        a as u64,
        4,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic128_fetch_or", "r8", a128_fetch_or);

unsafe extern "C" fn a128_fetch_xor(a: *mut u128, v: u128, mo: i32, pc: u64) -> u128 {
    let (old, new) = rmw16(a, |o| o ^ v);
    atomic_event(
        Op::AtomicFetchXor,
        a as u64,
        4,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic128_fetch_xor", "r8", a128_fetch_xor);

unsafe extern "C" fn a128_fetch_nand(a: *mut u128, v: u128, mo: i32, pc: u64) -> u128 {
    let (old, new) = rmw16(a, |o| !(o & v));
    atomic_event(
        Op::AtomicFetchNand,
        a as u64,
        4,
        mo,
        0,
        old as u64,
        new as u64,
        pc,
    );
    old
}
trampoline!("__tsan_atomic128_fetch_nand", "r8", a128_fetch_nand);

// The 128-bit compare-exchanges use all six argument registers, so they
// have no trampoline: their site is the top of the shadow stack.

/// `__tsan_atomic128_compare_exchange_strong`.
#[no_mangle]
pub unsafe extern "C" fn __tsan_atomic128_compare_exchange_strong(
    a: *mut u128,
    c: *mut u128,
    v: u128,
    mo: i32,
    _fmo: i32,
) -> i32 {
    cas128_ptr(a, c, v, mo, 0)
}

/// `__tsan_atomic128_compare_exchange_weak`.
#[no_mangle]
pub unsafe extern "C" fn __tsan_atomic128_compare_exchange_weak(
    a: *mut u128,
    c: *mut u128,
    v: u128,
    mo: i32,
    _fmo: i32,
) -> i32 {
    cas128_ptr(a, c, v, mo, CAS_WEAK)
}

unsafe fn cas128_ptr(a: *mut u128, c: *mut u128, v: u128, mo: i32, weak: u8) -> i32 {
    match cas16(a, *c, v) {
        (old, true) => {
            atomic_event(
                Op::AtomicCas,
                a as u64,
                4,
                mo,
                weak,
                old as u64,
                v as u64,
                0,
            );
            1
        }
        (cur, false) => {
            *c = cur;
            atomic_event(
                Op::AtomicCas,
                a as u64,
                4,
                mo,
                weak | CAS_FAILED,
                cur as u64,
                cur as u64,
                0,
            );
            0
        }
    }
}

/// `__tsan_atomic128_compare_exchange_val`.
#[no_mangle]
pub unsafe extern "C" fn __tsan_atomic128_compare_exchange_val(
    a: *mut u128,
    c: u128,
    v: u128,
    mo: i32,
    _fmo: i32,
) -> u128 {
    match cas16(a, c, v) {
        (old, true) => {
            atomic_event(Op::AtomicCas, a as u64, 4, mo, 0, old as u64, v as u64, 0);
            old
        }
        (cur, false) => {
            atomic_event(
                Op::AtomicCas,
                a as u64,
                4,
                mo,
                CAS_FAILED,
                cur as u64,
                cur as u64,
                0,
            );
            cur
        }
    }
}

// ---- fences ----

extern "C" fn thread_fence(mo: i32, pc: u64) {
    core::sync::atomic::fence(SeqCst);
    atomic_event(Op::AtomicFence, 0, 0, mo, 0, 0, 0, pc);
}
trampoline!("__tsan_atomic_thread_fence", "rsi", thread_fence);

/// A signal fence only orders against the compiler: nothing to record.
#[no_mangle]
pub extern "C" fn __tsan_atomic_signal_fence(_mo: i32) {
    core::sync::atomic::compiler_fence(SeqCst);
}
