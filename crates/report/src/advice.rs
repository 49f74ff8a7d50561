//! Recommendations: which lock algorithm or code change to try for each
//! lock of a [`Report`], with the numbers that justify it and the command
//! that tries it (`lockscope run --lock ALGORITHM -- PROGRAM`, see
//! `lockscope-locks`).
//!
//! Entry point: [`advise`] (report + [`MachineFacts`] of the recording
//! machine -> [`Recommendation`]s, sorted by the wait each could address).
//!
//! Design constraints:
//! - Timing-mode data only: counts, waits, holds, waiters, owner changes
//!   and blame. Whether critical sections only *read* needs memory
//!   accesses (detailed mode, `lockscope occ` / `lockscope ulcp`), so a
//!   reader-writer lock is never suggested for a mutex here; for a
//!   pthread rwlock the read/write split of its acquisitions is known.
//! - Every rule is a named threshold below, stated where it is decided,
//!   with why. No advice on locks that do not make threads wait (no noise).
//! - NUMA advice (HMCS) needs the machine's node count, read from the
//!   trace header's `numa_nodes` / `sockets` extras; without it, or with a
//!   single node, HMCS is never recommended.

use std::fmt::Write as _;

use lockscope_format::Header;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use crate::report::{LockOut, Report};
use lockscope_text::units::{count, ns};

/// A lock is advised on only when its total wait is at least this share of
/// all threads' lifetimes (1 %): below that, changing it cannot change the
/// program's time noticeably, and advice on it would be noise.
pub const MIN_WAIT_SHARE: f64 = 0.01;
/// Contended acquisitions needed before a lock *algorithm* is suggested: an
/// algorithm changes the cost of each hand-off, so there must be a pattern
/// of hand-offs, not one long wait (that one is a `reduce_hold` case).
pub const MIN_CONTENDED: u64 = 20;
/// Queue lock: contended share of acquisitions at least 10 %. Below it,
/// most acquisitions are uncontended and a queue lock's costlier
/// uncontended path (an atomic swap plus a queue node) would not pay off.
pub const QUEUE_MIN_CONTENDED_RATIO: f64 = 0.10;
/// Queue lock: mean hold below 1 µs. With sections this short the time
/// goes into moving the lock's cache line between waiters, which FIFO
/// queue locks (MCS, CLH) replace by local spinning and one hand-off per
/// release. With long sections the lock's own cost is in the noise and
/// the section's length is the problem (`reduce_hold`).
pub const SHORT_HOLD_NS: f64 = 1000.0;
/// Preempted holders: a contended wait longer than 10x what the queue
/// explains (mean waiters + the holder, times the mean hold) means the
/// holder or the next owner was not running: descheduled, or asleep in
/// the kernel after the release.
pub const PREEMPT_FACTOR: f64 = 10.0;
/// HMCS: at least half of the acquisitions change owner. Only then are
/// there hand-offs to keep within a NUMA node; a lock mostly re-taken by
/// the same thread never moves across sockets.
pub const HANDOFF_RATIO: f64 = 0.5;
/// Reduce hold / split the lock: one holder site is charged at least half
/// of the lock's wait (blame). Then that critical section, not the lock
/// algorithm, is what the others wait for.
pub const DOMINANT_SITE_SHARE: f64 = 0.5;
/// Reduce hold: the dominant site's mean hold is at least 1 µs (same bound
/// as [`SHORT_HOLD_NS`]: shorter sections are a hand-off problem).
pub const LONG_HOLD_NS: f64 = SHORT_HOLD_NS;
/// Balance the work before a barrier: the waiting charged to its most
/// frequent latecomer is at least half of all the waiting at it. Then one
/// thread's lateness, not a spread of small differences, is what the
/// others wait for (the same bound as [`DOMINANT_SITE_SHARE`]; barriers
/// whose waiting is under [`MIN_WAIT_SHARE`] of the threads' time get
/// nothing either).
pub const BARRIER_LATECOMER_SHARE: f64 = DOMINANT_SITE_SHARE;
/// Reader-writer lock already right: at least 90 % of its acquisitions
/// read.
pub const READ_MOSTLY: f64 = 0.9;
/// Reader-writer lock to replace by a mutex: under 10 % of its
/// acquisitions read, so it serializes like a mutex but with a costlier
/// protocol (and cannot be swapped by `lockscope run`).
pub const READ_RARE: f64 = 0.1;

