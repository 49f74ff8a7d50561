//! What-if predictions on the replay ([`crate::replay`]): how much faster
//! the program would run if a lock were removed or the critical sections
//! at a site were shorter, and a Coz-style curve per top lock (predicted
//! speedup if its hold times shrank by 0, 25, 50, 75, 100 %).
//!
//! Every prediction is a replay of the recorded run with one change, on
//! the same CPU model, compared with the replay of the unchanged run
//! (both without the recorder's overhead). Removing a lock keeps the
//! work done inside its sections and drops only the exclusion; whether
//! that is correct for the program is the user's business.
//!
//! The locks a scenario keeps are granted in the order threads reach them
//! in the replay, with the real lock's waiting policy
//! ([`crate::replay::Grant`]), not in the recorded order: a change that
//! moves threads in time changes who gets a lock next. Every prediction
//! is made under several variants of that model and carries their range
//! ([`ScenarioOut::range`]) and, when the trace gives reason, why it is
//! uncertain; removing a lock never saves more than it cost in the
//! recording.
//!
//! The ULCP-free scenario (`--ulcp-free`, PerfPlay §4) is the safe
//! version: from a detailed-mode trace, only the critical sections that
//! share written data with another thread's keep a lock, one per class
//! of such sections ([`lockscope_detailed::ulcp::classify`] names the pairs); each
//! unnecessary pair's gain (Eq. 1) is summed per pair of code regions
//! (Alg. 2) and ranked by its share P of the total (Eq. 2).

use std::collections::{BTreeMap, HashMap};

use crate::critical::PathWaits;
use crate::replay::{
    effective_cpus, simulate, Grant, Program, Scenario, SimResult, UlcpFree, FREE,
};
use lockscope_detailed::detailed::{AccessSet, Detailed};
use lockscope_detailed::ulcp::{classify, Kind};
use lockscope_symbols::Symbolizer;
use lockscope_trace::input::Meta;
use lockscope_trace::AnalysisError;

/// JSON schema name of [`WhatifReport`].
pub const SCHEMA: &str = "lockscope.whatif/1";

/// What to predict.
#[derive(Clone, Debug, Default)]
pub struct WhatifConfig {
    /// CPUs of the replayed machine (0: the recording machine's).
    pub cpus: u32,
    /// Locks to remove (symbol name or hex address).
    pub remove_locks: Vec<String>,
    /// Sites whose sections keep PCT % of their time: (site, PCT). A
    /// site is a hex pc, a function name or a `function (file:line)`
    /// location (prefix).
    pub shrink: Vec<(String, u32)>,
    /// Sites whose sections only read: their lock becomes a
    /// reader-writer lock and these sections its readers (one scenario
    /// for all of them).
    pub readers: Vec<String>,
    /// Locks to turn into reader-writer locks whose readers are the
    /// critical sections that only read (their write sets in the detailed
    /// view passed to [`analyze_with`] are empty); one scenario per lock.
    pub rwlock: Vec<String>,
    /// Run the ULCP-free scenario (needs the detailed view passed to
    /// [`analyze_with`]).
    pub ulcp_free: bool,
    /// Reader-writer locks of the scenarios prefer writers (glibc's
    /// `PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP`) instead of readers
    /// (glibc's default).
    pub prefer_writers: bool,
    /// Curves for this many locks (most replayed lock wait first).
    pub curve_top: usize,
    /// Read binaries for names.
    pub symbolize: bool,
}

/// A thread that gains.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ThreadGain {
    /// OS tid.
    pub tid: u32,
    /// Name.
    pub name: String,
    /// End in the unchanged replay, ns since the first start.
    pub baseline_end_ns: u64,
    /// End in the changed replay.
    pub predicted_end_ns: u64,
}

/// A lock whose waiting changes.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LockGain {
    /// Name (symbol or address).
    pub lock: String,
    /// Lock wait in the unchanged replay, ns.
    pub baseline_wait_ns: u64,
    /// Lock wait in the changed replay, ns.
    pub predicted_wait_ns: u64,
}

/// One scenario's prediction.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ScenarioOut {
    /// What was changed, in words.
    pub scenario: String,
    /// Predicted wall time, ns.
    pub predicted_wall_ns: u64,
    /// Unchanged wall / predicted wall.
    pub speedup: f64,
    /// The lowest and highest speedup over the model's uncertain inputs
    /// (the lock's waiting policy, the waiters' wake-up latency, the
    /// order of the unchanged run): see docs/replay.md, "Confidence".
    pub range: [f64; 2],
    /// Why the prediction cannot be trusted, when it cannot (events lost,
    /// threads far beyond the CPUs, a critical path made of waits of
    /// unknown cause); `null` otherwise.
    pub uncertain: Option<String>,
    /// Lock wait in the recorded run of the locks the scenario removes
    /// (hand-off latencies included), ns; `null` for other scenarios.
    pub recorded_wait_ns: Option<u64>,
    /// The gain was cut to what the removed (or reader-shared) locks
    /// cost in the recorded run (their waits and the CPU their unlocks
    /// spent waking waiters): removing a lock cannot save more, and
    /// sharing it among readers cannot save more than removing it.
    pub bounded: bool,
    /// Threads that end earlier, most gain first.
    pub threads: Vec<ThreadGain>,
    /// Locks whose waiting drops, most first.
    pub locks: Vec<LockGain>,
}

/// One point of a curve.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CurvePoint {
    /// How much shorter every critical section of the lock is, percent.
    pub shrink_pct: u32,
    /// Predicted wall time, ns.
    pub predicted_wall_ns: u64,
    /// Unchanged wall / predicted wall.
    pub speedup: f64,
}

/// Coz-style curve of one lock.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Curve {
    /// Lock name.
    pub lock: String,
    /// Lock wait in the unchanged replay, ns.
    pub wait_ns: u64,
    /// 0, 25, 50, 75, 100 % shorter holds.
    pub points: Vec<CurvePoint>,
}

/// `lockscope whatif` result (schema [`SCHEMA`]).
#[derive(Clone, Debug, serde::Serialize)]
pub struct WhatifReport {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// CPUs of the replayed machine.
    pub cpus: u32,
    /// Recorded wall time, ns.
    pub recorded_wall_ns: u64,
    /// Replayed wall time of the unchanged run without the recorder's
    /// overhead, locks granted in arrival order as in the scenarios: the
    /// baseline of every speedup, ns.
    pub baseline_wall_ns: u64,
    /// The same with locks granted in the recorded order (what `lockscope
    /// replay` calls "without the recorder"), ns.
    pub recorded_order_wall_ns: u64,
    /// The scenarios asked for.
    pub scenarios: Vec<ScenarioOut>,
    /// Curves of the top locks.
    pub curves: Vec<Curve>,
    /// The ULCP-free scenario, when asked for (`--ulcp-free`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ulcp_free: Option<UlcpFreeOut>,
}

