//! The lockscope recorder: everything of timing mode that runs *outside*
//! the recorded program.
//!
//! [`record`] creates a session directory on tmpfs, starts the program with
//! the preload library (`LD_PRELOAD`) and the session variables, drains the
//! per-thread shared-memory rings the program fills
//! ([`lockscope_ring::ring`]) while it runs, and writes one trace file
//! ([`lockscope_format::TraceWriter`]). After the program (and every
//! process it started) has exited, also when it was killed, the rings are
//! drained once more, the end records and the footer are written, and the
//! session directory is removed.
//!
//! # Entry points
//! - [`record`] with a [`RecordConfig`]; returns a [`RecordOutcome`] (exit
//!   status, counts, most contended locks) for the summary.
//! - [`drain_dir`]: the drain pipeline alone, over a session directory
//!   filled by someone else (benchmarks, tests with hand-made rings).
//! - [`orphaned_sessions`] and [`recover`]: the session directories of
//!   recorders that died (kept for [`KEEP_ORPHANED`]) and the trace made
//!   of one and of what its recorder had written.
//!
//! # Design constraints
//! - Threads: the *drain* thread copies raw slots out of the rings (one
//!   bulk copy per ring); *converter* workers ([`RecordConfig::writers`],
//!   by default one per four CPUs) decode and convert them (ticks to ns,
//!   call paths to stack ids, first sightings of locks) and encode them,
//!   each for its own share of the program's threads; one *output*
//!   thread writes the file. A single thread doing uncontended
//!   lock/unlock produces ~60M events/s, so the ring must be emptied
//!   every few ms; converting is the slower half and would stall the
//!   drain if it ran on the same thread. They are joined by a queue
//!   bounded in bytes (min(1 GiB, RAM/8) of raw slots): workers that fall
//!   behind a fast program catch up after it ends; beyond the limit the
//!   drain leaves the rings to fill, and the program drops events
//!   *counted* in the ring header instead of the recorder growing without
//!   bound.
//! - Nothing the program writes into the session is trusted: file names,
//!   headers, slots, maps and ELF files are validated and a bad one is
//!   skipped and counted, never a panic.
//! - Every loss is counted and ends up in [`lockscope_format::Loss`]
//!   records and the footer: ring overflow, threads without a ring, corrupt
//!   slots, a recorder that disabled itself inside the program.
#![deny(missing_docs)]

mod child;
mod convert;
mod drain;
mod elf;
mod maps;
mod pipeline;
mod recover;
mod sessiondir;
mod slotbuf;
mod wake;

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

pub use elf::{build_id, build_id_of_bytes};
pub use lockscope_ring::session::{DEFAULT_RING_KB, DEFAULT_RING_MAX_KB};
pub use maps::{parse_complete as parse_maps, parse_line as parse_map_line, MapLine};
pub use pipeline::{default_writers, drain_dir, drain_dir_with, MAX_WRITERS};
pub use recover::{recover, Gap, RecoverOutcome};
pub use sessiondir::{orphaned_sessions, OrphanedSession, SessionInfo, KEEP_ORPHANED};

/// Which call paths the preload library records (`LOCKSCOPE_STACKS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StackMode {
    /// Only for acquisitions that had to wait (the default: a full path
    /// costs ~20 ns, affordable only where the waiting already costs more).
    #[default]
    Contended,
    /// On every event.
    All,
    /// Never (the call site is still recorded).
    None,
}

impl StackMode {
    /// The value passed in `LOCKSCOPE_STACKS`.
    pub fn as_str(self) -> &'static str {
        match self {
            StackMode::Contended => "contended",
            StackMode::All => "all",
            StackMode::None => "none",
        }
    }
}

