//! lockscope's detailed-mode runtime: an implementation of the
//! ThreadSanitizer callback ABI (the symbol sets gcc 12 and clang 14-16
//! emit under `-fsanitize=thread`), built as a static library that
//! `lockscope cc` / `lockscope c++` link into the program instead of the
//! sanitizer's runtime.
//!
//! # What it records (only under `lockscope record`)
//! - Inside critical sections (the thread holds at least one lock, as
//!   counted by the capture layer's pthread hooks linked into the same
//!   executable): every plain access to memory other than the thread's own
//!   stack, as `Read`/`Write` events with size, pc and call path; at each
//!   release, the value of every location written since the outermost
//!   acquisition (`ReleaseValue`).
//! - Everywhere: every atomic operation with width, order, old and new
//!   value and call path; every heap allocation with its call path, and
//!   every free.
//! - With `LOCKSCOPE_ALL_ACCESSES=1`: accesses outside critical sections
//!   too (pc only), for the lockset analysis.
//!
//! Outside `lockscope record` every callback only does what the program
//! asked for (atomics, memcpy, malloc) and returns.
//!
//! # Entry points
//! - [`abi`]: accesses, function entry/exit (the shadow call stack),
//!   `__tsan_init`, memory intrinsics.
//! - [`atomic`]: the `__tsan_atomic*` operations, performed and recorded.
//! - [`alloc`]: malloc family (not in unit-test builds, which must keep
//!   the system allocator to themselves).
//! - [`wrap`]: the release points (`-Wl,--wrap=pthread_mutex_unlock`...),
//!   where [`record::release_values`] reads the written locations.
//!
//! # Design constraints
//! - Runs inside other people's programs: no panics on any path (no
//!   indexing that can fail, no allocation), no locks, no syscalls on the
//!   event path; every limit (shadow-stack depth, write-log size) is
//!   counted.
//! - Per-thread state is one `const`-initialized thread local with no
//!   destructor ([`tls`]).
//! - x86-64 Linux only (the trampolines and the 16-byte atomics are
//!   assembly).
#![deny(missing_docs)]

#[cfg(not(target_arch = "x86_64"))]
compile_error!("lockscope-tsan supports x86-64 only");

pub mod abi;
#[cfg(not(test))]
pub mod alloc;
pub mod atomic;
pub mod backend;
pub mod config;
pub mod record;
pub mod tls;
#[cfg(not(test))]
pub mod wrap;

/// Marker looked up by the preload library (`dlsym(RTLD_DEFAULT,
/// "lockscope_tsan_runtime")`): when the executable carries this runtime
/// (and with it the pthread hooks), the preloaded copy must stand down so
/// that nothing is recorded twice. `lockscope cc` exports it with
/// `-Wl,--export-dynamic-symbol`.
#[no_mangle]
#[used]
pub static lockscope_tsan_runtime: u32 = 1;

#[cfg(test)]
mod tests {
    /// The names `lockscope cc` passes to the linker are the ones this
    /// runtime defines (`wrap` is not compiled into unit tests, so its
    /// source is read).
    #[test]
    fn every_wrapped_function_has_a_wrapper_and_the_marker_is_ours() {
        let src = include_str!("wrap.rs");
        let mut trampolines = 0;
        for name in lockscope_tsan_abi::WRAPPED {
            // A trampoline that only flushes, then jumps to the real one.
            if src.contains(&format!("flush_then_jump!(\"{name}\");")) {
                trampolines += 1;
                continue;
            }
            assert!(
                src.contains(&format!("fn __wrap_{name}(")),
                "wrap.rs defines no __wrap_{name}"
            );
            assert!(
                src.contains(&format!("fn __real_{name}(")),
                "wrap.rs declares no __real_{name}"
            );
        }
        let defined = src.matches("extern \"C\" fn __wrap_").count() + trampolines;
        assert_eq!(
            defined,
            lockscope_tsan_abi::WRAPPED.len(),
            "a wrapper is not in the list"
        );
        let lib = include_str!("lib.rs");
        assert!(lib.contains(&format!(
            "pub static {}: u32",
            lockscope_tsan_abi::RUNTIME_MARKER
        )));
    }
}
