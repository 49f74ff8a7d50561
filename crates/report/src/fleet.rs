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

use crate::Report;
use lockscope_text::units;

/// A lock's name across runs: its report name (a symbol, a class
/// member, `mutex@function`), except for a lock named by nothing better
/// than its address, which differs from run to run: `KIND at FIRST USE`.
/// Not the first use for named locks: which thread's call is seen first
/// varies from run to run (a holder's acquisition is published after its
/// critical section, a waiter's attempt before). The same in the Parquet
/// tables' `lock` column.
pub fn lock_identity(l: &crate::report::LockOut) -> String {
    if l.named_by == lockscope_symbols::locknames::NamedBy::Address {
        format!("{} at {}", l.kind, l.first_use)
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
    /// `ThreadPool::m_`, `mutex at worker (pool.c:12)`).
    pub lock: String,
    /// Its first call site in the first trace that has it.
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
    let mut m: BTreeMap<String, (String, String, bool, PerTrace)> = BTreeMap::new();
    for &i in members {
        for l in &reports[i].1.locks {
            let e = m.entry(lock_identity(l)).or_insert_with(|| {
                (
                    l.first_use.clone(),
                    l.kind.to_string(),
                    l.futex_only(),
                    BTreeMap::new(),
                )
            });
            let t = e.3.entry(i).or_default();
            t.0 += l.wait_ns.total;
            t.1 += l.acquisitions;
            t.2 += l.contended;
        }
    }
    let mut v: Vec<FleetLock> = m
        .into_iter()
        .map(|(lock, (first_use, kind, futex_only, per))| {
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
            .map(|k| format!(", grouped by label {}", lockscope_text::text::term(k)))
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
            lockscope_text::text::term(&t.trace),
            units::ms(t.duration_ns),
            lockscope_text::text::term(&labels.join(" ")),
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
            lockscope_text::text::term(&head),
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
                lockscope_text::text::term(&l.lock).into_owned(),
                lockscope_text::text::term(&l.first_use).into_owned(),
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
        o.push_str(&columns(&rows));
        if g.locks.len() > top {
            let _ = writeln!(o, "  ({} more locks)", g.locks.len() - top);
        }
    }
    o
}

/// `rows` (the first is the header) as aligned columns, indented by two:
/// the first two (lock, first use) left-aligned, the figures right.
fn columns(rows: &[Vec<String>]) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let widths: Vec<usize> = (0..rows.first().map_or(0, Vec::len))
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for r in rows {
        let mut line = String::from(" ");
        for (c, cell) in r.iter().enumerate() {
            let pad = " ".repeat(widths[c] - cell.chars().count());
            if c < 2 {
                let _ = write!(line, " {cell}{pad}");
            } else {
                let _ = write!(line, " {pad}{cell}");
            }
        }
        let _ = writeln!(o, "{}", line.trim_end());
    }
    o
}

/// Schema name of [`GroupDiff`]'s JSON.
pub const DIFF_SCHEMA: &str = "lockscope.groupdiff/1";

/// A lock compared between two groups of traces.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct LockChange {
    /// Its name across runs ([`lock_identity`]).
    pub lock: String,
    /// Its first call site (in A when A has it).
    pub first_use: String,
    /// Traces of A and of B that have it.
    pub traces: (usize, usize),
    /// Wait per trace in A (mean over the traces of A that have it).
    pub wait_a: Spread,
    /// Wait per trace in B.
    pub wait_b: Spread,
    /// Change of the mean wait, percent of A's (null when A's is 0).
    pub wait_change_pct: Option<f64>,
    /// Whether the change exceeds what the spread between runs explains:
    /// |mean B - mean A| over twice its standard error,
    /// sqrt(sd_A^2 / n_A + sd_B^2 / n_B). Null when a side has fewer than
    /// two traces with the lock (no spread to judge by).
    pub beyond_spread: Option<bool>,
}

/// Two groups of traces compared lock by lock (`lockscope diff DIR_A
/// DIR_B`).
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct GroupDiff {
    /// [`DIFF_SCHEMA`].
    pub schema: &'static str,
    /// The traces of A, then of B.
    pub a: Vec<TraceRow>,
    /// The traces of B.
    pub b: Vec<TraceRow>,
    /// Duration of the recordings, per trace, in A and B.
    pub duration_a: Spread,
    /// Same for B.
    pub duration_b: Spread,
    /// Locks in A or B, largest absolute change of mean wait first.
    pub locks: Vec<LockChange>,
}

