//! Unnecessary lock contention pairs (PerfPlay §2.1, Algorithm 1).
//!
//! Every pair of consecutive critical sections of one lock run by
//! different threads is classified from the two sections' read and write
//! sets:
//! - `null_lock`: one of them touched no shared memory;
//! - `read_read`: neither wrote;
//! - `disjoint_write`: someone wrote, but no location one wrote was
//!   accessed by the other;
//! - `benign`: the only common locations are written by both, with the
//!   same value at both releases (redundant writes). PerfPlay decides this
//!   by replaying the pair in reverse order; the runtime's release values
//!   decide it here without a replay. A location one section reads and the
//!   other writes is a conflict even if the value did not change: we do
//!   not know the value read;
//! - `conflict`: a true conflict.
//!
//! Locations are byte ranges: a 4-byte write at `a` and a 1-byte read at
//! `a+2` overlap. Only memory other than the accessing thread's own stack
//! is in the sets (the runtime filters stacks), so a section that only
//! touches locals is a null lock, as in PerfPlay's Fig. 3.
//!
//! Two sections that both held a reader-writer lock in read mode do not
//! serialize each other and are not paired.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::detailed::{hex, AccessSet, Detailed, Section};

/// JSON schema identifier.
pub const SCHEMA: &str = "lockscope.ulcp/1";

/// Most data objects listed per site pair.
const MAX_OBJECTS: usize = 8;

/// Kind of a pair of consecutive critical sections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// One section touched no shared memory.
    NullLock,
    /// Neither section wrote.
    ReadRead,
    /// Writes, but to locations the other section did not access.
    DisjointWrite,
    /// Only common locations are writes of identical values.
    Benign,
    /// A true conflict.
    Conflict,
}

impl Kind {
    /// Stable name used in text and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Kind::NullLock => "null_lock",
            Kind::ReadRead => "read_read",
            Kind::DisjointWrite => "disjoint_write",
            Kind::Benign => "benign",
            Kind::Conflict => "conflict",
        }
    }
    /// All kinds, in report order.
    pub const ALL: [Kind; 5] = [
        Kind::NullLock,
        Kind::ReadRead,
        Kind::DisjointWrite,
        Kind::Benign,
        Kind::Conflict,
    ];
}

/// Merged, sorted, disjoint byte intervals [start, end).
pub(crate) fn intervals(set: &AccessSet) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = Vec::with_capacity(set.len());
    for (&a, &s) in set {
        let e = a.saturating_add(s.max(1));
        match v.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(e),
            _ => v.push((a, e)),
        }
    }
    v
}

pub(crate) fn hits(iv: &[(u64, u64)], addr: u64, size: u64) -> bool {
    let end = addr.saturating_add(size.max(1));
    let i = iv.partition_point(|&(s, _)| s < end);
    i > 0 && iv[i - 1].1 > addr
}

fn any_hit(set: &AccessSet, iv: &[(u64, u64)]) -> bool {
    set.iter().any(|(&a, &s)| hits(iv, a, s))
}

/// Algorithm 1 extended with the benign test (see the module docs).
pub fn classify(a: &Section, b: &Section) -> Kind {
    if a.is_empty() || b.is_empty() {
        return Kind::NullLock;
    }
    if a.writes.is_empty() && b.writes.is_empty() {
        return Kind::ReadRead;
    }
    let (aw, br, bw) = (
        intervals(&a.writes),
        intervals(&b.reads),
        intervals(&b.writes),
    );
    let rw = any_hit(&a.reads, &bw);
    let wr = any_hit(&a.writes, &br);
    let ww = any_hit(&a.writes, &bw);
    if !rw && !wr && !ww {
        return Kind::DisjointWrite;
    }
    if rw || wr {
        return Kind::Conflict;
    }
    let same = |x: &Section, y: &Section, yw: &[(u64, u64)]| {
        x.writes
            .iter()
            .filter(|(&a, &s)| hits(yw, a, s))
            .all(|(a, s)| {
                y.writes.get(a) == Some(s)
                    && matches!((x.release_values.get(a), y.release_values.get(a)),
                            (Some(v), Some(w)) if v == w)
            })
    };
    if same(a, b, &bw) && same(b, a, &aw) {
        Kind::Benign
    } else {
        Kind::Conflict
    }
}

