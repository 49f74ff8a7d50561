//! Names shared by the detailed-mode runtime (`lockscope-tsan`, linked
//! into programs) and the compiler wrapper that links it (`lockscope cc`,
//! in the CLI).
//!
//! Purpose: one list instead of two kept in sync by a comment. The runtime
//! cannot be the place (it is a staticlib that carries pthread and malloc
//! hooks: the CLI must not link it), so the list lives in this crate with
//! no dependencies, which both use.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

/// The functions the runtime wraps at link time (`-Wl,--wrap=NAME`) to see
/// release points: the runtime defines `__wrap_NAME` for each, and reads
/// the values written in the critical section before calling
/// `__real_NAME`.
pub const WRAPPED: &[&str] = &[
    "pthread_mutex_unlock",
    "pthread_rwlock_unlock",
    "pthread_spin_unlock",
    "pthread_cond_wait",
    "pthread_cond_timedwait",
    "pthread_cond_clockwait",
    "pthread_mutex_lock",
    "pthread_mutex_trylock",
    "pthread_mutex_timedlock",
    "pthread_rwlock_rdlock",
    "pthread_rwlock_wrlock",
    "pthread_rwlock_tryrdlock",
    "pthread_rwlock_trywrlock",
    "pthread_spin_lock",
    "pthread_spin_trylock",
    "pthread_barrier_wait",
    "pthread_create",
    "pthread_join",
    "pthread_cond_signal",
    "pthread_cond_broadcast",
    "sem_wait",
    "sem_trywait",
    "sem_timedwait",
    "sem_post",
];

/// The symbol that marks an executable carrying the runtime: the preload
/// library looks it up (`dlsym(RTLD_DEFAULT, ...)`) and stands down so
/// that nothing is recorded twice; `lockscope cc` keeps and exports it.
pub const RUNTIME_MARKER: &str = "lockscope_tsan_runtime";

/// The file name of the runtime that `lockscope cc` links.
pub const STATICLIB: &str = "liblockscope_tsan.a";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_symbols() {
        // They go into a comma-separated linker option: a comma or a space
        // would split it.
        for n in WRAPPED.iter().chain([&RUNTIME_MARKER]) {
            assert!(
                n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{n}"
            );
        }
    }
}
