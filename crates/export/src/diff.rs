//! Before/after comparison of two reports (`lockscope diff A B`): the same
//! program recorded twice, before and after a fix, or with another lock
//! algorithm. Locks are matched by what stays the same between runs,
//! never by address (ASLR moves everything): a lock's symbol, else its
//! class member (`ThreadPool::m_`), else the place it was first used
//! (`function (file:line)`), with its kind and the exec generation of its
//! process (not counting `lockscope run`'s own image: a swapped run's
//! program is the exec of `run`'s child); several unnamed locks first used
//! at the same place are one row (their sums). A mutex that `lockscope run
//! --lock ALG` replaced keeps its kind (`mutex`), so that it pairs with the
//! plain run's, and carries its algorithm (`swapped_lock_a`/`_b`). Sites
//! are matched by their user frame name.

use std::collections::BTreeMap;

use lockscope_report::Report;
use serde::Serialize;

/// Version tag of the JSON output.
pub const SCHEMA: &str = "lockscope.diff/1";

/// A figure before and after.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct Change {
    /// In A.
    pub before: f64,
    /// In B.
    pub after: f64,
    /// (after - before) / before, as a percentage; null when before is 0.
    pub percent: Option<f64>,
}

impl Change {
    /// The change from `before` to `after`.
    pub fn new(before: f64, after: f64) -> Change {
        Change {
            before,
            after,
            percent: (before != 0.0).then(|| 100.0 * (after - before) / before),
        }
    }
    /// `-92%`, `+3%`, `new` (from 0), or `=` (0 to 0).
    pub fn short(&self) -> String {
        match self.percent {
            Some(p) if p.abs() < 0.5 => "±0%".into(),
            Some(p) => format!("{p:+.0}%"),
            None if self.after == 0.0 => "=".into(),
            None => "new".into(),
        }
    }
}

/// One matched site of a lock.
#[derive(Clone, Debug, Serialize)]
pub struct SiteDiff {
    /// The site (user frame).
    pub site: String,
    /// Acquisitions.
    pub acquisitions: Change,
    /// Wait, ns.
    pub wait_ns: Change,
    /// Hold, ns.
    pub hold_ns: Change,
}

/// One matched lock.
#[derive(Clone, Debug, Serialize)]
pub struct LockDiff {
    /// Symbol, else `first use at SITE`.
    pub lock: String,
    /// mutex | rwlock | spin | futex.
    pub kind: String,
    /// The algorithm that replaced this mutex in A (`lockscope run
    /// --lock`); absent when glibc's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swapped_lock_a: Option<String>,
    /// The same in B.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swapped_lock_b: Option<String>,
    /// Present in A.
    pub in_a: bool,
    /// Present in B.
    pub in_b: bool,
    /// Acquisitions.
    pub acquisitions: Change,
    /// Contended acquisitions / acquisitions.
    pub contended_fraction: Change,
    /// Total wait, ns.
    pub wait_ns: Change,
    /// Total hold, ns.
    pub hold_ns: Change,
    /// Sites, by their wait in A then B.
    pub sites: Vec<SiteDiff>,
    /// The run-to-run spread of the wait's change this comparison can
    /// estimate, percent: from the spread of the wait between the threads
    /// that used the lock in each run (the total of n threads whose waits
    /// vary by a standard deviation s varies by about s * sqrt(n)), both
    /// runs combined. Null when a run has fewer than 2 such threads or no
    /// wait.
    pub wait_spread_percent: Option<f64>,
    /// Whether the wait's change exceeds twice that spread (null when the
    /// spread is unknown). A change within it may be run-to-run noise.
    pub wait_change_exceeds_spread: Option<bool>,
}

/// The comparison.
#[derive(Clone, Debug, Serialize)]
pub struct Diff {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// Command lines of A and B.
    pub commands: [String; 2],
    /// Wall time of the recording, ns.
    pub wall_ns: Change,
    /// Sum of the threads' lifetimes, ns.
    pub thread_time_ns: Change,
    /// Total wait for locks, ns.
    pub lock_wait_ns: Change,
    /// Locks, by wait in A (then B), descending.
    pub locks: Vec<LockDiff>,
    /// One line: the lock that waited most and the program's wall time.
    pub verdict: String,
    /// What makes the comparison doubtful: A and B are different
    /// programs, or ran with different arguments.
    pub warnings: Vec<String>,
}