/// One pair of code regions whose unnecessary contention was fused
/// (PerfPlay Alg. 2).
#[derive(Clone, Debug, serde::Serialize)]
pub struct UlcpRegion {
    /// Code region of the first section (call site of its acquisition).
    pub first: String,
    /// Code region of the second section.
    pub second: String,
    /// Lock name.
    pub lock: String,
    /// Unnecessary pairs fused here.
    pub count: u64,
    /// Of them, per kind (`null_lock`, `read_read`, `disjoint_write`,
    /// `benign`).
    pub kinds: BTreeMap<String, u64>,
    /// Summed gain ΔT (Eq. 1), ns.
    pub gain_ns: u64,
    /// Share of the total gain (Eq. 2), 0..1.
    pub p: f64,
}

/// The ULCP-free scenario's result.
#[derive(Clone, Debug, serde::Serialize)]
pub struct UlcpFreeOut {
    /// Predicted wall time with no unnecessary contention, ns.
    pub predicted_wall_ns: u64,
    /// Baseline wall / predicted wall.
    pub speedup: f64,
    /// The lowest and highest speedup over the model's uncertain inputs
    /// (as [`ScenarioOut::range`]).
    pub range: [f64; 2],
    /// Why the prediction cannot be trusted, when it cannot.
    pub uncertain: Option<String>,
    /// Critical sections that conflict with a section of another thread
    /// (they keep a lock, one per class of sections sharing data: the
    /// finer lock of the fix).
    pub sections_locked: u64,
    /// Critical sections that conflict with no other thread's (they take
    /// no lock in the scenario).
    pub sections_free: u64,
    /// Locks transformed (their non-conflicting sections run together).
    pub locks_transformed: usize,
    /// Locks kept as recorded (their sections in the detailed view did
    /// not line up with the replay's acquisitions).
    pub locks_kept: usize,
    /// Unnecessary pairs (consecutive sections of different threads that
    /// do not truly conflict).
    pub ulcps: u64,
    /// Truly conflicting consecutive pairs (kept in order).
    pub conflicts: u64,
    /// Pairs of code regions, highest P first.
    pub regions: Vec<UlcpRegion>,
}

/// Who accessed an 8-byte word under a lock, for [`conflict_classes`].
struct Word {
    /// The first section that touched it (index into the lock's list).
    first: usize,
    /// Its thread.
    thread: u32,
    /// Another thread touched it too.
    shared: bool,
    /// Some section wrote it.
    written: bool,
}

/// Union-find root of `i`, halving the path on the way.
fn root(parent: &mut [usize], mut i: usize) -> usize {
    while parent[i] != i {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    i
}

/// Per section of one lock (`secs`, indexes into the detailed view, in
/// recorded order): its conflict class, or [`FREE`]. Two sections are in
/// one class when they touch, directly or through others, an 8-byte word
/// that some section writes and that sections of two or more threads
/// touch: the data the lock really protects. A section that touches no
/// such word needs no lock. Classes rather than PerfPlay's per-pair
/// dependencies in recorded order: a fix locks data, not a sequence of
/// sections, and in the fixed program the order among the sections that
/// still exclude each other is whoever comes first. Words rather than
/// bytes: two threads writing two halves of one word count as sharing
/// it (rare in practice, and it errs towards keeping a lock).
fn conflict_classes(d: &Detailed, secs: &[usize]) -> Vec<u32> {
    let mut words: HashMap<u64, Word> = HashMap::new();
    for (k, &i) in secs.iter().enumerate() {
        let s = &d.sections[i];
        for (set, write) in [(&s.reads, false), (&s.writes, true)] {
            for w in word_span(set) {
                let e = words.entry(w).or_insert(Word {
                    first: k,
                    thread: s.thread,
                    shared: false,
                    written: false,
                });
                e.shared |= e.thread != s.thread;
                e.written |= write;
            }
        }
    }
    let mut parent: Vec<usize> = (0..secs.len()).collect();
    let mut locked = vec![false; secs.len()];
    for (k, &i) in secs.iter().enumerate() {
        let s = &d.sections[i];
        for w in word_span(&s.reads).chain(word_span(&s.writes)) {
            let Some(e) = words.get(&w) else { continue };
            if e.shared && e.written {
                locked[k] = true;
                locked[e.first] = true;
                let (a, b) = (root(&mut parent, k), root(&mut parent, e.first));
                if a != b {
                    parent[a.max(b)] = a.min(b);
                }
            }
        }
    }
    // Dense class numbers, in order of each class's first section.
    let mut id: HashMap<usize, u32> = HashMap::new();
    (0..secs.len())
        .map(|k| {
            if !locked[k] {
                return FREE;
            }
            let r = root(&mut parent, k);
            let n = id.len() as u32;
            *id.entry(r).or_insert(n)
        })
        .collect()
}

/// The 8-byte words an access set covers.
fn word_span(set: &AccessSet) -> impl Iterator<Item = u64> + '_ {
    set.iter().flat_map(|(&a, &s)| {
        let last = a.saturating_add(s.max(1) - 1) >> 3;
        (a >> 3)..=last
    })
}

/// The turns of lock `l` whose critical sections only read (empty write
/// set in the detailed view; sections without any access count as
/// readers too), and how many there are. The detailed view's sections of
/// the lock must line up one to one with the replay's acquisitions (as
/// for [`ulcp_free`]); `Err` says why not.
fn read_only_turns(p: &Program, d: &Detailed, l: u32) -> Result<(Vec<u64>, usize), String> {
    let id = p.locks[l as usize];
    let secs: Vec<&lockscope_detailed::detailed::Section> = d
        .sections
        .iter()
        .filter(|s| s.process == id.process && s.lock == id.addr)
        .collect();
    let turns = p.turns[l as usize];
    if secs.is_empty() {
        return Err(
            "the trace has no memory accesses under this lock (record a program built \
                    with `lockscope cc`/`c++`)"
                .into(),
        );
    }
    if secs.len() as u64 != turns {
        return Err(format!(
            "the detailed view has {} critical sections of this lock, the replay {turns} \
             acquisitions: they cannot be matched",
            secs.len()
        ));
    }
    let readers: Vec<u64> = secs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.writes.is_empty())
        .map(|(k, _)| k as u64)
        .collect();
    let n = readers.len();
    Ok((readers, n))
}

