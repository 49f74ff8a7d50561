//! The lock-contention report: which locks make threads wait, where, for
//! how long, and whose fault it is.
//!
//! Entry point: [`analyze`] (path + [`ReportConfig`] -> [`Report`]). The
//! [`Report`] is plain data: serialize it with serde for JSON (schema
//! [`SCHEMA`]), or render it with [`crate::render`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use serde::Serialize;

use crate::hist::Summary;
use crate::model::{Anomalies, Culprit, Kind, Model, ModelConfig};
use lockscope_symbols::{Location, Symbolizer};
use lockscope_trace::input::Meta;
use lockscope_trace::AnalysisError;

/// Version tag of the JSON output. Bumped on any incompatible change;
/// fields may be added without a bump.
pub const SCHEMA: &str = "lockscope.report/1";

/// Order of the lock table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SortKey {
    /// Total wait time, descending (default).
    #[default]
    Wait,
    /// Total hold time, descending.
    Hold,
    /// Acquisitions, descending.
    Acquisitions,
    /// Contended acquisitions, descending.
    Contended,
    /// Owner changes, descending.
    OwnerChanges,
    /// Maximum wait, descending.
    MaxWait,
    /// Lock name (or address), ascending.
    Name,
}

impl SortKey {
    /// Parses a `--sort` value.
    pub fn parse(s: &str) -> Option<SortKey> {
        Some(match s {
            "wait" => SortKey::Wait,
            "hold" => SortKey::Hold,
            "acquisitions" | "acq" => SortKey::Acquisitions,
            "contended" => SortKey::Contended,
            "owner-changes" => SortKey::OwnerChanges,
            "max-wait" => SortKey::MaxWait,
            "name" => SortKey::Name,
            _ => return None,
        })
    }
    /// Accepted `--sort` values.
    pub const NAMES: &'static [&'static str] = &[
        "wait",
        "hold",
        "acquisitions",
        "contended",
        "owner-changes",
        "max-wait",
        "name",
    ];
}

/// What to analyse and what to keep in the report.
#[derive(Clone, Debug)]
pub struct ReportConfig {
    /// Resolve addresses to functions, lines and data symbols.
    pub symbolize: bool,
    /// Subtract the recorder's measured overhead (PinCS §2.2).
    pub correct_overhead: bool,
    /// Order of locks.
    pub sort: SortKey,
    /// Keep at most this many locks and blame rows (None: all).
    pub top: Option<usize>,
    /// Drop locks whose total wait is below this, ns.
    pub min_wait_ns: u64,
    /// Keep only locks whose address (`0x...`) or name contains this.
    pub lock_filter: Option<String>,
    /// Keep only threads whose tid equals, or name contains, this.
    pub thread_filter: Option<String>,
    /// Name sites by their innermost frame even when it is runtime code
    /// (libc, libstdc++, Rust std, lockscope); default: by the innermost
    /// user frame ([`lockscope_symbols::Location::user_view`]).
    pub frames_all: bool,
    /// Read past damaged records instead of failing
    /// ([`lockscope_trace::input::index_with`]).
    pub skip_corrupt: bool,
}

impl Default for ReportConfig {
    fn default() -> Self {
        ReportConfig {
            symbolize: true,
            correct_overhead: true,
            sort: SortKey::Wait,
            top: None,
            min_wait_ns: 0,
            lock_filter: None,
            thread_filter: None,
            frames_all: false,
            skip_corrupt: false,
        }
    }
}

/// The report (JSON schema [`SCHEMA`]).
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// Recorded command line.
    pub command: Vec<String>,
    /// The trace's labels: `host`, `command` (the program's file name)
    /// and the user's (`record --label KEY=VALUE`), by key.
    pub labels: std::collections::BTreeMap<String, String>,
    /// Length of the recording, ns.
    pub duration_ns: u64,
    /// Events analysed.
    pub events: u64,
    /// Events the recorder could not record (counted, not analysed).
    pub lost_events: u64,
    /// Set when the trace was cut short.
    pub truncated: Option<String>,
    /// The same, as the byte offset where the file ends and what was
    /// being read (for front ends that word the warning themselves). Not
    /// in the JSON: `truncated` says it there.
    #[serde(skip)]
    pub cut_short: Option<(u64, &'static str)>,
    /// Set when damaged records were skipped (`--skip-corrupt`): how many,
    /// how many bytes, where the first was.
    pub damaged: Option<String>,
    /// The same stretches, for front ends. Not in the JSON: `damaged`
    /// says it there.
    #[serde(skip)]
    pub skipped: Vec<lockscope_format::Skipped>,
    /// Set when the trace was made by `lockscope recover` from the session
    /// of a recorder that died: when, and what was lost for good (absent
    /// from the JSON otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovered: Option<String>,
    /// Detailed-mode and imported events among [`Report::events`]
    /// (accesses, atomics, allocations): the whole-trace sections (spin
    /// locks, barriers, dead writes) are worth loading the trace for only
    /// when there are some. Not in the JSON.
    #[serde(skip)]
    pub detail_events: u64,
    /// Recorder overhead subtracted.
    pub overhead: OverheadOut,
    /// Locks (mutex, rwlock, spin, futex), sorted.
    pub locks: Vec<LockOut>,
    /// Wait charged to critical sections, per waiter thread and site and
    /// holder thread, site and call path.
    pub blame: Vec<BlameOut>,
    /// The same summed over threads: waiter site x holder site.
    pub blame_matrix: Vec<MatrixOut>,
    /// Holder sites ranked by the waiting they caused.
    pub blocking_sites: Vec<BlockingOut>,
    /// Per thread time breakdown.
    pub threads: Vec<ThreadOut>,
    /// Condition variables.
    pub conds: Vec<CondOut>,
    /// Barriers.
    pub barriers: Vec<BarrierOut>,
    /// Semaphores.
    pub semaphores: Vec<SemOut>,
    /// Protocol anomalies (lost events, clock trouble).
    pub anomalies: Anomalies,
    /// Free-text notes (symbolization problems, filters applied).
    pub notes: Vec<String>,
    /// What to try, per lock, with the evidence ([`crate::advice`]); sorted
    /// by the wait each could address. Empty with `--no-advice`.
    pub recommendations: Vec<crate::advice::Recommendation>,
    /// The one-line summary of the whole trace (before any filter).
    pub verdict: Verdict,
    /// Threads waiting for each other when the trace ended (wait-for
    /// cycles; [`crate::hangs`]).
    pub deadlocks: Vec<DeadlockOut>,
    /// Waits still open when the trace ended (blocked until exit, kill).
    pub hangs: Vec<HangOut>,
    /// Locks still held when the trace ended.
    pub open_holds: Vec<OpenHoldOut>,
    /// Lock-order inversions: pairs of locks taken in both orders.
    pub potential_deadlocks: Vec<InversionOut>,
    /// Condition variables used as locks (Python's GIL): their waits
    /// dominate, so they are shown with the locks, blamed on the signaller.
    pub cond_locks: Vec<CondLockOut>,
}

/// A condition variable whose waits are a lock's waits (a lock built from
/// a flag, a mutex and a condition variable, like Python's GIL: the
/// waiters wait for the flag's holder, and the signal is its release).
/// The rule: [`crate::advice::cond_is_lock`].
#[derive(Clone, Debug, Serialize)]
pub struct CondLockOut {
    /// Address.
    pub address: String,
    /// OS pid.
    pub pid: u32,
    /// Symbol or address.
    pub name: String,
    /// Completed waits.
    pub waits: u64,
    /// Their total, ns.
    pub wait_ns: u64,
    /// Of all threads' time.
    pub share_of_thread_time: f64,
    /// Waits ended by the signal of a thread that waits on it too (the
    /// token passed between waiters).
    pub handoffs: u64,
    /// Token intervals: a thread took it (its wait returned, or it took
    /// the mutex after its last signal), released the mutex, and later
    /// signalled (see [`crate::condlock`]).
    pub holdings: u64,
    /// Mean number of threads holding the token while any did (1 for a
    /// lock; at most [`crate::advice::COND_LOCK_MAX_HOLDERS`] here).
    pub holders_at_once: f64,
    /// Waits charged to the thread and site whose signal ended them.
    pub blame: Vec<CondBlameOut>,
}

/// Condition waits charged to one signaller.
#[derive(Clone, Debug, Serialize)]
pub struct CondBlameOut {
    /// Waiting thread's tid.
    pub waiter_tid: u32,
    /// Where it waited.
    pub waiter_site: String,
    /// Tid of the thread whose signal ended the waits (null: none did,
    /// a timeout or spurious wake-up).
    pub signaller_tid: Option<u32>,
    /// Where it signalled (the release of the cond-built lock).
    pub signaller_site: String,
    /// Wait, ns.
    pub wait_ns: u64,
    /// Waits.
    pub waits: u64,
}

/// The least share of all threads' time that a condition variable's waits
/// must have to be a lock of its own (the advice threshold,
/// [`crate::advice::MIN_WAIT_SHARE`]; the whole rule:
/// [`crate::advice::cond_is_lock`]).
pub const COND_LOCK_MIN_SHARE: f64 = crate::advice::MIN_WAIT_SHARE;

/// A wait still open at the end of the trace.
#[derive(Clone, Debug, Serialize)]
pub struct HangOut {
    /// OS tid.
    pub tid: u32,
    /// OS pid.
    pub pid: u32,
    /// Thread name.
    pub thread: String,
    /// lock | condition variable | join | semaphore | barrier | futex.
    pub waiting_in: &'static str,
    /// The lock or object (symbol or address), or `thread N` for a join.
    pub object: String,
    /// When the wait began, ns since the trace start.
    pub since_ns: u64,
    /// How long it had waited when the trace (or its process) ended, ns.
    pub waited_ns: u64,
    /// Where it waits (user frame).
    pub site: String,
    /// Its call path, if recorded.
    pub path: Vec<String>,
    /// Threads (tids) holding the lock waited for.
    pub held_by: Vec<u32>,
    /// A wait for work, not a hang: on a condition variable, semaphore or
    /// futex, in a process that then exited on its own (an exit status,
    /// not a signal). A server's workers and maintenance threads wait so
    /// when it shuts down (memcached on SIGINT). Left out of the verdict
    /// and printed apart.
    pub idle_at_exit: bool,
}

/// A lock still held at the end of the trace.
#[derive(Clone, Debug, Serialize)]
pub struct OpenHoldOut {
    /// OS tid of the holder.
    pub tid: u32,
    /// OS pid.
    pub pid: u32,
    /// The lock (symbol or address).
    pub lock: String,
    /// Acquired at, ns since the trace start.
    pub since_ns: u64,
    /// Held until the end, ns.
    pub held_ns: u64,
    /// Where it was acquired.
    pub site: String,
    /// Acquisition call path, if recorded.
    pub path: Vec<String>,
}

/// A deadlock: each thread waits for the next (the last for the first).
#[derive(Clone, Debug, Serialize)]
pub struct DeadlockOut {
    /// OS pid.
    pub pid: u32,
    /// The threads of the cycle.
    pub threads: Vec<DeadlockStepOut>,
    /// Why the call paths are empty (a trace recorded with `--stacks
    /// none`); absent when they were recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_paths: Option<String>,
}

/// One thread of a deadlock.
#[derive(Clone, Debug, Serialize)]
pub struct DeadlockStepOut {
    /// OS tid.
    pub tid: u32,
    /// Thread name.
    pub thread: String,
    /// What it waits for: a lock (symbol or address) or `join of thread N`.
    pub waits_for: String,
    /// Where it waits.
    pub wait_site: String,
    /// Its call path, if recorded.
    pub wait_path: Vec<String>,
    /// Since when, ns since the trace start.
    pub since_ns: u64,
    /// The thread it waits for (holder of the lock, or the joined one).
    pub held_by: u32,
    /// Where the holder acquired the lock (null for a join).
    pub holder_site: Option<String>,
    /// The holder's acquisition call path, if recorded.
    pub holder_path: Vec<String>,
}

/// Two locks taken in both orders: a potential deadlock.
#[derive(Clone, Debug, Serialize)]
pub struct InversionOut {
    /// OS pid.
    pub pid: u32,
    /// First lock (symbol or address).
    pub lock_a: String,
    /// Second lock.
    pub lock_b: String,
    /// `lock_b` acquired while holding `lock_a`.
    pub a_then_b: OrderOut,
    /// `lock_a` acquired while holding `lock_b`.
    pub b_then_a: OrderOut,
}

/// One acquisition made while holding another lock.
#[derive(Clone, Debug, Serialize)]
pub struct OrderOut {
    /// OS tid.
    pub tid: u32,
    /// Where the held lock was taken.
    pub held_at: String,
    /// Where the second lock was taken.
    pub acquired_at: String,
    /// Call path of the second acquisition, if recorded.
    pub path: Vec<String>,
}