/// A condition variable is shown as a lock ("used as a lock", see
/// [`cond_is_lock`]) only when at least this many of its waits were
/// ended by a thread that waits on it too (hand-offs between waiters): a
/// pattern of turns, not one wait for the end of the work (pbzip2's main
/// thread waits once, 1.1 s, for its workers). Low, because a real GIL
/// passes on few times: CPython 3.11's four computing threads in
/// `gil_threads.py` waited 15-17 times in 60 ms (its switch interval is
/// 5 ms), 11-13 of them ended by another waiter.
pub const COND_LOCK_MIN_HANDOFFS: u64 = 4;
/// ... and only when its token is held by at most 1.1 threads at a time
/// on average while anyone holds it. A holding ends at the start of the
/// critical section that gives the token up ([`crate::condlock`]), which
/// the mutex orders before the next holder's start: a lock's holdings
/// never overlap, whatever the scheduler does. The 0.1 is for a token
/// given up without the mutex (a flag cleared atomically, then a signal).
/// Measured (lockscope 0.1.0, 2-vCPU VM, 2026-11-28): 1.00 for
/// `gil_like.c` in 24 recordings of 24 (ending holdings at the signal
/// instead gave 1.12 in 2 of them, with a worker preempted between its
/// unlock and its signal) and for CPython 3.11's GIL (4 recordings);
/// GNU `sort`'s workers, which hand work to each other through one
/// condition variable, 1.26 with `--parallel=2` and 2.31 with
/// `--parallel=4`.
pub const COND_LOCK_MAX_HOLDERS: f64 = 1.1;

/// Whether a condition variable is a lock of its own (a GIL): what the
/// report shows under CONDITION VARIABLES USED AS LOCKS and the verdict
/// names.
///
/// What a GIL does, in events: a thread's wait on the condition variable
/// returns, it takes the flag, releases the mutex and runs *holding the
/// flag*, then clears it and signals the next waiter, which takes over.
/// So a lock built on a condition variable leaves *token intervals*
/// ([`crate::condlock`]): from a wait's return to the same thread's next
/// signal of it, with the mutex released in between. It is a lock when
/// (all of):
/// - its waits matter: at least [`MIN_WAIT_SHARE`] of the threads' time
///   and more than the wait on every lock together (`wait_ns`,
///   `thread_time_ns`, `lock_wait_ns`);
/// - at least [`COND_LOCK_MIN_HANDOFFS`] of its waits were ended by the
///   signal of a thread that waits on it too (`passed_between_waiters`):
///   the waiter takes over what the signaller held, and the signaller
///   comes back for it. A bounded queue's `notfull` is waited on by
///   producers and signalled by consumers, who never wait on it; a
///   completion wait is one wait;
/// - at most one thread held it at a time (mean holders of its token
///   intervals while any held it at most [`COND_LOCK_MAX_HOLDERS`]): the
///   threads take turns. Workers that hand work to each other (`sort`)
///   wait on and signal one condition variable too, but work at the same
///   time.
///
/// Not taken: the waits' share alone (the rule before: it named a bounded
/// queue's `notfull`, pbzip2's completion wait and `sort`'s worker
/// hand-offs), and exclusion measured on the threads' whole time (their
/// lifetime minus their blocked time, summed, against the wall time):
/// a runnable thread that the scheduler has not run counts as running
/// there, and on a loaded 2-CPU machine `gil_like.c`'s three workers,
/// which take turns by construction, added up to 1.9 threads at once.
/// The token intervals do not depend on the scheduler: a holder that is
/// descheduled still holds the flag, and nobody else does.
pub fn cond_is_lock(
    wait_ns: u64,
    thread_time_ns: u64,
    lock_wait_ns: u64,
    passed_between_waiters: u64,
    tokens: &crate::condlock::Tokens,
) -> bool {
    (wait_ns as f64) >= MIN_WAIT_SHARE * thread_time_ns as f64
        && wait_ns > lock_wait_ns
        && passed_between_waiters >= COND_LOCK_MIN_HANDOFFS
        && tokens.intervals > 0
        && tokens.holders_at_once() <= COND_LOCK_MAX_HOLDERS
}

