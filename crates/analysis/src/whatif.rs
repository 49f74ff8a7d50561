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
//! The ULCP-free scenario ([`ulcp_free`], PerfPlay §4) is the safe
//! version: from a detailed-mode trace, every critical section waits only
//! for the earlier sections of its lock it truly conflicts with
//! ([`crate::ulcp::classify`]); each unnecessary pair's gain (Eq. 1) is
//! summed per pair of code regions (Alg. 2) and ranked by its share P of
//! the total (Eq. 2).

use std::collections::{BTreeMap, HashMap};

use crate::detailed::{AccessSet, Detailed};
use crate::input::Meta;
use crate::replay::{effective_cpus, simulate, Program, Scenario, SimResult, UlcpFree};
use crate::symbols::Symbolizer;
use crate::ulcp::{classify, Kind};
use crate::AnalysisError;

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
    /// overhead: the baseline of every speedup, ns.
    pub baseline_wall_ns: u64,
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

/// Who accessed an 8-byte word last, for [`ulcp_free`].
#[derive(Default)]
struct Word {
    writer: Option<usize>,
    readers: Vec<(u32, usize)>,
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
    let secs: Vec<&crate::detailed::Section> = d
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
/// the detailed view's sections (in recorded order) give each
/// acquisition the earlier ones it truly conflicts with; the replay
/// grants an acquisition as soon as those are released (the dynamic
/// locking strategy: non-conflicting sections no longer exclude each
/// other, conflicting ones keep their recorded order).
pub fn ulcp_free(
    p: &Program,
    d: &mut Detailed,
    cpus: u32,
    base_wall: u64,
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
    // (lock, first turn, second turn, kind) of every unnecessary pair.
    let mut pairs: Vec<(u32, usize, usize, Kind)> = Vec::new();
    let mut conflicts = 0u64;
    for (&l, secs) in &by_lock {
        if secs.len() as u64 != turns[l as usize] {
            kept += 1;
            continue;
        }
        let mut deps = Vec::with_capacity(secs.len());
        // Per 8-byte word: the last section that wrote it and, per
        // thread, the last that read it since. They are the only earlier
        // sections a new one can truly conflict with first-hand (older
        // ones are ordered before them, by conflict or program order).
        let mut words: HashMap<u64, Word> = HashMap::new();
        for k in 0..secs.len() {
            let b = &d.sections[secs[k]];
            let mut cand: Vec<usize> = Vec::new();
            for w in word_span(&b.reads) {
                if let Some(e) = words.get(&w) {
                    cand.extend(e.writer);
                }
            }
            for w in word_span(&b.writes) {
                if let Some(e) = words.get(&w) {
                    cand.extend(e.writer);
                    cand.extend(e.readers.iter().map(|r| r.1));
                }
            }
            cand.sort_unstable();
            cand.dedup();
            let mut dk = Vec::new();
            for j in cand {
                let a = &d.sections[secs[j]];
                // Program order already keeps a thread's own sections;
                // readers of a reader-writer lock share it.
                if a.thread == b.thread || (a.shared && b.shared) {
                    continue;
                }
                // The word map over-approximates (a word, not bytes);
                // the ULCP test decides.
                if classify(a, b) == Kind::Conflict {
                    dk.push(j as u64);
                }
            }
            if k > 0 {
                let a = &d.sections[secs[k - 1]];
                if a.thread != b.thread && !(a.shared && b.shared) {
                    match classify(a, b) {
                        Kind::Conflict => conflicts += 1,
                        kind => pairs.push((l, k - 1, k, kind)),
                    }
                }
            }
            for w in word_span(&b.reads) {
                let e = words.entry(w).or_default();
                match e.readers.iter_mut().find(|r| r.0 == b.thread) {
                    Some(r) => r.1 = k,
                    None => e.readers.push((b.thread, k)),
                }
            }
            for w in word_span(&b.writes) {
                let e = words.entry(w).or_default();
                e.writer = Some(k);
                e.readers.clear();
            }
            deps.push(dk);
        }
        free.deps.insert(l, deps);
    }
    let transformed = free.deps.len();
    let base = simulate(
        p,
        cpus,
        &Scenario {
            record_sections: true,
            ..Scenario::default()
        },
    );
    let r = simulate(
        p,
        cpus,
        &Scenario {
            record_sections: true,
            ulcp_free: Some(free),
            ..Scenario::default()
        },
    );
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
        let (b0, b1) = (t(&r, l, j), t(&r, l, k));
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
        speedup: speedup(base_wall, r.wall_ns),
        locks_transformed: transformed,
        locks_kept: kept,
        ulcps: pairs.len() as u64,
        conflicts,
        regions,
    }
}

struct Names {
    sym: Symbolizer,
}