/// Where the threads' time went, in one line: the share of thread time
/// spent waiting for locks and blocked otherwise, and the lock (and its
/// site) that dominates the lock waiting. Computed on the whole trace.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Verdict {
    /// Sum of all threads' lifetimes, ns.
    pub thread_time_ns: u64,
    /// Of it, waiting to acquire locks (the threads' `lock_ns`), ns.
    pub lock_wait_ns: u64,
    /// Blocked on condition variables, ns.
    pub cond_wait_ns: u64,
    /// Blocked at barriers, ns.
    pub barrier_wait_ns: u64,
    /// Blocked on semaphores, ns.
    pub sem_wait_ns: u64,
    /// Blocked in pthread_join, ns.
    pub join_wait_ns: u64,
    /// Blocked waiting for the GPU (CUDA synchronizing calls), ns.
    pub gpu_wait_ns: u64,
    /// The lock with the largest total wait, if any thread waited.
    pub top_lock: Option<VerdictLock>,
    /// Share of the events that the recorder lost (lost / (recorded +
    /// lost)); absent when none was, so that complete traces' JSON is
    /// unchanged. The text then says that the figures are lower bounds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost_share: Option<f64>,
    /// No thread and no event was recorded: the program never loaded the
    /// preload library (a statically linked program, which LD_PRELOAD
    /// cannot reach). Absent when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub nothing_recorded: bool,
    /// The sentence printed at the top of the text report.
    pub text: String,
}

/// The lock that dominates the waiting.
#[derive(Clone, Debug, Default, Serialize)]
pub struct VerdictLock {
    /// Symbol, else address.
    pub name: String,
    /// Address, `0x...`.
    pub address: String,
    /// OS pid of its process.
    pub pid: u32,
    /// Its total wait, ns.
    pub wait_ns: u64,
    /// Its share of the wait on all locks.
    pub share_of_lock_wait: f64,
    /// Its site with the most wait (user frame), if known.
    pub site: Option<String>,
}

/// Overhead correction applied.
#[derive(Clone, Debug, Default, Serialize)]
pub struct OverheadOut {
    /// Whether it was subtracted.
    pub subtracted: bool,
    /// ns per acquisition call (mean over processes with a measurement).
    pub acquire_ns: f64,
    /// ns per release call.
    pub release_ns: f64,
    /// ns per other event.
    pub event_ns: f64,
    /// Total subtracted over all threads, ns.
    pub total_ns: u64,
    /// Total as a fraction of the uncorrected thread time.
    pub share_of_thread_time: f64,
}

/// One lock. Serialized by hand (through a private `LockJson`): what a
/// futex word does not show is null there.
#[derive(Clone, Debug)]
pub struct LockOut {
    /// Address, `0x...`.
    pub address: String,
    /// OS pid of its process.
    pub pid: u32,
    /// Exec generation of that process image (0 before any exec).
    pub exec_generation: u32,
    /// mutex | rwlock | spin | futex.
    pub kind: &'static str,
    /// A mutex of a process run under `lockscope run --lock ALG`: the
    /// algorithm that replaced it (`ttas`, `mcs, spin`). Absent otherwise,
    /// so that other traces' JSON is unchanged.
    pub swapped_lock: Option<String>,
    /// The exec generation that pairs this lock with the same program's
    /// in another recording: `exec_generation` less the images of
    /// `lockscope run` itself before it (a swapped run's program is the
    /// exec of `run`'s child, a plain run's is the first image). Not in
    /// the JSON.
    pub program_generation: u32,
    /// Symbol of a static lock, else null.
    pub name: Option<String>,
    /// The name every output shows (see [`lockscope_symbols::locknames`]): the symbol,
    /// else the class member (`ThreadPool::m_`), else the first use
    /// (`mutex@ThreadPool::submit`), else the address.
    pub label: String,
    /// What `label` was made from: symbol | member | first_use | address.
    pub named_by: lockscope_symbols::locknames::NamedBy,
    /// `label` without the `#N` that keeps it unique (`diff` matches locks
    /// by it). Not in the JSON.
    pub label_base: String,
    /// Where it was first used (`function (file:line)` or module+offset).
    pub first_use: String,
    /// Successful acquisitions (lock, trylock, timed calls).
    pub acquisitions: u64,
    /// Of which had to wait.
    pub contended: u64,
    /// Reader-writer locks: acquisitions in read (shared) mode. Absent
    /// (not null) for other kinds, so their JSON is unchanged.
    pub read_acquisitions: Option<u64>,
    /// contended / acquisitions.
    pub contended_ratio: f64,
    /// Failed trylock calls.
    pub trylock_failures: u64,
    /// Timed calls that timed out.
    pub timeouts: u64,
    /// Acquisitions still blocked when the trace ended (a deadlock, a
    /// program killed while it waited); their wait so far is in
    /// `wait_ns`. Absent when 0, so that other traces' JSON is unchanged.
    pub still_waiting: u64,
    /// Acquisitions by a different thread than the previous one.
    pub owner_changes: u64,
    /// Acquisitions at the first attempt / acquisitions.
    pub first_attempt_ratio: f64,
    /// Mean number of waiters while held.
    pub avg_waiters: f64,
    /// Wait: `total` over all attempts; `count`, `mean`, `max` and `p99`
    /// over the attempts that waited (an uncontended attempt's 0 ns would
    /// make the p99 0 for nearly every lock).
    pub wait_ns: Summary,
    /// Hold per critical section.
    pub hold_ns: Summary,
    /// Releases that entered the kernel, and time inside them.
    pub slow_unlocks: u64,
    /// Time inside unlock calls that entered the kernel, ns.
    pub unlock_ns: u64,
    /// Futex words: FUTEX_WAKE calls on it (0 for other kinds).
    pub wakes: u64,
    /// Acquisition sites.
    pub sites: Vec<SiteOut>,
    /// Acquisition call paths (contended acquisitions carry one).
    pub call_paths: Vec<PathOut>,
    /// Per thread.
    pub threads: Vec<LockThreadOut>,
    /// Index of the lock in the model (joins blame rows and advice to the
    /// lock without comparing display strings).
    pub(crate) obj: u32,
    /// A futex word waited on from Rust std's futex RwLock.
    pub(crate) rust_rwlock: bool,
}

impl LockOut {
    /// The kind as the text outputs show it: `mutex (ttas)` for a mutex
    /// that `lockscope run --lock ttas` replaced, else the kind.
    pub fn kind_label(&self) -> String {
        match &self.swapped_lock {
            Some(alg) => format!("{} ({alg})", self.kind),
            None => self.kind.to_string(),
        }
    }
}

/// One acquisition site of one lock.
#[derive(Clone, Debug, Serialize)]
pub struct SiteOut {
    /// The site as the text report, blame rows and advice name it
    /// (`function (file:line)`, with ` in caller` when inlined).
    pub name: String,
    /// Function, if known.
    pub function: Option<String>,
    /// Source file, if known.
    pub file: Option<String>,
    /// Line, if known.
    pub line: Option<u32>,
    /// `module+0xoffset`.
    pub location: String,
    /// Inlined frames, innermost first, as `function (file:line)`: the
    /// callers of the frame named by `function` within one return address.
    pub inlined: Vec<String>,
    /// Runtime frames inside the named one (libstdc++ headers, Rust std),
    /// innermost first, that the user-frame rule skipped; absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped_frames: Vec<String>,
    /// No user frame was found for these acquisitions: the return address
    /// is runtime code and no call path was recorded for them (only
    /// contended acquisitions carry one unless recorded with
    /// `--stacks all`). Absent when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub runtime_only: bool,
    /// Successful acquisitions.
    pub acquisitions: u64,
    /// Of which had to wait.
    pub contended: u64,
    /// Trylock failures.
    pub trylock_failures: u64,
    /// Wait, ns.
    pub wait_ns: u64,
    /// Longest wait, ns.
    pub max_wait_ns: u64,
    /// Hold of sections entered here, ns.
    pub hold_ns: u64,
}

/// One call path of one lock.
#[derive(Clone, Debug, Serialize)]
pub struct PathOut {
    /// Frames, innermost first (`function (file:line)`); empty if none.
    pub frames: Vec<String>,
    /// Successful acquisitions.
    pub acquisitions: u64,
    /// Of which had to wait.
    pub contended: u64,
    /// Wait, ns.
    pub wait_ns: u64,
}

/// The words of a recovered trace (header pair `recovered`, written by
/// `lockscope recover`), with the events lost for good: those the dead
/// recorder had taken and the program overwrote before the recovery.
fn recovered_line(
    h: &lockscope_format::Header,
    losses: &[lockscope_format::Loss],
) -> Option<String> {
    h.extra.iter().find(|(k, _)| k == "recovered")?;
    let lost: u64 = losses
        .iter()
        .filter(|l| l.reason == lockscope_format::LossReason::RecorderDied)
        .map(|l| l.events)
        .sum();
    Some(if lost == 0 {
        "this trace was recovered by `lockscope recover` after its recorder died; nothing was lost"
            .to_string()
    } else {
        format!(
            "this trace was recovered by `lockscope recover` after its recorder died; up to {} \
             events the recorder had taken were overwritten by the program before the recovery \
             and are lost",
            lockscope_text::units::count(lost)
        )
    })
}

impl LockOut {
    /// A futex word (Rust `std::sync`, parking_lot, glibc-internal
    /// locks): only its waits and wakes are seen, never its acquisitions
    /// or holds, which are null in JSON, empty in CSV and "-" in text and
    /// HTML.
    pub fn futex_only(&self) -> bool {
        self.kind.starts_with("futex")
    }
}

/// [`LockOut`] as JSON, in its field order: the figures a futex word does
/// not show are null (they were 0, or waits that returned woken counted
/// as acquisitions: "acquisitions 37 < contended 57" after two words were
/// merged).
#[derive(Serialize)]
struct LockJson<'a> {
    address: &'a str,
    pid: u32,
    exec_generation: u32,
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    swapped_lock: &'a Option<String>,
    name: &'a Option<String>,
    label: &'a str,
    named_by: lockscope_symbols::locknames::NamedBy,
    first_use: &'a str,
    acquisitions: Option<u64>,
    contended: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    read_acquisitions: Option<u64>,
    contended_ratio: Option<f64>,
    trylock_failures: u64,
    timeouts: u64,
    #[serde(skip_serializing_if = "is_zero")]
    still_waiting: u64,
    owner_changes: Option<u64>,
    first_attempt_ratio: Option<f64>,
    avg_waiters: Option<f64>,
    wait_ns: &'a Summary,
    hold_ns: Option<&'a Summary>,
    slow_unlocks: Option<u64>,
    unlock_ns: Option<u64>,
    wakes: u64,
    sites: Vec<SiteJson<'a>>,
    call_paths: Vec<PathJson<'a>>,
    threads: Vec<LockThreadJson<'a>>,
}

/// A [`SiteOut`] of a lock, its acquisitions and hold null for a futex
/// word (fields in [`SiteOut`]'s order, so that other locks' JSON is
/// unchanged).
#[derive(Serialize)]
struct SiteJson<'a> {
    name: &'a str,
    function: &'a Option<String>,
    file: &'a Option<String>,
    line: Option<u32>,
    location: &'a str,
    inlined: &'a [String],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    skipped_frames: &'a [String],
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    runtime_only: bool,
    acquisitions: Option<u64>,
    contended: u64,
    trylock_failures: u64,
    wait_ns: u64,
    max_wait_ns: u64,
    hold_ns: Option<u64>,
}

/// A [`PathOut`] of a lock, its acquisitions null for a futex word.
#[derive(Serialize)]
struct PathJson<'a> {
    frames: &'a [String],
    acquisitions: Option<u64>,
    contended: u64,
    wait_ns: u64,
}

/// A [`LockThreadOut`], its acquisitions and hold null for a futex word.
#[derive(Serialize)]
struct LockThreadJson<'a> {
    tid: u32,
    name: &'a str,
    acquisitions: Option<u64>,
    contended: u64,
    trylock_failures: u64,
    timeouts: u64,
    wait_ns: u64,
    max_wait_ns: u64,
    hold_ns: Option<u64>,
}

impl Serialize for LockOut {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let seen = !self.futex_only();
        let v = |x: u64| seen.then_some(x);
        let f = |x: f64| seen.then_some(x);
        LockJson {
            address: &self.address,
            pid: self.pid,
            exec_generation: self.exec_generation,
            kind: self.kind,
            swapped_lock: &self.swapped_lock,
            name: &self.name,
            label: &self.label,
            named_by: self.named_by,
            first_use: &self.first_use,
            acquisitions: v(self.acquisitions),
            contended: self.contended,
            read_acquisitions: self.read_acquisitions,
            contended_ratio: f(self.contended_ratio),
            trylock_failures: self.trylock_failures,
            timeouts: self.timeouts,
            still_waiting: self.still_waiting,
            owner_changes: v(self.owner_changes),
            first_attempt_ratio: f(self.first_attempt_ratio),
            avg_waiters: f(self.avg_waiters),
            wait_ns: &self.wait_ns,
            hold_ns: seen.then_some(&self.hold_ns),
            slow_unlocks: v(self.slow_unlocks),
            unlock_ns: v(self.unlock_ns),
            wakes: self.wakes,
            sites: self
                .sites
                .iter()
                .map(|x| SiteJson {
                    name: &x.name,
                    function: &x.function,
                    file: &x.file,
                    line: x.line,
                    location: &x.location,
                    inlined: &x.inlined,
                    skipped_frames: &x.skipped_frames,
                    runtime_only: x.runtime_only,
                    acquisitions: v(x.acquisitions),
                    contended: x.contended,
                    trylock_failures: x.trylock_failures,
                    wait_ns: x.wait_ns,
                    max_wait_ns: x.max_wait_ns,
                    hold_ns: v(x.hold_ns),
                })
                .collect(),
            call_paths: self
                .call_paths
                .iter()
                .map(|p| PathJson {
                    frames: &p.frames,
                    acquisitions: v(p.acquisitions),
                    contended: p.contended,
                    wait_ns: p.wait_ns,
                })
                .collect(),
            threads: self
                .threads
                .iter()
                .map(|t| LockThreadJson {
                    tid: t.tid,
                    name: &t.name,
                    acquisitions: v(t.acquisitions),
                    contended: t.contended,
                    trylock_failures: t.trylock_failures,
                    timeouts: t.timeouts,
                    wait_ns: t.wait_ns,
                    max_wait_ns: t.max_wait_ns,
                    hold_ns: v(t.hold_ns),
                })
                .collect(),
        }
        .serialize(s)
    }
}

