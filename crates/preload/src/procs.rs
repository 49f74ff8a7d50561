//! Process hooks: fork (the Fork event in the parent; the child's own
//! files come from the atfork handler in `capture::process`) and the exec
//! family (maps snapshot and Exec event before the image is replaced, and
//! an environment that keeps the recorder in the new image).

use libc::{c_char, c_int, pid_t};
use lockscope_capture::process;
use lockscope_capture::thread;
use lockscope_format::{phase, Op};
use lockscope_ring::tsc;

use crate::common::{emit, errno, guarded, set_errno, tramp};
use crate::real::real;

type Argv = *const *const c_char;

real!(real_fork = "fork": fn() -> pid_t);
real!(real_execve = "execve": fn(p: *const c_char, a: Argv, e: Argv) -> c_int);
real!(real_execvpe = "execvpe": fn(p: *const c_char, a: Argv, e: Argv) -> c_int);
real!(real_fexecve = "fexecve": fn(fd: c_int, a: Argv, e: Argv) -> c_int);

extern "C" {
    static environ: Argv;
}

unsafe extern "C-unwind" fn fork_impl(site: u64, fp: u64) -> pid_t {
    // SAFETY: the only unsafe operation is the real fork(), which has no
    // preconditions; the child's re-initialisation runs in our atfork
    // handler, not here.
    unsafe {
        if !thread::is_recording() {
            return real_fork();
        }
        let pid = real_fork();
        if pid != 0 {
            let e = errno();
            if let Some(mut g) = thread::recorder() {
                let t = tsc::now();
                guarded(|| {
                    if pid > 0 {
                        emit(
                            &mut g,
                            Op::Fork,
                            phase::DONE,
                            t,
                            0,
                            site,
                            fp,
                            pid as u64,
                            0,
                            false,
                        )
                    } else {
                        emit(
                            &mut g,
                            Op::Fork,
                            phase::FAIL,
                            t,
                            0,
                            site,
                            fp,
                            e as u64,
                            0,
                            false,
                        )
                    }
                });
            }
            set_errno(e);
        }
        pid
    }
}

tramp!(fork() -> pid_t = fork_impl ["rdi", "rsi"]);

/// Before an exec: if this process is the one being recorded (not a vfork
/// child sharing our memory), snapshot the maps and emit Exec. Returns
/// whether it did, so that a failure can be recorded too.
fn before_exec(site: u64, fp: u64) -> bool {
    // SAFETY: getpid has no preconditions.
    if !thread::is_recording() || unsafe { libc::getpid() } as u32 != process::pid() {
        return false;
    }
    let e = errno();
    process::snapshot_maps();
    let mut done = false;
    if let Some(mut g) = thread::recorder() {
        let t = tsc::now();
        guarded(|| emit(&mut g, Op::Exec, phase::DONE, t, 0, site, fp, 0, 0, false));
        done = true;
    }
    set_errno(e);
    done
}

/// The real exec returned: it failed. Record it, keep errno.
fn exec_failed(recorded: bool, site: u64, fp: u64) {
    let e = errno();
    if recorded {
        if let Some(mut g) = thread::recorder() {
            let t = tsc::now();
            guarded(|| {
                emit(
                    &mut g,
                    Op::Exec,
                    phase::FAIL,
                    t,
                    0,
                    site,
                    fp,
                    e as u64,
                    0,
                    false,
                )
            });
        }
    }
    set_errno(e);
}

/// An environment for exec that keeps LD_PRELOAD (with our library) and
/// LOCKSCOPE_* as they were when this image started. Unchanged when
/// nothing is missing; otherwise a copy in an anonymous mapping (no
/// malloc: exec may be called in a fork child of a threaded program),
/// unmapped if the exec fails.
struct Env {
    envp: Argv,
    map: *mut libc::c_void,
    len: usize,
}

impl Drop for Env {
    fn drop(&mut self) {
        if !self.map.is_null() {
            // SAFETY: our own mapping.
            unsafe { libc::munmap(self.map, self.len) };
        }
    }
}