/// What to record and where.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RecordConfig {
    /// The program to run (looked up in `PATH` when it has no `/`).
    pub program: OsString,
    /// Its arguments (without argv\[0\]).
    pub args: Vec<OsString>,
    /// The trace file to write (created or truncated).
    pub output: PathBuf,
    /// Path of `liblockscope_preload.so`.
    pub preload_lib: PathBuf,
    /// Call-path mode.
    pub stacks: StackMode,
    /// Size of a thread's first ring, KiB.
    pub ring_kb: u64,
    /// Largest ring a hot thread grows to, KiB.
    pub ring_max_kb: u64,
    /// A thread whose ring is full waits for the recorder instead of
    /// dropping the event: a complete trace, at the price of perturbing
    /// the program's timing while it waits (counted and reported in
    /// [`RecordOutcome::full_waits`]). On by default: threads
    /// that hold no lock wait before their next call when their ring is
    /// three quarters full, so the waits fall outside critical sections.
    pub wait_when_full: bool,
    /// Where to create the session directory; `None`: `/dev/shm`, else
    /// `$TMPDIR`, else `/tmp`.
    pub session_parent: Option<PathBuf>,
    /// Attach NVIDIA CUPTI to the program's CUDA contexts (by pointing
    /// `CUDA_INJECTION64_PATH` at the preload library) so that GPU
    /// launches, waits and executions are recorded. On by default; a
    /// program that does not use CUDA never loads CUPTI either way, and a
    /// user's own `CUDA_INJECTION64_PATH` is left alone.
    pub gpu: bool,
    /// Converter threads (1..=[`MAX_WRITERS`]); 0: [`default_writers`].
    /// Each program thread's events are converted by one of them, so more
    /// help only when several threads are busy. As many threads copy the
    /// rings in drain passes that find megabytes waiting.
    pub writers: usize,
    /// More environment for the program, set after the recorder's own
    /// variables: the settings of the injected runtimes that the user
    /// chose on the command line (`record --all-accesses` sets
    /// `LOCKSCOPE_ALL_ACCESSES=1`). The runtimes read the environment
    /// because it is all they have before `main`; a variable the user
    /// set already reaches the program unchanged unless listed here.
    pub env: Vec<(OsString, OsString)>,
    /// The user's labels (`record --label KEY=VALUE`), stored in the
    /// trace header as `label:KEY` pairs ([`LABEL_PREFIX`]) and carried
    /// into every report and export.
    pub labels: Vec<(String, String)>,
}

/// Prefix of a label's key among the header's extra pairs (trace format
/// 1.3).
pub const LABEL_PREFIX: &str = lockscope_format::LABEL_PREFIX;

impl RecordConfig {
    /// A configuration with the defaults (contended stacks, 64 KiB first
    /// rings growing up to 16 MiB, wait when full).
    pub fn new(
        program: impl Into<OsString>,
        args: Vec<OsString>,
        output: impl Into<PathBuf>,
        preload_lib: impl Into<PathBuf>,
    ) -> Self {
        RecordConfig {
            program: program.into(),
            args,
            output: output.into(),
            preload_lib: preload_lib.into(),
            stacks: StackMode::Contended,
            ring_kb: lockscope_ring::session::DEFAULT_RING_KB,
            ring_max_kb: lockscope_ring::session::DEFAULT_RING_MAX_KB,
            wait_when_full: true,
            session_parent: None,
            gpu: true,
            writers: 0,
            env: Vec::new(),
            labels: Vec::new(),
        }
    }
}

/// Counters of one lock, for the summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockSummary {
    /// OS pid of the process.
    pub pid: u32,
    /// Address of the lock (or futex word).
    pub addr: u64,
    /// Name of the op that first named it (`MutexLock`, `FutexWait`...).
    pub kind: &'static str,
    /// Successful acquisitions.
    pub acquisitions: u64,
    /// Acquisitions that had to wait (for futex words: waits).
    pub contended: u64,
    /// Total time spent waiting, ns (with the waits still open when the
    /// program ended, up to its end).
    pub wait_ns: u64,
    /// Acquisitions (for futex words: waits) still blocked when the
    /// program ended: a deadlock, or a program killed while it waited.
    pub still_waiting: u64,
}

