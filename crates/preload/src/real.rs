//! The real (next) definitions of the functions we interpose, resolved
//! with `dlsym(RTLD_NEXT)` at load time (one `.init_array` entry per
//! function: no `dlsym` on a signal path later), and lazily in
//! every hook as well: another preloaded or early library's constructor
//! may call `pthread_mutex_lock` before ours have run (a known preload pitfall).
//! glibc 2.36's `dlsym` does not allocate.

use core::sync::atomic::{AtomicUsize, Ordering};

/// The library (address of its NUL-terminated soname, a `'static`) that a
/// load-time [`Real::prefetch`] found not loaded: the prefetches after it
/// do not look for it again (see there). 0: none. Compared by address:
/// every `GompFn` names `GOMP`, one constant byte string, which the
/// compiler emits once (`a_program_without_openmp_looks_for_libgomp_once_at_start`
/// checks the effect); were it not, the prefetches would only look again,
/// as before. A `OnceLock` holding the name, compared by content, was
/// tried: the hooks' contention test
/// (`the_trace_counts_the_contention_the_program_itself_saw`) then failed
/// 4 of 14 runs against none of 18 with this (the hooks' timing moved;
/// why was not found).
static PREFETCH_LIB_ABSENT: AtomicUsize = AtomicUsize::new(0);

/// One lazily resolved function pointer.
pub(crate) struct Real {
    p: AtomicUsize,
    /// NUL-terminated symbol name.
    name: &'static [u8],
    /// NUL-terminated symbol version, or empty for the default version.
    version: &'static [u8],
    /// NUL-terminated soname of a library to look in when the symbol is
    /// not in the global scope (empty: none), see [`Real::with_lib`].
    lib: &'static [u8],
}

impl Real {
    pub(crate) const fn new(name: &'static [u8]) -> Real {
        Real {
            p: AtomicUsize::new(0),
            name,
            version: b"",
            lib: b"",
        }
    }

    pub(crate) const fn versioned(name: &'static [u8], version: &'static [u8]) -> Real {
        Real {
            p: AtomicUsize::new(0),
            name,
            version,
            lib: b"",
        }
    }

    /// Also looks in the already loaded library `lib` (NUL-terminated
    /// soname) when the symbol is not in the global scope. Why: a library
    /// the program `dlopen`s (a Python extension linked with libgomp) has
    /// its dependencies in its own local scope, which `RTLD_NEXT` does not
    /// search, yet its calls bind to our global definitions.
    pub(crate) const fn with_lib(self, lib: &'static [u8]) -> Real {
        Real { lib, ..self }
    }

    /// The address of the real function.
    #[inline(always)]
    pub(crate) fn get(&self) -> usize {
        let p = self.p.load(Ordering::Relaxed);
        if p != 0 {
            p
        } else {
            self.resolve()
        }
    }

    /// Resolves the function now if it exists (load time); a function no
    /// later object defines is left for [`Real::get`] to report if the
    /// program ever calls it.
    pub(crate) fn prefetch(&self) {
        if self.p.load(Ordering::Relaxed) == 0 {
            // At load time a library that is not loaded yet stays so for
            // every prefetch (they run one after another in our
            // constructors): once one `dlopen(RTLD_NOLOAD)` of it has
            // failed, the others skip it. Each failed one opened the
            // library's file and `/etc/ld.so.cache` to compare identities
            // (glibc does, for a name no loaded object has): 19 of them
            // for libgomp's entry points in every process of a program
            // without OpenMP, about 1 ms of its start-up. The lazy path
            // (`get`) still looks in the library once it is loaded.
            let lib = self.lib.as_ptr() as usize;
            let skip_lib =
                !self.lib.is_empty() && PREFETCH_LIB_ABSENT.load(Ordering::Relaxed) == lib;
            let p = self.lookup_in(!skip_lib, true);
            if p != 0 {
                self.p.store(p, Ordering::Relaxed);
            }
        }
    }

    /// dlvsym/dlsym in the global scope after us, then in `lib`; errno
    /// preserved; 0 if not found.
    fn lookup(&self) -> usize {
        self.lookup_in(true, false)
    }