/// The ULCP-free transformation of PerfPlay §4 on the replay: per lock,
/// the detailed view's sections (in recorded order) are split into
/// classes of sections that share data one of them writes
/// ([`conflict_classes`]); a section that shares no written data with
/// another thread's takes no lock, and the sections of one class exclude
/// each other through a lock of their own, granted in the order the
/// threads arrive (as the finer lock of a real fix would), not in the
/// recorded order (which would keep the recorded run's convoy).
/// Unnecessary pairs are still found and ranked as PerfPlay does.
fn ulcp_free_with(
    p: &Program,
    d: &mut Detailed,
    cpus: u32,
    b: &Baselines,
    names: &mut dyn FnMut(&Program, u32) -> String,
) -> UlcpFreeOut {
    // Turns per replayed lock.
    let turns = &p.turns;
    let lock_ix: HashMap<(u32, u64), u32> = p
        .locks
        .iter()
        .enumerate()
        .map(|(i, id)| ((id.process, id.addr), i as u32))
        .collect();
    let mut by_lock: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, s) in d.sections.iter().enumerate() {
        if let Some(&l) = lock_ix.get(&(s.process, s.lock)) {
            by_lock.entry(l).or_default().push(i);
        }
    }
    let mut free = UlcpFree::default();
    let mut kept = 0;
    let (mut locked, mut unlocked) = (0u64, 0u64);
    // (lock, first turn, second turn, kind) of every unnecessary pair.
    let mut pairs: Vec<(u32, usize, usize, Kind)> = Vec::new();
    let mut conflicts = 0u64;
    for (&l, secs) in &by_lock {
        if secs.len() as u64 != turns[l as usize] {
            kept += 1;
            continue;
        }
        for k in 1..secs.len() {
            let (a, b) = (&d.sections[secs[k - 1]], &d.sections[secs[k]]);
            if a.thread != b.thread && !(a.shared && b.shared) {
                match classify(a, b) {
                    Kind::Conflict => conflicts += 1,
                    kind => pairs.push((l, k - 1, k, kind)),
                }
            }
        }
        let classes = conflict_classes(d, secs);
        let n_free = classes.iter().filter(|&&c| c == FREE).count() as u64;
        unlocked += n_free;
        locked += classes.len() as u64 - n_free;
        free.classes.insert(l, classes);
    }
    let transformed = free.classes.len();
    let sc = Scenario {
        record_sections: true,
        ulcp_free: Some(free),
        ..Scenario::default()
    };
    let pr = predict(p, cpus, b, &sc, &[]);
    let base = simulate(
        p,
        cpus,
        &Scenario {
            record_sections: true,
            arrival: Some(b.grants[0]),
            ..Scenario::default()
        },
    );
    let r = &pr.r;
    // Eq. 1: a pair gains what the later of its two sections' ends moved
    // earlier, less what its first section's start moved earlier (that
    // part is owed to other pairs before it).
    let mut fused: BTreeMap<(u32, String, String), UlcpRegion> = BTreeMap::new();
    let t = |res: &SimResult, l: u32, k: usize| {
        res.section_times
            .get(l as usize)
            .and_then(|v| v.get(k))
            .copied()
            .unwrap_or((0, 0))
    };
    for &(l, j, k, kind) in &pairs {
        let (a0, a1) = (t(&base, l, j), t(&base, l, k));
        let (b0, b1) = (t(r, l, j), t(r, l, k));
        if [a0.0, a0.1, a1.1, b0.0, b0.1, b1.1].contains(&u64::MAX) {
            continue;
        }
        let end_gain = a0.1.max(a1.1) as i128 - b0.1.max(b1.1) as i128;
        let start_gain = a0.0 as i128 - b0.0 as i128;
        let gain = (end_gain - start_gain).max(0) as u64;
        let (sa, sb) = (&d.sections[by_lock[&l][j]], &d.sections[by_lock[&l][k]]);
        let ((pa, ca), (pb, cb)) = ((sa.process, sa.site), (sb.process, sb.site));
        let (fa, fb) = (d.site(pa, ca), d.site(pb, cb));
        // Alg. 2: pairs of the same two code regions are one, whichever
        // ran first.
        let (first, second) = if fa <= fb { (fa, fb) } else { (fb, fa) };
        let e = fused
            .entry((l, first.clone(), second.clone()))
            .or_insert_with(|| UlcpRegion {
                first,
                second,
                lock: names(p, l),
                count: 0,
                kinds: BTreeMap::new(),
                gain_ns: 0,
                p: 0.0,
            });
        e.count += 1;
        *e.kinds.entry(kind.name().to_string()).or_default() += 1;
        e.gain_ns += gain;
    }
    let mut regions: Vec<UlcpRegion> = fused.into_values().collect();
    let total: u64 = regions.iter().map(|r| r.gain_ns).sum();
    for g in &mut regions {
        g.p = if total == 0 {
            0.0
        } else {
            g.gain_ns as f64 / total as f64
        };
    }
    regions.sort_by(|a, b| {
        b.gain_ns
            .cmp(&a.gain_ns)
            .then(b.count.cmp(&a.count))
            .then_with(|| (&a.first, &a.second).cmp(&(&b.first, &b.second)))
    });
    UlcpFreeOut {
        predicted_wall_ns: r.wall_ns,
        speedup: pr.speedup,
        range: pr.range,
        uncertain: uncertain(b),
        sections_locked: locked,
        sections_free: unlocked,
        locks_transformed: transformed,
        locks_kept: kept,
        ulcps: pairs.len() as u64,
        conflicts,
        regions,
    }
}

struct Names {
    sym: Symbolizer,
    /// The report's lock names (see [`lockscope_symbols::locknames`]).
    locks: lockscope_symbols::locknames::LockNames,
}

impl Names {
    fn new(meta: &Meta, symbolize: bool) -> Self {
        let mut sym = Symbolizer::for_meta(meta, symbolize);
        let locks = lockscope_symbols::locknames::LockNames::new(meta, &mut sym);
        Names { sym, locks }
    }
    fn lock(&mut self, p: &Program, l: u32) -> String {
        let id = p.locks[l as usize];
        self.locks.label(&mut self.sym, id.process, id.addr)
    }
    fn site_matches(&mut self, process: u32, pc: u64, want: &str) -> bool {
        if let Some(h) = want.strip_prefix("0x") {
            return u64::from_str_radix(h, 16).ok() == Some(pc);
        }
        let loc = self.sym.code(process, pc);
        let short = loc.short();
        short == want
            || short.starts_with(want)
            || loc.module_offset() == want
            || loc.frames.iter().any(|f| {
                f.function.as_deref().is_some_and(|n| {
                    n == want || lockscope_detailed::detailed::short_name(n) == want
                })
            })
    }
}