/// What the recording machine was, from the trace header.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineFacts {
    /// Online CPUs (0: unknown, e.g. an imported trace).
    pub cpus: u32,
    /// NUMA nodes (or sockets), when the recorder wrote them (header
    /// extras `numa_nodes` or `sockets`; the larger one wins).
    pub numa_nodes: Option<u32>,
}

impl MachineFacts {
    /// Reads the facts from a trace header.
    pub fn from_header(h: &Header) -> MachineFacts {
        let nodes = ["numa_nodes", "sockets"]
            .iter()
            .filter_map(|k| h.get(k)?.trim().parse::<u32>().ok())
            .max();
        MachineFacts {
            cpus: h.cpus,
            numa_nodes: nodes,
        }
    }
}

/// The kind of change recommended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AdviceKind {
    /// A FIFO queue lock (MCS/CLH): short sections, heavy contention.
    QueueLock,
    /// A hierarchical (NUMA-aware) queue lock: hand-offs on a multi-node
    /// machine.
    Hmcs,
    /// A lock whose waiters spin briefly then sleep: more waiters than
    /// CPUs, or holders that get preempted.
    SpinThenPark,
    /// About a reader-writer lock: it fits (read-mostly).
    ReaderWriter,
    /// A reader-writer lock that is nearly always taken for writing:
    /// a mutex does the same for less.
    UseMutex,
    /// Shorten the dominant critical section, or split the lock.
    ReduceHold,
    /// A barrier (an OpenMP region's end included) whose waiting is
    /// mostly for one late thread: balance the work before it.
    BalanceWork,
    /// A lock threads were deadlocked on when the trace ended: its wait
    /// is the deadlock's, which no shorter section or other algorithm
    /// ends.
    BreakDeadlock,
}

impl AdviceKind {
    /// The name used in JSON and text.
    pub fn name(self) -> &'static str {
        match self {
            AdviceKind::QueueLock => "queue_lock",
            AdviceKind::Hmcs => "hmcs",
            AdviceKind::SpinThenPark => "spin_then_park",
            AdviceKind::ReaderWriter => "reader_writer",
            AdviceKind::UseMutex => "use_mutex",
            AdviceKind::ReduceHold => "reduce_hold",
            AdviceKind::BalanceWork => "balance_work",
            AdviceKind::BreakDeadlock => "break_deadlock",
        }
    }

    /// The heading of the recommendation in words (text, and JSON's
    /// `title`): the rule id of [`AdviceKind::name`] stays for programs
    /// that match on it, a reader gets what to do.
    pub fn title(self) -> &'static str {
        match self {
            AdviceKind::QueueLock => "use a queue lock",
            AdviceKind::Hmcs => "use a NUMA-aware queue lock",
            AdviceKind::SpinThenPark => "spin, then park",
            AdviceKind::ReaderWriter => "about the reader-writer lock",
            AdviceKind::UseMutex => "use a mutex",
            AdviceKind::ReduceHold => "reduce the hold time",
            AdviceKind::BalanceWork => "balance the work",
            AdviceKind::BreakDeadlock => "break the deadlock",
        }
    }
}

/// The recommendation for a lock that threads of a deadlock wait for
/// (DEADLOCK section): take the locks of the cycle in one order.
fn break_deadlock(report: &Report, l: &crate::report::LockOut) -> Option<Recommendation> {
    let d = report
        .deadlocks
        .iter()
        .find(|d| d.pid == l.pid && d.threads.iter().any(|s| s.waits_for == l.label))?;
    let locks: Vec<&str> = d.threads.iter().map(|s| s.waits_for.as_str()).collect();
    let tids: Vec<String> = d.threads.iter().map(|s| s.tid.to_string()).collect();
    let mut ev = Evidence::default();
    ev.put("wait_ns", l.wait_ns.total as f64);
    ev.put("still_waiting", l.still_waiting as f64);
    ev.put("threads", d.threads.len() as f64);
    Some(Recommendation {
        kind: AdviceKind::BreakDeadlock,
        title: AdviceKind::BreakDeadlock.title(),
        lock: l.label.clone(),
        address: l.address.clone(),
        pid: l.pid,
        advice: format!(
            "break the deadlock (see DEADLOCK): threads {} each hold a lock the next one \
             waits for; take {} in one order everywhere, or take them together \
             (std::scoped_lock, or a trylock that backs off)",
            tids.join(", "),
            locks.join(" and ")
        ),
        evidence_text: format!(
            "{} of its wait is {} still blocked when the trace ended",
            ns(l.wait_ns.total),
            if l.still_waiting == 1 {
                "1 acquisition".to_string()
            } else {
                format!("{} acquisitions", count(l.still_waiting))
            }
        ),
        evidence: ev,
        command: None,
        wait_addressed_ns: l.wait_ns.total,
        obj: l.obj,
    })
}