/// What a recording produced.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct RecordOutcome {
    /// The trace file.
    pub output: PathBuf,
    /// Exit status of the program as a shell reports it (128+N for
    /// signal N).
    pub exit_status: i32,
    /// The signal that killed the program, if any.
    pub signal: Option<i32>,
    /// Duration of the recording, ns.
    pub duration_ns: u64,
    /// Process images recorded.
    pub processes: u32,
    /// Threads recorded.
    pub threads: u32,
    /// Events written.
    pub events: u64,
    /// Events lost (all causes).
    pub lost: u64,
    /// Lost events by cause, for the message.
    pub losses: Vec<(lockscope_format::LossReason, u64)>,
    /// Size of the trace file, bytes.
    pub bytes: u64,
    /// Locks with the most contended acquisitions, most first (at most 10).
    pub top_locks: Vec<LockSummary>,
    /// Signals the recorder received and forwarded to the program.
    pub forwarded_signals: Vec<i32>,
    /// Processes in which the preload library disabled itself.
    pub disabled_processes: Vec<u32>,
    /// Most bytes of raw events queued between the drain and the writer
    /// at once (the writer may fall behind a fast program and catch up
    /// after it ends).
    pub queue_peak_bytes: u64,
    /// Times a ring was left to fill because that queue was at its limit
    /// (min(1 GiB, RAM/8)); the events the program then dropped are
    /// counted in `lost`.
    pub queue_full_skips: u64,
    /// Converter workers the recording used ([`RecordConfig::writers`]).
    pub writers: u32,
    /// Drain passes heavy enough to be copied by several threads (only
    /// with more than one writer).
    pub parallel_copies: u64,
    /// 2 MiB buffers the recorder mapped to carry events from the drain to
    /// the converters (recycled; each costs a huge page's zeroing when
    /// first touched).
    pub batch_buffers: u64,
    /// Times a thread of the program waited for the recorder to make room
    /// in its buffer (back-pressure, the default instead of losing events):
    /// the program's timing was perturbed for `full_wait_ns` in total.
    pub full_waits: u64,
    /// Total time threads spent in those waits, ns.
    pub full_wait_ns: u64,
    /// Times a thread's buffer could not be created or grown because the
    /// file system of the session directory was full (ENOSPC). The thread
    /// then got a smaller buffer, kept its current one (and waited), or,
    /// at worst, recorded nothing ([`RecordOutcome::threads_without_buffer`]).
    pub space_exhausted: u64,
    /// Threads that got no buffer at all (their events are lost, counted).
    pub threads_without_buffer: u64,
    /// Buffers grown because their thread ran hot.
    pub buffers_grown: u64,
    /// Threads that took over the buffer of a joined thread instead of
    /// creating one (creating and unmapping one per thread made
    /// short threads cost the program 3x).
    pub buffers_reused: u64,
    /// Buffers of joined threads unmapped instead of kept for reuse (the
    /// free list was full, or the buffer had grown large).
    pub buffers_not_pooled: u64,
    /// Thread starts that created a buffer although joined threads'
    /// buffers were waiting, none of them emptied by the recorder yet.
    pub pool_not_ready: u64,
    /// The directory the session was created in (`/dev/shm` unless told
    /// otherwise), for messages about its space.
    pub session_parent: PathBuf,
    /// CPU time (user and system) the recording process itself used, ns:
    /// the drain, the converters and the writer, not the program (its
    /// own time is its children's). What the recorder costs a machine
    /// whose CPUs the program keeps busy.
    pub recorder_cpu_ns: u64,
    /// Peak resident memory of the recording process, bytes: its
    /// buffers, and the program's rings it has mapped (shared memory
    /// counted once here, once in the program).
    pub recorder_peak_rss_bytes: u64,
}

/// (CPU ns, peak RSS bytes) of the calling process so far, its children
/// excluded; zeros where they cannot be read.
pub fn own_usage() -> (u64, u64) {
    // SAFETY: rusage is plain data; all zeroes is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid out-pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0, 0);
    }
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    (ns(ru.ru_utime) + ns(ru.ru_stime), peak_rss())
}

/// The value of field `name` (`VmHWM`, `CapEff`) in this process's
/// `/proc/self/status`, trimmed; `None` if it cannot be read.
pub fn self_status(name: &str) -> Option<String> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|v| v.strip_prefix(':'))
            .map(|v| v.trim().to_string())
    })
}