/// One thread's use of one lock.
#[derive(Clone, Debug, Serialize)]
pub struct LockThreadOut {
    /// OS tid.
    pub tid: u32,
    /// Name.
    pub name: String,
    /// Successful acquisitions.
    pub acquisitions: u64,
    /// Of which had to wait.
    pub contended: u64,
    /// Trylock failures.
    pub trylock_failures: u64,
    /// Timeouts.
    pub timeouts: u64,
    /// Wait, ns.
    pub wait_ns: u64,
    /// Longest wait, ns.
    pub max_wait_ns: u64,
    /// Hold, ns.
    pub hold_ns: u64,
    /// Model index of the thread (for `--thread`).
    #[serde(skip)]
    pub(crate) thread: u32,
}

/// Wait charged from a waiter site to a holder's critical section.
#[derive(Clone, Debug, Serialize)]
pub struct BlameOut {
    /// Lock address.
    pub lock: String,
    /// OS pid of the lock's process.
    pub pid: u32,
    /// Lock name or first use.
    pub lock_name: String,
    /// Waiting thread's tid.
    pub waiter_tid: u32,
    /// Where the waiter waited.
    pub waiter_site: String,
    /// Holder's tid; null when nobody held the lock (hand-off latency).
    pub holder_tid: Option<u32>,
    /// Holder's acquisition site (or waker's site for futex words).
    pub holder_site: String,
    /// Holder's call path, innermost first.
    pub holder_path: Vec<String>,
    /// Wait charged, ns.
    pub wait_ns: u64,
    /// Waits that received a share.
    pub waits: u64,
    #[serde(skip)]
    pub(crate) obj: u32,
    #[serde(skip)]
    pub(crate) waiter_thread: u32,
    #[serde(skip)]
    pub(crate) holder_thread: Option<u32>,
}

/// Waiter site x holder site.
#[derive(Clone, Debug, Serialize)]
pub struct MatrixOut {
    /// Lock address.
    pub lock: String,
    /// OS pid of the lock's process.
    pub pid: u32,
    /// Lock name or first use.
    pub lock_name: String,
    /// Where threads waited.
    pub waiter_site: String,
    /// Critical section they waited for.
    pub holder_site: String,
    /// Wait charged, ns.
    pub wait_ns: u64,
    /// Waits that received a share.
    pub waits: u64,
}

/// A holder site and the waiting it caused.
#[derive(Clone, Debug, Serialize)]
pub struct BlockingOut {
    /// Holder site.
    pub site: String,
    /// Lock address.
    pub lock: String,
    /// OS pid of the lock's process.
    pub pid: u32,
    /// Lock name or first use.
    pub lock_name: String,
    /// Wait charged to it, ns.
    pub wait_caused_ns: u64,
    /// Waits that received a share.
    pub waits: u64,
    #[serde(skip)]
    pub(crate) obj: u32,
}

/// One thread's time breakdown. free + lock + unlock + hold + unknown =
/// lifetime, and free = running + blocked.
#[derive(Clone, Debug, Serialize)]
pub struct ThreadOut {
    /// OS tid.
    pub tid: u32,
    /// OS pid.
    pub pid: u32,
    /// Exec generation of the process image.
    pub exec_generation: u32,
    /// Name.
    pub name: String,
    /// Lifetime after overhead correction, ns.
    pub lifetime_ns: u64,
    /// Not in a lock call, holding nothing.
    pub free_ns: u64,
    /// Waiting to acquire.
    pub lock_ns: u64,
    /// Inside unlock calls that entered the kernel.
    pub unlock_ns: u64,
    /// Holding >= 1 lock, not waiting or unlocking.
    pub hold_ns: u64,
    /// Not classifiable.
    pub unknown_ns: u64,
    /// Of free: blocked on a condition variable, barrier, semaphore, join
    /// or the GPU while holding no lock (the same waits with a lock held
    /// are hold). Added beside `free_ns`, whose meaning stays.
    pub blocked_ns: u64,
    /// Of free: the rest, `free_ns - blocked_ns` (computing, or in calls
    /// lockscope does not record: sleep, I/O).
    pub running_ns: u64,
    /// Of free/hold: waiting on condition variables.
    pub cond_wait_ns: u64,
    /// Of free/hold: waiting at barriers.
    pub barrier_wait_ns: u64,
    /// Of free/hold: waiting on semaphores.
    pub sem_wait_ns: u64,
    /// Of free/hold: waiting in pthread_join.
    pub join_wait_ns: u64,
    /// Of free/hold: waiting for the GPU (CUDA synchronizing calls;
    /// details: `lockscope gpu`).
    pub gpu_wait_ns: u64,
    /// Recorder overhead subtracted from this thread, ns.
    pub overhead_ns: u64,
    /// Events recorded.
    pub events: u64,
    /// Events lost.
    pub lost_events: u64,
    #[serde(skip)]
    pub(crate) thread: u32,
}

/// One condition variable.
#[derive(Clone, Debug, Serialize)]
pub struct CondOut {
    /// Address.
    pub address: String,
    /// OS pid of its process.
    pub pid: u32,
    /// Symbol or first use.
    pub name: String,
    /// Completed waits.
    pub waits: u64,
    /// Timed waits that timed out.
    pub timeouts: u64,
    /// Signals.
    pub signals: u64,
    /// Broadcasts.
    pub broadcasts: u64,
    /// Wait per call.
    pub wait_ns: Summary,
    /// Per thread (tid, waits, ns).
    pub threads: Vec<ObjThreadOut>,
}

/// One thread's waits on one object.
#[derive(Clone, Debug, Serialize)]
pub struct ObjThreadOut {
    /// OS tid.
    pub tid: u32,
    /// Waits.
    pub waits: u64,
    /// Wait, ns.
    pub wait_ns: u64,
    #[serde(skip)]
    pub(crate) thread: u32,
}

/// One barrier.
#[derive(Clone, Debug, Serialize)]
pub struct BarrierOut {
    /// Address.
    pub address: String,
    /// OS pid of its process.
    pub pid: u32,
    /// Symbol or first use.
    pub name: String,
    /// Rounds completed.
    pub rounds: u64,
    /// Waits.
    pub waits: u64,
    /// Wait per call.
    pub wait_ns: Summary,
    /// Per thread.
    pub threads: Vec<ObjThreadOut>,
    /// Waiting charged to the last thread to arrive (tid, ns).
    pub blamed_on: Vec<ObjThreadOut>,
    /// Model index of the barrier.
    #[serde(skip)]
    pub(crate) obj: u32,
}

/// One semaphore.
#[derive(Clone, Debug, Serialize)]
pub struct SemOut {
    /// Address.
    pub address: String,
    /// Symbol or first use.
    pub name: String,
    /// Successful waits.
    pub waits: u64,
    /// Of which blocked.
    pub contended: u64,
    /// Failed sem_trywait calls.
    pub trywait_failures: u64,
    /// Timed waits that timed out.
    pub timeouts: u64,
    /// Posts.
    pub posts: u64,
    /// Wait per call.
    pub wait_ns: Summary,
    /// Per thread.
    pub threads: Vec<ObjThreadOut>,
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// Analyses a trace file. `progress(done, total, phase)` is called now
/// and then (phase 0: indexing bytes, 1: events).
pub fn analyze(
    path: &Path,
    cfg: &ReportConfig,
    progress: &mut dyn FnMut(u64, u64, u8),
) -> Result<Report, AnalysisError> {
    let meta =
        lockscope_trace::input::index_with(path, cfg.skip_corrupt, &mut |d, t| progress(d, t, 0))?;
    analyze_observed(path, &meta, cfg, progress, |_| {})
}

/// [`analyze`] of a trace already indexed (`meta`), handing every step of
/// the synchronization layer to `observe` as the report's own pass reads
/// it ([`lockscope_trace::sync::for_each_step`]'s steps, with the overhead
/// correction of `cfg`; the recorded times of a step do not depend on
/// it). For a consumer of the steps that needs the report too (the HTML
/// report's timeline): one read of the trace serves both.
pub fn analyze_observed(
    path: &Path,
    meta: &Meta,
    cfg: &ReportConfig,
    progress: &mut dyn FnMut(u64, u64, u8),
    observe: impl FnMut(&lockscope_trace::sync::Step<'_>),
) -> Result<Report, AnalysisError> {
    // Hangs and deadlocks are tracked from the steps of the model's own
    // pass (the same interpretation of the protocol: a second one over
    // the raw events pushed the errno of a timed-out condition wait as a
    // held lock), and so are condition variables' token hand-offs and
    // whether the trace has detailed-mode or imported events.
    let mut scan = crate::hangs::Scan::new(meta);
    let mut tokens = crate::condlock::TokenScan::new(meta);
    let mut detail_events = 0u64;
    let mut observe = observe;
    let mut model = Model::build_observed(
        path,
        meta,
        ModelConfig {
            correct_overhead: cfg.correct_overhead,
        },
        &mut |d, t| progress(d, t, 1),
        |step, si| {
            // One non-synthetic step per event.
            if !step.kind.is_synthetic() {
                if is_detail_op(step.event.op) {
                    detail_events += 1;
                }
                tokens.event(step.thread, step.event);
            }
            scan.step(step, si);
            observe(step);
        },
    )?;
    let hangs = scan.finish();
    let tokens = tokens.finish();
    let mut r = build_report_scanned(meta, &mut model, cfg, &hangs, &tokens);
    r.detail_events = detail_events;
    Ok(r)
}

/// Events of detailed mode (accesses, atomics, allocations) and of
/// imported hardware traces: what the spin, barrier and dead-write
/// analyses read. A trace with none needs none of them.
fn is_detail_op(op: u8) -> bool {
    (lockscope_format::Op::Read as u8..=lockscope_format::Op::AccessRepeat as u8).contains(&op)
        || (80..=89).contains(&op)
}

/// Runs the timing model over a trace (exposed for other analyses).
pub fn build_model(
    path: &Path,
    meta: &Meta,
    cfg: &ReportConfig,
    progress: &mut dyn FnMut(u64, u64, u8),
) -> Result<Model, AnalysisError> {
    Model::build(
        path,
        meta,
        ModelConfig {
            correct_overhead: cfg.correct_overhead,
        },
        &mut |d, t| progress(d, t, 1),
    )
}

/// Symbolization with caches, for one report.
struct Names<'a> {
    sym: Symbolizer,
    model: &'a Model,
    meta: &'a Meta,
    sites: HashMap<u32, Location>,
    code: HashMap<(u32, u64), Location>,
    /// `--frames all`: no user-frame selection.
    frames_all: bool,
    /// Call paths of each lock by their innermost return address: (lock,
    /// pc) -> stacks.
    lock_paths: HashMap<(u32, u64), Vec<u32>>,
    /// The call paths each thread recorded on each lock, by innermost
    /// return address: (lock, thread, pc) -> stacks (from its waits and
    /// the sections it was blamed for).
    thread_paths: HashMap<(u32, u32, u64), Vec<u32>>,
    /// Every lock's name, made once for the whole trace (unique names).
    locks: lockscope_symbols::locknames::LockNames,
}

impl Names<'_> {
    fn code(&mut self, process: u32, pc: u64) -> Location {
        if let Some(l) = self.code.get(&(process, pc)) {
            return l.clone();
        }
        let l = self.sym.code(process, pc);
        self.code.insert((process, pc), l.clone());
        l
    }
    /// A site's raw location (innermost frame first).
    fn site(&mut self, s: u32) -> Location {
        if s == u32::MAX {
            return Location {
                module: "?".into(),
                ..Location::default()
            };
        }
        if let Some(l) = self.sites.get(&s) {
            return l.clone();
        }
        let (p, pc) = self.model.sites[s as usize];
        let l = self.code(p, pc);
        self.sites.insert(s, l.clone());
        l
    }
    /// The location as shown: its user view, or itself with `--frames
    /// all`; `None` when it is runtime code only.
    fn view(&self, loc: &Location) -> Option<Location> {
        if self.frames_all {
            Some(loc.clone())
        } else {
            loc.user_view()
        }
    }
    /// The shown location of a site, falling back to the first user frame
    /// of `stack` (a call path of the same event) when the return address
    /// is runtime code (an out-of-line `std::mutex::lock()`, Rust std's
    /// futex mutex), and to the raw location when neither has one.
    fn site_view(&mut self, s: u32, process: u32, stack: u32) -> Location {
        let loc = self.site(s);
        if let Some(v) = self.view(&loc) {
            return v;
        }
        if stack != 0 {
            if let Some(v) = self.path_user_frame(process, stack) {
                return v;
            }
        }
        loc
    }
    /// The shown name of site `s` of lock `oi` where the event's own call
    /// path is not at hand (a first use): as [`Self::site_view`], and when
    /// the return address is runtime code, the user frame that all of the
    /// lock's recorded call paths through that address agree on (several
    /// different ones: none is right for every event, and the runtime
    /// frame stays).
    fn site_str(&mut self, oi: u32, s: u32) -> String {
        self.site_str_of(oi, None, s)
    }
    /// As [`Self::site_str`] for an event of thread `thread`: when the
    /// lock's paths disagree, the paths that this thread recorded through
    /// the address (its waits) decide, if they agree.
    fn site_str_of(&mut self, oi: u32, thread: Option<u32>, s: u32) -> String {
        if s == u32::MAX {
            return NO_HOLDER.into();
        }
        let raw = self.site(s);
        if let Some(v) = self.view(&raw) {
            return v.short();
        }
        let pc = self.model.sites[s as usize].1;
        let all = self.lock_paths.get(&(oi, pc)).cloned().unwrap_or_default();
        if let Some(name) = self.agreed(oi, &all) {
            return name;
        }
        if let Some(t) = thread {
            let own = self
                .thread_paths
                .get(&(oi, t, pc))
                .cloned()
                .unwrap_or_default();
            if let Some(name) = self.agreed(oi, &own) {
                return name;
            }
        }
        self.runtime_only(&raw)
    }
    /// The name of a location that is runtime code only and that no call
    /// path explains: marked, as in the sites table, so that a holder's
    /// section or a first use is not read as the user's code.
    fn runtime_only(&self, raw: &Location) -> String {
        if self.frames_all {
            raw.short()
        } else {
            format!("{} [no user frame]", raw.short())
        }
    }
    /// The user frame that every call path of `stacks` names, if they all
    /// have one and it is the same.
    fn agreed(&mut self, oi: u32, stacks: &[u32]) -> Option<String> {
        let process = self.model.objs[oi as usize].process;
        let mut agreed: Option<String> = None;
        for &st in stacks {
            let name = self.path_user_frame(process, st)?.short();
            match &agreed {
                Some(a) if *a != name => return None,
                _ => agreed = Some(name),
            }
        }
        agreed
    }
    /// The shown name of site `s` of an event of `thread` on lock `oi`
    /// whose call path is `stack` (0: none recorded, as for an uncontended
    /// acquisition): the path's user frame when the site is runtime code,
    /// else as [`Self::site_str_of`].
    fn site_str_via(&mut self, oi: u32, thread: u32, s: u32, stack: u32) -> String {
        if s == u32::MAX {
            return NO_HOLDER.into();
        }
        if stack == 0 {
            return self.site_str_of(oi, Some(thread), s);
        }
        let process = self.model.objs[oi as usize].process;
        self.site_view(s, process, stack).short()
    }
    /// A call path as text, innermost first. Runtime frames are left out
    /// (lockscope's thread trampoline, libc's start_thread, std's lock
    /// internals) unless `--frames all` or nothing else is left.
    fn path(&mut self, process: u32, stack: u32) -> Vec<String> {
        let Some(st) = self.meta.stacks.get(&stack) else {
            return Vec::new();
        };
        let p = if st.process != 0 { st.process } else { process };
        let frames = st.frames.clone();
        let locs: Vec<Location> = frames.iter().map(|&pc| self.code(p, pc)).collect();
        let user: Vec<String> = locs
            .iter()
            .filter_map(|l| self.view(l))
            .map(|l| l.short())
            .collect();
        if user.is_empty() {
            locs.iter().map(Location::short).collect()
        } else {
            user
        }
    }
    /// The first user frame of a call path: walking outwards from the
    /// innermost return address, the first whose user view exists. A
    /// futex word's wait is always called from inside std's mutex (its
    /// return address names std, not the program), and an out-of-line
    /// `std::mutex::lock()` is the return address of every site at -O0.
    fn path_user_frame(&mut self, process: u32, stack: u32) -> Option<Location> {
        let st = self.meta.stacks.get(&stack)?;
        let p = if st.process != 0 { st.process } else { process };
        let frames = st.frames.clone();
        frames
            .into_iter()
            .find_map(|pc| self.code(p, pc).user_view())
    }
    /// A code address (call site) as shown: its user view, else the first
    /// user frame of `stack`, else the raw location.
    fn pc_str(&mut self, process: u32, pc: u64, stack: u32) -> String {
        let raw = self.code(process, pc);
        if let Some(v) = self.view(&raw) {
            return v.short();
        }
        if stack != 0 {
            if let Some(v) = self.path_user_frame(process, stack) {
                return v.short();
            }
        }
        self.runtime_only(&raw)
    }
    /// (the innermost frame of a call path, if any).
    fn path_first_pc(&self, stack: u32) -> Option<u64> {
        self.meta.stacks.get(&stack)?.frames.first().copied()
    }
    fn obj_name(&mut self, oi: u32) -> (Option<String>, String) {
        let o = &self.model.objs[oi as usize];
        let (p, a, fs) = (o.process, o.addr, o.first_site);
        let name = self.sym.data(p, a);
        let first = self.site_str(oi, fs);
        (name, first)
    }
    /// The name of lock `oi` (see [`lockscope_symbols::locknames`]).
    fn lock_label(&mut self, oi: u32) -> lockscope_symbols::locknames::LockName {
        let o = &self.model.objs[oi as usize];
        if let Some(n) = self.locks.get(o.process, o.addr) {
            return n.clone();
        }
        // An object the trace has no `LockInfo` for: the same rule, from
        // the model's first site.
        let (p, a, k) = (o.process, o.addr, o.kind);
        let pc = self
            .model
            .sites
            .get(o.first_site as usize)
            .map_or(0, |s| s.1);
        let (name, by) = lockscope_symbols::locknames::lock_name(&mut self.sym, p, a, k, pc);
        lockscope_symbols::locknames::LockName {
            base: name.clone(),
            name,
            by,
        }
    }
    /// Short name of lock `oi`, as every table shows it.
    fn label(&mut self, oi: u32) -> String {
        self.lock_label(oi).name
    }
}