/// Named numbers behind a recommendation, in a fixed order. Serialized as
/// a JSON object of numbers (integral values as integers).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Evidence(pub Vec<(&'static str, f64)>);

impl Evidence {
    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.0.iter().find(|(k, _)| *k == key).map(|&(_, v)| v)
    }
    fn put(&mut self, key: &'static str, v: f64) {
        self.0.push((key, v));
    }
}

impl Serialize for Evidence {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            if v.fract() == 0.0 && *v >= 0.0 && *v < 9.0e15 {
                m.serialize_entry(k, &(*v as u64))?;
            } else {
                m.serialize_entry(k, v)?;
            }
        }
        m.end()
    }
}

/// One recommendation for one lock.
#[derive(Clone, Debug, Serialize)]
pub struct Recommendation {
    /// What to change (the rule id, `spin_then_park`).
    pub kind: AdviceKind,
    /// The same in words (`spin, then park`), the text's heading.
    pub title: &'static str,
    /// The lock: its symbol, else its address.
    pub lock: String,
    /// Its address (`0x...`).
    pub address: String,
    /// OS pid of its process.
    pub pid: u32,
    /// One line of advice.
    pub advice: String,
    /// The numbers it rests on.
    pub evidence: Evidence,
    /// The same numbers, as a sentence.
    pub evidence_text: String,
    /// The command that tries it, when `lockscope run` can (pthread
    /// mutexes only, and a recorded command line).
    pub command: Option<String>,
    /// Wait it could address, ns (the sort key).
    pub wait_addressed_ns: u64,
    /// Model index of the lock (filters keep a lock's advice with it).
    #[serde(skip)]
    pub(crate) obj: u32,
}

/// Quotes `s` for a POSIX shell when it needs it.
fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./=:,+@%-".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The program to run: the recorded command line, minus a `lockscope run
/// ... --` wrapper (a recording of a run that already swapped the lock
/// must try the new lock on the program, not nest two runs).
fn program(cmd: &[String]) -> Option<Vec<String>> {
    let is_run = cmd.len() > 2 && cmd[0].rsplit('/').next() == Some("lockscope") && cmd[1] == "run";
    let rest: Vec<String> = if is_run {
        let dash = cmd.iter().position(|a| a == "--")?;
        cmd[dash + 1..].to_vec()
    } else {
        cmd.to_vec()
    };
    (!rest.is_empty()).then_some(rest)
}

fn run_command(r: &Report, l: &LockOut, opts: &str) -> Option<String> {
    // `lockscope run` swaps pthread mutexes only (crates/swap): no command
    // for rwlocks, spinlocks and raw futex words.
    if l.kind != "mutex" {
        return None;
    }
    let prog = program(&r.command)?;
    let args: Vec<String> = prog.iter().map(|a| shell_quote(a)).collect();
    Some(format!("lockscope run {opts} -- {}", args.join(" ")))
}

use lockscope_text::units::pct;

/// What a lock's figures say, computed once.
struct Figures {
    acq: f64,
    contended: f64,
    contended_ratio: f64,
    hold_mean: f64,
    /// Mean wait of the attempts that waited.
    cont_wait_mean: f64,
    waiters: f64,
    owner_change_ratio: f64,
    wait_total: u64,
    /// Wait charged to nobody (hand-off / wake-up latency).
    no_holder_ns: u64,
}

