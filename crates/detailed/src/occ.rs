//! Optimistic-concurrency potential of each critical section (PinCS §2.3).
//!
//! A critical section is a lock, or its acquisition site when the lock
//! lives in a heap block (dynamically allocated locks). For its instances
//! ("traces"):
//! - rdops / wrops: accesses per instance; rdwr / rd locations: distinct
//!   locations written / only read per instance; the same in cache lines
//!   (line size of the recording machine, from the trace header);
//! - waits w_c: other threads an acquisition had to wait for (those that
//!   held the lock or got it between this thread's attempt and its
//!   acquisition), averaged over all acquisitions;
//! - conflict model: trace A sees a conflict from a concurrent B if B
//!   writes a location A accessed; A finishing first is as likely as not,
//!   so C(A, B) is 0 or 0.5. Each trace is compared with the window of 2
//!   traces of every other thread closest to it in acquisition order (the
//!   one just before and the one just after), and p_c is the mean of C
//!   over all compared pairs. (The paper writes the per-trace term as a
//!   sum; its Fig. 1 numbers, 0.49 * 0.49 * 0.5 = 0.12 -> 1 - 0.88^1.63 =
//!   0.187, are those of the mean, which is also what keeps p_c a
//!   probability.) Then p_conflict = 1 - (1 - p_c)^w_c;
//! - intersect locs / cachelines: mean size of the conflicting
//!   intersection over pairs that conflict at that granularity (so false
//!   sharing shows as more lines than locations);
//! - per thread: frac_wait and frac_cs (time waiting for and holding the
//!   section over the thread's lifetime), occ_speedup = 1 / (1 + frac_cs *
//!   p/(1-p) - frac_wait), benefit = max(frac_wait - frac_cs * p/(1-p), 0);
//! - program: max OCC efficiency = sum of benefit * E(t) over sum of E(t),
//!   best-case speedup = 1 / (1 - efficiency).
//!
//! Timing comes from the same run as the access sets. The recorder's own
//! per-call cost, when the trace has it, is subtracted as in PinCS §2.2.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::detailed::{hex, AccessSet, Detailed, Section};
use crate::ulcp::{hits, intervals};

/// JSON schema identifier.
pub const SCHEMA: &str = "lockscope.occ/1";

/// Per-thread figures of one critical section.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThreadOcc {
    /// Index of the thread in the trace (0 = first).
    pub thread: u32,
    /// OS thread id.
    pub tid: u32,
    /// Shared (reader) acquisitions.
    pub s_acq: u64,
    /// Exclusive acquisitions.
    pub x_acq: u64,
    /// Fraction of the thread's lifetime spent waiting for the section.
    pub frac_wait: f64,
    /// Fraction spent inside it.
    pub frac_cs: f64,
    /// Estimated speedup of this thread with ideal OCC for this section.
    pub occ_speedup: f64,
    /// Fraction of the thread's time OCC would save (>= 0).
    pub benefit: f64,
}

/// One critical section.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SectionOcc {
    /// `lock` or `site` (dynamically allocated lock).
    pub key: String,
    /// Lock name (or the acquiring function for a site).
    pub name: String,
    /// Lock address or acquisition pc, hex.
    pub address: String,
    /// Acquisition sites (`function (file:line)`).
    pub sites: Vec<String>,
    /// Instances.
    pub instances: u64,
    /// Reads per instance.
    pub rdops: f64,
    /// Writes per instance.
    pub wrops: f64,
    /// Written locations per instance.
    pub rdwr_locs: f64,
    /// Read-only locations per instance.
    pub rd_locs: f64,
    /// Written cache lines per instance.
    pub rdwr_cachelines: f64,
    /// Read-only cache lines per instance.
    pub rd_cachelines: f64,
    /// Average number of threads waited for per acquisition (w_c).
    pub waits: f64,
    /// Pairwise conflict probability p_c.
    pub pair_conflict: f64,
    /// p_conflict = 1 - (1 - p_c)^w_c.
    pub conflict_prob: f64,
    /// Mean conflicting intersection, locations.
    pub intersect_locs: f64,
    /// Mean conflicting intersection, cache lines.
    pub intersect_cachelines: f64,
    /// Per thread.
    pub threads: Vec<ThreadOcc>,
}

