//! Lockset analysis: the Eraser state machine over every recorded access,
//! with the happens-before of thread creation, join and barriers.
//!
//! Each location (access address) is in one of four states:
//!
//! - **virgin**: never accessed;
//! - **exclusive(t)**: accessed by thread `t` only, or by threads that
//!   handed it over in happens-before order (below); no lock is needed;
//! - **shared**: read by a second thread concurrently, written by at most
//!   the first: Eraser refines the candidate set C but reports nothing;
//! - **shared-modified**: written while shared, or written by a second
//!   thread: a C that becomes empty is a report.
//!
//! Leaving exclusive, C is the set of locks held by that access; every
//! later access intersects C with the locks it holds (only locks held in
//! write mode count for writes: Eraser's reader-writer refinement).
//!
//! Happens-before ([`crate::hb`]): when every earlier access to the
//! location by another thread happens before the current access through
//! `pthread_create`, `pthread_join` or a barrier, the location is not
//! shared at that moment: it goes (back) to exclusive for the accessing
//! thread and C starts over at the next sharing. So data initialised by
//! `main` before it starts the threads, read by `main` after it joined
//! them, or handed from one phase's owner to the next across a barrier is
//! not a race. Locks are not happens-before edges (see [`crate::hb`]).
//!
//! A data object (a static, or the heap blocks of one allocation context)
//! is consistently protected by lock L when L is in the effective set of
//! each of its locations: for a location that was ever shared, the
//! intersection of C over all the periods it was shared; for a location
//! only ever accessed in exclusive hand-offs, the locks held at all of its
//! accesses.
//!
//! Accesses outside critical sections are recorded only when the program
//! ran with `LOCKSCOPE_ALL_ACCESSES=1` (see the README, "Lockset: recorded
//! on request", for why this is done offline). Without them, unprotected
//! data cannot be seen, and the report says so.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use crate::detailed::{hex, Detailed};
use crate::hb::ordered;

/// JSON schema identifier.
pub const SCHEMA: &str = "lockscope.lockset/1";

/// Most access sites listed per unprotected object.
const MAX_SITES: usize = 12;

/// Eraser state of a location.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Never accessed.
    Virgin,
    /// Accessed by one thread only (its trace id), or handed to it in
    /// happens-before order.
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
    /// Intersection of C over the shared periods that ended (a hand-off
    /// back to exclusive ends one); `None` if it was never shared before.
    hist: Option<Vec<u64>>,
    /// Per thread, its own clock value at its latest access.
    acc: Vec<(u32, u64)>,
    /// Went back to exclusive through happens-before at least once.
    handed_off: bool,
    process: u32,
    first_time: u64,
    sites: BTreeSet<u64>,
}

fn intersect(a: &mut Vec<u64>, b: &[u64]) {
    a.retain(|x| b.binary_search(x).is_ok());
}