/// Sites that are different inlining chains but print the same (`drop_gil
/// (ceval_gil.h:162) in PyEval_SaveThread (ceval.c:526)`, inlined into
/// several callers) get the first caller that tells them apart:
/// `... < os_stat_impl (posixmodule.c:2897)`, or `< (no caller)` for the
/// chain that ends first.
fn disambiguate_sites(sites: &mut [SiteOut]) {
    let mut by_name: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, s) in sites.iter().enumerate() {
        by_name.entry(s.name.clone()).or_default().push(i);
    }
    for group in by_name.values().filter(|g| g.len() > 1) {
        // `inlined[0]` is already in the name (` in caller`).
        let first = sites[group[0]].inlined.len().min(1);
        let longest = group
            .iter()
            .map(|&i| sites[i].inlined.len())
            .max()
            .unwrap_or(0);
        let k = (first..longest).find(|&k| {
            let x = sites[group[0]].inlined.get(k);
            group.iter().any(|&i| sites[i].inlined.get(k) != x)
        });
        let Some(k) = k else {
            continue;
        };
        for &i in group {
            let tail = match sites[i].inlined.get(k) {
                Some(f) => f.clone(),
                None => "(no caller)".to_string(),
            };
            sites[i].name = format!("{} < {tail}", sites[i].name);
        }
    }
}

/// The holder site of waits that nobody's critical section explains.
pub const NO_HOLDER: &str = "(no holder: hand-off / wake-up latency)";

/// An empty site row for a shown location (`raw`: the innermost frames
/// it was selected from, for `skipped_frames`).
fn site_out(loc: &Location, raw: &Location) -> SiteOut {
    let skipped = if raw.module == loc.module && raw.offset == loc.offset {
        raw.frames.len().saturating_sub(loc.frames.len())
    } else {
        0
    };
    SiteOut {
        name: loc.short(),
        skipped_frames: raw.frames[..skipped]
            .iter()
            .map(|f| {
                format!(
                    "{} ({}:{})",
                    f.function.as_deref().unwrap_or("?"),
                    f.file
                        .as_deref()
                        .map_or("?", |p| p.rsplit('/').next().unwrap_or(p)),
                    f.line.unwrap_or(0)
                )
            })
            .collect(),
        runtime_only: false,
        function: loc.function().map(str::to_string),
        file: loc.file_line().map(|(f, _)| f.to_string()),
        line: loc.file_line().map(|(_, l)| l),
        location: loc.module_offset(),
        inlined: loc
            .frames
            .iter()
            .skip(1)
            .map(|f| {
                format!(
                    "{} ({}:{})",
                    f.function.as_deref().unwrap_or("?"),
                    f.file
                        .as_deref()
                        .map_or("?", |p| p.rsplit('/').next().unwrap_or(p)),
                    f.line.unwrap_or(0)
                )
            })
            .collect(),
        acquisitions: 0,
        contended: 0,
        trylock_failures: 0,
        wait_ns: 0,
        max_wait_ns: 0,
        hold_ns: 0,
    }
}

fn pid_of(meta: &Meta, process: u32) -> u32 {
    meta.processes.get(&process).map_or(0, |p| p.pid)
}

fn gen_of(meta: &Meta, process: u32) -> u32 {
    meta.processes
        .get(&process)
        .map_or(0, |p| p.exec_generation)
}

/// The lock algorithm that replaced the pthread mutexes of `process`
/// (`lockscope run --lock`), if any.
fn swapped_lock_of(meta: &Meta, process: u32) -> Option<String> {
    meta.processes
        .get(&process)
        .map(|p| p.swapped_lock.clone())
        .filter(|s| !s.is_empty())
}

/// [`LockOut::program_generation`] of `process`: its exec generation, not
/// counting the images of `lockscope run` before it.
fn program_generation_of(meta: &Meta, process: u32) -> u32 {
    let Some(p) = meta.processes.get(&process) else {
        return 0;
    };
    let launchers = meta
        .processes
        .values()
        .filter(|q| q.pid == p.pid && q.exec_generation < p.exec_generation)
        .filter(|q| is_lockscope_run(q))
        .count() as u32;
    p.exec_generation.saturating_sub(launchers)
}

/// An image of lockscope's own `run` subcommand (the fork child that
/// execs the program with the swap library).
fn is_lockscope_run(p: &lockscope_format::Process) -> bool {
    let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
    base(&p.exe) == "lockscope" && p.argv.get(1).is_some_and(|a| a == "run")
}

fn is_lock(k: Kind) -> bool {
    matches!(
        k,
        Kind::Mutex | Kind::Rwlock | Kind::Spin | Kind::Futex | Kind::SemLock
    )
}

/// Turns a finished model into the report, in three stages:
///
/// 1. `full_report`: every lock, blame row, thread and object the model
///    knows, symbolized, unfiltered;
/// 2. findings on that full report ([`crate::advice::advise`]), so that
///    what is recommended never depends on `--top`, `--min-wait` or the
///    output format (text shows 20 locks by default, JSON all);
/// 3. `filtered_view`: the filters, sort and `--top` of `cfg`.
pub fn build_report(meta: &Meta, model: &mut Model, cfg: &ReportConfig) -> Report {
    build_report_with(meta, model, cfg, &(Default::default(), 0))
}

/// [`build_report`] with the findings of [`crate::hangs::scan`] (and the
/// time of the trace's last event).
pub fn build_report_with(
    meta: &Meta,
    model: &mut Model,
    cfg: &ReportConfig,
    hangs: &(crate::hangs::Findings, u64),
) -> Report {
    build_report_scanned(meta, model, cfg, hangs, &HashMap::new())
}

/// [`build_report_with`] with the condition variables' token hand-offs
/// ([`crate::condlock::TokenScan`], by process trace id and address):
/// without them no condition variable is shown as a lock.
pub fn build_report_scanned(
    meta: &Meta,
    model: &mut Model,
    cfg: &ReportConfig,
    hangs: &(crate::hangs::Findings, u64),
    tokens: &HashMap<(u32, u64), crate::condlock::Tokens>,
) -> Report {
    let model: &Model = model;
    let mut sym = Symbolizer::for_meta(meta, cfg.symbolize);
    let locks = lockscope_symbols::locknames::LockNames::new(meta, &mut sym);
    let mut names = Names {
        sym,
        locks,
        model,
        meta,
        sites: HashMap::new(),
        code: HashMap::new(),
        frames_all: cfg.frames_all,
        lock_paths: HashMap::new(),
        thread_paths: HashMap::new(),
    };
    let first_pc = |stack: u32| {
        meta.stacks
            .get(&stack)
            .and_then(|s| s.frames.first().copied())
    };
    for &(oi, stack) in model.by_path.keys() {
        if let Some(pc) = first_pc(stack) {
            names.lock_paths.entry((oi, pc)).or_default().push(stack);
        }
    }
    for &(oi, wthread, _, wstack, c) in model.blame.keys() {
        for (t, st) in [(wthread, wstack), (c.thread, c.stack)] {
            if let Some(pc) = first_pc(st).filter(|_| st != 0 && t != u32::MAX) {
                names.thread_paths.entry((oi, t, pc)).or_default().push(st);
            }
        }
    }
    for v in names
        .lock_paths
        .values_mut()
        .chain(names.thread_paths.values_mut())
    {
        v.sort_unstable();
        v.dedup();
    }
    let mut full = full_report(meta, model, &mut names, cfg);
    // Hangs first: the advice for a deadlocked lock points to the
    // deadlock instead of reading its wait as contention.
    hang_rows(meta, &mut names, hangs, tokens, &mut full);
    full.recommendations = crate::advice::advise(
        &full,
        &crate::advice::MachineFacts::from_header(&meta.header),
    );
    full.verdict = verdict(&full);
    filtered_view(full, model, cfg)
}