    /// [`Real::lookup`], looking in `lib` only when `in_lib`; with
    /// `note_absent`, a `lib` found not loaded is remembered in
    /// [`PREFETCH_LIB_ABSENT`].
    fn lookup_in(&self, in_lib: bool, note_absent: bool) -> usize {
        // SAFETY: dlsym/dlvsym/dlopen with NUL-terminated names; errno is
        // saved because the program must not see our lookups. The handle
        // of `dlopen(RTLD_NOLOAD)` (a reference to an already loaded
        // library, or null) is only used for the lookup and released.
        unsafe {
            let saved = *libc::__errno_location();
            let mut p = find(libc::RTLD_NEXT, self.name, self.version);
            if p == 0 && in_lib && !self.lib.is_empty() {
                let h = libc::dlopen(
                    self.lib.as_ptr() as *const libc::c_char,
                    libc::RTLD_LAZY | libc::RTLD_NOLOAD,
                );
                if !h.is_null() {
                    p = find(h, self.name, self.version);
                    libc::dlclose(h);
                } else if note_absent {
                    PREFETCH_LIB_ABSENT.store(self.lib.as_ptr() as usize, Ordering::Relaxed);
                }
            }
            *libc::__errno_location() = saved;
            p
        }
    }

    #[cold]
    #[inline(never)]
    fn resolve(&self) -> usize {
        let p = self.lookup();
        if p == 0 {
            // The program called a function that no later object
            // defines: there is nothing correct we can forward to.
            let msg = b"lockscope: cannot resolve an interposed function: ";
            // SAFETY: writes of our own buffers to stderr, then abort.
            unsafe {
                libc::write(2, msg.as_ptr() as *const libc::c_void, msg.len());
                libc::write(
                    2,
                    self.name.as_ptr() as *const libc::c_void,
                    self.name.len() - 1,
                );
                libc::write(2, b"\n".as_ptr() as *const libc::c_void, 1);
                libc::abort();
            }
        }
        self.p.store(p, Ordering::Relaxed);
        p
    }
}

/// `dlvsym(handle, name, version)` when a version is given and found,
/// else `dlsym(handle, name)`; 0 if neither finds it.
///
/// # Safety
/// `handle` is `RTLD_NEXT`, `RTLD_DEFAULT` or a live `dlopen` handle;
/// `name` and `version` are NUL-terminated (or `version` empty).
unsafe fn find(handle: *mut libc::c_void, name: &[u8], version: &[u8]) -> usize {
    // SAFETY: the caller's contract.
    unsafe {
        let mut p = core::ptr::null_mut();
        if !version.is_empty() {
            p = libc::dlvsym(
                handle,
                name.as_ptr() as *const libc::c_char,
                version.as_ptr() as *const libc::c_char,
            );
        }
        if p.is_null() {
            p = libc::dlsym(handle, name.as_ptr() as *const libc::c_char);
        }
        p as usize
    }
}

/// Declares a lazily resolved real function and a typed caller for it.
macro_rules! real {
    ($(#[$m:meta])* $vis:vis $caller:ident = $sym:literal $(@ $ver:literal)? : fn($($a:ident : $t:ty),*) -> $r:ty) => {
        $(#[$m])*
        #[inline(always)]
        #[allow(clippy::missing_safety_doc)]
        $vis unsafe fn $caller($($a: $t),*) -> $r {
            // SAFETY: `R.get()` is never 0 (it aborts when the symbol
            // does not exist) and is the address dlsym/dlvsym returned for
            // `$sym` in a later object (RTLD_NEXT): the real function,
            // whose C signature is the one declared here, so the transmute
            // gives a callable pointer of the right type (a usize and a fn
            // pointer have the same size). Calling it forwards the caller's
            // arguments unchanged: this function's contract is the real
            // function's C contract (valid pointers etc.), upheld by our
            // caller, i.e. ultimately by the program that called the
            // interposed symbol.
            unsafe {
            static R: $crate::real::Real = real!(@new $sym $(, $ver)?);
            // Resolved at load time by our own constructor entry, so that
            // no `dlsym` runs later on a signal path (a hook called from a
            // signal handler); the lazy path in `Real::get` remains for
            // hooks called before the constructors ran.
            #[used]
            #[link_section = ".init_array"]
            static RESOLVE: extern "C" fn() = {
                extern "C" fn resolve() {
                    R.prefetch();
                }
                resolve
            };
            let f: unsafe extern "C-unwind" fn($($t),*) -> $r =
                core::mem::transmute::<usize, unsafe extern "C-unwind" fn($($t),*) -> $r>(R.get());
            f($($a),*)
        }}
    };
    (@new $sym:literal) => { $crate::real::Real::new(concat!($sym, "\0").as_bytes()) };
    (@new $sym:literal, $ver:literal) => {
        $crate::real::Real::versioned(concat!($sym, "\0").as_bytes(), concat!($ver, "\0").as_bytes())
    };
}
pub(crate) use real;