/// The OCC report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OccReport {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// Cache line size used (bytes).
    pub cache_line: u64,
    /// Sections, most benefit first.
    pub sections: Vec<SectionOcc>,
    /// Fraction of all threads' time ideal OCC would save.
    pub max_occ_efficiency: f64,
    /// 1 / (1 - max_occ_efficiency).
    pub best_case_speedup: f64,
    /// Caveats.
    pub notes: Vec<String>,
}

/// Locations and lines of one instance.
struct Sets {
    acc: AccessSet,
    wr: AccessSet,
    wr_iv: Vec<(u64, u64)>,
    acc_lines: BTreeSet<u64>,
    wr_lines: BTreeSet<u64>,
}

fn lines(set: &AccessSet, line: u64) -> BTreeSet<u64> {
    let mut v = BTreeSet::new();
    for (&a, &s) in set {
        let last = a.saturating_add(s.max(1) - 1) / line;
        for l in a / line..=last.min(a / line + 64) {
            v.insert(l);
        }
    }
    v
}

fn sets(s: &Section, line: u64) -> Sets {
    let mut acc = s.reads.clone();
    for (&a, &sz) in &s.writes {
        acc.add(a, sz);
    }
    acc.seal();
    Sets {
        acc_lines: lines(&acc, line),
        wr_lines: lines(&s.writes, line),
        acc,
        wr: s.writes.clone(),
        wr_iv: intervals(&s.writes),
    }
}

/// Locations of `a` that overlap the write intervals `wr_iv`.
fn loc_intersection(a: &AccessSet, wr_iv: &[(u64, u64)]) -> usize {
    a.iter().filter(|(&x, &xs)| hits(wr_iv, x, xs)).count()
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Lock(u32, u64),
    Site(u32, u64),
}

