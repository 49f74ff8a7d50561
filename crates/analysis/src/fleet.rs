//! One report over many traces (`lockscope report A B C ...`): per lock
//! identity across the traces, with the spread between them, optionally
//! per group of traces sharing a label's value (`--group-by KEY`).
//!
//! A lock's identity across runs is its report name and first call site
//! (`label`, `first_use`): addresses differ from run to run (ASLR, heap),
//! names and sites do not. Every figure is a sum or a statistic of the
//! traces' own [`Report`]s (built one at a time by the caller, each in
//! bounded memory), so a lock's total over the traces is the sum of what
//! `lockscope report` says of each.
//!
//! The same identity and sums are what docs/fleet.md's Parquet queries
//! compute; this is the answer for a handful of traces without a query
//! engine.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::units;
use crate::Report;

/// A lock's name across runs: its report name, except for a lock named
/// by nothing better than its address (which differs from run to run):
/// `KIND (unnamed)`, told apart by its first call site. The same in the
/// Parquet tables' `lock` column.
pub fn lock_identity(l: &crate::report::LockOut) -> String {
    if l.named_by == crate::locknames::NamedBy::Address {
        format!("{} (unnamed)", l.kind)
    } else {
        l.label.clone()
    }
}

/// Schema name of [`FleetReport`]'s JSON.
pub const SCHEMA: &str = "lockscope.fleet/1";

/// One trace of the set.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct TraceRow {
    /// Its path as given.
    pub trace: String,
    /// Its command line.
    pub command: Vec<String>,
    /// Its labels (host and command included).
    pub labels: BTreeMap<String, String>,
    /// Duration of the recording, ns.
    pub duration_ns: u64,
    /// Events lost while recording.
    pub lost_events: u64,
}

/// A figure over the traces that have a lock: its total, mean, lowest and
/// highest per trace, and standard deviation between traces (0 with one).
#[derive(Clone, Debug, Default, Serialize)]
#[non_exhaustive]
pub struct Spread {
    /// Sum over the traces.
    pub total: u64,
    /// Mean per trace.
    pub mean: f64,
    /// Lowest trace.
    pub min: u64,
    /// Highest trace.
    pub max: u64,
    /// Standard deviation between traces (sample, n - 1).
    pub stddev: f64,
}

impl Spread {
    fn of(v: &[u64]) -> Spread {
        if v.is_empty() {
            return Spread::default();
        }
        let n = v.len() as f64;
        let total: u64 = v.iter().sum();
        let mean = total as f64 / n;
        let var = if v.len() > 1 {
            v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / (n - 1.0)
        } else {
            0.0
        };
        Spread {
            total,
            mean,
            min: v.iter().copied().min().unwrap_or(0),
            max: v.iter().copied().max().unwrap_or(0),
            stddev: var.sqrt(),
        }
    }
}

/// A lock identity over a set of traces.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct FleetLock {
    /// Its name across runs ([`lock_identity`]: `hot`,
    /// `ThreadPool::m_`, `mutex (unnamed)`).
    pub lock: String,
    /// Its first call site.
    pub first_use: String,
    /// Its kind in the first trace that has it.
    pub kind: String,
    /// Traces of the set that have it.
    pub traces: usize,
    /// Wait per trace, ns.
    pub wait_ns: Spread,
    /// Acquisitions per trace (null for a futex word, which shows only
    /// its waits).
    pub acquisitions: Option<Spread>,
    /// Contended acquisitions (for a futex word: waits) per trace.
    pub contended: Spread,
}

/// The locks of one group of traces (all traces when not grouped).
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct Group {
    /// The label's value shared by the group (`None`: not grouped, or
    /// traces without the label).
    pub value: Option<String>,
    /// Indexes into [`FleetReport::traces`].
    pub traces: Vec<usize>,
    /// Locks, most total wait first.
    pub locks: Vec<FleetLock>,
}

/// One report over many traces.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct FleetReport {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// The label the groups are by (`None`: one group).
    pub group_by: Option<String>,
    /// The traces, in the order given.
    pub traces: Vec<TraceRow>,
    /// The groups, by label value (traces without the label last).
    pub groups: Vec<Group>,
}

/// Builds the report over `reports` (path and report of each trace),
/// grouped by the value of label `group_by` when given.
pub fn aggregate(reports: &[(String, Report)], group_by: Option<&str>) -> FleetReport {
    let traces: Vec<TraceRow> = reports
        .iter()
        .map(|(p, r)| TraceRow {
            trace: p.clone(),
            command: r.command.clone(),
            labels: r.labels.clone(),
            duration_ns: r.duration_ns,
            lost_events: r.lost_events,
        })
        .collect();
    // Group members, by value; traces without the label form the last.
    let mut by_value: BTreeMap<Option<String>, Vec<usize>> = BTreeMap::new();
    for (i, (_, r)) in reports.iter().enumerate() {
        let v = group_by.and_then(|k| r.labels.get(k).cloned());
        by_value.entry(v).or_default().push(i);
    }
    let mut groups: Vec<Group> = by_value
        .into_iter()
        .map(|(value, members)| Group {
            locks: locks_of(reports, &members),
            value,
            traces: members,
        })
        .collect();
    // `None` sorts first in a BTreeMap; it belongs last.
    groups.sort_by_key(|g| g.value.is_none());
    FleetReport {
        schema: SCHEMA,
        group_by: group_by.map(str::to_string),
        traces,
        groups,
    }
}