fn hex_eq(want: &str, addr: u64) -> bool {
    want.strip_prefix("0x")
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        == Some(addr)
}

/// Resolves `--remove-lock` names to lock indexes.
fn find_lock(p: &Program, names: &mut Names, opt: &str, want: &str) -> Result<u32, AnalysisError> {
    for l in 0..p.locks.len() as u32 {
        if hex_eq(want, p.locks[l as usize].addr) || names.lock(p, l) == want {
            return Ok(l);
        }
    }
    let known: Vec<String> = (0..p.locks.len().min(20) as u32)
        .map(|l| names.lock(p, l))
        .collect();
    Err(AnalysisError::Config(format!(
        "{opt} {want:?}: no lock of that name or address in the trace (locks: {})",
        known.join(", ")
    )))
}

fn outcome(
    p: &Program,
    names: &mut Names,
    what: String,
    b: &Baselines,
    pr: &Predicted,
    removed: &[u32],
) -> ScenarioOut {
    let (base, r) = (&b.arr[0], &pr.r);
    let t0 = 0;
    let mut threads: Vec<ThreadGain> = p
        .threads
        .iter()
        .enumerate()
        .filter(|(i, _)| r.ends[*i] < base.ends[*i])
        .map(|(i, t)| ThreadGain {
            tid: t.tid,
            name: t.name.clone(),
            baseline_end_ns: base.ends[i] - t0,
            predicted_end_ns: r.ends[i] - t0,
        })
        .collect();
    threads.sort_by_key(|g| std::cmp::Reverse(g.baseline_end_ns - g.predicted_end_ns));
    let mut locks: Vec<LockGain> = (0..p.locks.len())
        .filter(|&l| r.lock_wait_by_lock[l] < base.lock_wait_by_lock[l])
        .map(|l| LockGain {
            lock: names.lock(p, l as u32),
            baseline_wait_ns: base.lock_wait_by_lock[l],
            predicted_wait_ns: r.lock_wait_by_lock[l],
        })
        .collect();
    locks.sort_by_key(|g| std::cmp::Reverse(g.baseline_wait_ns - g.predicted_wait_ns));
    locks.truncate(10);
    ScenarioOut {
        scenario: what,
        predicted_wall_ns: r.wall_ns,
        speedup: pr.speedup,
        range: pr.range,
        uncertain: uncertain(b),
        recorded_wait_ns: (!removed.is_empty()).then(|| {
            removed
                .iter()
                .map(|&l| b.as_recorded.lock_wait_by_lock[l as usize])
                .sum()
        }),
        bounded: pr.bounded,
        threads,
        locks,
    }
}

/// The variations of the lock model a prediction's range spans, the
/// point prediction's first: barging with the recorded wake-up latency
/// (glibc's mutexes and rwlocks), the same with half and twice the
/// latency, and FIFO hand-off.
fn variations(prefer_writers: bool) -> Vec<Grant> {
    let g = Grant {
        prefer_writers,
        ..Grant::default()
    };
    vec![
        g,
        Grant {
            latency_pct: 50,
            ..g
        },
        Grant {
            latency_pct: 200,
            ..g
        },
        Grant { handoff: true, ..g },
    ]
}

/// `v` and, where the recorder's calibrated cost is over
/// [`crate::replay::RECORDER_SHARE`] of the threads' work, the point
/// prediction's model with the recorder's cost per lock event at
/// [`crate::replay::IN_SITU_COST_FACTOR`] times its calibration
/// ([`Grant::recorder_cost_pct`]): the trace's sections and convoys were
/// lengthened by more than the calibration says, and the range must
/// reach what the program alone may do. PARSEC fluidanimate with one
/// coarse lock at 4 threads on 2 CPUs: 1.50x predicted (range 1.49-1.99)
/// for making it per-cell, 1.06x measured.
fn with_in_situ_cost(p: &Program, mut v: Vec<Grant>) -> Vec<Grant> {
    let (_, share) = crate::replay::recorder_share(p);
    if share > crate::replay::RECORDER_SHARE && p.calibrated_max_ns > 0 {
        if let Some(&g) = v.first() {
            v.push(Grant {
                recorder_cost_pct: (crate::replay::IN_SITU_COST_FACTOR * 100.0).round() as u32,
                ..g
            });
        }
    }
    v
}

/// The unchanged run under each variation of the model, and what its
/// critical path says: computed once, shared by every scenario.
struct Baselines {
    /// Replay of the run as recorded (locks in their recorded order),
    /// without the recorder.
    rec: SimResult,
    /// The same with the recorder's cost and the preempted time kept: the
    /// recorded run itself (its waits bound what removing a lock saves).
    as_recorded: SimResult,
    /// The unchanged run with locks granted in arrival order, per
    /// variation ([`variations`]).
    arr: Vec<SimResult>,
    grants: Vec<Grant>,
    /// Why this trace's predictions cannot be trusted (empty: they can).
    reasons: Vec<String>,
}

/// Runs `f` for each item on up to two threads (the replays of one
/// prediction are independent; a report asks for a dozen).
fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    if items.len() < 2 {
        return items.iter().map(&f).collect();
    }
    let half = items.len().div_ceil(2);
    std::thread::scope(|sc| {
        let h = sc.spawn(|| items[half..].iter().map(&f).collect::<Vec<R>>());
        let mut a: Vec<R> = items[..half].iter().map(&f).collect();
        match h.join() {
            Ok(b) => a.extend(b),
            // A panic in the helper thread: compute its half here (the
            // same pure function; a second panic propagates as usual).
            Err(_) => a.extend(items[half..].iter().map(&f)),
        }
        a
    })
}

