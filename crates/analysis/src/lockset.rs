//! Lockset analysis: the Eraser state machine over every recorded access.
//!
//! Each location (access address) goes virgin -> exclusive (first thread)
//! -> shared (read by a second thread) or shared-modified (written by a
//! second thread, or written while shared). Leaving exclusive, its
//! candidate set C is the set of locks held by that access; every later
//! access intersects C with the locks it holds (only locks held in write
//! mode count for writes: Eraser's reader-writer refinement). A
//! shared-modified location whose C becomes empty is unprotected. The
//! exclusive phase is what lets a thread initialize data without locks
//! before publishing it.
//!
//! A data object (a static, or the heap blocks of one allocation context)
//! is consistently protected by lock L when L is in the effective set of
//! each of its locations: C for shared ones, and for locations only one
//! thread ever touched, the locks held at all of their accesses.
//!
//! Accesses outside critical sections are recorded only when the program
//! ran with `LOCKSCOPE_ALL_ACCESSES=1` (see the README, "Lockset: recorded on request", for why this
//! is done offline). Without them, unprotected data cannot be seen, and
//! the report says so.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use crate::detailed::{hex, Detailed};

/// JSON schema identifier.
pub const SCHEMA: &str = "lockscope.lockset/1";

/// Most access sites listed per unprotected object.
const MAX_SITES: usize = 12;

/// Eraser state of a location.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Never accessed.
    Virgin,
    /// Accessed by one thread only (its trace id).
    Exclusive(u32),
    /// Read by several threads, written by at most the first.
    Shared,
    /// Written after becoming shared, or written by a second thread.
    SharedModified,
}

impl State {
    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            State::Virgin => "virgin",
            State::Exclusive(_) => "exclusive",
            State::Shared => "shared",
            State::SharedModified => "shared-modified",
        }
    }
}

struct Loc {
    state: State,
    /// Candidate set (valid once shared).
    cand: Vec<u64>,
    /// Locks held at every access so far.
    always: Option<Vec<u64>>,
    /// Set when C became empty in shared-modified.
    race: bool,
    process: u32,
    first_time: u64,
    sites: BTreeSet<u64>,
}

fn intersect(a: &mut Vec<u64>, b: &[u64]) {
    a.retain(|x| b.binary_search(x).is_ok());
}

/// One step of the state machine: the access of `thread` (`write`) with
/// `held` (the relevant locks, sorted). Returns true when this access made
/// the location unprotected.
pub fn step(
    state: &mut State,
    cand: &mut Vec<u64>,
    thread: u32,
    write: bool,
    held: &[u64],
) -> bool {
    match *state {
        State::Virgin => {
            *state = State::Exclusive(thread);
            false
        }
        State::Exclusive(t) if t == thread => false,
        State::Exclusive(_) => {
            *cand = held.to_vec();
            if write {
                *state = State::SharedModified;
                cand.is_empty()
            } else {
                *state = State::Shared;
                false
            }
        }
        State::Shared => {
            intersect(cand, held);
            if write {
                *state = State::SharedModified;
                cand.is_empty()
            } else {
                false
            }
        }
        State::SharedModified => {
            intersect(cand, held);
            cand.is_empty()
        }
    }
}

/// A lock and the data it consistently protects.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Protected {
    /// The lock's name.
    pub lock: String,
    /// Its address, hex.
    pub address: String,
    /// Data objects.
    pub data: Vec<String>,
}

/// Shared data written with no common lock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unprotected {
    /// The data object.
    pub data: String,
    /// Locations of it that became unprotected.
    pub locations: u64,
    /// Code sites that accessed those locations (`function (file:line)`).
    pub sites: Vec<String>,
}

/// Locations by final state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StateCounts {
    /// Accessed by one thread only.
    pub exclusive: u64,
    /// Read-shared.
    pub shared: u64,
    /// Shared and written.
    pub shared_modified: u64,
}

/// The lockset report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LocksetReport {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// Whether accesses outside critical sections were recorded.
    pub all_accesses: bool,
    /// Locks and what they protect.
    pub protected: Vec<Protected>,
    /// Unprotected shared data.
    pub unprotected: Vec<Unprotected>,
    /// Locations by final state.
    pub states: StateCounts,
    /// Caveats.
    pub notes: Vec<String>,
}