/// Recommendations for every lock of `report`, sorted by the wait they
/// could address (largest first).
pub fn advise(report: &Report, facts: &MachineFacts) -> Vec<Recommendation> {
    let thread_time: u64 = report.threads.iter().map(|t| t.lifetime_ns).sum();
    let mut out = Vec::new();
    for l in &report.locks {
        // No noise: a lock whose waiting is under 1 % of the threads' time
        // gets nothing, however its ratios look (a 100 % contended lock
        // taken twice is not worth changing).
        if l.wait_ns.total == 0 || (l.wait_ns.total as f64) < MIN_WAIT_SHARE * thread_time as f64 {
            continue;
        }
        let label = l.label.clone();
        if let Some(r) = break_deadlock(report, l) {
            // The other rules read a deadlocked lock's wait as throughput
            // lost to contention (a long "hold" to shorten): it is the
            // deadlock, and only breaking it helps.
            out.push(r);
            continue;
        }
        // By the lock's identity, not its name: after a fork the parent's
        // and the child's copy of a static lock have the same name.
        let blocking: Vec<_> = report
            .blocking_sites
            .iter()
            .filter(|b| b.obj == l.obj)
            .collect();
        let no_holder_ns = blocking
            .iter()
            .filter(|b| b.site.starts_with("(no holder"))
            .map(|b| b.wait_caused_ns)
            .sum();
        let f = Figures {
            acq: l.acquisitions as f64,
            contended: l.contended as f64,
            contended_ratio: l.contended_ratio,
            hold_mean: l.hold_ns.mean,
            cont_wait_mean: l.wait_ns.total as f64 / l.contended.max(1) as f64,
            waiters: l.avg_waiters,
            owner_change_ratio: if l.acquisitions == 0 {
                0.0
            } else {
                l.owner_changes as f64 / l.acquisitions as f64
            },
            wait_total: l.wait_ns.total,
            no_holder_ns,
        };
        let mk = |kind, advice: String, ev: Evidence, text: String, cmd, wait| Recommendation {
            kind,
            title: AdviceKind::title(kind),
            lock: label.clone(),
            address: l.address.clone(),
            pid: l.pid,
            advice,
            evidence: ev,
            evidence_text: text,
            command: cmd,
            wait_addressed_ns: wait,
            obj: l.obj,
        };
        let algo = algorithm(report, l, &f, facts);
        if let Some((kind, advice, ev, text, wait)) = rwlock(l, &f) {
            out.push(mk(kind, advice, ev, text, None, wait));
        }
        // Reduce hold / split: the holder site charged most of the wait.
        let mut reduce: Option<(String, u64)> = None;
        let top = blocking
            .iter()
            .filter(|b| !b.site.starts_with("(no holder"))
            .max_by_key(|b| b.wait_caused_ns);
        if let Some(b) = top {
            let share = b.wait_caused_ns as f64 / f.wait_total as f64;
            let site = l.sites.iter().find(|s| s.name == b.site);
            let site_hold = site
                .filter(|s| s.acquisitions > 0 && s.hold_ns > 0)
                .map(|s| s.hold_ns as f64 / s.acquisitions as f64);
            // Futex words have no visible hold (the blame goes to the
            // waker's site): the share alone decides there. Elsewhere the
            // section must also be long, or it is a hand-off problem that
            // the algorithm rules above cover.
            let long = match site_hold {
                Some(h) => h >= LONG_HOLD_NS,
                None => l.kind.starts_with("futex") || f.hold_mean >= LONG_HOLD_NS,
            };
            if share >= DOMINANT_SITE_SHARE && long {
                let mut ev = Evidence::default();
                ev.put("wait_ns", f.wait_total as f64);
                ev.put("site_wait_ns", b.wait_caused_ns as f64);
                ev.put("site_share", share);
                ev.put("site_waits", b.waits as f64);
                let futex = l.kind.starts_with("futex");
                let mut text = format!(
                    "{} of the {} wait on this lock ({} {}) is charged to {} at {}",
                    pct(share),
                    ns(f.wait_total),
                    count(b.waits),
                    if b.waits == 1 { "wait" } else { "waits" },
                    if futex { "the wake" } else { "the section" },
                    b.site
                );
                if let Some(h) = site_hold {
                    ev.put("site_mean_hold_ns", h.round());
                    let _ = write!(text, ", mean hold there {}", ns(h.round() as u64));
                }
                // A futex word's holder is invisible: its waits are blamed
                // on the wake that ended them, i.e. on the release of the
                // section to shorten.
                let what = if futex {
                    "the critical section released by that wake"
                } else {
                    "that critical section"
                };
                reduce = Some((b.site.clone(), b.wait_caused_ns));
                out.push(mk(
                    AdviceKind::ReduceHold,
                    format!(
                        "shorten {what}: move work out of it, or split the lock so that \
                         this section and the others stop excluding each other"
                    ),
                    ev,
                    text,
                    None,
                    b.wait_caused_ns,
                ));
            }
        }
        if let Some((kind, advice, mut ev, mut text, cmd)) = algo {
            // An algorithm changes what each hand-off costs (and, spinning
            // or not, what waiters take from a running holder); it does
            // not shorten a section. When a long section is what the
            // others wait for (the reduce-hold rule fired: a lock held
            // across a 20 ms sleep), the wait charged to it is that
            // section's length, and the algorithm addresses the rest only:
            // so the advice the evidence supports comes first. The
            // alternative, dropping the algorithm advice, would hide a
            // real oversubscription behind one long section.
            let wait = match &reduce {
                Some((site, in_section)) => {
                    ev.put("wait_in_long_section_ns", *in_section as f64);
                    let _ = write!(
                        text,
                        "; {} of the wait is the long section at {site}, which no lock \
                         algorithm shortens (see reduce_hold)",
                        ns(*in_section)
                    );
                    f.wait_total.saturating_sub(*in_section)
                }
                None => f.wait_total,
            };
            out.push(mk(kind, advice, ev, text, cmd, wait));
        }
    }
    for b in &report.barriers {
        if let Some(r) = balance_work(b, thread_time) {
            out.push(r);
        }
    }
    out.sort_by(|a, b| {
        (b.wait_addressed_ns, a.kind, &a.lock).cmp(&(a.wait_addressed_ns, b.kind, &b.lock))
    });
    out
}