impl Baselines {
    /// `grants`: the model variants, the point prediction's first
    /// ([`variations`], or fewer).
    fn new(p: &Program, meta: &Meta, cpus: u32, grants: Vec<Grant>) -> Baselines {
        // (arrival policy, keep the recorder's cost)
        let mut runs: Vec<(Option<Grant>, bool)> = vec![(None, true), (None, false)];
        runs.extend(grants.iter().map(|&g| (Some(g), false)));
        let mut sims = par_map(&runs, |&(g, keep)| {
            simulate(
                p,
                cpus,
                &Scenario {
                    arrival: g,
                    keep_overhead: keep,
                    ..Scenario::default()
                },
            )
        });
        let as_recorded = sims.remove(0);
        let rec = sims.remove(0);
        let path: PathWaits = crate::critical::path_waits(p, cpus);
        let mut reasons = Vec::new();
        let lost: u64 = meta.losses.iter().map(|l| l.events).sum();
        if lost > 0 {
            reasons.push(format!(
                "{lost} events were lost: the replay does not know what they did"
            ));
        }
        let alive = max_alive(p);
        // Four times the CPUs: a handful of extra threads is what the CPU
        // model is for (the 4-thread fixtures on 2 CPUs are predicted
        // within their range); beyond that, wake-ups wait for time slices
        // the model does not have.
        if cpus > 0 && alive > 4 * cpus as usize {
            reasons.push(format!(
                "up to {alive} threads ran at once on {cpus} CPUs: the replay's CPU model, not \
                 the recording, decides most of their timing"
            ));
        }
        if path.length_ns > 0 && path.unknown_wait_ns * 2 > path.length_ns {
            reasons.push(format!(
                "{:.0}% of the critical path is waits of unknown cause (timeouts, wake-ups from \
                 outside the trace), which no change to a lock shortens",
                path.unknown_wait_ns as f64 * 100.0 / path.length_ns as f64
            ));
        }
        // The recorder's cost is subtracted from the sections too: where
        // it is a large share, the sections' true length, and so the
        // contention, is uncertain. PARSEC's fluidanimate with one coarse
        // lock at 4 threads: 1.50x predicted for making it per-cell, 1.06x
        // measured.
        let (subtracted, share) = crate::replay::recorder_share(p);
        if share > crate::replay::RECORDER_SHARE {
            reasons.push(format!(
                "the recorder's calibrated cost ({:.1} ms) is {:.0}% of the threads' work: it \
                 lengthened the sections and the waits by more than is measured, and the gain \
                 may be smaller",
                subtracted as f64 / 1e6,
                share * 100.0
            ));
        }
        Baselines {
            rec,
            as_recorded,
            arr: sims,
            grants,
            reasons,
        }
    }

    /// The baseline wall time every speedup is relative to: the
    /// unchanged run under the point prediction's model (the same model
    /// as the scenario, so that what the model gets wrong about the
    /// recorded run cancels out instead of counting as a gain).
    fn wall(&self) -> u64 {
        self.arr[0].wall_ns
    }
}

/// The most threads alive at once in the recording.
fn max_alive(p: &Program) -> usize {
    let mut ev: Vec<(u64, i32)> = Vec::with_capacity(p.threads.len() * 2);
    for t in &p.threads {
        ev.push((t.start, 1));
        ev.push((t.end.max(t.start), -1));
    }
    // Ends before starts at the same instant.
    ev.sort_unstable();
    let (mut cur, mut best) = (0i32, 0i32);
    for (_, d) in ev {
        cur += d;
        best = best.max(cur);
    }
    best.max(0) as usize
}

/// A scenario's point prediction, its range, and whether the
/// critical-path bound cut it.
struct Predicted {
    r: SimResult,
    speedup: f64,
    range: [f64; 2],
    bounded: bool,
}

/// Replays `sc` under every variation of the lock model (arrival order)
/// and compares each with the unchanged run under the same variation.
/// `removed`: the locks the scenario removes or lets readers share,
/// whose gain their recorded cost bounds.
fn predict(p: &Program, cpus: u32, b: &Baselines, sc: &Scenario, removed: &[u32]) -> Predicted {
    let mut rs = par_map(&b.grants, |&g| {
        simulate(
            p,
            cpus,
            &Scenario {
                arrival: Some(g),
                ..sc.clone()
            },
        )
    });
    // Removing a lock saves at most what it cost in the recorded run: the
    // time threads waited for it (hand-off latencies included) and the
    // CPU its unlocks spent waking them. A lock whose recorded wait is 1
    // ms cannot save 200 ms, whatever the replay without the recorder
    // moved (taking the recorder's cost and the preempted time out makes
    // threads arrive at locks earlier, and a wait that appears there was
    // never seen). Not only its waits on the critical path: removing one
    // lock also reorders the others, and a wait off the path can move a
    // section that was on it (a thread that no longer waits for lock M
    // takes lock L before the thread whose turn it was).
    let cap = (!removed.is_empty()).then(|| {
        removed
            .iter()
            .map(|&l| {
                let l = l as usize;
                b.as_recorded.lock_wait_by_lock.get(l).copied().unwrap_or(0)
                    + b.as_recorded
                        .unlock_work_by_lock
                        .get(l)
                        .copied()
                        .unwrap_or(0)
            })
            .sum::<u64>()
    });
    let mut bounded = false;
    let mut speeds: Vec<f64> = Vec::with_capacity(rs.len() + 1);
    for (i, r) in rs.iter().enumerate() {
        let base = b.arr[i].wall_ns;
        let mut wall = r.wall_ns;
        if let Some(cap) = cap {
            let floor = base.saturating_sub(cap);
            if wall < floor {
                wall = floor;
                bounded |= i == 0;
            }
        }
        speeds.push(speedup(base, wall));
    }
    // The recorded order of the unchanged run is the other reading of
    // "unchanged": its distance from the arrival-order replay is part of
    // the model's uncertainty.
    let rec_base = b.rec.wall_ns;
    let mut wall0 = rs[0].wall_ns;
    if let Some(cap) = cap {
        wall0 = wall0.max(rec_base.saturating_sub(cap));
    }
    speeds.push(speedup(rec_base, wall0));
    let lo = speeds.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = speeds.iter().copied().fold(0.0f64, f64::max);
    let mut r = rs.swap_remove(0);
    if bounded {
        r.wall_ns = b.wall().saturating_sub(cap.unwrap_or(0)).max(r.wall_ns);
    }
    Predicted {
        speedup: speeds[0],
        range: [lo, hi],
        bounded,
        r,
    }
}

fn uncertain(b: &Baselines) -> Option<String> {
    (!b.reasons.is_empty()).then(|| b.reasons.join("; "))
}

