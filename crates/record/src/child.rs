//! Starting the program, forwarding signals to it, and reaping it and its
//! descendants.

use std::collections::HashMap;
use std::ffi::OsString;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use lockscope_ring::session::SessionWake;

use crate::{RecordConfig, RecordError};

/// Last forwardable signal received (0: none pending).
static PENDING_SIGNAL: AtomicI32 = AtomicI32::new(0);
/// Signals received so far (the third one escalates to SIGKILL).
static SIGNAL_COUNT: AtomicU32 = AtomicU32::new(0);

const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The last signal received and when (CLOCK_MONOTONIC ms), to recognise
/// the same signal delivered twice by one sender.
static LAST_SIGNAL: AtomicI32 = AtomicI32::new(0);
static LAST_SIGNAL_MS: AtomicU64 = AtomicU64::new(0);
/// The same signal again within this many ms is one event: `timeout`
/// sends it to the recorder and then to its process group, which the
/// recorder is in.
const SAME_SIGNAL_MS: u64 = 200;

/// The drain's wake page while a recording's handlers are installed
/// (null otherwise): a handler wakes the sleeping drain through it, so
/// that a child's end or a signal to forward is handled at once, not at
/// the drain's next timeout.
static SIGNAL_WAKE: AtomicPtr<SessionWake> = AtomicPtr::new(std::ptr::null_mut());
/// Handlers between their load of [`SIGNAL_WAKE`] and their last use of
/// it: [`SignalGuard`]'s drop waits for none, so that the page is never
/// unmapped under a handler running on another thread.
static IN_HANDLER: AtomicU32 = AtomicU32::new(0);
/// Set by a handler: news for the drain's loop (a child ended, a signal
/// arrived), which its last look before sleeping takes ([`take_noted`]).
static NOTED: AtomicBool = AtomicBool::new(false);

/// Tells the drain's loop, and wakes the drain if it sleeps.
/// Async-signal-safe: atomics and one raw system call (errno untouched).
fn wake_from_handler() {
    NOTED.store(true, Ordering::SeqCst);
    IN_HANDLER.fetch_add(1, Ordering::SeqCst);
    let w = SIGNAL_WAKE.load(Ordering::SeqCst);
    // SAFETY: non-null only while the page is mapped; SignalGuard's drop
    // clears it and then waits for IN_HANDLER to drop to 0 before the
    // page can be unmapped.
    if let Some(w) = unsafe { w.as_ref() } {
        // Not `wake_drain`: the drain's last look before sleeping does not
        // see this news unless it reads NOTED, which it does; the
        // unconditional wake covers a drain already asleep.
        lockscope_ring::ring::wake_drain_now(w);
    }
    IN_HANDLER.fetch_sub(1, Ordering::SeqCst);
}

/// True (once) if a handler ran since the last call: the drain's loop
/// then goes round again instead of sleeping.
pub(crate) fn take_noted() -> bool {
    NOTED.swap(false, Ordering::SeqCst)
}

extern "C" fn on_child(_sig: libc::c_int) {
    wake_from_handler();
}

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // Where the program has a process group of its own (see `spawn`), a
    // signal to the recorder's group (`kill -INT -PGID`, `timeout`) or to
    // the recorder alone reaches only the recorder, which forwards it
    // once. Where the program shares the recorder's group (an interactive
    // terminal), a Ctrl-C is sent by the kernel (si_code > 0) to the whole
    // foreground group, the program included: it is not forwarded, which
    // would deliver it twice. Either way the recorder keeps running and
    // finishes the trace once the program is gone.
    // SAFETY: the kernel passes a valid siginfo with SA_SIGINFO.
    let user_sent = info.is_null() || unsafe { (*info).si_code } <= 0;
    let now = monotonic_ms();
    let prev = LAST_SIGNAL.swap(sig, Ordering::Relaxed);
    let prev_ms = LAST_SIGNAL_MS.swap(now, Ordering::Relaxed);
    if prev == sig && now.saturating_sub(prev_ms) < SAME_SIGNAL_MS {
        return;
    }
    SIGNAL_COUNT.fetch_add(1, Ordering::Relaxed);
    if user_sent || PROGRAM_OWN_GROUP.load(Ordering::Relaxed) {
        PENDING_SIGNAL.store(sig, Ordering::Relaxed);
    }
    wake_from_handler();
}