/// Stage 1: the whole model as report rows, nothing filtered.
fn full_report(meta: &Meta, model: &Model, names: &mut Names, cfg: &ReportConfig) -> Report {
    let mut locks = lock_rows(meta, model, names);
    let mut blame = blame_rows(meta, model, names);
    merge_rust_rwlocks(&mut locks, &mut blame);
    let futex_conds = split_futex_condvars(&mut locks, &mut blame);
    let (blame_matrix, blocking_sites) = aggregate_blame(&blame);
    let mut threads = thread_rows(meta, model);
    let (mut conds, barriers, semaphores) = object_rows(meta, model, names);
    if !futex_conds.is_empty() {
        conds.extend(
            futex_conds
                .into_iter()
                .map(|l| futex_cond_out(l, &mut threads)),
        );
        conds.sort_by_key(|c| std::cmp::Reverse(c.wait_ns.total));
    }
    let overhead = overhead_out(model, cfg);
    let mut notes: Vec<String> = names
        .sym
        .problems()
        .iter()
        .map(|p| format!("symbols: {p}"))
        .collect();
    if !cfg.symbolize {
        notes.push("symbolization disabled: sites are module+offset".into());
    }
    // A trace of attach mode (`record -p PID`) holds only what the kernel
    // saw of the futex calls: every figure it cannot know is "-", and the
    // note says why, in every output.
    if meta.header.get("capture") == Some("attach") {
        notes.push(
            "attach mode (eBPF, record -p): only futex waits (those that slept, those that returned at once) and \
             wakes that woke a thread were seen; acquisitions and holds of sections that never waited happened \
             in user space, unseen (-), and nothing ran inside the program, so there is no recorder cost to subtract"
                .into(),
        );
    }
    // Loss records and in-stream Lost annotations may describe the same
    // drops: take the largest account rather than their sum.
    let lost_records: u64 = meta.losses.iter().map(|l| l.events).sum();
    let lost_annot: u64 = model.threads.iter().map(|t| t.lost).sum();
    Report {
        schema: SCHEMA,
        command: meta.header.command.clone(),
        labels: lockscope_format::labels(&meta.header),
        duration_ns: meta.footer.as_ref().map_or_else(
            || model.threads.iter().map(|t| t.end).max().unwrap_or(0),
            |f| f.duration_ns,
        ),
        events: meta.events,
        lost_events: meta
            .footer
            .as_ref()
            .map_or(0, |f| f.lost)
            .max(lost_records)
            .max(lost_annot),
        truncated: meta.truncated.clone(),
        cut_short: meta.cut_short,
        damaged: lockscope_trace::input::damaged_line(&meta.skipped),
        skipped: meta.skipped.clone(),
        recovered: recovered_line(&meta.header, &meta.losses),
        // Set by `analyze`, which counts them in its pass.
        detail_events: 0,
        overhead,
        locks,
        blame,
        blame_matrix,
        blocking_sites,
        threads,
        conds,
        barriers,
        semaphores,
        anomalies: model.anomalies.clone(),
        notes,
        recommendations: Vec::new(),
        verdict: Verdict::default(),
        deadlocks: Vec::new(),
        hangs: Vec::new(),
        open_holds: Vec::new(),
        potential_deadlocks: Vec::new(),
        cond_locks: Vec::new(),
    }
}

/// Hangs, open holds, deadlocks and inversions as report rows.
fn hang_rows(
    meta: &Meta,
    names: &mut Names,
    (f, last): &(crate::hangs::Findings, u64),
    tokens: &HashMap<(u32, u64), crate::condlock::Tokens>,
    r: &mut Report,
) {
    use crate::hangs::WaitKind;
    let trace_end = meta
        .footer
        .as_ref()
        .map_or(*last, |x| x.duration_ns.max(*last));
    let thread = |id: u32| meta.threads.get(&id);
    let process_of = |id: u32| thread(id).map_or(0, |t| t.process);
    let tid_of = |id: u32| thread(id).map_or(0, |t| t.tid);
    let name_of = |id: u32| {
        meta.thread_names
            .get(&id)
            .cloned()
            .or_else(|| thread(id).map(|t| t.name.clone()))
            .unwrap_or_default()
    };
    // A blocked thread lives until its process ended (exit, kill) or,
    // when that was not seen, the trace did.
    let end_of = |process: u32| {
        meta.process_ends
            .get(&process)
            .map_or(trace_end, |p| p.end_ns)
    };
    let lock = |names: &mut Names, process: u32, addr: u64| -> String {
        names.locks.label(&mut names.sym, process, addr)
    };
    // The process exited on its own: `exit` or a return from `main`
    // (statuses 0-127), as opposed to a signal (128+N) or an end not seen.
    let exited = |process: u32| {
        meta.process_ends
            .get(&process)
            .is_some_and(|e| (0..128).contains(&e.status))
    };
    for w in &f.open_waits {
        let p = process_of(w.thread);
        let held_by: Vec<u32> = if w.kind == WaitKind::Lock {
            f.open_holds
                .iter()
                .filter(|(t, h)| h.addr == w.addr && process_of(*t) == p && *t != w.thread)
                .map(|(t, _)| tid_of(*t))
                .collect()
        } else {
            Vec::new()
        };
        r.hangs.push(HangOut {
            tid: tid_of(w.thread),
            pid: pid_of(meta, p),
            thread: name_of(w.thread),
            waiting_in: w.kind.name(),
            object: if w.kind == WaitKind::Join {
                format!("thread {}", w.addr)
            } else {
                lock(names, p, w.addr)
            },
            since_ns: w.since,
            waited_ns: end_of(p).saturating_sub(w.since),
            site: names.pc_str(p, w.site, w.stack),
            path: names.path(p, w.stack),
            held_by,
            // Lock, join and barrier waits at exit stay hangs: a thread
            // stuck there when the program gave up is worth a look.
            idle_at_exit: exited(p)
                && matches!(
                    w.kind,
                    WaitKind::Cond | WaitKind::Semaphore | WaitKind::Futex
                ),
        });
    }
    r.hangs
        .sort_by_key(|h| (h.idle_at_exit, std::cmp::Reverse(h.waited_ns), h.pid, h.tid));
    for (t, h) in &f.open_holds {
        let p = process_of(*t);
        r.open_holds.push(OpenHoldOut {
            tid: tid_of(*t),
            pid: pid_of(meta, p),
            lock: lock(names, p, h.addr),
            since_ns: h.since,
            held_ns: end_of(p).saturating_sub(h.since),
            site: names.pc_str(p, h.site, h.stack),
            path: names.path(p, h.stack),
        });
    }
    r.open_holds
        .sort_by_key(|h| (std::cmp::Reverse(h.held_ns), h.pid, h.tid));
    // Condition variables used as locks.
    let thread_time: u64 = r.threads.iter().map(|t| t.lifetime_ns).sum();
    let lock_wait: u64 = r.locks.iter().map(|l| l.wait_ns.total).sum();
    for c in &r.conds {
        let w = c.wait_ns.total;
        let Ok(addr) = u64::from_str_radix(c.address.trim_start_matches("0x"), 16) else {
            continue;
        };
        // After an exec the same pid is another process trace id: the
        // image with most hand-offs speaks for the row (as the row sums
        // them, the rare case of two is not worth a split).
        let tok = tokens
            .iter()
            .filter(|(&(p, a), _)| a == addr && pid_of(meta, p) == c.pid)
            .map(|(_, t)| t)
            .max_by_key(|t| (t.intervals, t.held_ns))
            .cloned()
            .unwrap_or_default();
        // Waits ended by a thread that waits on it too: the token passed
        // between waiters.
        let of_c = || {
            f.cond_blame
                .iter()
                .filter(move |&&((p, a, ..), _)| a == addr && pid_of(meta, p) == c.pid)
        };
        let waiters: HashSet<u32> = of_c().map(|&((_, _, wt, ..), _)| wt).collect();
        let passed: u64 = of_c()
            .filter(|&&((.., sig), _)| sig.is_some_and(|(t, _)| waiters.contains(&t)))
            .map(|&(_, (_, n))| n)
            .sum();
        if !crate::advice::cond_is_lock(w, thread_time, lock_wait, passed, &tok) {
            continue;
        }
        let mut blame: Vec<CondBlameOut> = Vec::new();
        for &((p, a, wt, ws, wstack, sig), (ns, n)) in &f.cond_blame {
            if a != addr || pid_of(meta, p) != c.pid {
                continue;
            }
            let row = CondBlameOut {
                waiter_tid: tid_of(wt),
                // Its own call path names the waiter's user frame when the
                // wait is called from runtime code (std::condition_variable).
                waiter_site: names.pc_str(p, ws, wstack),
                signaller_tid: sig.map(|(t, _)| tid_of(t)),
                signaller_site: match sig {
                    Some((_, site)) => names.pc_str(p, site, 0),
                    None => "(no signal: timed out or woke spuriously)".into(),
                },
                wait_ns: ns,
                waits: n,
            };
            // Paths that name the same site are one row.
            match blame.iter_mut().find(|b| {
                (
                    b.waiter_tid,
                    &b.waiter_site,
                    b.signaller_tid,
                    &b.signaller_site,
                ) == (
                    row.waiter_tid,
                    &row.waiter_site,
                    row.signaller_tid,
                    &row.signaller_site,
                )
            }) {
                Some(b) => {
                    b.wait_ns += row.wait_ns;
                    b.waits += row.waits;
                }
                None => blame.push(row),
            }
        }
        blame.sort_by_key(|b| std::cmp::Reverse(b.wait_ns));
        r.cond_locks.push(CondLockOut {
            address: c.address.clone(),
            pid: c.pid,
            name: c.name.clone(),
            waits: c.waits,
            wait_ns: w,
            share_of_thread_time: ratio(w, thread_time),
            handoffs: passed,
            holdings: tok.intervals,
            holders_at_once: tok.holders_at_once(),
            blame,
        });
    }
    for cycle in &f.deadlocks {
        let p = cycle.first().map_or(0, |s| process_of(s.wait.thread));
        let threads: Vec<DeadlockStepOut> = cycle
            .iter()
            .map(|s| DeadlockStepOut {
                tid: tid_of(s.wait.thread),
                thread: name_of(s.wait.thread),
                waits_for: if s.wait.kind == WaitKind::Join {
                    format!("join of thread {}", s.wait.addr)
                } else {
                    lock(names, p, s.wait.addr)
                },
                wait_site: names.pc_str(p, s.wait.site, s.wait.stack),
                wait_path: names.path(p, s.wait.stack),
                since_ns: s.wait.since,
                held_by: tid_of(s.holder),
                holder_site: s.held.as_ref().map(|h| names.pc_str(p, h.site, h.stack)),
                holder_path: s
                    .held
                    .as_ref()
                    .map_or(Vec::new(), |h| names.path(p, h.stack)),
            })
            .collect();
        // The recorder walks a blocked call's path at its start (the only
        // event of a wait that never returns) unless `--stacks none`
        // turned every walk off. Walking there anyway would keep the
        // deadlock's paths, but `none` promises no walk at all (its cost
        // and its trace size): say why the paths are missing instead.
        let no_paths = (meta.header.get("stacks") == Some("none")
            && threads.iter().all(|t| t.wait_path.is_empty()))
        .then(|| {
            "no call paths: the trace was recorded with --stacks none; record with \
             --stacks contended (the default) to see where each thread waits"
                .to_string()
        });
        r.deadlocks.push(DeadlockOut {
            pid: pid_of(meta, p),
            threads,
            no_paths,
        });
    }
    for i in &f.inversions {
        let p = i.process;
        let order = |names: &mut Names, w: &crate::hangs::OrderWitness| OrderOut {
            tid: tid_of(w.thread),
            held_at: names.pc_str(p, w.held_site, 0),
            acquired_at: names.pc_str(p, w.acquire_site, w.stack),
            path: names.path(p, w.stack),
        };
        r.potential_deadlocks.push(InversionOut {
            pid: pid_of(meta, p),
            lock_a: lock(names, p, i.a),
            lock_b: lock(names, p, i.b),
            a_then_b: order(names, &i.a_then_b),
            b_then_a: order(names, &i.b_then_a),
        });
    }
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

fn share_str(a: u64, b: u64) -> String {
    lockscope_text::units::pct(ratio(a, b))
}

/// Stage 2 finding: the verdict line on the full report.
fn verdict(r: &Report) -> Verdict {
    let sum = |f: fn(&ThreadOut) -> u64| r.threads.iter().map(f).sum::<u64>();
    let mut v = Verdict {
        thread_time_ns: sum(|t| t.lifetime_ns),
        lock_wait_ns: sum(|t| t.lock_ns),
        cond_wait_ns: sum(|t| t.cond_wait_ns),
        barrier_wait_ns: sum(|t| t.barrier_wait_ns),
        sem_wait_ns: sum(|t| t.sem_wait_ns),
        join_wait_ns: sum(|t| t.join_wait_ns),
        gpu_wait_ns: sum(|t| t.gpu_wait_ns),
        top_lock: None,
        lost_share: (r.lost_events > 0)
            .then(|| ratio(r.lost_events, r.events.saturating_add(r.lost_events))),
        nothing_recorded: r.threads.is_empty() && r.events == 0 && r.lost_events == 0,
        text: String::new(),
    };
    let all_lock_wait: u64 = r.locks.iter().map(|l| l.wait_ns.total).sum();
    let several = {
        let mut pids = r.threads.iter().map(|t| t.pid);
        let first = pids.next();
        pids.any(|p| Some(p) != first)
    };
    if let Some(l) = r
        .locks
        .iter()
        .filter(|l| l.wait_ns.total > 0)
        .max_by_key(|l| (l.wait_ns.total, std::cmp::Reverse(l.obj)))
    {
        v.top_lock = Some(VerdictLock {
            name: l.label.clone(),
            address: l.address.clone(),
            pid: l.pid,
            wait_ns: l.wait_ns.total,
            share_of_lock_wait: ratio(l.wait_ns.total, all_lock_wait),
            site: l
                .sites
                .iter()
                .filter(|s| s.wait_ns > 0)
                .max_by_key(|s| s.wait_ns)
                .map(|s| s.name.clone()),
        });
    }
    let t = v.thread_time_ns;
    let mut text = if v.lock_wait_ns > 0 || v.top_lock.is_some() {
        let mut s = format!(
            "threads waited for locks {} of their time ({} of {})",
            share_str(v.lock_wait_ns, t),
            lockscope_text::units::ns(v.lock_wait_ns),
            lockscope_text::units::ns(t)
        );
        if let Some(top) = &v.top_lock {
            let pid = if several {
                format!(" (pid {})", top.pid)
            } else {
                String::new()
            };
            s.push_str(&format!(
                ", {:.1}% of it on {}{pid}",
                top.share_of_lock_wait * 100.0,
                top.name
            ));
            if let Some(site) = &top.site {
                s.push_str(&format!(", most at {site}"));
            }
        }
        s
    } else {
        "no thread waited for a mutex, rwlock or spinlock".to_string()
    };
    let blocked: Vec<String> = [
        ("condition variables", v.cond_wait_ns),
        ("barriers", v.barrier_wait_ns),
        ("semaphores", v.sem_wait_ns),
        ("join", v.join_wait_ns),
        ("the GPU", v.gpu_wait_ns),
    ]
    .iter()
    .filter(|(_, ns)| *ns > 0 && ratio(*ns, t) >= 0.001)
    .map(|(what, ns)| format!("{what} {}", share_str(*ns, t)))
    .collect();
    if !blocked.is_empty() {
        text.push_str(&format!("; blocked otherwise: {}", blocked.join(", ")));
    }
    // The barrier that made threads wait most, when it matters (1 % of the
    // threads' time, as for advice), and who it waited for: an OpenMP
    // program's verdict otherwise named no place at all.
    if let Some(b) = r
        .barriers
        .first()
        .filter(|b| ratio(b.wait_ns.total, t) >= crate::advice::MIN_WAIT_SHARE)
    {
        text.push_str(&format!("; most barrier waiting at {}", b.name));
        if let Some(l) = b.blamed_on.first() {
            text.push_str(&format!(
                ", {:.0}% of it for thread {}, the last to arrive",
                ratio(l.wait_ns, b.wait_ns.total) * 100.0,
                l.tid
            ));
        }
    }
    if let Some(c) = r.cond_locks.first() {
        let top = c
            .blame
            .iter()
            .filter(|b| b.signaller_tid.is_some())
            .max_by_key(|b| b.wait_ns);
        text.push_str(&format!(
            "; condition variable {} is used as a lock: its waits are {:.1}% of the threads' time{}",
            c.name,
            c.share_of_thread_time * 100.0,
            top.map_or(String::new(), |b| format!(
                ", most ended by signals at {}",
                b.signaller_site
            ))
        ));
    }
    // A hang outranks everything: the figures above count only waits
    // that ended, and a deadlocked thread's never does.
    if let Some(d) = r.deadlocks.first() {
        let tids: Vec<String> = d.threads.iter().map(|s| s.tid.to_string()).collect();
        let on: Vec<&str> = d.threads.iter().map(|s| s.waits_for.as_str()).collect();
        let longest = r.hangs.iter().map(|h| h.waited_ns).max().unwrap_or(0);
        text = format!(
            "DEADLOCK: threads {} wait for each other ({}){}, blocked up to {} when the trace \
             ended",
            tids.join(", "),
            on.join(", "),
            if r.deadlocks.len() > 1 {
                format!(" and {} more cycles", r.deadlocks.len() - 1)
            } else {
                String::new()
            },
            lockscope_text::units::ns(longest)
        );
    } else if let Some(h) = r.hangs.first().filter(|h| !h.idle_at_exit) {
        // Sorted with the idle ones last: the first is a real hang if any.
        let n = r.hangs.iter().filter(|h| !h.idle_at_exit).count();
        text.push_str(&format!(
            "; {} thread{} still blocked when the trace ended (longest: {} in {} at {})",
            n,
            if n == 1 { "" } else { "s" },
            lockscope_text::units::ns(h.waited_ns),
            h.waiting_in,
            h.site
        ));
    }
    // Said first, so that no figure is read without it.
    if v.nothing_recorded {
        // Not "no thread waited": nothing was seen at all. The recorder
        // writes a thread's record when its preload library starts in the
        // process, so zero threads means it never did (a dynamically
        // linked program with no lock call still has its threads).
        // `lockscope cc -static` does not link on a system without a
        // static libgcc_s (Debian's): the hint is to rebuild without
        // `-static`, with either compiler.
        text = "nothing was recorded: no thread of the program reached the recorder. A \
                statically linked program cannot load the preload library (LD_PRELOAD does \
                not reach it): rebuild it without -static, with your compiler or with \
                `lockscope cc` (detailed mode)"
            .to_string();
    } else if let Some(lost) = v.lost_share {
        // Lost events drop waits and holds uncounted (the model never
        // invents a wait for a missing event): every share above can only
        // be too low, and which lock ranks first may change.
        text = format!(
            "{} of {} events were lost ({:.1}%), so these shares are lower bounds and the \
             ranking is uncertain: {text}",
            lockscope_text::units::count(r.lost_events),
            lockscope_text::units::count(r.events.saturating_add(r.lost_events)),
            lost * 100.0
        );
    }
    v.text = text;
    v
}

/// Every lock of the model, in model order.
fn lock_rows(meta: &Meta, model: &Model, names: &mut Names) -> Vec<LockOut> {
    // Group site and path stats by lock once.
    let mut sites_of: HashMap<u32, Vec<(u32, &crate::model::SiteStats)>> = HashMap::new();
    for (&(o, s), &i) in &model.by_site {
        sites_of
            .entry(o)
            .or_default()
            .push((s, &model.site_stats[i as usize]));
    }
    let mut paths_of: HashMap<u32, Vec<(u32, &crate::model::SiteStats)>> = HashMap::new();
    for (&(o, s), st) in &model.by_path {
        paths_of.entry(o).or_default().push((s, st));
    }
    (0..model.objs.len() as u32)
        .filter(|&i| is_lock(model.objs[i as usize].kind))
        .map(|i| {
            let sites = sites_of.get(&i).map(Vec::as_slice).unwrap_or(&[]);
            let paths = paths_of.get(&i).map(Vec::as_slice).unwrap_or(&[]);
            lock_out(meta, model, names, i, sites, paths)
        })
        .collect()
}

type Stats<'a> = [(u32, &'a crate::model::SiteStats)];