/// One step of the state machine: the access of `thread` (`write`) with
/// `held` (the relevant locks, sorted); `after_all` when every earlier
/// access of another thread to the location happens before this one.
/// Returns true when this access made the location unprotected.
pub fn step(
    state: &mut State,
    cand: &mut Vec<u64>,
    thread: u32,
    write: bool,
    held: &[u64],
    after_all: bool,
) -> bool {
    match *state {
        State::Virgin => {
            *state = State::Exclusive(thread);
            false
        }
        State::Exclusive(t) if t == thread => false,
        // Handed over (create, join, barrier): not shared concurrently.
        _ if after_all => {
            *state = State::Exclusive(thread);
            cand.clear();
            false
        }
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
    /// Locations that went back to exclusive at least once because every
    /// earlier access happened before the next one (create, join,
    /// barrier).
    pub handed_off: u64,
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
            hist: None,
            acc: Vec::new(),
            handed_off: false,
            process,
            first_time: a.time,
            sites: BTreeSet::new(),
        });
        match &mut l.always {
            None => l.always = Some(held.clone()),
            Some(v) => intersect(v, held),
        }
        let now = d.clocks.get(a.clock as usize);
        let mine = now.and_then(|c| c.get(&a.thread)).copied().unwrap_or(0);
        let after_all = now.is_some_and(|now| {
            l.acc
                .iter()
                .all(|&(t, c)| t == a.thread || ordered(t, c, now))
        });
        let was_shared = matches!(l.state, State::Shared | State::SharedModified);
        if after_all && was_shared {
            // A shared period ends: remember what protected it.
            match &mut l.hist {
                None => l.hist = Some(l.cand.clone()),
                Some(h) => intersect(h, &l.cand),
            }
        }
        let before = l.state;
        if step(
            &mut l.state,
            &mut l.cand,
            a.thread,
            a.write,
            held,
            after_all,
        ) {
            l.race = true;
        }
        if before != l.state && matches!(l.state, State::Exclusive(_)) {
            if before != State::Virgin {
                l.handed_off = true;
            }
            l.acc.clear();
        }
        match l.acc.iter_mut().find(|x| x.0 == a.thread) {
            Some(x) => x.1 = mine,
            None => l.acc.push((a.thread, mine)),
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
        if l.handed_off {
            states.handed_off += 1;
        }
        let cur: Option<&[u64]> = match l.state {
            State::Virgin => continue,
            State::Exclusive(_) => {
                states.exclusive += 1;
                None
            }
            State::Shared => {
                states.shared += 1;
                Some(&l.cand)
            }
            State::SharedModified => {
                states.shared_modified += 1;
                Some(&l.cand)
            }
        };
        let eff_owned: Vec<u64> = match (&l.hist, cur) {
            (None, None) => l.always.clone().unwrap_or_default(),
            (None, Some(c)) => c.to_vec(),
            (Some(h), None) => h.clone(),
            (Some(h), Some(c)) => {
                let mut v = h.clone();
                intersect(&mut v, c);
                v
            }
        };
        let eff: &[u64] = &eff_owned;
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
             invisible. Record with `lockscope record --all-accesses`."
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
        "Lockset (Eraser): {} exclusive, {} shared, {} shared-modified locations \
         ({} handed over through create, join or a barrier)",
        r.states.exclusive, r.states.shared, r.states.shared_modified, r.states.handed_off
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
        assert!(!step(&mut s, &mut c, 1, true, &[], false));
        assert_eq!(s, State::Exclusive(1));
        assert!(
            !step(&mut s, &mut c, 1, true, &[], false),
            "init without locks is fine"
        );
        assert!(!step(&mut s, &mut c, 2, false, &[0xA, 0xB], false));
        assert_eq!((s, c.clone()), (State::Shared, vec![0xA, 0xB]));
        assert!(
            !step(&mut s, &mut c, 3, false, &[], false),
            "read-shared: no report"
        );
        assert!(c.is_empty());
        assert!(step(&mut s, &mut c, 3, true, &[0xA], false));
        assert_eq!(s, State::SharedModified);
        // Everything before happened before this access (a join): the
        // location is handed over, not shared.
        assert!(!step(&mut s, &mut c, 1, false, &[], true));
        assert_eq!(s, State::Exclusive(1));
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

    fn sync_ev(time: u64, op: lockscope_format::Op, arg: u64) -> lockscope_format::Event {
        lockscope_format::Event {
            time,
            op: op as u8,
            flags: lockscope_format::phase::DONE,
            arg,
            ..lockscope_format::Event::default()
        }
    }

    #[test]
    fn written_under_lock_read_after_join_is_not_a_race() {
        use lockscope_format::Op;
        let (l, x, init) = (0xA, 0x100, 0x200);
        let worker = |t0: u64| {
            vec![
                rd(t0, init),
                lock(t0 + 1, l),
                wr(t0 + 2, x),
                unlock(t0 + 3, l),
            ]
        };
        let t = trace(vec![
            vec![
                wr(1, init),
                sync_ev(2, Op::ThreadCreate, 102),
                sync_ev(3, Op::ThreadCreate, 103),
                sync_ev(30, Op::ThreadJoin, 102),
                sync_ev(31, Op::ThreadJoin, 103),
                rd(32, x),
                wr(33, init),
            ],
            worker(10),
            worker(20),
        ]);
        let mut d = Detailed::from_trace(&t, false);
        let r = analyze(&mut d);
        assert_eq!(r.unprotected, vec![], "{r:#?}");
        // x was shared only while the workers ran, always under l.
        assert_eq!(r.protected.len(), 1);
        assert_eq!(r.protected[0].data, vec!["0x100".to_string()]);
        assert_eq!(r.states.handed_off, 2, "{r:#?}");
        assert_eq!(r.states.exclusive, 2);

        // Without the joins main's read races with the workers' writes.
        let t = trace(vec![
            vec![
                wr(1, init),
                sync_ev(2, Op::ThreadCreate, 102),
                sync_ev(3, Op::ThreadCreate, 103),
                rd(32, x),
            ],
            worker(10),
            worker(20),
        ]);
        let r = analyze(&mut Detailed::from_trace(&t, false));
        assert_eq!(r.unprotected.len(), 1, "{r:#?}");
        assert_eq!(r.unprotected[0].data, "0x100");
    }
}