/// The locations that make a pair what it is, each with the time of the
/// section it comes from (to name heap blocks while they are live): the
/// conflicting ones for conflict/benign, the common reads for read-read
/// (else all reads), the writes for disjoint-write.
fn involved(a: &Section, b: &Section, kind: Kind) -> Vec<(u64, u64)> {
    let pick = |x: &Section, set: &AccessSet, iv: &[(u64, u64)]| -> Vec<(u64, u64)> {
        set.iter()
            .filter(|(&a, &s)| hits(iv, a, s))
            .map(|(&a, _)| (a, x.released))
            .collect()
    };
    let all = |x: &Section, set: &AccessSet| -> Vec<(u64, u64)> {
        set.keys().map(|&a| (a, x.released)).collect()
    };
    let mut v: Vec<(u64, u64)> = match kind {
        Kind::NullLock => Vec::new(),
        Kind::ReadRead => {
            let c = pick(a, &a.reads, &intervals(&b.reads));
            if c.is_empty() {
                let mut c = all(a, &a.reads);
                c.extend(all(b, &b.reads));
                c
            } else {
                c
            }
        }
        Kind::DisjointWrite => {
            let mut c = all(a, &a.writes);
            c.extend(all(b, &b.writes));
            c
        }
        Kind::Benign | Kind::Conflict => {
            let (aw, bw) = (intervals(&a.writes), intervals(&b.writes));
            let mut c = pick(a, &a.writes, &bw);
            c.extend(pick(a, &a.reads, &bw));
            c.extend(pick(b, &b.reads, &aw));
            c
        }
    };
    v.sort_unstable();
    v.dedup_by_key(|x| x.0);
    v
}

/// Pair counts per kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Null-lock pairs.
    pub null_lock: u64,
    /// Read-read pairs.
    pub read_read: u64,
    /// Disjoint-write pairs.
    pub disjoint_write: u64,
    /// Benign pairs.
    pub benign: u64,
    /// True conflicts.
    pub conflict: u64,
}

impl Counts {
    fn add(&mut self, k: Kind) {
        *self.get_mut(k) += 1;
    }
    fn get_mut(&mut self, k: Kind) -> &mut u64 {
        match k {
            Kind::NullLock => &mut self.null_lock,
            Kind::ReadRead => &mut self.read_read,
            Kind::DisjointWrite => &mut self.disjoint_write,
            Kind::Benign => &mut self.benign,
            Kind::Conflict => &mut self.conflict,
        }
    }
    /// Count of one kind.
    pub fn get(&self, k: Kind) -> u64 {
        match k {
            Kind::NullLock => self.null_lock,
            Kind::ReadRead => self.read_read,
            Kind::DisjointWrite => self.disjoint_write,
            Kind::Benign => self.benign,
            Kind::Conflict => self.conflict,
        }
    }
    /// Unnecessary pairs (everything but true conflicts).
    pub fn unnecessary(&self) -> u64 {
        self.null_lock + self.read_read + self.disjoint_write + self.benign
    }
}

/// Pairs of one kind between two code sites.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SitePair {
    /// Function containing the first section's acquisition.
    pub first: String,
    /// Function containing the second section's acquisition.
    pub second: String,
    /// Kind name.
    pub kind: String,
    /// Number of pairs.
    pub count: u64,
    /// Data objects involved (see the module docs), at most 8.
    pub objects: Vec<String>,
}

/// Result for one lock.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LockUlcp {
    /// Symbol or allocation context of the lock.
    pub name: String,
    /// Address, hex.
    pub address: String,
    /// Critical section instances.
    pub sections: u64,
    /// Pairs of consecutive sections from different threads, by kind.
    pub pairs: Counts,
    /// Per pair of acquisition functions and kind, most frequent first.
    pub site_pairs: Vec<SitePair>,
}