/// Runs the analysis.
pub fn analyze(d: &mut Detailed, overhead_ns: Option<(f64, f64)>) -> OccReport {
    let line = d.cache_line.max(1);
    let mut groups: BTreeMap<Key, Vec<usize>> = BTreeMap::new();
    for (i, s) in d.sections.iter().enumerate() {
        let k = if d.is_heap(s.lock, s.acquired) {
            Key::Site(s.process, s.site)
        } else {
            Key::Lock(s.process, s.lock)
        };
        groups.entry(k).or_default().push(i);
    }
    let thread_index: BTreeMap<u32, u32> = d
        .threads
        .keys()
        .enumerate()
        .map(|(i, &t)| (t, i as u32))
        .collect();
    let life = |d: &Detailed, t: u32| -> f64 {
        d.threads
            .get(&t)
            .map_or(0.0, |s| s.end.saturating_sub(s.start) as f64)
    };
    // PinCS §2.2: every recorded acquisition costs O once per thread
    // waited for and once each for the acquire and the release.
    let (o_acq, o_rel) = overhead_ns.unwrap_or((0.0, 0.0));
    let mut sections = Vec::new();
    let mut naming: Vec<(Key, u64, BTreeSet<u64>)> = Vec::new();
    // Sum over threads of E(t) and of benefit * E(t).
    let mut total_life = 0.0;
    let mut overhead_by_thread: BTreeMap<u32, f64> = BTreeMap::new();
    let mut benefit_time = 0.0;
    for &t in d.threads.keys() {
        total_life += life(d, t);
    }
    for (key, idx) in &groups {
        let secs: Vec<&Section> = idx.iter().map(|&i| &d.sections[i]).collect();
        let n = secs.len() as f64;
        let all: Vec<Sets> = secs.iter().map(|s| sets(s, line)).collect();
        let mean = |f: &dyn Fn(usize) -> f64| (0..secs.len()).map(f).sum::<f64>() / n;
        let rdops = mean(&|i| secs[i].rdops as f64);
        let wrops = mean(&|i| secs[i].wrops as f64);
        let rdwr_locs = mean(&|i| all[i].wr.len() as f64);
        let rd_locs = mean(&|i| (all[i].acc.len() - all[i].wr.len()) as f64);
        let rdwr_lines = mean(&|i| all[i].wr_lines.len() as f64);
        let rd_lines = mean(&|i| all[i].acc_lines.difference(&all[i].wr_lines).count() as f64);

        // Waits: threads ahead of each acquisition.
        let mut waits_sum = 0.0;
        for (i, s) in secs.iter().enumerate() {
            let mut ahead = BTreeSet::new();
            for j in (0..i).rev().take(4096) {
                let o = secs[j];
                if o.thread != s.thread && o.released > s.attempt && o.acquired <= s.acquired {
                    ahead.insert(o.thread);
                }
                if o.released <= s.attempt && !o.shared && !s.shared {
                    break;
                }
            }
            waits_sum += ahead.len() as f64;
        }
        let waits = waits_sum / n;

        // Conflict model over windows of 2 per other thread.
        let mut per_thread: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, s) in secs.iter().enumerate() {
            per_thread.entry(s.thread).or_default().push(i);
        }
        let (mut p_sum, mut p_n) = (0.0, 0u64);
        let (mut il_sum, mut il_n, mut ic_sum, mut ic_n) = (0.0, 0u64, 0.0, 0u64);
        for (i, s) in secs.iter().enumerate() {
            let (mut c_sum, mut c_n) = (0.0, 0u64);
            for (&t, list) in &per_thread {
                if t == s.thread {
                    continue;
                }
                let k = list.partition_point(|&j| j < i);
                let window = [k.checked_sub(1).map(|x| list[x]), list.get(k).copied()];
                for j in window.into_iter().flatten() {
                    let locs = loc_intersection(&all[i].acc, &all[j].wr_iv);
                    let lines = all[i].acc_lines.intersection(&all[j].wr_lines).count();
                    c_n += 1;
                    if locs > 0 {
                        c_sum += 0.5;
                        il_sum += locs as f64;
                        il_n += 1;
                    }
                    if lines > 0 {
                        ic_sum += lines as f64;
                        ic_n += 1;
                    }
                }
            }
            if c_n > 0 {
                p_sum += c_sum / c_n as f64;
                p_n += 1;
            }
        }
        let pair_conflict = if p_n == 0 { 0.0 } else { p_sum / p_n as f64 };
        let conflict_prob = 1.0 - (1.0 - pair_conflict).powf(waits);
        let ratio = {
            let p = conflict_prob.min(0.999_999);
            p / (1.0 - p)
        };

        // Per thread timing.
        let mut threads = Vec::new();
        for (&t, list) in &per_thread {
            let (mut s_acq, mut x_acq, mut wait, mut hold) = (0u64, 0u64, 0.0, 0.0);
            let mut corr = 0.0;
            for &i in list {
                let s = secs[i];
                if s.shared {
                    s_acq += 1;
                } else {
                    x_acq += 1;
                }
                wait += s.acquired.saturating_sub(s.attempt) as f64;
                hold += s.released.saturating_sub(s.acquired) as f64;
                corr += waits * o_acq + o_acq + o_rel;
            }
            *overhead_by_thread.entry(t).or_default() += corr;
            let e = (life(d, t) - corr).max(1.0);
            let frac_wait = ((wait - corr).max(0.0) / e).min(1.0);
            let frac_cs = (hold / e).min(1.0);
            let occ_speedup = 1.0 / (1.0 + frac_cs * ratio - frac_wait);
            let benefit = (frac_wait - frac_cs * ratio).max(0.0);
            benefit_time += benefit * e;
            let span = d.threads.get(&t);
            threads.push(ThreadOcc {
                thread: thread_index.get(&t).copied().unwrap_or(0),
                tid: span.map_or(0, |s| s.tid),
                s_acq,
                x_acq,
                frac_wait,
                frac_cs,
                occ_speedup,
                benefit,
            });
        }
        threads.sort_by_key(|t| t.thread);

        let (kname, addr) = match *key {
            Key::Lock(_, a) => ("lock", a),
            Key::Site(_, a) => ("site", a),
        };
        let site_pcs: BTreeSet<u64> = secs.iter().map(|s| s.site).collect();
        naming.push((*key, secs[0].acquired, site_pcs));
        sections.push(SectionOcc {
            key: kname.into(),
            name: String::new(),
            address: hex(addr),
            sites: Vec::new(),
            instances: secs.len() as u64,
            rdops,
            wrops,
            rdwr_locs,
            rd_locs,
            rdwr_cachelines: rdwr_lines,
            rd_cachelines: rd_lines,
            waits,
            pair_conflict,
            conflict_prob,
            intersect_locs: if il_n == 0 { 0.0 } else { il_sum / il_n as f64 },
            intersect_cachelines: if ic_n == 0 { 0.0 } else { ic_sum / ic_n as f64 },
            threads,
        });
    }
    // Names need the symbolizer (a mutable borrow of `d`): second pass.
    for (s, (key, first_time, site_pcs)) in sections.iter_mut().zip(naming) {
        let (process, addr) = match key {
            Key::Lock(p, a) | Key::Site(p, a) => (p, a),
        };
        s.name = match key {
            Key::Lock(..) => d.lock_name(process, addr, first_time),
            Key::Site(..) => d.function(process, addr),
        };
        let mut sites: Vec<String> = site_pcs
            .into_iter()
            .take(8)
            .map(|pc| d.site(process, pc))
            .collect();
        sites.dedup();
        s.sites = sites;
    }
    let corrected_life = total_life - overhead_by_thread.values().sum::<f64>();
    let max_occ_efficiency = if corrected_life > 0.0 {
        (benefit_time / corrected_life).clamp(0.0, 0.999_999)
    } else {
        0.0
    };
    let total_benefit = |s: &SectionOcc| s.threads.iter().map(|t| t.benefit).sum::<f64>();
    sections.sort_by(|a, b| total_benefit(b).total_cmp(&total_benefit(a)));
    let mut notes = Vec::new();
    if d.lost > 0 {
        notes.push(format!("{} events were lost while recording", d.lost));
    }
    OccReport {
        schema: SCHEMA,
        cache_line: line,
        sections,
        max_occ_efficiency,
        best_case_speedup: 1.0 / (1.0 - max_occ_efficiency),
        notes,
    }
}