#[derive(Default, Clone)]
struct Acc {
    acq: u64,
    contended: u64,
    wait: u64,
    hold: u64,
    /// Wait of each thread that used the lock, ns (for the spread).
    thread_waits: Vec<u64>,
    swapped_lock: Option<String>,
    sites: BTreeMap<String, (u64, u64, u64)>,
}

fn key_of(l: &lockscope_report::report::LockOut) -> (String, String) {
    use lockscope_symbols::locknames::NamedBy;
    // The name without the `#N` that made it unique in one run: two
    // pools' `ThreadPool::m_` are one row, as unnamed locks first used at
    // one place are. A lock named by its first use keeps the finer
    // `function (file:line)` of that use.
    let name = match l.named_by {
        NamedBy::Symbol | NamedBy::Member => l.label_base.clone(),
        _ => match &l.name {
            Some(n) => n.clone(),
            None => format!("first use at {}", l.first_use),
        },
    };
    let name = if l.program_generation > 0 {
        format!("{name} (exec {})", l.program_generation)
    } else {
        name
    };
    (name, l.kind.to_string())
}

fn locks_of(r: &Report) -> BTreeMap<(String, String), Acc> {
    let mut m: BTreeMap<(String, String), Acc> = BTreeMap::new();
    for l in &r.locks {
        let a = m.entry(key_of(l)).or_default();
        a.acq += l.acquisitions;
        a.contended += l.contended;
        a.wait += l.wait_ns.total;
        a.hold += l.hold_ns.total;
        a.thread_waits.extend(
            l.threads
                .iter()
                .filter(|t| t.acquisitions + t.contended > 0)
                .map(|t| t.wait_ns),
        );
        if a.swapped_lock.is_none() {
            a.swapped_lock.clone_from(&l.swapped_lock);
        }
        for s in &l.sites {
            let e = a.sites.entry(s.name.clone()).or_default();
            e.0 += s.acquisitions;
            e.1 += s.wait_ns;
            e.2 += s.hold_ns;
        }
    }
    m
}

fn c(a: u64, b: u64) -> Change {
    Change::new(a as f64, b as f64)
}

/// Relative spread of a total from its parts (see
/// [`LockDiff::wait_spread_percent`]): the parts' standard deviation
/// times sqrt(n), over the total. None with fewer than 2 parts or a zero
/// total.
fn relative_spread(parts: &[u64]) -> Option<f64> {
    let n = parts.len();
    let total: f64 = parts.iter().map(|&w| w as f64).sum();
    if n < 2 || total <= 0.0 {
        return None;
    }
    let mean = total / n as f64;
    let var = parts
        .iter()
        .map(|&w| (w as f64 - mean).powi(2))
        .sum::<f64>()
        / (n - 1) as f64;
    Some(var.sqrt() * (n as f64).sqrt() / total)
}

/// The program a command line runs: after `lockscope run ... --` (a
/// swapped run's command is `lockscope run --lock ALG -- PROG ARGS`), its
/// file name and arguments.
fn program_of(cmd: &[String]) -> (String, Vec<String>) {
    let mut c = cmd;
    if c.len() > 2 && c[1] == "run" && c[0].ends_with("lockscope") {
        if let Some(i) = c.iter().position(|a| a == "--") {
            c = &c[i + 1..];
        }
    }
    let prog = c.first().map_or(String::new(), |p| {
        std::path::Path::new(p)
            .file_name()
            .map_or(p.clone(), |f| f.to_string_lossy().into_owned())
    });
    (prog, c.iter().skip(1).cloned().collect())
}

