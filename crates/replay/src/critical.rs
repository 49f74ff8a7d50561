//! The critical path of a replayed run: the chain of work that decided
//! its wall time, through the happens-before edges the replay honours
//! (lock release to the next acquisition, signal to wake, last barrier
//! arrival to departures, thread end to join, creation to start, futex
//! wake to wait return).
//!
//! Walked backwards from the thread that ends last: from its end, back to
//! the last time it was woken; there the path jumps to the thread that
//! woke it, at that moment, and so on back to a thread's start (and from a
//! created thread to its creator). The time of each stretch goes to its
//! thread, and, where the thread held locks meanwhile, to those locks and
//! sites. A lock threads waited for that is never held on the path is
//! *off the critical path*: making it faster changes waits, not the wall
//! time.

use std::collections::BTreeMap;

use crate::replay::{effective_cpus, simulate_logged, PathLog, Program, Scenario};
use lockscope_symbols::Symbolizer;
use lockscope_trace::input::Meta;

/// JSON schema name of [`CriticalPath`].
pub const SCHEMA: &str = "lockscope.critical_path/1";

/// A thread's share of the path.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ThreadOnPath {
    /// OS tid.
    pub tid: u32,
    /// Name.
    pub name: String,
    /// Time on the path, ns.
    pub ns: u64,
}

/// A lock's share of the path.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LockOnPath {
    /// Lock name.
    pub lock: String,
    /// Time on the path inside its critical sections, ns.
    pub held_on_path_ns: u64,
    /// Time threads waited for it in the replay, ns.
    pub wait_ns: u64,
    /// Threads waited for it but it is never held on the path.
    pub off_path: bool,
    /// Sites whose sections are on the path: (site, ns), most first.
    pub sites: Vec<SiteOnPath>,
}

/// A call site's share of the path.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SiteOnPath {
    /// Site (function and line, or address).
    pub site: String,
    /// Time on the path in sections entered there, ns.
    pub ns: u64,
}

/// `lockscope critical-path` result (schema [`SCHEMA`]).
#[derive(Clone, Debug, serde::Serialize)]
pub struct CriticalPath {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// CPUs of the replayed machine.
    pub cpus: u32,
    /// Length of the path (= replayed wall time), ns.
    pub length_ns: u64,
    /// Hops from one thread to another along the path.
    pub hops: u64,
    /// Threads on the path, most time first.
    pub threads: Vec<ThreadOnPath>,
    /// Locks held on the path or waited for, most time on the path first.
    pub locks: Vec<LockOnPath>,
    /// Wall time of the recorded run, ns: the figures above are the
    /// replay's (without the recorder's overhead, on `cpus` CPUs), not the
    /// recorded ones `report` shows.
    pub recorded_wall_ns: u64,
    /// Why the figures differ from `report`'s, when they do by more than
    /// [`DIFFERS`] (`None`: they agree).
    pub differs: Option<String>,
}

/// Relative difference between the replayed and the recorded wall time
/// (or lock wait) above which the output says its figures are the
/// replay's: a replay within the recorder's own overhead is the recorded
/// run for the reader.
pub const DIFFERS: f64 = 0.05;