/// The balance-work rule for one barrier (see [`BARRIER_LATECOMER_SHARE`]).
fn balance_work(b: &crate::report::BarrierOut, thread_time: u64) -> Option<Recommendation> {
    let total = b.wait_ns.total;
    if total == 0 || (total as f64) < MIN_WAIT_SHARE * thread_time as f64 {
        return None;
    }
    let late = b.blamed_on.first()?;
    let share = late.wait_ns as f64 / total as f64;
    if share < BARRIER_LATECOMER_SHARE {
        return None;
    }
    let mut ev = Evidence::default();
    ev.put("wait_ns", total as f64);
    ev.put("rounds", b.rounds as f64);
    ev.put("latecomer_tid", f64::from(late.tid));
    ev.put("latecomer_wait_caused_ns", late.wait_ns as f64);
    ev.put("latecomer_share", share);
    let text = format!(
        "{} of the {} waited at it over {} rounds is waiting for thread {}, the last to arrive",
        pct(share),
        ns(total),
        count(b.rounds),
        late.tid
    );
    Some(Recommendation {
        kind: AdviceKind::BalanceWork,
        title: AdviceKind::BalanceWork.title(),
        lock: b.name.clone(),
        address: b.address.clone(),
        pid: b.pid,
        advice: format!(
            "balance the work before this barrier: thread {} arrives late and the others wait \
             for it (`lockscope barriers` on a detailed-mode trace names the code it arrives from)",
            late.tid
        ),
        evidence: ev,
        evidence_text: text,
        command: None,
        wait_addressed_ns: late.wait_ns,
        obj: b.obj,
    })
}

type Algo = (AdviceKind, String, Evidence, String, Option<String>);

