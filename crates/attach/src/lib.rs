//! Attach mode: the blocking waits of processes that are already running
//! (`lockscope record -p PID`, or every process with `-a`), seen through
//! eBPF, with no restart and nothing injected, written as an ordinary
//! lockscope trace that every command reads.
//!
//! # What is seen
//! The kernel side (`bpf/futex.bpf.c`, compiled by clang in build.rs) runs
//! at the entry and return of every `futex` system call of the attached
//! processes: each wait that slept at least `--min-wait` and each wake that
//! woke a thread is sent to the recorder with the thread's user registers
//! and a copy of the top of its stack, which [`unwind`] walks offline with
//! the binaries' CFI. A futex wait is where every blocking lock of glibc
//! (mutexes, rwlocks, condition variables, semaphores, barriers), of Rust's
//! `std::sync` and of most runtimes ends up, so the wait of any lock that
//! made a thread sleep is seen, with the waiter's call path and the call
//! path of the thread whose wake ended it (the releasing holder: the
//! blame). The trace holds them as the `LD_PRELOAD` recorder writes futex
//! waits and wakes (`Op::FutexWait`, `Op::FutexWake`), so reports treat
//! the words as they treat Rust's locks: waits, sites and blame exact,
//! acquisitions and holds of uncontended sections unknown ("-").
//!
//! # Entry point
//! [`record`] ([`AttachConfig`] -> the trace file and an [`AttachSummary`]).
//!
//! # Design constraints
//! Nothing runs inside the attached processes: their code, memory and
//! timing are untouched except for the cost of the BPF programs on their
//! futex calls, and they keep running, unchanged, after the recorder
//! detaches (the programs are removed when the recorder's file descriptors
//! close, even if it is killed). Every limit is counted in the trace as a
//! loss: a full event ring, a full table of calls in progress, a stack
//! that could not be copied. x86-64 only (the register offsets of the
//! kernel side). Needs CAP_BPF and CAP_PERFMON (or root).
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod bpf;
mod session;
pub mod unwind;

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

pub use session::record;

/// CLOCK_MONOTONIC, ns: the clock `bpf_ktime_get_ns` reads (the ring
/// protocol's clock, which the recorder's other clocks are also read
/// from).
pub(crate) use lockscope_ring::tsc::monotonic_ns;

/// What to attach to and how.
#[derive(Clone, Debug)]
pub struct AttachConfig {
    /// Processes to attach to (with `all`, ignored).
    pub pids: Vec<u32>,
    /// Every process on the machine.
    pub all: bool,
    /// Stop after this long (else at the stop flag, or when every
    /// attached process has exited).
    pub duration: Option<Duration>,
    /// Waits shorter than this are dropped in the kernel, before they are
    /// copied.
    pub min_wait_ns: u64,
    /// Keep only these threads (empty: all).
    pub tids: Vec<u32>,
    /// Keep only processes whose command name (`comm`) is one of these
    /// (empty: all).
    pub comms: Vec<String>,
    /// Keep only these futex words (lock addresses; empty: all).
    pub locks: Vec<u64>,
    /// The trace to write.
    pub output: PathBuf,
    /// Labels (`KEY`, `VALUE`) stored in the header.
    pub labels: Vec<(String, String)>,
}

/// What a recording held.
#[derive(Clone, Debug, Default)]
pub struct AttachSummary {
    /// Waits recorded (completed, or still open at the end).
    pub waits: u64,
    /// Of those, waits that slept and were woken.
    pub slept: u64,
    /// Waits still blocked when the recording ended.
    pub open_waits: u64,
    /// Wakes that woke a thread.
    pub wakes: u64,
    /// Events lost, all reasons.
    pub lost: u64,
    /// Events of threads or processes the filters (`--tid`, `--comm`)
    /// left out.
    pub filtered: u64,
    /// Processes seen.
    pub processes: usize,
    /// Threads seen.
    pub threads: usize,
    /// Length of the recording, ns.
    pub duration_ns: u64,
    /// Why it ended.
    pub ended: Ended,
}

/// Why a recording ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ended {
    /// `--duration` elapsed.
    #[default]
    Duration,
    /// The stop flag was raised (Ctrl-C).
    Stopped,
    /// Every attached process exited.
    Exited,
}

/// Why attach mode could not record.
#[derive(Debug)]
#[non_exhaustive]
pub enum AttachError {
    /// This build has no BPF program: clang was missing when it was built.
    NotBuilt,
    /// The recorder lacks a capability the kernel requires.
    Capability(&'static str),
    /// No such process.
    NoProcess(u32),
    /// A process filter matched nothing at the start.
    Config(String),
    /// The kernel refused the BPF program or a map operation.
    Bpf {
        /// What was being done.
        what: &'static str,
        /// The loader's message.
        detail: String,
    },
    /// The trace could not be written.
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The trace encoder failed.
    Format(lockscope_format::FormatError),
}

impl fmt::Display for AttachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttachError::NotBuilt => write!(
                f,
                "attach mode is not in this build of lockscope (clang was missing when it was built): install clang and rebuild"
            ),
            AttachError::Capability(c) => write!(
                f,
                "attach mode needs {c} (run as root, or give lockscope CAP_BPF and CAP_PERFMON)"
            ),
            AttachError::NoProcess(p) => write!(f, "no process {p}"),
            AttachError::Config(m) => write!(f, "{m}"),
            AttachError::Bpf { what, detail } => write!(f, "eBPF: {what}: {detail}"),
            AttachError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            AttachError::Format(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for AttachError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AttachError::Io { source, .. } => Some(source),
            AttachError::Format(e) => Some(e),
            _ => None,
        }
    }
}

impl From<lockscope_format::FormatError> for AttachError {
    fn from(e: lockscope_format::FormatError) -> Self {
        AttachError::Format(e)
    }
}