/// One lock's row: figures, sites, call paths and threads.
fn lock_out(
    meta: &Meta,
    model: &Model,
    names: &mut Names,
    i: u32,
    site_stats: &Stats,
    path_stats: &Stats,
) -> LockOut {
    let o = &model.objs[i as usize];
    let (name, first_use) = names.obj_name(i);
    // A futex word's role, from the runtime code that waits on it.
    let role = if o.kind == Kind::Futex {
        futex_role(names, o.process, site_stats, path_stats)
    } else {
        FutexRole::Unknown
    };
    let label = names.lock_label(i);
    // Rust std's RwLock is two futex words (readers wait on the state,
    // writers on `writer_notify` 4 bytes after it): merged into one row.
    let rust_rwlock = role == FutexRole::RwLock;
    // Sites by their user frame (see `Location::user_view`). Several
    // return addresses can be the same source line (and a site without
    // line info is its module+offset): merged by that.
    let mut merged: BTreeMap<String, SiteOut> = BTreeMap::new();
    let add = |merged: &mut BTreeMap<String, SiteOut>,
               shown: &Location,
               raw: &Location,
               st: &crate::model::SiteStats| {
        let e = merged
            .entry(shown.key())
            .or_insert_with(|| site_out(shown, raw));
        e.acquisitions += st.acquisitions;
        e.contended += st.contended;
        e.trylock_failures += st.trylock_failures;
        e.wait_ns += st.wait_ns;
        e.max_wait_ns = e.max_wait_ns.max(st.max_wait_ns);
        e.hold_ns += st.hold_ns;
    };
    for &(s, st) in site_stats {
        if st.acquisitions + st.contended + st.trylock_failures + st.timeouts + st.still_waiting
            == 0
        {
            continue;
        }
        let raw = names.site(s);
        if let Some(shown) = names.view(&raw) {
            add(&mut merged, &shown, &raw, st);
            continue;
        }
        // The return address is runtime code only: attribute what the
        // call paths through it cover to their user frames, and keep the
        // rest (acquisitions without a path) under the runtime frame,
        // marked as such.
        let pc = model.sites[s as usize].1;
        let mut rest = st.clone();
        for &(stack, ps) in path_stats {
            if stack == 0 || names.path_first_pc(stack) != Some(pc) {
                continue;
            }
            let Some(shown) = names.path_user_frame(o.process, stack) else {
                continue;
            };
            let raw_path = names.code(o.process, pc);
            add(&mut merged, &shown, &raw_path, ps);
            rest.acquisitions = rest.acquisitions.saturating_sub(ps.acquisitions);
            rest.contended = rest.contended.saturating_sub(ps.contended);
            rest.trylock_failures = rest.trylock_failures.saturating_sub(ps.trylock_failures);
            rest.timeouts = rest.timeouts.saturating_sub(ps.timeouts);
            rest.still_waiting = rest.still_waiting.saturating_sub(ps.still_waiting);
            rest.wait_ns = rest.wait_ns.saturating_sub(ps.wait_ns);
            rest.hold_ns = rest.hold_ns.saturating_sub(ps.hold_ns);
        }
        if rest.acquisitions + rest.contended + rest.trylock_failures + rest.timeouts > 0
            || rest.still_waiting > 0
        {
            if rest.contended + rest.still_waiting == 0 {
                rest.wait_ns = 0;
                rest.max_wait_ns = 0;
            }
            let key = format!("runtime:{}", raw.key());
            let e = merged.entry(key).or_insert_with(|| SiteOut {
                runtime_only: true,
                ..site_out(&raw, &raw)
            });
            e.acquisitions += rest.acquisitions;
            e.contended += rest.contended;
            e.trylock_failures += rest.trylock_failures;
            e.wait_ns += rest.wait_ns;
            e.max_wait_ns = e.max_wait_ns.max(rest.max_wait_ns);
            e.hold_ns += rest.hold_ns;
        }
    }
    let mut sites: Vec<SiteOut> = merged.into_values().collect();
    disambiguate_sites(&mut sites);
    sites.sort_by(|a, b| {
        (b.wait_ns, b.acquisitions, &a.location).cmp(&(a.wait_ns, a.acquisitions, &b.location))
    });
    let mut call_paths: Vec<PathOut> = path_stats
        .iter()
        .filter(|(s, st)| *s != 0 && st.acquisitions + st.contended + st.still_waiting > 0)
        .map(|&(s, st)| PathOut {
            frames: names.path(o.process, s),
            acquisitions: st.acquisitions,
            contended: st.contended,
            wait_ns: st.wait_ns,
        })
        .collect();
    call_paths.sort_by(|a, b| (b.wait_ns, &a.frames).cmp(&(a.wait_ns, &b.frames)));
    let mut threads: Vec<LockThreadOut> = o
        .per_thread
        .iter()
        .map(|(&t, &lti)| {
            let lt = &model.lock_threads[lti as usize];
            let th = &model.threads[t as usize];
            LockThreadOut {
                tid: th.tid,
                name: th.name.clone(),
                acquisitions: lt.acquisitions,
                contended: lt.contended,
                trylock_failures: lt.trylock_failures,
                timeouts: lt.timeouts,
                wait_ns: lt.wait_ns,
                max_wait_ns: lt.max_wait_ns,
                hold_ns: lt.hold_ns,
                thread: t,
            }
        })
        .collect();
    threads.sort_by_key(|t| (std::cmp::Reverse(t.wait_ns), t.tid));
    LockOut {
        address: format!("{:#x}", o.addr),
        pid: pid_of(meta, o.process),
        exec_generation: gen_of(meta, o.process),
        kind: if o.kind == Kind::Futex {
            role.kind()
        } else {
            o.kind.name()
        },
        swapped_lock: (o.kind == Kind::Mutex)
            .then(|| swapped_lock_of(meta, o.process))
            .flatten(),
        program_generation: program_generation_of(meta, o.process),
        name,
        label: label.name,
        named_by: label.by,
        label_base: label.base,
        first_use,
        acquisitions: o.acquisitions,
        contended: o.contended,
        read_acquisitions: (o.kind == Kind::Rwlock).then_some(o.shared_acquisitions),
        contended_ratio: ratio(o.contended, o.acquisitions),
        trylock_failures: o.trylock_failures,
        timeouts: o.timeouts,
        still_waiting: o.still_waiting,
        owner_changes: o.owner_changes,
        first_attempt_ratio: ratio(o.first_attempt, o.acquisitions),
        avg_waiters: o.avg_waiters(),
        wait_ns: o.wait.nonzero_summary(),
        hold_ns: o.hold.summary(),
        slow_unlocks: o.slow_unlocks,
        unlock_ns: o.unlock_ns,
        wakes: if o.kind == Kind::Futex { o.signals } else { 0 },
        sites,
        call_paths,
        threads,
        obj: i,
        rust_rwlock,
    }
}