/// Text rendering in the layout of PinCS Fig. 1.
pub fn render_text(r: &OccReport, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    for s in &r.sections {
        let label = if s.key == "lock" { "lock" } else { "eip" };
        writeln!(
            out,
            "{label} {}    {}  [{}]",
            s.address,
            s.name,
            s.sites.join("; ")
        )?;
        writeln!(out, "      rdops {:.6}      wrops {:.6}", s.rdops, s.wrops)?;
        writeln!(
            out,
            "      rdwr locs {:.6}      rd locs {:.6}",
            s.rdwr_locs, s.rd_locs
        )?;
        writeln!(
            out,
            "rdwr cachelines {:.6} rd cachelines {:.6}",
            s.rdwr_cachelines, s.rd_cachelines
        )?;
        writeln!(
            out,
            "      waits {:.6} conflict prob {:.6}",
            s.waits, s.conflict_prob
        )?;
        writeln!(
            out,
            "  intersect locs {:.6} cachelines {:.6}",
            s.intersect_locs, s.intersect_cachelines
        )?;
        for t in &s.threads {
            writeln!(
                out,
                "thread {}: s_acq {} x_acq {} frac_wait {:.6}",
                t.thread, t.s_acq, t.x_acq, t.frac_wait
            )?;
            writeln!(
                out,
                "      frac_cs {:.6} occ_speedup {:.6}",
                t.frac_cs, t.occ_speedup
            )?;
        }
        writeln!(out)?;
    }
    writeln!(out, "Max OCC efficiency is {:.6},", r.max_occ_efficiency)?;
    writeln!(out, "Best case speedup is {:.6}", r.best_case_speedup)?;
    writeln!(out, "(cache line {} bytes)", r.cache_line)?;
    for n in &r.notes {
        writeln!(out, "note: {n}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detailed::testutil::*;

    #[test]
    fn conflict_model_and_intersections() {
        // Two threads alternate on lock A. Thread 1 always writes 0x100;
        // thread 2 writes 0x100 in its first section only, 0x108 (same
        // cache line) in the second.
        let l = 0xA;
        let t = trace(vec![
            vec![
                lock(0, l),
                wr(1, 0x100),
                unlock(2, l),
                lock(20, l),
                wr(21, 0x100),
                unlock(22, l),
            ],
            vec![
                lock(10, l),
                wr(11, 0x100),
                unlock(12, l),
                lock(30, l),
                wr(31, 0x108),
                unlock(32, l),
            ],
        ]);
        let mut d = Detailed::from_trace(&t, false);
        let r = analyze(&mut d, None);
        let s = &r.sections[0];
        assert_eq!(s.instances, 4);
        assert_eq!(
            (s.rdops, s.wrops, s.rdwr_locs, s.rd_locs),
            (0.0, 1.0, 1.0, 0.0)
        );
        // Order: a0(t1) b0(t2) a1(t1) b1(t2).
        // a0 vs {b0}: conflict. b0 vs {a0, a1}: both. a1 vs {b0, b1}: b0 only.
        // b1 vs {a1}: none. p = (1*0.5 + 1*0.5 + 0.5*0.5 + 0) / 4.
        assert!(
            (s.pair_conflict - 0.3125).abs() < 1e-9,
            "{}",
            s.pair_conflict
        );
        assert_eq!(s.intersect_locs, 1.0);
        assert_eq!(s.intersect_cachelines, 1.0);
        assert_eq!(s.waits, 0.0);
        assert_eq!(s.conflict_prob, 0.0, "no waiting: w_c = 0");
    }

    #[test]
    fn heap_locks_are_keyed_by_acquisition_site() {
        use lockscope_format::{Event, Op};
        // The lock at 0x5000 lies in a heap block: two acquisition sites
        // give two critical sections.
        let alloc = Event {
            time: 0,
            op: Op::Alloc as u8,
            addr: 0x5000,
            arg: 64,
            ..Event::default()
        };
        let at = |t: u64, site: u64| Event {
            site,
            ..lock(t, 0x5000)
        };
        let t = trace(vec![vec![
            alloc,
            at(1, 0x111),
            unlock(2, 0x5000),
            at(3, 0x222),
            unlock(4, 0x5000),
        ]]);
        let mut d = Detailed::from_trace(&t, false);
        let r = analyze(&mut d, None);
        let mut keys: Vec<(&str, &str)> = r
            .sections
            .iter()
            .map(|s| (s.key.as_str(), s.address.as_str()))
            .collect();
        keys.sort();
        assert_eq!(keys, [("site", "0x111"), ("site", "0x222")]);
    }

    #[test]
    fn waits_count_threads_ahead() {
        let l = 0xA;
        let t = trace(vec![
            vec![lock(0, l), unlock(10, l)],
            vec![lock_begin(2, l), lock_done_contended(10, l), unlock(20, l)],
            vec![lock_begin(3, l), lock_done_contended(20, l), unlock(30, l)],
        ]);
        let mut d = Detailed::from_trace(&t, false);
        let r = analyze(&mut d, None);
        // 0 + 1 + 2 threads ahead.
        assert!((r.sections[0].waits - 1.0).abs() < 1e-9);
    }
}