/// Compares group `a` with group `b` (path and report of each trace).
pub fn diff_groups(a: &[(String, Report)], b: &[(String, Report)]) -> GroupDiff {
    let fa = aggregate(a, None);
    let fb = aggregate(b, None);
    let locks_a = fa
        .groups
        .into_iter()
        .next()
        .map(|g| g.locks)
        .unwrap_or_default();
    let locks_b = fb
        .groups
        .into_iter()
        .next()
        .map(|g| g.locks)
        .unwrap_or_default();
    let mut keys: BTreeMap<String, (Option<FleetLock>, Option<FleetLock>)> = BTreeMap::new();
    for l in locks_a {
        let k = l.lock.clone();
        keys.entry(k).or_default().0 = Some(l);
    }
    for l in locks_b {
        let k = l.lock.clone();
        keys.entry(k).or_default().1 = Some(l);
    }
    let mut locks: Vec<LockChange> = keys
        .into_iter()
        .map(|(lock, (la, lb))| {
            let first_use = la
                .as_ref()
                .or(lb.as_ref())
                .map(|l| l.first_use.clone())
                .unwrap_or_default();
            let (na, wa) = la.map_or((0, Spread::default()), |l| (l.traces, l.wait_ns));
            let (nb, wb) = lb.map_or((0, Spread::default()), |l| (l.traces, l.wait_ns));
            let se = (wa.stddev.powi(2) / na.max(1) as f64 + wb.stddev.powi(2) / nb.max(1) as f64)
                .sqrt();
            LockChange {
                lock,
                first_use,
                traces: (na, nb),
                wait_change_pct: (wa.mean > 0.0).then(|| (wb.mean - wa.mean) / wa.mean * 100.0),
                beyond_spread: (na >= 2 && nb >= 2).then(|| (wb.mean - wa.mean).abs() > 2.0 * se),
                wait_a: wa,
                wait_b: wb,
            }
        })
        .collect();
    locks.sort_by(|x, y| {
        let d = |l: &LockChange| (l.wait_b.mean - l.wait_a.mean).abs();
        d(y).total_cmp(&d(x)).then_with(|| x.lock.cmp(&y.lock))
    });
    let dur =
        |v: &[(String, Report)]| Spread::of(&v.iter().map(|r| r.1.duration_ns).collect::<Vec<_>>());
    GroupDiff {
        schema: DIFF_SCHEMA,
        duration_a: dur(a),
        duration_b: dur(b),
        a: fa.traces,
        b: fb.traces,
        locks,
    }
}

/// The group comparison as text: a verdict line, then one row per lock
/// (at most `top`).
pub fn diff_text(d: &GroupDiff, top: usize) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let pct = |a: f64, b: f64| {
        if a > 0.0 {
            format!("{:+.0}%", (b - a) / a * 100.0)
        } else if b > 0.0 {
            "new".to_string()
        } else {
            "-".to_string()
        }
    };
    let verdict = match d.locks.first() {
        Some(l) => format!(
            "{} wait {} per run{}",
            lockscope_text::text::term(&l.lock),
            pct(l.wait_a.mean, l.wait_b.mean),
            match l.beyond_spread {
                Some(true) => ", beyond the run-to-run spread",
                Some(false) => ", within the run-to-run spread",
                None => " (too few runs to judge the spread)",
            }
        ),
        None => "no lock in either group".to_string(),
    };
    let _ = writeln!(
        o,
        "lockscope diff: {} traces (A) against {} (B): {verdict}; program {} per run",
        d.a.len(),
        d.b.len(),
        pct(d.duration_a.mean, d.duration_b.mean)
    );
    let mut rows: Vec<Vec<String>> = vec![vec![
        "lock".into(),
        "first use".into(),
        "runs A/B".into(),
        "wait A mean".into(),
        "sd".into(),
        "wait B mean".into(),
        "sd".into(),
        "change".into(),
        "spread".into(),
    ]];
    for l in d.locks.iter().take(top) {
        rows.push(vec![
            lockscope_text::text::term(&l.lock).into_owned(),
            lockscope_text::text::term(&l.first_use).into_owned(),
            format!("{}/{}", l.traces.0, l.traces.1),
            units::ms_f64(l.wait_a.mean),
            units::ms_f64(l.wait_a.stddev),
            units::ms_f64(l.wait_b.mean),
            units::ms_f64(l.wait_b.stddev),
            pct(l.wait_a.mean, l.wait_b.mean),
            match l.beyond_spread {
                Some(true) => "beyond".into(),
                Some(false) => "within".into(),
                None => "-".into(),
            },
        ]);
    }
    o.push_str(&columns(&rows));
    if d.locks.len() > top {
        let _ = writeln!(o, "  ({} more locks)", d.locks.len() - top);
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