/// The lock algorithm rules: spin-then-park, else queue lock or HMCS.
fn algorithm(r: &Report, l: &LockOut, f: &Figures, m: &MachineFacts) -> Option<Algo> {
    // rwlocks and futex words cannot be swapped, and their waits are a
    // different protocol (shared holders; no visible hold): only the
    // rwlock and reduce-hold rules apply to them.
    if !(l.kind == "mutex" || l.kind == "spin") || l.contended < MIN_CONTENDED {
        return None;
    }
    let mut ev = Evidence::default();
    ev.put("acquisitions", f.acq);
    ev.put("contended", f.contended);
    ev.put("contended_ratio", f.contended_ratio);
    ev.put("mean_hold_ns", f.hold_mean.round());
    ev.put("mean_contended_wait_ns", f.cont_wait_mean.round());
    ev.put("avg_waiters", f.waiters);
    ev.put("wait_ns", f.wait_total as f64);
    ev.put("cpus", f64::from(m.cpus));
    let base = format!(
        "contended {} of {} acquisitions, mean hold {}, mean contended wait {}, \
         mean waiters {:.2}, {} waiting in all",
        pct(f.contended_ratio),
        count(l.acquisitions),
        ns(f.hold_mean.round() as u64),
        ns(f.cont_wait_mean.round() as u64),
        f.waiters,
        ns(f.wait_total)
    );

    // Spin-then-park, first: when the waiters plus the holder outnumber
    // the CPUs, a spinning waiter takes a CPU the holder (or the next
    // owner) needs, and any FIFO spin lock collapses (each hand-off waits
    // for the next waiter to be scheduled). Checked before the queue
    // lock rule, which would otherwise recommend exactly such a lock.
    let oversubscribed = m.cpus > 0 && f.waiters + 1.0 > f64::from(m.cpus);
    // Waits far longer than the queue explains: the holder was
    // descheduled, or waiters slept through the release.
    let queue_explains = (f.waiters + 1.0) * f.hold_mean;
    let preempted = f.hold_mean > 0.0 && f.cont_wait_mean > PREEMPT_FACTOR * queue_explains;
    if oversubscribed || preempted {
        let why = if oversubscribed {
            format!(
                "waiters plus holder ({:.2}) exceed the {} CPUs of the recording machine",
                f.waiters + 1.0,
                m.cpus
            )
        } else {
            let after = f.no_holder_ns as f64 / f.wait_total.max(1) as f64;
            // Which of the two it was, when blame can tell: wait charged
            // to nobody is time after the release (the next owner asleep
            // or not scheduled), else the holder was descheduled.
            let who = if after >= 0.5 {
                format!(
                    "{} of it after the release: waiters asleep, woken late",
                    pct(after)
                )
            } else {
                "holders or next owners were not running".to_string()
            };
            format!(
                "contended waits are {:.0}x what the queue explains ((waiters + 1) x mean hold), \
                 {who}",
                f.cont_wait_mean / queue_explains.max(1.0)
            )
        };
        ev.put(
            "wait_over_queue",
            f.cont_wait_mean / queue_explains.max(1.0),
        );
        if f.wait_total > 0 {
            ev.put(
                "no_holder_share",
                f.no_holder_ns as f64 / f.wait_total as f64,
            );
        }
        // ttas rather than mcs: when waiters outnumber CPUs a FIFO lock
        // hands the lock to the oldest waiter even if it is descheduled
        // (lock-waiter preemption); a test-and-set lock lets a running
        // thread take it. Parking after a short spin gives the CPU back.
        let advice = if l.kind == "spin" {
            "use a blocking lock (a mutex, or a spin-then-park lock) instead of this \
             spinlock: spinning waiters take CPUs from the holder"
                .to_string()
        } else {
            "use a lock whose waiters spin briefly then sleep, and that a running thread \
             can take (test-test-and-set, spin-then-park)"
                .to_string()
        };
        return Some((
            AdviceKind::SpinThenPark,
            advice,
            ev,
            format!("{why}; {base}"),
            run_command(r, l, "--lock ttas --wait spin-then-park"),
        ));
    }

    if f.contended_ratio >= QUEUE_MIN_CONTENDED_RATIO
        && f.hold_mean > 0.0
        && f.hold_mean < SHORT_HOLD_NS
    {
        ev.put("owner_change_ratio", f.owner_change_ratio);
        if let Some(n) = m.numa_nodes {
            ev.put("numa_nodes", f64::from(n));
        }
        // HMCS only on a machine with more than one NUMA node: its benefit
        // is keeping hand-offs within a node, which a single node cannot
        // show (it only adds levels to every acquisition there).
        let multi = m.numa_nodes.is_some_and(|n| n > 1);
        if multi && f.owner_change_ratio >= HANDOFF_RATIO {
            return Some((
                AdviceKind::Hmcs,
                format!(
                    "use a NUMA-aware queue lock (HMCS): {} of acquisitions change owner on a \
                     {}-node machine, so hand-offs cross nodes; HMCS passes the lock within a \
                     node first",
                    pct(f.owner_change_ratio),
                    m.numa_nodes.unwrap_or(0)
                ),
                ev,
                base,
                run_command(r, l, "--lock hmcs"),
            ));
        }
        let numa = match m.numa_nodes {
            Some(n) if n > 1 => format!(
                "; HMCS not suggested: only {} of acquisitions change owner",
                pct(f.owner_change_ratio)
            ),
            Some(_) => "; a NUMA-aware lock (HMCS) is not applicable: the recording machine \
                        has one NUMA node (its benefit needs several sockets)"
                .to_string(),
            None => "; NUMA topology not recorded, so HMCS is not considered \
                     (it only pays off on multi-socket machines)"
                .to_string(),
        };
        let advice = if l.kind == "spin" {
            format!(
                "use a FIFO queue lock (MCS or CLH, lockscope-locks) instead of this spinlock: \
                 each waiter spins on its own cache line{numa}"
            )
        } else {
            format!(
                "use a FIFO queue lock (MCS): short sections under contention spend their time \
                 moving the lock's cache line; MCS waiters spin locally and get it in order{numa}"
            )
        };
        return Some((
            AdviceKind::QueueLock,
            advice,
            ev,
            base,
            run_command(r, l, "--lock mcs"),
        ));
    }
    None
}