/// The ULCP report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct UlcpReport {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// Locks with at least one pair, most unnecessary pairs first.
    pub locks: Vec<LockUlcp>,
    /// Totals over all locks.
    pub total: Counts,
    /// Caveats (events lost, missing symbols).
    pub notes: Vec<String>,
}

/// Runs the analysis.
pub fn analyze(d: &mut Detailed) -> UlcpReport {
    let mut by_lock: BTreeMap<(u32, u64), Vec<usize>> = BTreeMap::new();
    for (i, s) in d.sections.iter().enumerate() {
        by_lock.entry((s.process, s.lock)).or_default().push(i);
    }
    let mut locks = Vec::new();
    let mut total = Counts::default();
    for ((process, lock), idx) in by_lock {
        let mut counts = Counts::default();
        type Key = (String, String, Kind);
        let mut sites: BTreeMap<Key, (u64, BTreeSet<String>)> = BTreeMap::new();
        for w in idx.windows(2) {
            let (a, b) = (&d.sections[w[0]], &d.sections[w[1]]);
            if a.thread == b.thread || (a.shared && b.shared) {
                continue;
            }
            let kind = classify(a, b);
            counts.add(kind);
            total.add(kind);
            let (sa, sb) = (a.site, b.site);
            let locs = involved(a, b, kind);
            let first = d.function(process, sa);
            let second = d.function(process, sb);
            let e = sites.entry((first, second, kind)).or_default();
            e.0 += 1;
            for (addr, time) in locs {
                if e.1.len() >= MAX_OBJECTS {
                    break;
                }
                let name = d.object_base(process, addr, time);
                e.1.insert(name);
            }
        }
        let first_time = d.sections[idx[0]].acquired;
        let name = d.lock_name(process, lock, first_time);
        let mut site_pairs: Vec<SitePair> = sites
            .into_iter()
            .map(|((first, second, kind), (count, objs))| SitePair {
                first,
                second,
                kind: kind.name().into(),
                count,
                objects: objs.into_iter().collect(),
            })
            .collect();
        site_pairs.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.kind.cmp(&b.kind)));
        locks.push(LockUlcp {
            name,
            address: hex(lock),
            sections: idx.len() as u64,
            pairs: counts,
            site_pairs,
        });
    }
    locks.sort_by(|a, b| {
        b.pairs
            .unnecessary()
            .cmp(&a.pairs.unnecessary())
            .then_with(|| a.address.cmp(&b.address))
    });
    let mut notes = Vec::new();
    if d.lost > 0 {
        notes.push(format!(
            "{} events were lost while recording: sets may be incomplete",
            d.lost
        ));
    }
    if d.sections.iter().all(|s| s.is_empty()) && !d.sections.is_empty() {
        notes.push(
            "no memory access was recorded inside any critical section: was the program \
             built with `lockscope cc`?"
                .into(),
        );
    }
    notes.extend(d.symbol_problems().iter().cloned());
    UlcpReport {
        schema: SCHEMA,
        locks,
        total,
        notes,
    }
}