/// CLOCK_MONOTONIC in ms (async-signal-safe).
fn monotonic_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer; clock_gettime is async-signal-safe.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// True when the program runs in a process group of its own: then every
/// signal the recorder gets was not delivered to the program.
static PROGRAM_OWN_GROUP: AtomicBool = AtomicBool::new(false);

/// True if a terminal on stdin, stdout or stderr has the recorder's
/// process group in the foreground: an interactive session, where the
/// program must stay in that group (a background group reading the
/// terminal would be stopped by SIGTTIN).
fn interactive() -> bool {
    // SAFETY: plain calls on standard descriptors.
    unsafe {
        let me = libc::getpgrp();
        (0..3).any(|fd| libc::isatty(fd) == 1 && libc::tcgetpgrp(fd) == me)
    }
}

/// Installed signal handlers; restores the previous ones when dropped.
pub(crate) struct SignalGuard {
    old: Vec<(libc::c_int, libc::sigaction)>,
    /// The wake page given to the handlers (null: none).
    wake: *mut SessionWake,
}

impl SignalGuard {
    /// Installs the handlers of the signals to forward, and of SIGCHLD
    /// (a child ended: the drain's loop reaps it). Both wake the drain
    /// through `wake` (null: none); the page must stay mapped until the
    /// guard is dropped.
    pub(crate) fn install(wake: *const SessionWake) -> SignalGuard {
        PENDING_SIGNAL.store(0, Ordering::Relaxed);
        SIGNAL_COUNT.store(0, Ordering::Relaxed);
        LAST_SIGNAL.store(0, Ordering::Relaxed);
        let wake = wake as *mut SessionWake;
        SIGNAL_WAKE.store(wake, Ordering::SeqCst);
        let mut old = Vec::new();
        let handlers = FORWARDED
            .iter()
            .map(|&s| (s, on_signal as *const () as usize, libc::SA_SIGINFO))
            .chain([(
                libc::SIGCHLD,
                on_child as *const () as usize,
                libc::SA_NOCLDSTOP,
            )]);
        for (sig, handler, flags) in handlers {
            // SAFETY: plain sigaction calls with initialized structs.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = handler;
                sa.sa_flags = flags | libc::SA_RESTART;
                libc::sigemptyset(&mut sa.sa_mask);
                let mut prev: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &sa, &mut prev) == 0 {
                    old.push((sig, prev));
                }
            }
        }
        SignalGuard { old, wake }
    }

    /// A signal to forward, if one arrived since the last call; after
    /// three signals, SIGKILL (the user insists).
    pub(crate) fn take(&self) -> Option<libc::c_int> {
        let s = PENDING_SIGNAL.swap(0, Ordering::Relaxed);
        if SIGNAL_COUNT.load(Ordering::Relaxed) >= 3 {
            return Some(libc::SIGKILL);
        }
        (s != 0).then_some(s)
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        for (sig, prev) in &self.old {
            // SAFETY: restoring what sigaction returned.
            unsafe { libc::sigaction(*sig, prev, std::ptr::null_mut()) };
        }
        // Ours only (a recording started later in this process may have
        // put its own there); then no handler still holds it.
        let _ = SIGNAL_WAKE.compare_exchange(
            self.wake,
            std::ptr::null_mut(),
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        while IN_HANDLER.load(Ordering::SeqCst) != 0 {
            std::hint::spin_loop();
        }
    }
}