/// Why a reader-writer scenario on lock `l` is uncertain beyond the
/// trace's reasons: a mutex in the recording whose scenario keeps
/// writers, in a trace that does not carry the machine's wake-up latency
/// of a sleeping waiter. A glibc rwlock's waiters sleep at every hand-off
/// between readers and writers (readers woken by a writer's release
/// waited 33 us on average in a recording of
/// `tests/programs/whatif/rw_table.c` with 5 % updates), while the
/// recorded mutex's waiters on 2 CPUs seldom fell asleep (0.3-0.5 us);
/// with writers, a real rwlock can be several times slower than the
/// mutex it replaces. With the latency in the header (format 1.2) the
/// replay charges it to every woken waiter of the lock
/// ([`crate::replay::Program::sleeping_wake_ns`]) and its range varies it
/// with the other latencies; without it the replay has only the mutex's
/// hand-offs, as before the field existed, and says so.
fn rw_uncertain(p: &Program, b: &Baselines, l: u32, writers_left: bool) -> Option<String> {
    let mut why = b.reasons.clone();
    if writers_left && !p.has_readers(l) && p.sleeping_wake_ns == 0 {
        why.push(
            "the lock was a mutex and keeps writers: a real reader-writer lock wakes sleeping \
             waiters at every hand-off between readers and writers, slower than the recorded \
             mutex's hand-offs the replay uses (glibc's rwlock with 5-20 % writers ran 0.2-0.8x \
             as fast as the mutex on 2 CPUs, where this model predicted gains); the trace does \
             not carry the machine's wake-up latency of a sleeping waiter (recorded before \
             trace format 1.2), which the replay would charge to them"
                .to_string(),
        );
    }
    (!why.is_empty()).then(|| why.join("; "))
}

fn speedup(base: u64, new: u64) -> f64 {
    if new == 0 {
        1.0
    } else {
        base as f64 / new as f64
    }
}

/// Runs the scenarios of `cfg` on a replayable program.
pub fn analyze(
    p: &Program,
    meta: &Meta,
    cfg: &WhatifConfig,
) -> Result<WhatifReport, AnalysisError> {
    analyze_with(p, meta, cfg, None)
}

/// [`analyze`] with the detailed view of a detailed-mode trace, needed by
/// [`WhatifConfig::ulcp_free`].
pub fn analyze_with(
    p: &Program,
    meta: &Meta,
    cfg: &WhatifConfig,
    detailed: Option<&mut Detailed>,
) -> Result<WhatifReport, AnalysisError> {
    let cpus = effective_cpus(p, cfg.cpus);
    let mut names = Names::new(meta, cfg.symbolize);
    let b = Baselines::new(
        p,
        meta,
        cpus,
        with_in_situ_cost(p, variations(cfg.prefer_writers)),
    );
    let mut scenarios = Vec::new();
    for want in &cfg.remove_locks {
        let l = find_lock(p, &mut names, "--remove-lock", want)?;
        let sc = Scenario {
            remove_locks: vec![l],
            ..Scenario::default()
        };
        let r = predict(p, cpus, &b, &sc, &[l]);
        let what = format!("remove lock {}", names.lock(p, l));
        scenarios.push(outcome(p, &mut names, what, &b, &r, &[l]));
    }
    for (want, pct) in &cfg.shrink {
        let mut keys = Vec::new();
        for (k, s) in p.sections.iter().enumerate() {
            let process = p.locks[s.lock as usize].process;
            if names.site_matches(process, s.site, want) {
                keys.push((k as u32, *pct));
            }
        }
        if keys.is_empty() {
            return Err(AnalysisError::Config(format!(
                "--shrink {want}={pct}: no critical section was entered at a site matching {want:?} \
                 (give a hex call site, a function name or a `function (file:line)` location)"
            )));
        }
        let sc = Scenario {
            shrink: keys,
            ..Scenario::default()
        };
        let r = predict(p, cpus, &b, &sc, &[]);
        let what = format!("critical sections entered at {want} take {pct}% of their time");
        scenarios.push(outcome(p, &mut names, what, &b, &r, &[]));
    }
    let rw_kind = if cfg.prefer_writers {
        "writer-preferring"
    } else {
        "reader-preferring"
    };
    if !cfg.readers.is_empty() {
        let mut keys = Vec::new();
        for want in &cfg.readers {
            let before = keys.len();
            for (k, s) in p.sections.iter().enumerate() {
                let process = p.locks[s.lock as usize].process;
                if names.site_matches(process, s.site, want) {
                    keys.push(k as u32);
                }
            }
            if keys.len() == before {
                return Err(AnalysisError::Config(format!(
                    "--readers {want}: no critical section was entered at a site matching {want:?}"
                )));
            }
        }
        // The locks the scenario changes, and whether each keeps sections
        // that write.
        let mut changed: BTreeMap<u32, bool> = BTreeMap::new();
        for &k in &keys {
            changed.insert(p.sections[k as usize].lock, false);
        }
        for (k, s) in p.sections.iter().enumerate() {
            if let Some(w) = changed.get_mut(&s.lock) {
                *w |= !keys.contains(&(k as u32));
            }
        }
        let sc = Scenario {
            readers: keys,
            ..Scenario::default()
        };
        // A lock whose readers share it saves at most what removing it
        // would: the same bound (under outside load the reader scenario
        // was predicted at 1.48x where removing the lock was bounded at
        // 1.26x, on a fixture whose every section is a reader).
        let relaxed: Vec<u32> = changed.keys().copied().collect();
        let r = predict(p, cpus, &b, &sc, &relaxed);
        let what = format!(
            "{rw_kind} reader-writer lock: sections entered at {} read (share the lock)",
            cfg.readers.join(", ")
        );
        let mut out = outcome(p, &mut names, what, &b, &r, &[]);
        if let Some((&l, &w)) = changed.iter().find(|(_, &w)| w).or(changed.iter().next()) {
            out.uncertain = rw_uncertain(p, &b, l, w);
        }
        scenarios.push(out);
    }
    for want in &cfg.rwlock {
        let l = find_lock(p, &mut names, "--rwlock", want)?;
        let Some(d) = detailed.as_deref() else {
            return Err(AnalysisError::Config(format!(
                "--rwlock {want}: needs the read/write sets of a detailed-mode trace \
                 (or name the sections that only read with --readers SITE)"
            )));
        };
        let (turns, readers) = read_only_turns(p, d, l).map_err(|why| {
            AnalysisError::Config(format!("--rwlock {want}: {why} (use --readers SITE)"))
        })?;
        let sc = Scenario {
            reader_turns: vec![(l, turns)],
            ..Scenario::default()
        };
        // Bounded as removing the lock is (see --readers above).
        let r = predict(p, cpus, &b, &sc, &[l]);
        let what = format!(
            "{rw_kind} reader-writer lock {}: the {readers} of its {} critical sections that \
             only read share it",
            names.lock(p, l),
            p.turns[l as usize]
        );
        let mut out = outcome(p, &mut names, what, &b, &r, &[]);
        out.uncertain = rw_uncertain(p, &b, l, (readers as u64) < p.turns[l as usize]);
        scenarios.push(out);
    }
    let base = &b.arr[0];
    let mut order: Vec<u32> = (0..p.locks.len() as u32)
        .filter(|&l| base.lock_wait_by_lock[l as usize] > 0)
        .collect();
    order.sort_by_key(|&l| (std::cmp::Reverse(base.lock_wait_by_lock[l as usize]), l));
    let mut curves = Vec::new();
    for &l in order.iter().take(cfg.curve_top) {
        let keys: Vec<u32> = p
            .sections
            .iter()
            .enumerate()
            .filter(|(_, s)| s.lock == l)
            .map(|(k, _)| k as u32)
            .collect();
        let shrinks = [25u32, 50, 75, 100];
        let walls = par_map(&shrinks, |&shrink| {
            let sc = Scenario {
                shrink: keys.iter().map(|&k| (k, 100 - shrink)).collect(),
                arrival: Some(b.grants[0]),
                ..Scenario::default()
            };
            simulate(p, cpus, &sc).wall_ns
        });
        let mut points = vec![CurvePoint {
            shrink_pct: 0,
            predicted_wall_ns: b.wall(),
            speedup: 1.0,
        }];
        for (&shrink, wall) in shrinks.iter().zip(walls) {
            points.push(CurvePoint {
                shrink_pct: shrink,
                predicted_wall_ns: wall,
                speedup: speedup(b.wall(), wall),
            });
        }
        curves.push(Curve {
            lock: names.lock(p, l),
            wait_ns: base.lock_wait_by_lock[l as usize],
            points,
        });
    }
    let mut uf = None;
    if cfg.ulcp_free {
        let Some(d) = detailed else {
            return Err(AnalysisError::Config(
                "--ulcp-free needs the detailed view of a detailed-mode trace".into(),
            ));
        };
        let mut nm = |p: &Program, l: u32| names.lock(p, l);
        uf = Some(ulcp_free_with(p, d, cpus, &b, &mut nm));
    }
    p.check()?;
    Ok(WhatifReport {
        schema: SCHEMA,
        cpus,
        recorded_wall_ns: p.recorded_wall(),
        baseline_wall_ns: b.wall(),
        recorded_order_wall_ns: b.rec.wall_ns,
        scenarios,
        curves,
        ulcp_free: uf,
    })
}

