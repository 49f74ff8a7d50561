//! What-if predictions on the replay ([`crate::replay`]): how much faster
//! the program would run if a lock were removed or the critical sections
//! at a site were shorter, and a Coz-style curve per top lock (predicted
//! speedup if its hold times shrank by 0, 25, 50, 75, 100 %).
//!
//! Every prediction is a replay of the recorded run with one change, on
//! the same CPU model, compared with the replay of the unchanged run
//! (both without the recorder's overhead). Removing a lock keeps the
//! work done inside its sections and drops only the exclusion; whether
//! that is correct for the program is the user's business (PerfPlay's
//! `--ulcp-free` transformation, which keeps truly conflicting sections
//! ordered, is not implemented yet).

use crate::input::Meta;
use crate::replay::{effective_cpus, simulate, Program, Scenario, SimResult};
use crate::symbols::Symbolizer;
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
fn find_lock(p: &Program, names: &mut Names, want: &str) -> Result<u32, AnalysisError> {
    for l in 0..p.locks.len() as u32 {
        if hex_eq(want, p.locks[l as usize].addr) || names.lock(p, l) == want {
            return Ok(l);
        }
    }
    let known: Vec<String> = (0..p.locks.len().min(20) as u32)
        .map(|l| names.lock(p, l))
        .collect();
    Err(AnalysisError::Config(format!(
        "--remove-lock {want:?}: no lock of that name or address in the trace (locks: {})",
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
    let cpus = effective_cpus(p, cfg.cpus);
    let mut names = Names {
        sym: Symbolizer::new(meta.maps.clone(), meta.strings.clone(), cfg.symbolize),
    };
    let base = simulate(p, cpus, &Scenario::default());
    let mut scenarios = Vec::new();
    for want in &cfg.remove_locks {
        let l = find_lock(p, &mut names, want)?;
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
    Ok(WhatifReport {
        schema: SCHEMA,
        cpus,
        recorded_wall_ns: p.recorded_wall(),
        baseline_wall_ns: base.wall_ns,
        scenarios,
        curves,
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