/// What a futex word is, told by the runtime code that waits on it (the
/// recorder sees only `syscall(SYS_futex, ...)`: Rust's `std::sync`,
/// parking_lot and glibc's internal locks bypass pthreads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FutexRole {
    Mutex,
    RwLock,
    Condvar,
    Once,
    ParkingLot,
    GlibcInternal,
    Unknown,
}

impl FutexRole {
    /// The `kind` of its row.
    fn kind(self) -> &'static str {
        match self {
            FutexRole::Mutex => "futex-mutex",
            FutexRole::RwLock => "futex-rwlock",
            FutexRole::Condvar => "futex-condvar",
            FutexRole::Once => "futex-once",
            FutexRole::ParkingLot => "futex-parking-lot",
            FutexRole::GlibcInternal => "futex-glibc",
            FutexRole::Unknown => "futex",
        }
    }

    /// The role a function name reveals, if any. Rust std 1.8x names
    /// (`std::sys::sync::mutex::futex::Mutex::lock_contended`,
    /// `...::rwlock::futex::RwLock::read_contended` / `write_contended`,
    /// `...::condvar::futex::Condvar::wait...`, `...::once::futex::Once::call`,
    /// checked on a program built here); older std paths (`sys::unix::locks`)
    /// and parking_lot's (`parking_lot::raw_mutex`, `raw_rwlock`,
    /// `condvar`, `once`, or only its thread parker) the same way.
    fn of_function(f: &str) -> Option<FutexRole> {
        const TABLE: &[(&str, FutexRole)] = &[
            ("futex::Condvar", FutexRole::Condvar),
            ("futex_condvar::Condvar", FutexRole::Condvar),
            ("parking_lot::condvar", FutexRole::Condvar),
            ("futex::RwLock", FutexRole::RwLock),
            ("futex_rwlock::RwLock", FutexRole::RwLock),
            ("parking_lot::raw_rwlock", FutexRole::RwLock),
            ("futex::Mutex", FutexRole::Mutex),
            ("futex_mutex::Mutex", FutexRole::Mutex),
            ("parking_lot::raw_mutex", FutexRole::Mutex),
            ("parking_lot::raw_fair_mutex", FutexRole::Mutex),
            ("futex::Once", FutexRole::Once),
            ("parking_lot::once", FutexRole::Once),
            ("parking_lot_core", FutexRole::ParkingLot),
            // glibc's own locks, as attach mode sees them (every futex
            // call, not only those made through `syscall()`): the
            // low-level wait is shared by pthread mutexes and glibc's
            // internal locks, so the pthread function above it decides
            // (see `futex_role`).
            ("pthread_mutex_cond_lock", FutexRole::Mutex),
            ("pthread_mutex_lock", FutexRole::Mutex),
            ("pthread_mutex_timedlock", FutexRole::Mutex),
            ("pthread_mutex_clocklock", FutexRole::Mutex),
            ("pthread_mutex_unlock", FutexRole::Mutex),
            ("pthread_rwlock_", FutexRole::RwLock),
            ("pthread_cond_", FutexRole::Condvar),
            ("__lll_lock_wait", FutexRole::GlibcInternal),
            ("__lll_lock_wake", FutexRole::GlibcInternal),
        ];
        TABLE.iter().find(|(p, _)| f.contains(p)).map(|&(_, r)| r)
    }
}

/// The role of a futex word: the innermost function of a known role on
/// the waits' own return addresses (with their inlining chains) and call
/// paths. Innermost, because a `Condvar::wait` re-takes its mutex after
/// the wake: that wait, on the mutex word, is `Mutex::lock_contended`
/// called from `Condvar::wait`, and is the mutex's. Where several waits
/// disagree (a word reused), the one with the most waits wins.
fn futex_role(names: &mut Names, process: u32, sites: &Stats, paths: &Stats) -> FutexRole {
    let mut votes: Vec<(FutexRole, u64)> = Vec::new();
    let mut vote = |r: FutexRole, n: u64| match votes.iter_mut().find(|v| v.0 == r) {
        Some(v) => v.1 += n,
        None => votes.push((r, n)),
    };
    let first = |frames: &[lockscope_symbols::Frame]| {
        frames
            .iter()
            .filter_map(|f| f.function.as_deref())
            .find_map(FutexRole::of_function)
    };
    for &(s, st) in sites {
        if let Some(r) = first(&names.site(s).frames) {
            vote(r, st.contended + st.trylock_failures + st.timeouts + 1);
        }
    }
    for &(stack, st) in paths {
        let pcs = names
            .meta
            .stacks
            .get(&stack)
            .map(|s| s.frames.clone())
            .unwrap_or_default();
        // glibc's low-level lock wait is the innermost frame of every
        // contended pthread mutex and of glibc's internal locks alike: it
        // says "glibc" only when no pthread function calls it.
        let mut weak = None;
        for pc in pcs.into_iter().take(8) {
            match first(&names.code(process, pc).frames) {
                Some(FutexRole::GlibcInternal) => {
                    weak.get_or_insert(FutexRole::GlibcInternal);
                }
                Some(r) => {
                    weak = Some(r);
                    break;
                }
                None => {}
            }
        }
        if let Some(r) = weak {
            vote(r, st.contended + st.trylock_failures + st.timeouts + 1);
        }
    }
    // The site's own frames are the innermost: a glibc-internal vote
    // from them yields to a pthread role found on the call paths.
    if votes.iter().any(|v| v.0 != FutexRole::GlibcInternal) {
        votes.retain(|v| v.0 != FutexRole::GlibcInternal);
    }
    votes
        .into_iter()
        .max_by_key(|&(r, n)| (n, std::cmp::Reverse(r as u8)))
        .map_or(FutexRole::Unknown, |(r, _)| r)
}

/// Takes the futex words that are condition variables (Rust's `Condvar`,
/// parking_lot's) out of the locks, with their blame rows: a condition
/// wait waits for an event, not for a lock, and a barrier built on a
/// Condvar is not lock contention that shortening a critical section
/// would cure. Returned to be listed with the condition variables.
fn split_futex_condvars(locks: &mut Vec<LockOut>, blame: &mut Vec<BlameOut>) -> Vec<LockOut> {
    let kind = FutexRole::Condvar.kind();
    let (conds, kept): (Vec<LockOut>, Vec<LockOut>) = std::mem::take(locks)
        .into_iter()
        .partition(|l| l.kind == kind);
    *locks = kept;
    blame.retain(|b| !conds.iter().any(|c| c.obj == b.obj));
    conds
}

/// A futex condition variable's row among the condition variables, and
/// its waits moved from the threads' lock time to their free time
/// (blocked on a condition variable), where the interpreter counted them
/// as lock waits: it cannot tell a futex word's role, which the symbols
/// tell only here.
fn futex_cond_out(l: LockOut, threads: &mut [ThreadOut]) -> CondOut {
    for lt in &l.threads {
        if let Some(t) = threads.iter_mut().find(|t| t.thread == lt.thread) {
            let w = lt.wait_ns.min(t.lock_ns);
            t.lock_ns -= w;
            t.free_ns += w;
            t.blocked_ns += w;
            t.cond_wait_ns += w;
        }
    }
    CondOut {
        // The label, as for a pthread condition variable (and as the HTML
        // timeline names its waits).
        name: l.label.clone(),
        address: l.address,
        pid: l.pid,
        waits: l.contended,
        timeouts: l.timeouts,
        signals: l.wakes,
        broadcasts: 0,
        wait_ns: l.wait_ns,
        threads: l
            .threads
            .iter()
            .map(|t| ObjThreadOut {
                tid: t.tid,
                waits: t.contended,
                wait_ns: t.wait_ns,
                thread: t.thread,
            })
            .collect(),
    }
}

/// Merges the two futex words of each Rust std RwLock (state at `a`,
/// writer_notify at `a + 4`, both waited on from std's RwLock code) into
/// one row of kind `futex-rwlock` at `a`, and points the second word's
/// blame rows at it. The merged wait p99 is the larger of the two (an
/// upper bound: the histograms are not kept).
fn merge_rust_rwlocks(locks: &mut Vec<LockOut>, blame: &mut [BlameOut]) {
    let addr = |l: &LockOut| u64::from_str_radix(l.address.trim_start_matches("0x"), 16).ok();
    let mut at: HashMap<(u32, u32, u64), usize> = HashMap::new();
    for (i, l) in locks.iter().enumerate() {
        if let (true, Some(a)) = (l.rust_rwlock, addr(l)) {
            at.insert((l.pid, l.exec_generation, a), i);
        }
    }
    let mut gone: Vec<usize> = Vec::new();
    let mut pairs: Vec<(usize, usize)> = at
        .iter()
        .filter_map(|(&(p, g, a), &i)| at.get(&(p, g, a + 4)).map(|&j| (i, j)))
        .collect();
    pairs.sort_unstable();
    for (i, j) in pairs {
        if gone.contains(&i) || gone.contains(&j) {
            continue;
        }
        let b = locks[j].clone();
        let a = &mut locks[i];
        a.kind = "futex-rwlock";
        a.contended += b.contended;
        a.trylock_failures += b.trylock_failures;
        a.timeouts += b.timeouts;
        a.wakes += b.wakes;
        let (wa, wb) = (a.wait_ns, b.wait_ns);
        a.wait_ns.total = wa.total + wb.total;
        a.wait_ns.count = wa.count + wb.count;
        a.wait_ns.mean = if a.wait_ns.count == 0 {
            0.0
        } else {
            a.wait_ns.total as f64 / a.wait_ns.count as f64
        };
        a.wait_ns.max = wa.max.max(wb.max);
        a.wait_ns.p99 = wa.p99.max(wb.p99);
        for s in b.sites {
            match a.sites.iter_mut().find(|x| x.name == s.name) {
                Some(x) => {
                    x.contended += s.contended;
                    x.trylock_failures += s.trylock_failures;
                    x.wait_ns += s.wait_ns;
                    x.max_wait_ns = x.max_wait_ns.max(s.max_wait_ns);
                }
                None => a.sites.push(s),
            }
        }
        a.sites
            .sort_by(|x, y| (y.wait_ns, &x.name).cmp(&(x.wait_ns, &y.name)));
        a.call_paths.extend(b.call_paths);
        a.call_paths
            .sort_by(|x, y| (y.wait_ns, &x.frames).cmp(&(x.wait_ns, &y.frames)));
        for t in b.threads {
            match a.threads.iter_mut().find(|x| x.thread == t.thread) {
                Some(x) => {
                    x.contended += t.contended;
                    x.trylock_failures += t.trylock_failures;
                    x.wait_ns += t.wait_ns;
                    x.max_wait_ns = x.max_wait_ns.max(t.max_wait_ns);
                }
                None => a.threads.push(t),
            }
        }
        a.threads
            .sort_by_key(|t| (std::cmp::Reverse(t.wait_ns), t.tid));
        let label = a.label.clone();
        for r in blame
            .iter_mut()
            .filter(|r| r.obj == b.obj || r.obj == a.obj)
        {
            r.obj = a.obj;
            r.lock.clone_from(&a.address);
            r.lock_name.clone_from(&label);
        }
        gone.push(j);
    }
    gone.sort_unstable();
    for j in gone.into_iter().rev() {
        locks.remove(j);
    }
}

/// (lock, waiter tid, waiter site, holder tid, holder site, holder path).
type BlameKey = (u32, u32, String, Option<u32>, String, Vec<String>);

/// Every blame entry of the model, summed per waiter thread and site and
/// holder thread, site and path; largest first.
fn blame_rows(meta: &Meta, model: &Model, names: &mut Names) -> Vec<BlameOut> {
    // Value: wait, waits, waiter thread index, holder thread index.
    let mut rows: BTreeMap<BlameKey, (u64, u64, u32, Option<u32>)> = BTreeMap::new();
    for (&(oi, wthread, wsite, wstack, c), &(ns, n)) in &model.blame {
        if ns == 0 {
            continue;
        }
        let process = model.objs[oi as usize].process;
        let wtid = model.threads.get(wthread as usize).map_or(0, |t| t.tid);
        // The waiter's own call path names its user frame when the site
        // is runtime code; without one, the lock's paths must agree.
        let ws = names.site_str_via(oi, wthread, wsite, wstack);
        let (hthread, htid, hs, hp) = if c == Culprit::NONE {
            (None, None, NO_HOLDER.to_string(), Vec::new())
        } else {
            (
                Some(c.thread),
                model.threads.get(c.thread as usize).map(|t| t.tid),
                names.site_str_via(oi, c.thread, c.site, c.stack),
                names.path(process, c.stack),
            )
        };
        let e = rows
            .entry((oi, wtid, ws, htid, hs, hp))
            .or_insert((0, 0, wthread, hthread));
        e.0 += ns;
        e.1 += n;
    }
    let mut blame: Vec<BlameOut> = rows
        .into_iter()
        .map(|((oi, wtid, ws, htid, hs, hp), (ns, n, wt, ht))| {
            let o = &model.objs[oi as usize];
            BlameOut {
                lock: format!("{:#x}", o.addr),
                pid: pid_of(meta, o.process),
                lock_name: names.label(oi),
                waiter_tid: wtid,
                waiter_site: ws,
                holder_tid: htid,
                holder_site: hs,
                holder_path: hp,
                wait_ns: ns,
                waits: n,
                obj: oi,
                waiter_thread: wt,
                holder_thread: ht,
            }
        })
        .collect();
    blame.sort_by_key(|b| std::cmp::Reverse(b.wait_ns));
    blame
}