use lockscope_text::units::ms;

/// Renders a what-if report as text.
pub fn render_text(r: &WhatifReport, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    writeln!(
        out,
        "what-if on {} CPU(s): recorded wall {}, replayed without the recorder {} (locks in \
         arrival order; {} in the recorded order)",
        r.cpus,
        ms(r.recorded_wall_ns),
        ms(r.baseline_wall_ns),
        ms(r.recorded_order_wall_ns)
    )?;
    for s in &r.scenarios {
        writeln!(out, "\n{}", s.scenario)?;
        writeln!(
            out,
            "  predicted wall {}  speedup {:.2}x (range {:.2}-{:.2}){}",
            ms(s.predicted_wall_ns),
            s.speedup,
            s.range[0],
            s.range[1],
            match s.recorded_wait_ns {
                Some(w) => format!("  recorded wait on the lock {}", ms(w)),
                None => String::new(),
            }
        )?;
        if s.bounded {
            writeln!(
                out,
                "  (bounded: removing or sharing a lock saves at most the waiting for it in the recorded run)"
            )?;
        }
        if let Some(why) = &s.uncertain {
            writeln!(out, "  uncertain: {why}")?;
        }
        for t in s.threads.iter().take(8) {
            writeln!(
                out,
                "  thread {:>8} {:<16} ends {} -> {}",
                t.tid,
                t.name,
                ms(t.baseline_end_ns),
                ms(t.predicted_end_ns)
            )?;
        }
        for l in &s.locks {
            writeln!(
                out,
                "  lock {:<24} wait {} -> {}",
                l.lock,
                ms(l.baseline_wait_ns),
                ms(l.predicted_wait_ns)
            )?;
        }
    }
    if let Some(u) = &r.ulcp_free {
        writeln!(
            out,
            "\nULCP-free (sections that do not truly conflict no longer exclude each other)"
        )?;
        writeln!(
            out,
            "  predicted wall {}  speedup {:.2}x (range {:.2}-{:.2})  ({} unnecessary pairs, {} \
             conflicting; {} sections keep a lock, {} need none; {} lock(s) transformed, {} kept \
             as recorded)",
            ms(u.predicted_wall_ns),
            u.speedup,
            u.range[0],
            u.range[1],
            u.ulcps,
            u.conflicts,
            u.sections_locked,
            u.sections_free,
            u.locks_transformed,
            u.locks_kept
        )?;
        if let Some(why) = &u.uncertain {
            writeln!(out, "  uncertain: {why}")?;
        }
        if !u.regions.is_empty() {
            writeln!(
                out,
                "  {:>4} {:>6} {:>12} {:>7}  code regions (lock)",
                "rank", "P", "gain", "pairs"
            )?;
        }
        for (i, g) in u.regions.iter().take(20).enumerate() {
            writeln!(
                out,
                "  {:>4} {:>5.1}% {:>12} {:>7}  {} <-> {} ({})",
                i + 1,
                g.p * 100.0,
                ms(g.gain_ns),
                g.count,
                g.first,
                g.second,
                g.lock
            )?;
        }
    }
    if !r.curves.is_empty() {
        writeln!(
            out,
            "\nspeedup if every critical section of the lock were shorter by"
        )?;
        writeln!(
            out,
            "  {:<24} {:>12} {:>7} {:>7} {:>7} {:>7} {:>7}",
            "lock", "wait", "0%", "25%", "50%", "75%", "100%"
        )?;
        for c in &r.curves {
            write!(out, "  {:<24} {:>12}", c.lock, ms(c.wait_ns))?;
            for p in &c.points {
                write!(out, " {:>6.2}x", p.speedup)?;
            }
            writeln!(out)?;
        }
    }
    Ok(())
}

/// One lock of the report's "what it would gain" section (JSON
/// `gains.locks`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct GainOut {
    /// The lock's name, as the replay's other commands take it
    /// (`--remove-lock NAME`).
    pub lock: String,
    /// Its threads' wait in the recorded run (replayed unchanged), ns.
    pub wait_ns: u64,
    /// Predicted speedup of the program without the lock.
    pub without_speedup: f64,
    /// Range of that prediction over the lock model's variations.
    pub without_range: [f64; 2],
    /// True when the gain without the lock is bounded by its recorded
    /// wait (the replay would have gained more).
    pub without_bounded: bool,
    /// Predicted speedup with the lock's critical sections half as long.
    pub halved_speedup: f64,
    /// Range of that prediction.
    pub halved_range: [f64; 2],
}