impl Names {
    fn lock(&mut self, p: &Program, l: u32) -> String {
        let id = p.locks[l as usize];
        self.sym
            .data(id.process, id.addr)
            .unwrap_or_else(|| format!("{:#x}", id.addr))
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
                f.function
                    .as_deref()
                    .is_some_and(|n| n == want || crate::detailed::short_name(n) == want)
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
    base: &SimResult,
    r: &SimResult,
) -> ScenarioOut {
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
        speedup: speedup(base.wall_ns, r.wall_ns),
        threads,
        locks,
    }
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
    let mut names = Names {
        sym: Symbolizer::for_meta(meta, cfg.symbolize),
    };
    let base = simulate(p, cpus, &Scenario::default());
    let mut scenarios = Vec::new();
    for want in &cfg.remove_locks {
        let l = find_lock(p, &mut names, "--remove-lock", want)?;
        let sc = Scenario {
            remove_locks: vec![l],
            ..Scenario::default()
        };
        let r = simulate(p, cpus, &sc);
        let what = format!("remove lock {}", names.lock(p, l));
        scenarios.push(outcome(p, &mut names, what, &base, &r));
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
        let r = simulate(
            p,
            cpus,
            &Scenario {
                shrink: keys,
                ..Scenario::default()
            },
        );
        let what = format!("critical sections entered at {want} take {pct}% of their time");
        scenarios.push(outcome(p, &mut names, what, &base, &r));
    }
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
        let r = simulate(
            p,
            cpus,
            &Scenario {
                readers: keys,
                ..Scenario::default()
            },
        );
        let what = format!(
            "reader-writer lock: sections entered at {} read (share the lock)",
            cfg.readers.join(", ")
        );
        scenarios.push(outcome(p, &mut names, what, &base, &r));
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
        let r = simulate(
            p,
            cpus,
            &Scenario {
                reader_turns: vec![(l, turns)],
                ..Scenario::default()
            },
        );
        let what = format!(
            "reader-writer lock {}: the {readers} of its {} critical sections that only read \
             share it",
            names.lock(p, l),
            p.turns[l as usize]
        );
        scenarios.push(outcome(p, &mut names, what, &base, &r));
    }
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
        let mut points = Vec::new();
        for shrink in [0u32, 25, 50, 75, 100] {
            let wall = if shrink == 0 {
                base.wall_ns
            } else {
                let sc = Scenario {
                    shrink: keys.iter().map(|&k| (k, 100 - shrink)).collect(),
                    ..Scenario::default()
                };
                simulate(p, cpus, &sc).wall_ns
            };
            points.push(CurvePoint {
                shrink_pct: shrink,
                predicted_wall_ns: wall,
                speedup: speedup(base.wall_ns, wall),
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
        uf = Some(ulcp_free(p, d, cpus, base.wall_ns, &mut nm));
    }
    p.check()?;
    Ok(WhatifReport {
        schema: SCHEMA,
        cpus,
        recorded_wall_ns: p.recorded_wall(),
        baseline_wall_ns: base.wall_ns,
        scenarios,
        curves,
        ulcp_free: uf,
    })
}

fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

/// Renders a what-if report as text.
pub fn render_text(r: &WhatifReport, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    writeln!(
        out,
        "what-if on {} CPU(s): recorded wall {}, replayed without the recorder {}",
        r.cpus,
        ms(r.recorded_wall_ns),
        ms(r.baseline_wall_ns)
    )?;
    for s in &r.scenarios {
        writeln!(out, "\n{}", s.scenario)?;
        writeln!(
            out,
            "  predicted wall {}  speedup {:.2}x",
            ms(s.predicted_wall_ns),
            s.speedup
        )?;
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
            "  predicted wall {}  speedup {:.2}x  ({} unnecessary pairs, {} conflicting kept in \
             order; {} lock(s) transformed, {} kept as recorded)",
            ms(u.predicted_wall_ns),
            u.speedup,
            u.ulcps,
            u.conflicts,
            u.locks_transformed,
            u.locks_kept
        )?;
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

/// The report's "what it would gain" lines (issue 9 item 5): for the
/// `top` locks with the most replayed waiting, the predicted speedup of
/// the program without the lock and with its sections half as long, and
/// the command that reproduces it. Empty when no lock makes a thread
/// wait in the replay. `trace` is the path as the user should type it.
pub fn gain_lines(
    p: &Program,
    meta: &Meta,
    top: usize,
    trace: &str,
    symbolize: bool,
) -> Vec<String> {
    let cpus = effective_cpus(p, 0);
    let mut names = Names {
        sym: Symbolizer::for_meta(meta, symbolize),
    };
    let base = simulate(p, cpus, &Scenario::default());
    let mut order: Vec<u32> = (0..p.locks.len() as u32)
        .filter(|&l| base.lock_wait_by_lock[l as usize] > 0)
        .collect();
    order.sort_by_key(|&l| (std::cmp::Reverse(base.lock_wait_by_lock[l as usize]), l));
    let mut out = Vec::new();
    for &l in order.iter().take(top) {
        let without = simulate(
            p,
            cpus,
            &Scenario {
                remove_locks: vec![l],
                ..Scenario::default()
            },
        );
        let half: Vec<(u32, u32)> = p
            .sections
            .iter()
            .enumerate()
            .filter(|(_, s)| s.lock == l)
            .map(|(k, _)| (k as u32, 50))
            .collect();
        let halved = simulate(
            p,
            cpus,
            &Scenario {
                shrink: half,
                ..Scenario::default()
            },
        );
        let name = names.lock(p, l);
        out.push(format!(
            "  {name}: without it {:.2}x faster, with its critical sections half as long {:.2}x \
             (lockscope whatif {trace} --remove-lock {name})",
            speedup(base.wall_ns, without.wall_ns),
            speedup(base.wall_ns, halved.wall_ns),
        ));
    }
    if p.check().is_err() {
        // A spill file that could not be read back: no figures rather
        // than wrong ones (the line is a hint in the report).
        return Vec::new();
    }
    out
}