/// The blame rows summed over threads: (waiter site x holder site, holder
/// sites), each largest first.
fn aggregate_blame(blame: &[BlameOut]) -> (Vec<MatrixOut>, Vec<BlockingOut>) {
    // Keyed by (lock, sites) then summed; the first row of a key gives
    // the lock's names.
    let mut matrix: BTreeMap<(u32, &str, &str), (u64, u64, &BlameOut)> = BTreeMap::new();
    let mut blocking: BTreeMap<(&str, u32), (u64, u64, &BlameOut)> = BTreeMap::new();
    for b in blame {
        let m = matrix
            .entry((b.obj, &b.waiter_site, &b.holder_site))
            .or_insert((0, 0, b));
        m.0 += b.wait_ns;
        m.1 += b.waits;
        let k = blocking.entry((&b.holder_site, b.obj)).or_insert((0, 0, b));
        k.0 += b.wait_ns;
        k.1 += b.waits;
    }
    let mut blame_matrix: Vec<MatrixOut> = matrix
        .into_iter()
        .map(|((_, ws, hs), (ns, n, b))| MatrixOut {
            lock: b.lock.clone(),
            pid: b.pid,
            lock_name: b.lock_name.clone(),
            waiter_site: ws.to_string(),
            holder_site: hs.to_string(),
            wait_ns: ns,
            waits: n,
        })
        .collect();
    blame_matrix.sort_by_key(|b| std::cmp::Reverse(b.wait_ns));
    let mut blocking_sites: Vec<BlockingOut> = blocking
        .into_iter()
        .map(|((site, obj), (ns, n, b))| BlockingOut {
            site: site.to_string(),
            lock: b.lock.clone(),
            pid: b.pid,
            lock_name: b.lock_name.clone(),
            wait_caused_ns: ns,
            waits: n,
            obj,
        })
        .collect();
    blocking_sites.sort_by_key(|b| std::cmp::Reverse(b.wait_caused_ns));
    (blame_matrix, blocking_sites)
}

/// Every thread's time breakdown, by pid then tid.
fn thread_rows(meta: &Meta, model: &Model) -> Vec<ThreadOut> {
    let mut threads: Vec<ThreadOut> = model
        .threads
        .iter()
        .enumerate()
        .map(|(i, t)| ThreadOut {
            tid: t.tid,
            pid: pid_of(meta, t.process),
            exec_generation: gen_of(meta, t.process),
            name: t.name.clone(),
            lifetime_ns: t.lifetime(),
            free_ns: t.cats[0],
            lock_ns: t.cats[1],
            unlock_ns: t.cats[2],
            hold_ns: t.cats[3],
            unknown_ns: t.cats[4],
            blocked_ns: t.blocked_free,
            running_ns: t.cats[0].saturating_sub(t.blocked_free),
            cond_wait_ns: t.blocked[0],
            barrier_wait_ns: t.blocked[1],
            sem_wait_ns: t.blocked[2],
            join_wait_ns: t.blocked[3],
            gpu_wait_ns: t.blocked[4],
            overhead_ns: t.overhead_ns,
            events: t.events,
            lost_events: t.lost,
            thread: i as u32,
        })
        .collect();
    threads.sort_by_key(|t| (t.pid, t.tid));
    threads
}

/// Condition variables, barriers and semaphores, each by total wait.
fn object_rows(
    meta: &Meta,
    model: &Model,
    names: &mut Names,
) -> (Vec<CondOut>, Vec<BarrierOut>, Vec<SemOut>) {
    let mut obj_threads: HashMap<u32, Vec<ObjThreadOut>> = HashMap::new();
    for (&(oi, ti), &(n, ns)) in &model.obj_waits {
        obj_threads.entry(oi).or_default().push(ObjThreadOut {
            tid: model.threads[ti as usize].tid,
            waits: n,
            wait_ns: ns,
            thread: ti,
        });
    }
    for v in obj_threads.values_mut() {
        v.sort_by_key(|t| (t.tid, t.thread));
    }
    let mut conds = Vec::new();
    let mut barriers = Vec::new();
    let mut semaphores = Vec::new();
    for (i, o) in model.objs.iter().enumerate() {
        let i = i as u32;
        let threads = obj_threads.remove(&i).unwrap_or_default();
        match o.kind {
            Kind::Cond => conds.push(CondOut {
                address: format!("{:#x}", o.addr),
                pid: pid_of(meta, o.process),
                name: names.label(i),
                waits: o.acquisitions,
                timeouts: o.timeouts,
                signals: o.signals,
                broadcasts: o.broadcasts,
                wait_ns: o.wait.summary(),
                threads,
            }),
            Kind::Barrier => {
                let mut blamed_on: Vec<ObjThreadOut> = model
                    .barrier_blame
                    .iter()
                    .filter(|((b, _), _)| *b == i)
                    .map(|((_, t), &ns)| ObjThreadOut {
                        tid: model.threads.get(*t as usize).map_or(0, |t| t.tid),
                        waits: 0,
                        wait_ns: ns,
                        thread: *t,
                    })
                    .collect();
                blamed_on.sort_by_key(|t| (std::cmp::Reverse(t.wait_ns), t.tid));
                barriers.push(BarrierOut {
                    address: format!("{:#x}", o.addr),
                    pid: pid_of(meta, o.process),
                    name: names.label(i),
                    rounds: o.rounds,
                    waits: o.acquisitions,
                    wait_ns: o.wait.summary(),
                    threads,
                    blamed_on,
                    obj: i,
                })
            }
            Kind::Semaphore => semaphores.push(SemOut {
                address: format!("{:#x}", o.addr),
                name: names.label(i),
                waits: o.acquisitions,
                contended: o.contended,
                trywait_failures: o.trylock_failures,
                timeouts: o.timeouts,
                posts: o.signals,
                wait_ns: o.wait.summary(),
                threads,
            }),
            _ => {}
        }
    }
    conds.sort_by_key(|c| std::cmp::Reverse(c.wait_ns.total));
    barriers.sort_by_key(|b| std::cmp::Reverse(b.wait_ns.total));
    semaphores.sort_by_key(|s| std::cmp::Reverse(s.wait_ns.total));
    (conds, barriers, semaphores)
}

/// The recorder overhead that was (or could have been) subtracted.
fn overhead_out(model: &Model, cfg: &ReportConfig) -> OverheadOut {
    let n = model.overhead.len().max(1) as f64;
    let total_ns = model.overhead_total();
    let raw_time: u64 = model
        .threads
        .iter()
        .map(|t| t.lifetime() + t.overhead_ns)
        .sum();
    OverheadOut {
        subtracted: cfg.correct_overhead && !model.overhead.is_empty(),
        acquire_ns: model.overhead.iter().map(|o| o.acquire_ns).sum::<f64>() / n,
        release_ns: model.overhead.iter().map(|o| o.release_ns).sum::<f64>() / n,
        event_ns: model.overhead.iter().map(|o| o.event_ns).sum::<f64>() / n,
        total_ns,
        share_of_thread_time: ratio(total_ns, raw_time),
    }
}

/// Stage 3: what `cfg` asks to see. Locks pass `--min-wait`, `--lock` and
/// `--thread` (a lock some selected thread used), are sorted by
/// `cfg.sort` and cut to `--top`; blame rows are those of kept locks that
/// involve a selected thread (as waiter or holder), summed again into the
/// matrix and blocking sites; recommendations are kept for locks that
/// pass `--lock` and `--thread` (not `--top` or `--min-wait`: advice was
/// decided on the full model and is the same in every output format).
fn filtered_view(full: Report, model: &Model, cfg: &ReportConfig) -> Report {
    let thread_ok = |ti: u32| -> bool {
        let Some(f) = &cfg.thread_filter else {
            return true;
        };
        let Some(t) = model.threads.get(ti as usize) else {
            return false;
        };
        f.parse::<u32>().ok() == Some(t.tid) || t.name.contains(f.as_str())
    };
    let selected = |l: &LockOut| -> bool {
        let by_lock = match cfg.lock_filter.as_deref() {
            None => true,
            Some(f) => {
                l.address.contains(f)
                    || l.name.as_deref().is_some_and(|n| n.contains(f))
                    || l.first_use.contains(f)
            }
        };
        let by_thread =
            cfg.thread_filter.is_none() || l.threads.iter().any(|t| thread_ok(t.thread));
        by_lock && by_thread
    };
    let mut full = full;
    let all_locks = std::mem::take(&mut full.locks);
    let all_blame = std::mem::take(&mut full.blame);
    let threads = std::mem::take(&mut full.threads);
    let mut conds = std::mem::take(&mut full.conds);
    let mut barriers = std::mem::take(&mut full.barriers);
    let mut semaphores = std::mem::take(&mut full.semaphores);
    let recommendations = std::mem::take(&mut full.recommendations);
    // The objects the view is about: the selected locks, and every
    // barrier unless the view is narrowed to some locks. Their advice is
    // what the view keeps.
    let mut chosen: std::collections::HashSet<u32> = all_locks
        .iter()
        .filter(|l| selected(l))
        .map(|l| l.obj)
        .collect();
    if cfg.lock_filter.is_none() {
        chosen.extend(barriers.iter().map(|b| b.obj));
    }
    let recommendations: Vec<_> = recommendations
        .into_iter()
        .filter(|r| chosen.contains(&r.obj))
        .collect();

    let mut locks: Vec<LockOut> = all_locks
        .into_iter()
        .filter(|l| chosen.contains(&l.obj) && l.wait_ns.total >= cfg.min_wait_ns)
        .collect();
    let key_name = |l: &LockOut| -> String {
        l.name
            .clone()
            .unwrap_or_else(|| format!("~{:016x}", model.objs[l.obj as usize].addr))
    };
    match cfg.sort {
        SortKey::Name => locks.sort_by_key(key_name),
        k => locks.sort_by_key(|l| {
            let v = match k {
                SortKey::Hold => l.hold_ns.total,
                SortKey::Acquisitions => l.acquisitions,
                SortKey::Contended => l.contended,
                SortKey::OwnerChanges => l.owner_changes,
                SortKey::MaxWait => l.wait_ns.max,
                _ => l.wait_ns.total,
            };
            (
                std::cmp::Reverse(v),
                std::cmp::Reverse(l.acquisitions),
                model.objs[l.obj as usize].addr,
            )
        }),
    }
    if let Some(n) = cfg.top {
        locks.truncate(n);
    }
    for l in &mut locks {
        l.threads.retain(|t| thread_ok(t.thread));
    }

    let kept: std::collections::HashSet<u32> = locks.iter().map(|l| l.obj).collect();
    let mut blame: Vec<BlameOut> = all_blame
        .into_iter()
        .filter(|b| kept.contains(&b.obj))
        .filter(|b| {
            cfg.thread_filter.is_none()
                || thread_ok(b.waiter_thread)
                || b.holder_thread.is_some_and(thread_ok)
        })
        .collect();
    let (mut blame_matrix, mut blocking_sites) = aggregate_blame(&blame);
    if let Some(n) = cfg.top {
        blame.truncate(n);
        blocking_sites.truncate(n);
        blame_matrix.truncate(n);
    }

    let threads = threads
        .into_iter()
        .filter(|t| thread_ok(t.thread))
        .collect();
    for v in conds.iter_mut().map(|c| &mut c.threads) {
        v.retain(|t| thread_ok(t.thread));
    }
    for b in &mut barriers {
        b.threads.retain(|t| thread_ok(t.thread));
    }
    for s in &mut semaphores {
        s.threads.retain(|t| thread_ok(t.thread));
    }
    Report {
        locks,
        blame,
        blame_matrix,
        blocking_sites,
        threads,
        conds,
        barriers,
        semaphores,
        recommendations,
        ..full
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_symbols::Frame;

    fn loc(offset: u64, chain: &[(&str, u32)]) -> Location {
        Location {
            module: "python3.11".into(),
            offset,
            frames: chain
                .iter()
                .map(|&(f, line)| Frame {
                    function: Some(f.into()),
                    file: Some(format!("/src/{f}.c")),
                    line: Some(line),
                })
                .collect(),
        }
    }

    /// One inlined helper reached from several callers
    /// prints the same `f (..) in g (..)`; the rows get the first caller
    /// that differs, and a row with a distinct name is left alone.
    #[test]
    fn sites_that_print_alike_get_their_distinct_caller() {
        let a = loc(1, &[("drop_gil", 162), ("save", 526), ("listdir", 4187)]);
        let b = loc(2, &[("drop_gil", 162), ("save", 526)]);
        let c = loc(3, &[("drop_gil", 162), ("save", 526), ("stat", 2527)]);
        let d = loc(4, &[("take_gil", 238)]);
        let mut sites: Vec<SiteOut> = [&a, &b, &c, &d].iter().map(|l| site_out(l, l)).collect();
        disambiguate_sites(&mut sites);
        let names: Vec<&str> = sites.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "drop_gil (drop_gil.c:162) in save (save.c:526) < listdir (listdir.c:4187)",
                "drop_gil (drop_gil.c:162) in save (save.c:526) < (no caller)",
                "drop_gil (drop_gil.c:162) in save (save.c:526) < stat (stat.c:2527)",
                "take_gil (take_gil.c:238)",
            ]
        );
    }
}