/// Reader-writer lock rules: the read/write split of its acquisitions.
fn rwlock(l: &LockOut, f: &Figures) -> Option<(AdviceKind, String, Evidence, String, u64)> {
    let reads = l.read_acquisitions?;
    if l.acquisitions == 0 || l.contended == 0 {
        return None;
    }
    let share = reads as f64 / f.acq;
    let mut ev = Evidence::default();
    ev.put("acquisitions", f.acq);
    ev.put("read_acquisitions", reads as f64);
    ev.put("read_ratio", share);
    ev.put("contended", f.contended);
    ev.put("wait_ns", f.wait_total as f64);
    let text = format!(
        "{} of {} acquisitions read, {} contended, {} waiting in all",
        pct(share),
        count(l.acquisitions),
        count(l.contended),
        ns(f.wait_total)
    );
    if share >= READ_MOSTLY {
        // Already the right tool; what the readers wait for is the rare
        // writers. A writer-preferring or different rwlock would need the
        // waits split by mode, which this report does not have: no claim.
        return Some((
            AdviceKind::ReaderWriter,
            "keep the reader-writer lock: it is read-mostly; the waiting comes from its \
             writers' sections (see BLAME), so shorten those rather than change the lock"
                .into(),
            ev,
            text,
            // It addresses no wait by itself: sorted after real changes.
            0,
        ));
    }
    if share < READ_RARE {
        return Some((
            AdviceKind::UseMutex,
            "use a mutex: almost every acquisition is a write, so the reader-writer lock \
             serializes like a mutex with a costlier protocol (a mutex can then be tried \
             with other algorithms by lockscope run)"
                .into(),
            ev,
            text,
            f.wait_total,
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_and_wrapper() {
        assert_eq!(shell_quote("./a.out"), "./a.out");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            program(&v(&[
                "/usr/bin/lockscope",
                "run",
                "--lock",
                "mcs",
                "--",
                "./p",
                "1"
            ])),
            Some(v(&["./p", "1"]))
        );
        assert_eq!(program(&v(&["./p"])), Some(v(&["./p"])));
        assert_eq!(program(&[]), None);
    }

    #[test]
    fn facts_from_header() {
        let mut h = Header {
            cpus: 8,
            ..Header::default()
        };
        assert_eq!(MachineFacts::from_header(&h).numa_nodes, None);
        h.extra.push(("numa_nodes".into(), "2".into()));
        h.extra.push(("sockets".into(), "junk".into()));
        let f = MachineFacts::from_header(&h);
        assert_eq!((f.cpus, f.numa_nodes), (8, Some(2)));
    }
}