/// The report's "what it would gain" section (JSON `gains`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Gains {
    /// The locks shown, most recorded wait first.
    pub locks: Vec<GainOut>,
    /// Of the `considered` locks threads waited for most, how many were
    /// left out: neither change gains more than the prediction's range.
    pub left_out: u64,
    /// Locks considered (the `top` with most wait, or fewer).
    pub considered: u64,
    /// Why the trace's predictions are uncertain, when they are.
    pub uncertain: Option<String>,
}

/// The report's "what it would gain" figures: for the `top` locks with
/// the most waiting in the recorded run, the predicted speedup of the
/// program without the lock (with its range) and with its sections half
/// as long (each with its range), next to the lock's recorded wait. A
/// lock is kept only when one of the two gains is larger than its range
/// (the model cannot tell a smaller gain from none); `left_out` counts
/// the others. `None` when no lock makes a thread wait in the replay, or
/// when the replay's spill file could not be read back (no figures
/// rather than wrong ones).
pub fn gains(p: &Program, meta: &Meta, top: usize, symbolize: bool) -> Option<Gains> {
    let cpus = effective_cpus(p, 0);
    let mut names = Names::new(meta, symbolize);
    // The report varies the waiting policy (barging, FIFO hand-off) and
    // the order of the unchanged run, not the wake-up latency: 17
    // replays for three locks instead of 31 (a report of the bundled
    // demo's 7M-event trace took 11.8 s with all four variants, 5.6 s
    // before ranges). `lockscope whatif` gives the full range.
    let all = variations(false);
    // Nor the recorder's in-situ cost (`with_in_situ_cost`): on the
    // demo's trace it made the report 8.9-10.0 s -> 13.2-13.5 s, with the
    // same output.
    let b = Baselines::new(p, meta, cpus, vec![all[0], all[3]]);
    let waits = &b.as_recorded.lock_wait_by_lock;
    let mut order: Vec<u32> = (0..p.locks.len() as u32)
        .filter(|&l| waits[l as usize] > 0)
        .collect();
    order.sort_by_key(|&l| (std::cmp::Reverse(waits[l as usize]), l));
    let mut locks = Vec::new();
    let mut hidden = 0u64;
    for &l in order.iter().take(top) {
        let without = predict(
            p,
            cpus,
            &b,
            &Scenario {
                remove_locks: vec![l],
                ..Scenario::default()
            },
            &[l],
        );
        let half: Vec<(u32, u32)> = p
            .sections
            .iter()
            .enumerate()
            .filter(|(_, s)| s.lock == l)
            .map(|(k, _)| (k as u32, 50))
            .collect();
        let halved = predict(
            p,
            cpus,
            &b,
            &Scenario {
                shrink: half,
                ..Scenario::default()
            },
            &[],
        );
        // Shown when either change gains more than the model's range.
        let significant = |x: &Predicted| x.speedup - 1.0 > x.range[1] - x.range[0];
        if !significant(&without) && !significant(&halved) {
            hidden += 1;
            continue;
        }
        locks.push(GainOut {
            lock: names.lock(p, l),
            wait_ns: waits[l as usize],
            without_speedup: without.speedup,
            without_range: without.range,
            without_bounded: without.bounded,
            halved_speedup: halved.speedup,
            halved_range: halved.range,
        });
    }
    if p.check().is_err() {
        // A spill file that could not be read back: no figures rather
        // than wrong ones.
        return None;
    }
    let considered = order.len().min(top) as u64;
    let uncertain = uncertain(&b);
    // Nothing to say without a lock that made a thread wait, unless the
    // replay itself is in doubt (that line stands alone then).
    (considered > 0 || uncertain.is_some()).then_some(Gains {
        locks,
        left_out: hidden,
        considered,
        uncertain,
    })
}

/// The report's "what it would gain" lines for [`gains`], each with the
/// command that reproduces it. `trace` is the path as the user should
/// type it.
pub fn gain_lines(g: &Gains, trace: &str) -> Vec<String> {
    let mut out = Vec::new();
    for x in &g.locks {
        let name = &x.lock;
        out.push(format!(
            "  {name} (waited {} in the recorded run): without it {:.2}x faster ({:.2}-{:.2}{}), \
             with its critical sections half as long {:.2}x ({:.2}-{:.2}) (lockscope whatif \
             {trace} --remove-lock {name})",
            ms(x.wait_ns),
            x.without_speedup,
            x.without_range[0],
            x.without_range[1],
            if x.without_bounded {
                ", bounded by its recorded wait"
            } else {
                ""
            },
            x.halved_speedup,
            x.halved_range[0],
            x.halved_range[1],
        ));
    }
    if g.left_out > 0 {
        out.push(format!(
            "  ({} of the {} locks threads waited for most left out: neither removing \
             them nor halving their critical sections gains more than the range of the \
             prediction)",
            g.left_out, g.considered
        ));
    }
    if let Some(why) = &g.uncertain {
        out.push(format!("  uncertain: {why}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program(work_ns: u64, overhead_ns: u64, calibrated_max_ns: u64) -> Program {
        let mut p = Program::default();
        p.work_ns = work_ns;
        p.overhead_ns = overhead_ns;
        p.calibrated_max_ns = calibrated_max_ns;
        p
    }

    // See issue 27: a trace the recorder's cost dominates (PARSEC
    // fluidanimate, one coarse lock, 4 threads) had a range that did not
    // reach the measured speedup.
    #[test]
    fn a_trace_the_recorders_cost_dominates_gets_the_in_situ_cost_variant() {
        let v = variations(false);
        let heavy = with_in_situ_cost(&program(800, 200, 40), v.clone());
        assert_eq!(heavy.len(), v.len() + 1);
        let last = heavy.last().unwrap();
        assert_eq!(
            last.recorder_cost_pct,
            (crate::replay::IN_SITU_COST_FACTOR * 100.0) as u32
        );
        // The point prediction's model otherwise.
        assert_eq!(
            Grant {
                recorder_cost_pct: 100,
                ..*last
            },
            v[0]
        );
        // A cheap recorder (1 % of the work) or no calibration: no variant.
        assert_eq!(
            with_in_situ_cost(&program(990, 10, 40), v.clone()).len(),
            v.len()
        );
        assert_eq!(
            with_in_situ_cost(&program(800, 200, 0), v.clone()).len(),
            v.len()
        );
    }
}