/// Runs the analysis.
pub fn analyze(d: &mut Detailed) -> LocksetReport {
    let mut locs: HashMap<u64, Loc> = HashMap::new();
    let accesses = std::mem::take(&mut d.accesses);
    for a in &accesses {
        let process = d
            .threads
            .get(&a.thread)
            .map_or(d.main_process, |t| t.process);
        let held_all = &d.locksets[a.lockset as usize];
        let held = if a.write {
            &d.locksets[a.write_lockset as usize]
        } else {
            held_all
        };
        let l = locs.entry(a.addr).or_insert_with(|| Loc {
            state: State::Virgin,
            cand: Vec::new(),
            always: None,
            race: false,
            process,
            first_time: a.time,
            sites: BTreeSet::new(),
        });
        match &mut l.always {
            None => l.always = Some(held.clone()),
            Some(v) => intersect(v, held),
        }
        if step(&mut l.state, &mut l.cand, a.thread, a.write, held) {
            l.race = true;
        }
        if l.sites.len() < MAX_SITES {
            l.sites.insert(a.site);
        }
    }
    d.accesses = accesses;

    let mut states = StateCounts::default();
    // object -> (effective protecting locks, process)
    let mut objects: BTreeMap<String, Option<Vec<u64>>> = BTreeMap::new();
    let mut lock_process: HashMap<u64, (u32, u64)> = HashMap::new();
    let mut races: BTreeMap<String, (u64, BTreeSet<(u32, u64)>)> = BTreeMap::new();
    let mut keys: Vec<u64> = locs.keys().copied().collect();
    keys.sort_unstable();
    for addr in keys {
        let l = &locs[&addr];
        let eff: &[u64] = match l.state {
            State::Virgin => continue,
            State::Exclusive(_) => {
                states.exclusive += 1;
                l.always.as_deref().unwrap_or(&[])
            }
            State::Shared => {
                states.shared += 1;
                &l.cand
            }
            State::SharedModified => {
                states.shared_modified += 1;
                &l.cand
            }
        };
        let name = d.object_base(l.process, addr, l.first_time);
        for &lk in eff {
            lock_process.entry(lk).or_insert((l.process, l.first_time));
        }
        let e = objects.entry(name.clone()).or_insert(None);
        match e {
            None => *e = Some(eff.to_vec()),
            Some(v) => intersect(v, eff),
        }
        if l.race {
            let r = races.entry(name).or_default();
            r.0 += 1;
            r.1.extend(l.sites.iter().map(|&s| (l.process, s)));
        }
    }
    let mut by_lock: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for (name, set) in &objects {
        for &lk in set.as_deref().unwrap_or(&[]) {
            by_lock.entry(lk).or_default().insert(name.clone());
        }
    }
    let mut protected = Vec::new();
    for (lk, data) in by_lock {
        let (process, time) = lock_process
            .get(&lk)
            .copied()
            .unwrap_or((d.main_process, 0));
        protected.push(Protected {
            lock: d.lock_name(process, lk, time),
            address: hex(lk),
            data: data.into_iter().collect(),
        });
    }
    let mut unprotected = Vec::new();
    for (data, (n, sites)) in races {
        let mut names: Vec<String> = sites
            .into_iter()
            .map(|(p, s)| d.site(p, s))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        names.truncate(MAX_SITES);
        unprotected.push(Unprotected {
            data,
            locations: n,
            sites: names,
        });
    }
    let all_accesses = d.outside_accesses > 0;
    let mut notes = Vec::new();
    if !all_accesses {
        notes.push(
            "only accesses inside critical sections were recorded: unprotected data is \
             invisible. Record with LOCKSCOPE_ALL_ACCESSES=1 in the environment."
                .into(),
        );
    }
    if d.lost > 0 {
        notes.push(format!("{} events were lost while recording", d.lost));
    }
    LocksetReport {
        schema: SCHEMA,
        all_accesses,
        protected,
        unprotected,
        states,
        notes,
    }
}

/// Text rendering.
pub fn render_text(r: &LocksetReport, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    writeln!(
        out,
        "Lockset (Eraser): {} exclusive, {} shared, {} shared-modified locations",
        r.states.exclusive, r.states.shared, r.states.shared_modified
    )?;
    writeln!(out, "\nprotected data")?;
    if r.protected.is_empty() {
        writeln!(out, "  (none)")?;
    }
    for p in &r.protected {
        writeln!(out, "  {} ({}) protects:", p.lock, p.address)?;
        for d in &p.data {
            writeln!(out, "    {d}")?;
        }
    }
    writeln!(
        out,
        "\nunprotected shared data (candidate lockset became empty)"
    )?;
    if r.unprotected.is_empty() {
        writeln!(out, "  (none)")?;
    }
    for u in &r.unprotected {
        writeln!(
            out,
            "  {} ({} location(s)), accessed at:",
            u.data, u.locations
        )?;
        for s in &u.sites {
            writeln!(out, "    {s}")?;
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

    #[test]
    fn eraser_transitions() {
        let (mut s, mut c) = (State::Virgin, Vec::new());
        assert!(!step(&mut s, &mut c, 1, true, &[]));
        assert_eq!(s, State::Exclusive(1));
        assert!(
            !step(&mut s, &mut c, 1, true, &[]),
            "init without locks is fine"
        );
        assert!(!step(&mut s, &mut c, 2, false, &[0xA, 0xB]));
        assert_eq!((s, c.clone()), (State::Shared, vec![0xA, 0xB]));
        assert!(
            !step(&mut s, &mut c, 3, false, &[]),
            "read-shared: no report"
        );
        assert!(c.is_empty());
        assert!(step(&mut s, &mut c, 3, true, &[0xA]));
        assert_eq!(s, State::SharedModified);
    }

    #[test]
    fn protected_and_unprotected() {
        let l = 0xA;
        let t = trace(vec![
            vec![
                wr(1, 0x100), // init, exclusive, no lock
                lock(2, l),
                wr(3, 0x100),
                unlock(4, l),
                wr(5, 0x200), // racy counter
            ],
            vec![lock(10, l), wr(11, 0x100), unlock(12, l), wr(13, 0x200)],
        ]);
        let mut d = Detailed::from_trace(&t, false);
        let r = analyze(&mut d);
        assert!(r.all_accesses);
        assert_eq!(r.protected.len(), 1);
        assert_eq!(r.protected[0].data, vec!["0x100".to_string()]);
        assert_eq!(r.unprotected.len(), 1);
        assert_eq!(r.unprotected[0].data, "0x200");
        assert_eq!(r.states.shared_modified, 2);
    }
}