/// Computes the critical path of the replayed run (without the
/// recorder's overhead) on `cpus` CPUs (0: the recording machine's).
pub fn analyze(p: &Program, meta: &Meta, cpus: u32, symbolize: bool) -> CriticalPath {
    let cpus = effective_cpus(p, cpus);
    let (res, log) = simulate_logged(p, cpus, &Scenario::default(), true);
    let log = log.expect("logged");
    let n = p.threads.len();
    let mut per_thread = vec![0u64; n];
    // Per (section, thread): one return address of an out-of-line lock
    // call is a section of every caller; the thread's own call paths
    // tell which caller it was.
    let mut per_cs: BTreeMap<(u32, u32), u64> = BTreeMap::new();
    let hops = walk(&res, &log, |x, from, t| {
        attribute(&log.holds[x], from, t, x as u32, &mut per_cs);
        per_thread[x] += t - from;
    });
    let mut sym = Symbolizer::for_meta(meta, symbolize);
    let lock_names = lockscope_symbols::locknames::LockNames::new(meta, &mut sym);
    let mut threads: Vec<ThreadOnPath> = (0..n)
        .filter(|&i| per_thread[i] > 0)
        .map(|i| ThreadOnPath {
            tid: p.threads[i].tid,
            name: p.threads[i].name.clone(),
            ns: per_thread[i],
        })
        .collect();
    threads.sort_by_key(|x| std::cmp::Reverse(x.ns));
    let mut locks: Vec<LockOnPath> = Vec::new();
    for (l, id) in p.locks.iter().enumerate() {
        // Sites named as `report` names them (the user's frame, not
        // `__gthread_mutex_lock`); return addresses that name the same
        // source position are one row.
        let mut merged: BTreeMap<String, u64> = BTreeMap::new();
        for (&(cs, x), &ns) in per_cs
            .iter()
            .filter(|(&(cs, _), _)| p.sections[cs as usize].lock == l as u32)
        {
            let all = p.section_stacks.get(cs as usize).map_or(&[][..], |v| v);
            let own: Vec<u32> = all.iter().filter(|s| s.0 == x).map(|s| s.1).collect();
            let stacks: Vec<u32> = if own.is_empty() {
                all.iter().map(|s| s.1).collect()
            } else {
                own
            };
            let site = sym.user_site(
                &meta.stacks,
                id.process,
                p.sections[cs as usize].site,
                &stacks,
            );
            *merged.entry(site).or_default() += ns;
        }
        let mut sites: Vec<SiteOnPath> = merged
            .into_iter()
            .map(|(site, ns)| SiteOnPath { site, ns })
            .collect();
        let held: u64 = sites.iter().map(|s| s.ns).sum();
        let wait = res.lock_wait_by_lock[l];
        if held == 0 && wait == 0 {
            continue;
        }
        sites.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.site.cmp(&b.site)));
        locks.push(LockOnPath {
            lock: lock_names.label(&mut sym, id.process, id.addr),
            held_on_path_ns: held,
            wait_ns: wait,
            off_path: held == 0,
            sites,
        });
    }
    locks.sort_by_key(|l| {
        (
            std::cmp::Reverse(l.held_on_path_ns),
            std::cmp::Reverse(l.wait_ns),
        )
    });
    let length_ns: u64 = per_thread.iter().sum();
    let recorded_wall_ns = p.recorded_wall();
    let differs = differs(length_ns, recorded_wall_ns, p, cpus);
    CriticalPath {
        schema: SCHEMA,
        cpus,
        length_ns,
        hops,
        threads,
        locks,
        recorded_wall_ns,
        differs,
    }
}

/// The sentence saying that the figures are the replay's, when the
/// replayed run is more than [`DIFFERS`] away from the recorded one or
/// runs on another number of CPUs.
fn differs(length: u64, recorded: u64, p: &Program, cpus: u32) -> Option<String> {
    let rel = if recorded == 0 {
        0.0
    } else {
        length as f64 / recorded as f64 - 1.0
    };
    let other_cpus = p.cpus != 0 && p.cpus != cpus;
    if rel.abs() <= DIFFERS && !other_cpus {
        return None;
    }
    let mut why = format!(
        "these figures come from the replay ({} without the recorder{}), not from the \
         recorded run of {} that `lockscope report` shows",
        ms(length),
        if other_cpus {
            format!(", on {cpus} CPUs instead of {}", p.cpus)
        } else {
            String::new()
        },
        ms(recorded)
    );
    match (p.overhead_ns, p.preempted_ns) {
        (0, 0) => {}
        (o, 0) => why.push_str(&format!("; the recorder's own {} is left out", ms(o))),
        (o, q) => why.push_str(&format!(
            "; the recorder's own {} and {} of preemption or waiting for the recorder \
             are left out",
            ms(o),
            ms(q)
        )),
    }
    Some(why)
}

/// Walks the critical path of a logged simulation backwards from the
/// thread that ends last, calling `visit(thread, from, to)` for each
/// stretch of it. Returns the hops between threads.
fn walk(
    res: &crate::replay::SimResult,
    log: &PathLog,
    mut visit: impl FnMut(usize, u64, u64),
) -> u64 {
    let n = res.ends.len();
    let mut hops = 0u64;
    // Start at the thread that ends last.
    let mut cur = (0..n).max_by_key(|&i| (res.ends[i], std::cmp::Reverse(i)));
    let mut t = cur.map_or(0, |i| res.ends[i]);
    let mut guard = 0usize;
    let limit = log.wakes.iter().map(Vec::len).sum::<usize>() + 2 * n + 16;
    while let Some(x) = cur {
        guard += 1;
        if guard > limit {
            break;
        }
        let wakes = &log.wakes[x];
        // The last wake of x at or before t (strictly before when we just
        // arrived at t through a hop, to make progress).
        let i = wakes.partition_point(|w| w.0 <= t);
        let (from, next) = match i.checked_sub(1).map(|k| wakes[k]) {
            Some((tw, waker)) if waker as usize != x => (tw, Some((waker as usize, tw))),
            Some((tw, _)) => (tw, Some((x, tw.saturating_sub(1)))),
            None => {
                let start = log.starts[x].min(t);
                let next = log.spawns[x].map(|(ts, parent)| (parent as usize, ts.min(start)));
                (start, next)
            }
        };
        let from = from.min(t);
        visit(x, from, t);
        match next {
            Some((y, ty)) => {
                if y != x {
                    hops += 1;
                }
                cur = Some(y);
                t = ty.min(from);
            }
            None => cur = None,
        }
    }
    hops
}