/// Text rendering: a table per lock like PerfPlay's Table 1, then the
/// site pairs.
pub fn render_text(r: &UlcpReport, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    writeln!(
        out,
        "ULCP: consecutive critical sections of one lock from different threads (PerfPlay Alg. 1)"
    )?;
    writeln!(
        out,
        "{:<40} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "lock", "sections", "null", "rd-rd", "disj-wr", "benign", "conflict"
    )?;
    for l in &r.locks {
        let p = &l.pairs;
        writeln!(
            out,
            "{:<40} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}",
            format!("{} ({})", l.name, l.address),
            l.sections,
            p.null_lock,
            p.read_read,
            p.disjoint_write,
            p.benign,
            p.conflict
        )?;
    }
    let t = &r.total;
    writeln!(
        out,
        "{:<40} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "total", "", t.null_lock, t.read_read, t.disjoint_write, t.benign, t.conflict
    )?;
    for l in &r.locks {
        if l.site_pairs.is_empty() {
            continue;
        }
        writeln!(
            out,
            "\n{} ({}): pairs by acquisition site",
            l.name, l.address
        )?;
        for s in &l.site_pairs {
            writeln!(
                out,
                "  {:>7}  {:<15} {} -> {}",
                s.count, s.kind, s.first, s.second
            )?;
            if !s.objects.is_empty() {
                writeln!(out, "           data: {}", s.objects.join(", "))?;
            }
        }
    }
    for n in &r.notes {
        writeln!(out, "note: {n}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detailed::testutil::*;

    fn sec(reads: &[(u64, u64)], writes: &[(u64, u64)], rv: &[(u64, u64)]) -> Section {
        Section {
            reads: reads.iter().copied().collect(),
            writes: writes.iter().copied().collect(),
            release_values: rv.iter().copied().collect(),
            ..Section::default()
        }
    }

    #[test]
    fn algorithm_1_with_benign() {
        let none = sec(&[], &[], &[]);
        let r = sec(&[(0x10, 4)], &[], &[]);
        let r2 = sec(&[(0x20, 4)], &[], &[]);
        let w = sec(&[(0x30, 4)], &[(0x30, 4)], &[(0x30, 1)]);
        let w2 = sec(&[(0x40, 4)], &[(0x40, 4)], &[(0x40, 1)]);
        let same1 = sec(&[], &[(0x50, 4)], &[(0x50, 1)]);
        let same2 = sec(&[], &[(0x50, 4)], &[(0x50, 1)]);
        let diff = sec(&[], &[(0x50, 4)], &[(0x50, 2)]);
        let inc1 = sec(&[(0x60, 8)], &[(0x60, 8)], &[(0x60, 5)]);
        let inc2 = sec(&[(0x60, 8)], &[(0x60, 8)], &[(0x60, 6)]);
        let byte_in = sec(&[(0x62, 1)], &[], &[]);
        assert_eq!(classify(&none, &w), Kind::NullLock);
        assert_eq!(classify(&r, &none), Kind::NullLock);
        assert_eq!(classify(&r, &r2), Kind::ReadRead);
        assert_eq!(classify(&r, &r), Kind::ReadRead);
        assert_eq!(classify(&w, &w2), Kind::DisjointWrite);
        assert_eq!(classify(&r, &w), Kind::DisjointWrite);
        assert_eq!(classify(&same1, &same2), Kind::Benign);
        assert_eq!(classify(&same1, &diff), Kind::Conflict);
        assert_eq!(classify(&inc1, &inc2), Kind::Conflict);
        assert_eq!(classify(&byte_in, &inc1), Kind::Conflict, "ranges overlap");
        let no_rv = sec(&[], &[(0x50, 4)], &[]);
        assert_eq!(classify(&same1, &no_rv), Kind::Conflict, "unknown value");
    }

    #[test]
    fn pairs_only_across_threads_and_counted_per_lock() {
        let l = 0xA;
        let t = trace(vec![
            vec![
                lock(10, l),
                rd(11, 0x100),
                unlock(12, l),
                lock(13, l),
                rd(14, 0x100),
                unlock(15, l),
            ],
            vec![
                lock(20, l),
                rd(21, 0x100),
                unlock(22, l),
                lock(30, l),
                unlock(31, l),
            ],
        ]);
        let mut d = Detailed::from_trace(&t, false);
        let r = analyze(&mut d);
        assert_eq!(r.locks.len(), 1);
        let p = &r.locks[0].pairs;
        // Order: t1 t1 t2 t2 -> pairs (t1,t2) only once.
        assert_eq!(
            (
                p.null_lock,
                p.read_read,
                p.disjoint_write,
                p.benign,
                p.conflict
            ),
            (0, 1, 0, 0, 0)
        );
        assert_eq!(r.locks[0].sections, 4);
    }
}