/// The locks of the traces `members`, most total wait first.
fn locks_of(reports: &[(String, Report)], members: &[usize]) -> Vec<FleetLock> {
    // Per identity: kind, futex-only, and per-trace figures (summed when
    // one trace has two locks of the same identity).
    type PerTrace = BTreeMap<usize, (u64, u64, u64)>;
    let mut m: BTreeMap<(String, String), (String, bool, PerTrace)> = BTreeMap::new();
    for &i in members {
        for l in &reports[i].1.locks {
            let e = m
                .entry((lock_identity(l), l.first_use.clone()))
                .or_insert_with(|| (l.kind.to_string(), l.futex_only(), BTreeMap::new()));
            let t = e.2.entry(i).or_default();
            t.0 += l.wait_ns.total;
            t.1 += l.acquisitions;
            t.2 += l.contended;
        }
    }
    let mut v: Vec<FleetLock> = m
        .into_iter()
        .map(|((lock, first_use), (kind, futex_only, per))| {
            let col = |f: fn(&(u64, u64, u64)) -> u64| per.values().map(f).collect::<Vec<_>>();
            FleetLock {
                lock,
                first_use,
                kind,
                traces: per.len(),
                wait_ns: Spread::of(&col(|x| x.0)),
                acquisitions: (!futex_only).then(|| Spread::of(&col(|x| x.1))),
                contended: Spread::of(&col(|x| x.2)),
            }
        })
        .collect();
    v.sort_by(|a, b| {
        b.wait_ns
            .total
            .cmp(&a.wait_ns.total)
            .then_with(|| a.lock.cmp(&b.lock))
    });
    v
}

/// The report as text: the traces, then per group its locks with the
/// spread of their wait between traces, at most `top` per group.
pub fn text(f: &FleetReport, top: usize) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "lockscope report: {} traces{}",
        f.traces.len(),
        f.group_by
            .as_deref()
            .map(|k| format!(", grouped by label {}", crate::render::term(k)))
            .unwrap_or_default()
    );
    for (i, t) in f.traces.iter().enumerate() {
        let labels: Vec<String> = t
            .labels
            .iter()
            .filter(|(k, _)| *k != "command")
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(
            o,
            "  [{}] {}  {}  {}{}",
            i + 1,
            crate::render::term(&t.trace),
            units::ms(t.duration_ns),
            crate::render::term(&labels.join(" ")),
            if t.lost_events > 0 {
                format!("  ({} events lost)", units::count(t.lost_events))
            } else {
                String::new()
            }
        );
    }
    for g in &f.groups {
        let members: Vec<String> = g.traces.iter().map(|i| format!("[{}]", i + 1)).collect();
        let head = match (&f.group_by, &g.value) {
            (Some(k), Some(v)) => format!("{k}={v}"),
            (Some(k), None) => format!("no label {k}"),
            (None, _) => "all traces".to_string(),
        };
        let _ = writeln!(
            o,
            "\nLOCKS, {} ({} trace{}: {}); wait per trace: mean, lowest-highest, standard deviation",
            crate::render::term(&head),
            g.traces.len(),
            if g.traces.len() == 1 { "" } else { "s" },
            members.join(" ")
        );
        let mut rows: Vec<Vec<String>> = vec![vec![
            "lock".into(),
            "first use".into(),
            "in".into(),
            "wait total".into(),
            "mean".into(),
            "lowest".into(),
            "highest".into(),
            "stddev".into(),
            "acq mean".into(),
            "contended mean".into(),
        ]];
        for l in g.locks.iter().take(top) {
            rows.push(vec![
                crate::render::term(&l.lock).into_owned(),
                crate::render::term(&l.first_use).into_owned(),
                format!("{}/{}", l.traces, g.traces.len()),
                units::ms(l.wait_ns.total),
                units::ms_f64(l.wait_ns.mean),
                units::ms(l.wait_ns.min),
                units::ms(l.wait_ns.max),
                units::ms_f64(l.wait_ns.stddev),
                l.acquisitions
                    .as_ref()
                    .map_or("-".into(), |a| units::count(a.mean.round() as u64)),
                units::count(l.contended.mean.round() as u64),
            ]);
        }
        let widths: Vec<usize> = (0..rows[0].len())
            .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
            .collect();
        for r in &rows {
            let mut line = String::from(" ");
            for (c, cell) in r.iter().enumerate() {
                let pad = widths[c] - cell.chars().count();
                // Names left, figures right.
                if c < 2 {
                    let _ = write!(line, " {cell}{}", " ".repeat(pad));
                } else {
                    let _ = write!(line, " {}{cell}", " ".repeat(pad));
                }
            }
            let _ = writeln!(o, "{}", line.trim_end());
        }
        if g.locks.len() > top {
            let _ = writeln!(o, "  ({} more locks)", g.locks.len() - top);
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_three_traces() {
        let s = Spread::of(&[10, 20, 30]);
        assert_eq!((s.total, s.min, s.max), (60, 10, 30));
        assert!((s.mean - 20.0).abs() < 1e-9);
        assert!((s.stddev - 10.0).abs() < 1e-9);
        let one = Spread::of(&[7]);
        assert_eq!((one.total, one.stddev), (7, 0.0));
    }
}