/// What the critical path of the recorded run says about waiting, for
/// the what-if predictions' confidence.
#[derive(Clone, Debug, Default)]
pub struct PathWaits {
    /// Length of the path, ns.
    pub length_ns: u64,
    /// Time on the path spent in waits with no recorded cause (timeouts,
    /// wakes from outside the trace), ns.
    pub unknown_wait_ns: u64,
}

/// The waits on the critical path of the run as recorded: its replay
/// with the recorder's cost and the preempted time kept and the locks in
/// their recorded order, which reproduces the recorded timing (within
/// 0.2 % on the fixtures), on `cpus` CPUs. Not the replay without the
/// recorder: taking the recorder's cost out moves threads in time.
pub fn path_waits(p: &Program, cpus: u32) -> PathWaits {
    let sc = Scenario {
        keep_overhead: true,
        ..Scenario::default()
    };
    let (res, log) = simulate_logged(p, cpus, &sc, true);
    let log = log.expect("logged");
    let mut out = PathWaits::default();
    walk(&res, &log, |x, from, t| {
        out.length_ns += t - from;
        // A thread's sleeps are in time order and do not overlap.
        let sl = &log.sleeps[x];
        let first = sl.partition_point(|s| s.1 <= from);
        for &(a, b) in sl[first..].iter().take_while(|s| s.0 < t) {
            out.unknown_wait_ns += b.min(t).saturating_sub(a.max(from));
        }
    });
    out
}

/// Adds the overlap of [a, b) with each section of `holds` to its key.
fn attribute(
    holds: &[(u64, u64, u32)],
    a: u64,
    b: u64,
    thread: u32,
    per_cs: &mut BTreeMap<(u32, u32), u64>,
) {
    if b <= a {
        return;
    }
    // Holds are ordered by end: skip those that ended before a. Past b,
    // only an enclosing (outer) section can still overlap; a run of
    // sections that all start after b means there is none left.
    let first = holds.partition_point(|h| h.1 <= a);
    let mut after = 0;
    for &(s, e, cs) in &holds[first..] {
        if s >= b {
            after += 1;
            if after > 16 {
                break;
            }
            continue;
        }
        after = 0;
        let ov = e.min(b).saturating_sub(s.max(a));
        if ov > 0 {
            *per_cs.entry((cs, thread)).or_default() += ov;
        }
    }
}

/// Columns the text output fits in.
const WIDTH: usize = 100;

use lockscope_text::units::ms;

/// Renders a critical path as text.
pub fn render_text(r: &CriticalPath, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    writeln!(
        out,
        "critical path of the replayed run on {} CPU(s): {} ({} hops between threads)",
        r.cpus,
        ms(r.length_ns),
        r.hops
    )?;
    if let Some(d) = &r.differs {
        write!(
            out,
            "{}",
            lockscope_text::text::fit_lines(&format!("  note: {d}\n"), WIDTH)
        )?;
    }
    writeln!(out, "\nthreads on the path")?;
    for t in &r.threads {
        writeln!(
            out,
            "  {:>8}  {:<16} {:>12}  {:5.1} %",
            t.tid,
            lockscope_text::text::elide(&t.name, 16),
            ms(t.ns),
            pct(t.ns, r.length_ns)
        )?;
    }
    writeln!(out, "\nlocks (held on the path vs waited for)")?;
    if r.locks.is_empty() {
        writeln!(out, "  (none)")?;
    }
    for l in &r.locks {
        writeln!(
            out,
            "  {:<24} on path {:>12} ({:4.1} %)  waited {:>12}",
            lockscope_text::text::elide(&l.lock, 24),
            ms(l.held_on_path_ns),
            pct(l.held_on_path_ns, r.length_ns),
            ms(l.wait_ns),
        )?;
        if l.off_path {
            writeln!(
                out,
                "      OFF the critical path: shortening it does not shorten the run"
            )?;
        }
        // Site, then its time right-aligned: the row fits WIDTH columns
        // with the site's middle elided (its start names the function,
        // its end the file and line).
        for s in l.sites.iter().take(5) {
            let t = ms(s.ns);
            let w = WIDTH - 6 - 1 - t.len().max(12);
            writeln!(
                out,
                "      {:<w$} {:>12}",
                lockscope_text::text::elide(&s.site, w),
                t
            )?;
        }
        if l.sites.len() > 5 {
            let rest: u64 = l.sites[5..].iter().map(|s| s.ns).sum();
            writeln!(
                out,
                "      {:<w$} {:>12}",
                format!("({} more sites)", l.sites.len() - 5),
                ms(rest),
                w = WIDTH - 6 - 1 - 12
            )?;
        }
    }
    Ok(())
}

fn pct(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 * 100.0 / b as f64
    }
}