/// The process's peak resident memory, bytes (`VmHWM`), 0 if unknown.
///
/// Not `getrusage`'s `ru_maxrss`: Linux keeps it across `exec`, so a
/// recorder started by a large process (a benchmark harness holding a
/// trace in memory) reported that process's 4.8 GB as its own.
fn peak_rss() -> u64 {
    self_status("VmHWM")
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Why a recording failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum RecordError {
    /// The program could not be started (not found, not executable...).
    Spawn {
        /// The program as given.
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The session directory could not be created or used.
    Session {
        /// Directory concerned.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The trace file could not be created or written.
    Output {
        /// The trace file.
        path: PathBuf,
        /// What went wrong.
        source: lockscope_format::FormatError,
    },
    /// The program ran to its end, but the trace could not be written
    /// completely (a full file system): what was written before is kept,
    /// readable as a truncated trace.
    TraceIncomplete {
        /// The trace file.
        path: PathBuf,
        /// What went wrong.
        source: lockscope_format::FormatError,
        /// Bytes of the trace on disk.
        bytes: u64,
        /// The program's exit status, as [`RecordOutcome::exit_status`].
        exit_status: i32,
    },
    /// The preload library does not exist.
    NoPreload {
        /// The path tried.
        path: PathBuf,
    },
    /// A recorder thread failed unexpectedly (a bug: please report it).
    Internal(String),
    /// A session directory could not be recovered ([`recover`]).
    Recover {
        /// The session directory, or the trace, concerned.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::Spawn { program, source } => {
                write!(f, "cannot run `{program}`: {}", os_message(source))
            }
            RecordError::Session { path, source } => write!(
                f,
                "cannot use the session directory {}: {}",
                path.display(),
                os_message(source)
            ),
            RecordError::Output { path, source } => {
                write!(f, "cannot write the trace {}: {source}", path.display())
            }
            RecordError::TraceIncomplete {
                path,
                source,
                bytes,
                exit_status,
            } => {
                let cause = match source {
                    lockscope_format::FormatError::Io(e) => io_cause(e),
                    e => e.to_string(),
                };
                write!(
                    f,
                    "the trace {} is incomplete: {cause}, after {bytes} bytes (they are kept: \
                     `lockscope report` reads what they hold); the program exited with {exit_status}",
                    path.display()
                )
            }
            RecordError::NoPreload { path } => write!(
                f,
                "the preload library {} does not exist (build the workspace first)",
                path.display()
            ),
            RecordError::Internal(m) => write!(f, "internal recorder error: {m}"),
            RecordError::Recover { path, what } => {
                write!(f, "cannot recover {}: {what}", path.display())
            }
        }
    }
}

impl std::error::Error for RecordError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RecordError::Spawn { source, .. } | RecordError::Session { source, .. } => Some(source),
            RecordError::Output { source, .. } | RecordError::TraceIncomplete { source, .. } => {
                Some(source)
            }
            _ => None,
        }
    }
}

/// "No such file or directory" rather than std's "No such file or
/// directory (os error 2)": the error number helps nobody here.
/// A write error in words a user acts on: the usual causes named first.
fn io_cause(e: &std::io::Error) -> String {
    let named = match e.raw_os_error() {
        Some(libc::ENOSPC) => "the file system is full (ENOSPC)",
        Some(libc::EDQUOT) => "the disk quota is exceeded (EDQUOT)",
        Some(libc::EIO) => "an I/O error of the device (EIO)",
        _ => return os_message(e),
    };
    format!("{named}: {}", os_message(e))
}

fn os_message(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => {
            // SAFETY: strerror returns a valid C string for any errno.
            let s = unsafe { std::ffi::CStr::from_ptr(libc::strerror(n)) };
            s.to_string_lossy().into_owned()
        }
        None => e.to_string(),
    }
}

/// Records one run of `config.program`. Blocks until the program and all
/// its descendants have exited.
///
/// The calling process becomes a child subreaper (so that orphaned
/// descendants of the program are reparented to it and their exit status
/// is known) and reaps *every* child it has: call it from a process with
/// no other children. SIGINT, SIGTERM and SIGHUP sent to the calling
/// process while recording are forwarded to the program; the trace is
/// then finished normally.
pub fn record(config: RecordConfig) -> Result<RecordOutcome, RecordError> {
    pipeline::run(config)
}