/// Compares report `a` (before) with report `b` (after).
pub fn diff(a: &Report, b: &Report) -> Diff {
    let (la, lb) = (locks_of(a), locks_of(b));
    let mut keys: Vec<&(String, String)> = la.keys().chain(lb.keys()).collect();
    keys.sort();
    keys.dedup();
    let empty = Acc::default();
    let mut locks: Vec<LockDiff> = keys
        .into_iter()
        .map(|k| {
            let x = la.get(k).unwrap_or(&empty);
            let y = lb.get(k).unwrap_or(&empty);
            let frac = |acc: &Acc| {
                if acc.acq == 0 {
                    0.0
                } else {
                    acc.contended as f64 / acc.acq as f64
                }
            };
            let mut names: Vec<&String> = x.sites.keys().chain(y.sites.keys()).collect();
            names.sort();
            names.dedup();
            let z = (0, 0, 0);
            let mut sites: Vec<SiteDiff> = names
                .into_iter()
                .map(|n| {
                    let p = x.sites.get(n).unwrap_or(&z);
                    let q = y.sites.get(n).unwrap_or(&z);
                    SiteDiff {
                        site: n.clone(),
                        acquisitions: c(p.0, q.0),
                        wait_ns: c(p.1, q.1),
                        hold_ns: c(p.2, q.2),
                    }
                })
                .collect();
            sites.sort_by(|s, t| {
                (t.wait_ns.before, t.wait_ns.after)
                    .partial_cmp(&(s.wait_ns.before, s.wait_ns.after))
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
            let spread = match (
                relative_spread(&x.thread_waits),
                relative_spread(&y.thread_waits),
            ) {
                (Some(p), Some(q)) => Some(100.0 * (p * p + q * q).sqrt()),
                _ => None,
            };
            let wait_ns = c(x.wait, y.wait);
            LockDiff {
                wait_spread_percent: spread,
                wait_change_exceeds_spread: spread
                    .zip(wait_ns.percent)
                    .map(|(s, p)| p.abs() > 2.0 * s),
                lock: k.0.clone(),
                kind: k.1.clone(),
                swapped_lock_a: x.swapped_lock.clone(),
                swapped_lock_b: y.swapped_lock.clone(),
                in_a: la.contains_key(k),
                in_b: lb.contains_key(k),
                acquisitions: c(x.acq, y.acq),
                contended_fraction: Change::new(frac(x), frac(y)),
                wait_ns,
                hold_ns: c(x.hold, y.hold),
                sites,
            }
        })
        .collect();
    locks.sort_by(|s, t| {
        (t.wait_ns.before, t.wait_ns.after)
            .partial_cmp(&(s.wait_ns.before, s.wait_ns.after))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let wall = c(a.duration_ns, b.duration_ns);
    let wait_a: u64 = a.locks.iter().map(|l| l.wait_ns.total).sum();
    let wait_b: u64 = b.locks.iter().map(|l| l.wait_ns.total).sum();
    let verdict = match locks.first() {
        Some(l) if l.wait_ns.before > 0.0 || l.wait_ns.after > 0.0 => format!(
            "{}{} wait {}{}, program {}",
            l.lock,
            swap_mark(l),
            l.wait_ns.short(),
            match (l.wait_change_exceeds_spread, l.wait_spread_percent) {
                (Some(false), Some(sp)) => {
                    format!(" (within the run-to-run spread, about ±{sp:.0}%)")
                }
                _ => String::new(),
            },
            wall.short()
        ),
        _ => format!("no lock wait in either run, program {}", wall.short()),
    };
    let (pa, aa) = program_of(&a.command);
    let (pb, ab) = program_of(&b.command);
    let mut warnings = Vec::new();
    if pa != pb {
        warnings.push(format!(
            "A and B are different programs (`{pa}` and `{pb}`): locks are matched by name only, \
             and their times measure different work"
        ));
    } else if aa != ab {
        warnings.push(
            "A and B ran with different arguments: the comparison holds if they did the same work"
                .to_string(),
        );
    }
    Diff {
        schema: SCHEMA,
        commands: [a.command.join(" "), b.command.join(" ")],
        wall_ns: wall,
        thread_time_ns: c(a.verdict.thread_time_ns, b.verdict.thread_time_ns),
        lock_wait_ns: c(wait_a, wait_b),
        locks,
        verdict,
        warnings,
    }
}

/// ` [pthread -> ttas]` for a mutex whose algorithm differs between the
/// runs, else nothing (two plain runs print as before).
fn swap_mark(l: &LockDiff) -> String {
    if l.swapped_lock_a == l.swapped_lock_b {
        return String::new();
    }
    let alg = |s: &Option<String>| s.clone().unwrap_or_else(|| "pthread".into());
    format!(
        " [{} -> {}]",
        alg(&l.swapped_lock_a),
        alg(&l.swapped_lock_b)
    )
}

use lockscope_text::units::ms_f64 as ms;

/// Milliseconds in at most 7 characters: `318.2`, `12.34`, `0.012`.
fn short_ms(ns: f64) -> String {
    let v = ns / 1e6;
    if v >= 1000.0 {
        format!("{v:.0}")
    } else if v >= 100.0 {
        format!("{v:.1}")
    } else if v >= 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// `318.2 -> 0.000 -100%`, 24 characters; `~` after the change when it is
/// within the run-to-run spread.
fn span(c: &Change, within: bool) -> String {
    // Growth past +999% as a factor, so that the column keeps its width.
    let change = match c.percent {
        Some(p) if p > 999.0 => format!("x{:.0}", c.after / c.before),
        _ => c.short(),
    };
    format!(
        "{:>7} -> {:>7} {:>5}{}",
        short_ms(c.before),
        short_ms(c.after),
        change,
        if within { "~" } else { "" }
    )
}

/// `s` in at most `w` characters: the middle elided, the end (a site's
/// `(file:line)`) kept.
fn fit(s: &str, w: usize) -> String {
    let n = s.chars().count();
    if n <= w {
        return s.to_string();
    }
    let tail = w * 2 / 3;
    let head = w - tail - 3;
    let h: String = s.chars().take(head).collect();
    let t: String = s.chars().skip(n - tail).collect();
    format!("{h}...{t}")
}

/// The comparison as text, at most 100 columns wide (names elided in the
/// middle, as `report` does).
pub fn text(d: &Diff) -> String {
    use std::fmt::Write;
    const LOCK_W: usize = 28;
    let mut s = String::new();
    let _ = writeln!(s, "{}", d.verdict);
    for w in &d.warnings {
        let _ = writeln!(s, "WARNING: {w}");
    }
    let _ = writeln!(s, "A: {}\nB: {}\n", d.commands[0], d.commands[1]);
    for (name, ch) in [
        ("wall time", d.wall_ns),
        ("thread time", d.thread_time_ns),
        ("lock wait", d.lock_wait_ns),
    ] {
        let _ = writeln!(
            s,
            "{name:<12} {:>14} -> {:>14}  {}",
            ms(ch.before),
            ms(ch.after),
            ch.short()
        );
    }
    let _ = writeln!(
        s,
        "\n{:<LOCK_W$} {:>6} {:>25} {:>24} {:>13}",
        "lock", "acq", "wait ms", "hold ms", "contended"
    );
    let mut any_within = false;
    for l in &d.locks {
        let mark = match (l.in_a, l.in_b) {
            (true, false) => " (only in A)",
            (false, true) => " (only in B)",
            _ => "",
        };
        let within = l.wait_change_exceeds_spread == Some(false);
        any_within |= within;
        let _ = writeln!(
            s,
            "{:<LOCK_W$} {:>6} {:>25} {:>24} {:>13}",
            fit(&format!("{}{}{mark}", l.lock, swap_mark(l)), LOCK_W),
            l.acquisitions.short(),
            span(&l.wait_ns, within),
            span(&l.hold_ns, false),
            format!(
                "{:.1}%->{:.1}%",
                100.0 * l.contended_fraction.before,
                100.0 * l.contended_fraction.after
            ),
        );
        for st in l.sites.iter().take(3) {
            let _ = writeln!(
                s,
                "    {:<58} wait {}",
                fit(&st.site, 58),
                span(&st.wait_ns, false)
            );
        }
    }
    if any_within {
        let _ = writeln!(
            s,
            "\n~ the wait changed by less than twice the spread between the lock's threads: \
             maybe run-to-run noise"
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes() {
        assert_eq!(Change::new(100.0, 8.0).short(), "-92%");
        assert_eq!(Change::new(100.0, 100.2).short(), "±0%");
        assert_eq!(Change::new(0.0, 5.0).short(), "new");
        assert_eq!(Change::new(0.0, 0.0).short(), "=");
        assert_eq!(Change::new(0.0, 5.0).percent, None);
    }

    #[test]
    fn the_spread_of_a_total_grows_with_the_spread_of_its_parts() {
        assert_eq!(relative_spread(&[5]), None);
        assert_eq!(relative_spread(&[0, 0]), None);
        assert_eq!(relative_spread(&[10, 10, 10, 10]), Some(0.0));
        // sd 10 (sample), n 2, total 20: 10 * sqrt(2) / 20.
        let r = relative_spread(&[3, 17]).unwrap();
        assert!(
            (r - (98f64).sqrt() * 2f64.sqrt() / 20.0).abs() < 1e-12,
            "{r}"
        );
    }

    #[test]
    fn a_swapped_run_is_the_same_program_as_the_plain_one() {
        let plain = vec!["./prog".to_string(), "4".to_string()];
        let swapped: Vec<String> = [
            "/usr/bin/lockscope",
            "run",
            "--lock",
            "ttas",
            "--",
            "/x/prog",
            "4",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(program_of(&plain), program_of(&swapped));
        assert_ne!(program_of(&plain).0, program_of(&["./other".to_string()]).0);
    }

    #[test]
    fn long_names_keep_their_end() {
        let f = fit("a_very_long_function_name_here (some/dir/file.c:1234)", 28);
        assert_eq!(f.chars().count(), 28);
        assert!(f.ends_with("file.c:1234)"), "{f}");
    }
}