fn starts_with_key(entry: &[u8], saved: &[u8]) -> bool {
    let key_len = saved.iter().position(|&b| b == b'=').map_or(0, |i| i + 1);
    key_len > 0 && entry.starts_with(&saved[..key_len])
}

/// Path of this library, if it was loaded through LD_PRELOAD.
///
/// # Safety
/// None beyond the library being loaded (it always is while running).
unsafe fn own_path() -> Option<&'static [u8]> {
    // SAFETY: dladdr fills the zeroed local `info` for an address inside
    // this library (our own function); `dli_fname` is checked non-null and
    // then points to the loader's NUL-terminated path of this object,
    // which lives as long as the object stays loaded (a preloaded library
    // is never unloaded): valid for 'static in practice.
    unsafe {
        let mut info: libc::Dl_info = core::mem::zeroed();
        if libc::dladdr(own_path as *const libc::c_void, &mut info) == 0 || info.dli_fname.is_null()
        {
            return None;
        }
        Some(core::ffi::CStr::from_ptr(info.dli_fname).to_bytes())
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

///
/// # Safety
/// `envp` must be null or a NULL-terminated array of NUL-terminated
/// strings (what exec accepts).
unsafe fn fix_env(envp: Argv) -> Env {
    // SAFETY: `envp` is null or a NULL-terminated array of NUL-terminated
    // strings (contract), read up to its NULL (`n` entries) and through
    // CStr::from_ptr; `preload_at < n` when set. The new mapping is ours,
    // `len` bytes: `slots` pointers (n program entries, at most
    // SAVED_ENV_KEYS added ones, the NULL: `k` never exceeds
    // n + SAVED_ENV_KEYS) and then `text` bytes for the merged LD_PRELOAD
    // entry, whose writes ("LD_PRELOAD=", our path, ':', the old value
    // after its 11-byte key, NUL) total lib + old_preload + 2 <= text.
    // Saved entries are NUL-terminated in their static buffers (shorter
    // than the buffer, which is zero-filled) and live for the process.
    unsafe {
        let unchanged = Env {
            envp,
            map: core::ptr::null_mut(),
            len: 0,
        };
        let saved = process::saved_env();
        if saved[1].is_empty() {
            // Not in a session: nothing to keep.
            return unchanged;
        }
        // Our library's path, if LD_PRELOAD named it (the detailed runtime is
        // linked into the program and needs no LD_PRELOAD).
        let lib = own_path().filter(|p| contains(saved[0], p));
        let mut n = 0usize;
        let mut present = [false; process::SAVED_ENV_KEYS];
        let mut preload_ok = lib.is_none();
        let mut preload_at = usize::MAX;
        if !envp.is_null() {
            while !(*envp.add(n)).is_null() {
                let e = core::ffi::CStr::from_ptr(*envp.add(n)).to_bytes();
                for (i, s) in saved.iter().enumerate() {
                    if !s.is_empty() && !present[i] && starts_with_key(e, s) {
                        present[i] = true;
                        if i == 0 {
                            preload_at = n;
                            preload_ok = lib.is_none_or(|l| contains(e, l));
                        }
                    }
                }
                n += 1;
            }
        }
        let missing = (0..saved.len())
            .filter(|&i| !saved[i].is_empty() && !present[i])
            .count();
        if missing == 0 && preload_ok {
            return unchanged;
        }
        // Pointer array, then room for a merged LD_PRELOAD entry.
        let old_preload: &[u8] = if preload_at != usize::MAX {
            core::ffi::CStr::from_ptr(*envp.add(preload_at)).to_bytes()
        } else {
            b""
        };
        let text = lib.map_or(0, |l| l.len()) + old_preload.len() + 16;
        // The program's entries, every saved entry possibly missing, the NULL.
        let slots = n + process::SAVED_ENV_KEYS + 1;
        let len = slots * 8 + text;
        let map = libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if map == libc::MAP_FAILED {
            return unchanged;
        }
        let out = map as *mut *const c_char;
        let mut k = 0;
        for i in 0..n {
            out.add(k).write(*envp.add(i));
            k += 1;
        }
        if !preload_ok {
            // LD_PRELOAD=<our library>:<what the program set>
            let dst = (map as *mut u8).add(slots * 8);
            let lib = lib.unwrap_or(b"");
            let mut w = 0;
            for part in [b"LD_PRELOAD=" as &[u8], lib] {
                core::ptr::copy_nonoverlapping(part.as_ptr(), dst.add(w), part.len());
                w += part.len();
            }
            let old_val = old_preload.get(11..).unwrap_or(b"");
            if !old_val.is_empty() {
                *dst.add(w) = b':';
                w += 1;
                core::ptr::copy_nonoverlapping(old_val.as_ptr(), dst.add(w), old_val.len());
                w += old_val.len();
            }
            *dst.add(w) = 0;
            if preload_at != usize::MAX {
                out.add(preload_at).write(dst as *const c_char);
            } else {
                out.add(k).write(dst as *const c_char);
                k += 1;
                present[0] = true;
            }
        }
        for i in 0..saved.len() {
            if !saved[i].is_empty() && !present[i] {
                // Saved entries are NUL-terminated in their static buffers.
                out.add(k).write(saved[i].as_ptr() as *const c_char);
                k += 1;
            }
        }
        out.add(k).write(core::ptr::null());
        Env {
            envp: out as Argv,
            map,
            len,
        }
    }
}

unsafe extern "C-unwind" fn execve_impl(
    p: *const c_char,
    a: Argv,
    e: Argv,
    site: u64,
    fp: u64,
) -> c_int {
    // SAFETY: the program's arguments go to the real function unchanged
    // (its contract is the program's), except the environment: `fix_env`
    // reads the program's NULL-terminated `e` (exec's contract) and returns
    // it or a NULL-terminated copy in a mapping `env` owns, alive until
    // after the real call returns (it only returns on failure).
    unsafe {
        let rec = before_exec(site, fp);
        let env = fix_env(e);
        let rc = real_execve(p, a, env.envp);
        exec_failed(rec, site, fp);
        let err = errno();
        drop(env);
        set_errno(err);
        rc
    }
}

unsafe extern "C-unwind" fn execvpe_impl(
    p: *const c_char,
    a: Argv,
    e: Argv,
    site: u64,
    fp: u64,
) -> c_int {
    // SAFETY: the program's arguments go to the real function unchanged
    // (its contract is the program's), except the environment: `fix_env`
    // reads the program's NULL-terminated `e` (exec's contract) and returns
    // it or a NULL-terminated copy in a mapping `env` owns, alive until
    // after the real call returns (it only returns on failure).
    unsafe {
        let rec = before_exec(site, fp);
        let env = fix_env(e);
        let rc = real_execvpe(p, a, env.envp);
        exec_failed(rec, site, fp);
        let err = errno();
        drop(env);
        set_errno(err);
        rc
    }
}

unsafe extern "C-unwind" fn fexecve_impl(fd: c_int, a: Argv, e: Argv, site: u64, fp: u64) -> c_int {
    // SAFETY: the program's arguments go to the real function unchanged
    // (its contract is the program's), except the environment: `fix_env`
    // reads the program's NULL-terminated `e` (exec's contract) and returns
    // it or a NULL-terminated copy in a mapping `env` owns, alive until
    // after the real call returns (it only returns on failure).
    unsafe {
        let rec = before_exec(site, fp);
        let env = fix_env(e);
        let rc = real_fexecve(fd, a, env.envp);
        exec_failed(rec, site, fp);
        let err = errno();
        drop(env);
        set_errno(err);
        rc
    }
}

unsafe extern "C-unwind" fn execv_impl(p: *const c_char, a: Argv, site: u64, fp: u64) -> c_int {
    // SAFETY: `environ` is the process environment (a NULL-terminated
    // array libc maintains), read once; execve_impl gets the program's
    // own arguments, whose contract is execv's.
    unsafe { execve_impl(p, a, environ, site, fp) }
}

unsafe extern "C-unwind" fn execvp_impl(p: *const c_char, a: Argv, site: u64, fp: u64) -> c_int {
    // SAFETY: as in execv_impl: `environ` read once, the program's
    // arguments forwarded under execvp's contract.
    unsafe { execvpe_impl(p, a, environ, site, fp) }
}

tramp!(execve(p: *const c_char, a: Argv, e: Argv) -> c_int = execve_impl ["rcx", "r8"]);
tramp!(execvpe(p: *const c_char, a: Argv, e: Argv) -> c_int = execvpe_impl ["rcx", "r8"]);
tramp!(fexecve(fd: c_int, a: Argv, e: Argv) -> c_int = fexecve_impl ["rcx", "r8"]);
tramp!(execv(p: *const c_char, a: Argv) -> c_int = execv_impl ["rdx", "rcx"]);
tramp!(execvp(p: *const c_char, a: Argv) -> c_int = execvp_impl ["rdx", "rcx"]);

// ---- execl, execlp, execle: C-variadic ----
// The trampoline spills the five register arguments after `path` into a
// stack array and passes it, the address of the stack arguments, the call
// site and the variant to `execl_impl`, which collects argv (and envp for
// execle) and calls the vector form.

macro_rules! execl_tramp {
    ($name:ident, $kind:literal) => {
        #[doc = concat!("Interposed `", stringify!($name), "` (C-variadic).")]
        #[cfg_attr(not(test), no_mangle)]
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name(path: *const c_char, arg0: *const c_char) -> c_int {
            core::arch::naked_asm!(
                ".cfi_startproc",
                "sub rsp, 56",
                ".cfi_adjust_cfa_offset 56",
                "mov qword ptr [rsp], rsi",
                "mov qword ptr [rsp + 8], rdx",
                "mov qword ptr [rsp + 16], rcx",
                "mov qword ptr [rsp + 24], r8",
                "mov qword ptr [rsp + 32], r9",
                "mov rsi, rsp",
                "lea rdx, [rsp + 64]",
                "mov rcx, qword ptr [rsp + 56]",
                "mov r8d, {kind}",
                "mov r9, rbp",
                "call {imp}",
                "add rsp, 56",
                ".cfi_adjust_cfa_offset -56",
                "ret",
                ".cfi_endproc",
                imp = sym execl_impl,
                kind = const $kind,
            )
        }
    };
}

execl_tramp!(execl, 0);
execl_tramp!(execlp, 1);
execl_tramp!(execle, 2);

/// Most arguments an execl-family call may pass (the kernel's own limit
/// on argv is far lower in practice).
const MAX_LIST: usize = 1 << 16;

unsafe extern "C-unwind" fn execl_impl(
    path: *const c_char,
    regs: *const *const c_char,
    stack: *const *const c_char,
    site: u64,
    kind: u32,
    fp: u64,
) -> c_int {
    // SAFETY: `regs` is the trampoline's 5-slot stack array of the
    // register arguments after `path` and `stack` the caller's stack
    // arguments (the variadic tail): execl's contract is a NULL-terminated
    // list (then envp for execle), so every index read, `0..=n` (+1 for
    // execle), is an argument the program passed; bounded by MAX_LIST.
    // `argv` is our own mapping of (n + 1) pointers, filled and NULL-
    // terminated, unmapped once after the exec failed. `environ` is read
    // once (libc's NULL-terminated environment).
    unsafe {
        let arg = |i: usize| {
            if i < 5 {
                *regs.add(i)
            } else {
                *stack.add(i - 5)
            }
        };
        let mut n = 0;
        while n < MAX_LIST && !arg(n).is_null() {
            n += 1;
        }
        if n == MAX_LIST {
            set_errno(libc::E2BIG);
            return -1;
        }
        let envp = if kind == 2 {
            arg(n + 1) as Argv
        } else {
            environ
        };
        let len = (n + 1) * 8;
        let map = libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if map == libc::MAP_FAILED {
            set_errno(libc::ENOMEM);
            return -1;
        }
        let argv = map as *mut *const c_char;
        for i in 0..=n {
            argv.add(i).write(arg(i));
        }
        let rc = if kind == 1 {
            execvpe_impl(path, argv, envp, site, fp)
        } else {
            execve_impl(path, argv, envp, site, fp)
        };
        let e = errno();
        libc::munmap(map, len);
        set_errno(e);
        rc
    }
}