/// Starts the program with the preload library and session variables.
pub(crate) fn spawn(cfg: &RecordConfig, session: &std::path::Path) -> Result<u32, RecordError> {
    let mut preload = OsString::from(cfg.preload_lib.as_os_str());
    // Prepend: the program's own preloads still load, after ours, so our
    // hooks see their lock calls too.
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let mut cmd = Command::new(&cfg.program);
    cmd.args(&cfg.args)
        .env("LD_PRELOAD", preload)
        .env(lockscope_ring::session::ENV_SESSION, session)
        .env(
            lockscope_ring::session::ENV_RING_KB,
            cfg.ring_kb.to_string(),
        )
        .env(
            lockscope_ring::session::ENV_RING_MAX_KB,
            cfg.ring_max_kb.to_string(),
        )
        .env(lockscope_ring::session::ENV_STACKS, cfg.stacks.as_str())
        .env(
            lockscope_ring::tsc::ENV_CLOCK,
            if lockscope_ring::tsc::is_monotonic() {
                "monotonic"
            } else {
                "tsc"
            },
        )
        .env(
            lockscope_ring::session::ENV_ON_FULL,
            if cfg.wait_when_full { "wait" } else { "drop" },
        )
        .envs(cfg.env.iter().map(|(k, v)| (k, v)));
    // GPU capture: the CUDA driver loads this library and calls its
    // `InitializeInjection` when the program first uses CUDA. Someone
    // else's injection (another profiler) wins: two cannot coexist.
    if cfg.gpu && std::env::var_os("CUDA_INJECTION64_PATH").is_none() {
        cmd.env("CUDA_INJECTION64_PATH", &cfg.preload_lib);
    }
    // Outside an interactive terminal the program gets a process group of
    // its own, so that a signal sent to the recorder's group (`kill -INT
    // -PGID`, `timeout -s INT`, supervisors) reaches the program once,
    // forwarded by the recorder, instead of twice. It dies with
    // the recorder (PR_SET_PDEATHSIG), as it would have with the group.
    let own_group = !interactive();
    PROGRAM_OWN_GROUP.store(own_group, Ordering::Relaxed);
    if own_group {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
        // SAFETY: prctl is async-signal-safe; nothing else runs in the
        // child between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                );
                Ok(())
            });
        }
    }
    let child = cmd.spawn().map_err(|source| RecordError::Spawn {
        program: cfg.program.to_string_lossy().into_owned(),
        source,
    })?;
    // The Child handle is dropped without waiting: we reap with waitpid(-1)
    // below, which also collects reparented grandchildren.
    Ok(child.id())
}

/// Makes this process the reaper of orphaned descendants (or stops being
/// one), so that a program's background children are waited for (their
/// rings drained) and their exit status known.
pub(crate) fn set_subreaper(on: bool) {
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(
            libc::PR_SET_CHILD_SUBREAPER,
            libc::c_ulong::from(on),
            0,
            0,
            0,
        )
    };
}

/// Shell-style status: the exit code, or 128+N for signal N.
pub(crate) fn shell_status(raw: libc::c_int) -> (i32, Option<i32>) {
    if libc::WIFSIGNALED(raw) {
        let s = libc::WTERMSIG(raw);
        (128 + s, Some(s))
    } else {
        (libc::WEXITSTATUS(raw), None)
    }
}

/// Reaps every exited child without blocking. Returns false when there
/// is no child left at all.
pub(crate) fn reap(statuses: &mut HashMap<u32, libc::c_int>) -> bool {
    loop {
        let mut st = 0;
        // SAFETY: plain waitpid.
        let pid = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG) };
        if pid > 0 {
            statuses.insert(pid as u32, st);
            continue;
        }
        if pid == 0 {
            return true;
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return false;
    }
}

/// Sends `sig` to `pid` (ignoring "no such process": it just exited).
pub(crate) fn send(pid: u32, sig: libc::c_int) {
    // SAFETY: kill with a positive pid.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}
