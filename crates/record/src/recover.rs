//! Recovery of a recording whose recorder died (SIGKILL, the OOM killer):
//! the session directory it left ([`crate::orphaned_sessions`]) still
//! holds, in the rings, what the program published and the recorder had
//! not copied yet, and the trace it was writing holds what it had written
//! (all but about its last two seconds, see `FLUSH_EVERY` in the
//! converter). [`recover`] joins the two into one trace.
//!
//! How: the rings are drained by the ordinary pipeline into a second trace
//! whose times are on the dead recorder's clock (the start pair of its
//! header, else of the session's info), and the two traces are then
//! merged record by record: the dead recorder's first, as written, then
//! the rings', with their ids (strings, processes, threads, call paths)
//! mapped onto the first's where they name the same thing (a process by
//! pid and exec generation, a thread by process, tid and start, a call
//! path by its frames) and numbered after them where not.
//!
//! Not taken: seeding the converter with the first trace's tables so that
//! it continues its ids. That reaches into every stage of the pipeline
//! (the drain numbers processes and threads, the workers call paths,
//! first sightings of locks and thread names) for a path that runs once
//! after a crash; a merge at the level of records touches none of them,
//! and its cost (decoding and re-encoding the rings' events, a few MB)
//! does not matter there.
//!
//! What the dead recorder had taken out of the rings and not yet written
//! is found again: the recorder marks in each ring how far the trace file
//! holds its events (`durable`, at most a second or two behind), and the
//! rings are read again from there. The program overwrites those slots
//! only when it fills its ring past them: what it overwrote is counted as
//! lost (reason `RecorderDied`, slots, an upper bound on events). The
//! part read twice (written to the file after the last mark, and read
//! again from the ring) is recognised by the first part's last event of
//! each thread, found among the rings' events, and written once.

use std::collections::{HashMap, HashSet};
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};

use lockscope_format::{Event, FormatError, Header, LossReason, Record, TraceReader, TraceWriter};
use lockscope_ring::tsc;

use crate::sessiondir::{SessionInfo, LOCK_NAME};
use crate::RecordError;

/// Name of the rings' own trace inside the session directory (tmpfs,
/// removed with it).
const TAIL_NAME: &str = "recovered-tail.lstrace";

/// A thread some of whose events are lost: the dead recorder had taken
/// them out of its ring without writing them, and the program has
/// overwritten them since.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Gap {
    /// OS process id.
    pub pid: u32,
    /// OS thread id.
    pub tid: u32,
    /// Ring slots lost (an upper bound on events).
    pub slots: u64,
}

/// What [`recover`] made.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct RecoverOutcome {
    /// The dead recorder's trace that was joined, if any.
    pub partial: Option<PathBuf>,
    /// Where and why that trace ended early (it always does: nobody wrote
    /// its end), as the reader words it.
    pub partial_end: Option<String>,
    /// Events taken from it.
    pub partial_events: u64,
    /// Events taken from the rings.
    pub ring_events: u64,
    /// Threads in the recovered trace.
    pub threads: u32,
    /// Ring slots the dead recorder had taken and not written, read again.
    pub reread_slots: u64,
    /// Threads with events lost for good, most first.
    pub gaps: Vec<Gap>,
    /// Events counted as lost (ring overflow and the like, as in any
    /// trace; not the gaps).
    pub lost: u64,
    /// The recorded command, from the session or the trace.
    pub command: String,
}

/// Joins the trace a dead recorder was writing (`partial`; `None`: only
/// the rings) and the rings of its session directory `session` into one
/// trace written to `out`. The session directory is left as it was but
/// for the rings' read positions (their contents are consumed): the
/// caller removes it once `out` is safely written.
pub fn recover<W: Write>(
    session: &Path,
    partial: Option<&Path>,
    out: W,
) -> Result<RecoverOutcome, RecordError> {
    let fail = |what: String| RecordError::Recover {
        path: session.to_path_buf(),
        what,
    };
    if !session.is_dir() {
        return Err(fail("it is not a directory".into()));
    }
    // The session's own lock: held by a live recorder (then the session
    // is not orphaned) or by another recover; held by us from here on,
    // so that no recorder starting meanwhile sweeps the session away.
    let lock = std::fs::File::open(session.join(LOCK_NAME)).map_err(|e| {
        fail(format!(
            "it has no {LOCK_NAME} ({e}): not a lockscope session directory"
        ))
    })?;
    use std::os::unix::io::AsRawFd;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(fail(
            "its recorder is still running (or another `lockscope recover` is at work on it)"
                .into(),
        ));
    }
    let info = SessionInfo::read(session);

    // The first part, read to where it ends.
    let mut first = match partial {
        Some(p) => Some(Part::read(p).map_err(|e| RecordError::Recover {
            path: p.to_path_buf(),
            what: e,
        })?),
        None => None,
    };

    // The rings, drained on the dead recorder's clock.
    let (clock, start) = match &first {
        Some(f) => (
            f.header
                .extra
                .iter()
                .find(|(k, _)| k == "clock")
                .map(|(_, v)| v.clone())
                .unwrap_or_default(),
            Some(tsc::ClockPair {
                tsc: f.header.tsc_at_start,
                mono_ns: f.header.monotonic_ns_at_start,
            }),
        ),
        None => info
            .as_ref()
            .map(|i| (i.clock.clone(), i.start))
            .unwrap_or_default(),
    };
    tsc::use_monotonic(clock == "monotonic");
    // A thread that outgrew its first ring continues in `T...-<seq>.ring`,
    // found by the drain through its predecessor's header; once the dead
    // recorder had removed the predecessor, the earliest ring left is
    // where the thread starts here: it takes the first ring's name.
    let rings = first_rings_renamed(session);
    // Back to where the file holds each ring's events (see the module
    // doc), before the drain opens them.
    let mut reread_slots = 0;
    let mut gaps = Vec::new();
    for (path, (pid, _, tid)) in rings {
        let Ok(mut c) = lockscope_ring::ring::Consumer::open(&path) else {
            continue;
        };
        let (again, lost) = c.rewind_to_durable();
        reread_slots += again;
        if lost > 0 {
            gaps.push(Gap {
                pid,
                tid,
                slots: lost,
            });
        }
    }
    let command: Vec<String> = match (&first, &info) {
        (Some(f), _) => f.header.command.clone(),
        (None, Some(i)) => i.command.split(' ').map(str::to_string).collect(),
        (None, None) => vec!["(recovered)".into()],
    };
    let tail_path = session.join(TAIL_NAME);
    crate::pipeline::drain_orphan(session, &tail_path, start, command.clone())?;
    let tail = TraceReader::new(BufReader::new(
        std::fs::File::open(&tail_path).map_err(|e| fail(format!("{TAIL_NAME}: {e}")))?,
    ))
    .map_err(|e| fail(format!("{TAIL_NAME}: {e}")))?;

    let mut header = match &first {
        Some(f) => f.header.clone(),
        None => tail.header().clone(),
    };
    let unix_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    header.extra.retain(|(k, _)| k != "recovered");
    header
        .extra
        .push(("recovered".into(), format!("unix {unix_now}")));
    let mut w = TraceWriter::new(out, &header).map_err(|e| output_error(session, e))?;
    let mut m = Merge::default();
    let mut outcome = RecoverOutcome {
        command: command.join(" "),
        ..RecoverOutcome::default()
    };
    if let Some(f) = first.as_mut() {
        outcome.partial = Some(f.path.clone());
        outcome.partial_end = f.end.clone();
        m.copy_first(f, &mut w)
            .map_err(|e| output_error(session, e))?;
        outcome.partial_events = w.events_written();
    }
    let overlap = m
        .find_overlap(
            TraceReader::new(BufReader::new(
                std::fs::File::open(&tail_path).map_err(|e| fail(format!("{TAIL_NAME}: {e}")))?,
            ))
            .map_err(|e| fail(format!("{TAIL_NAME}: {e}")))?,
        )
        .map_err(|e| fail(format!("{TAIL_NAME}: {e}")))?;
    // Lost for good, per process.
    for g in &gaps {
        m.died.push((g.pid, g.slots));
    }
    m.merge_tail(tail, overlap, &mut w).map_err(|e| match e {
        MergeError::Out(e) => output_error(session, e),
        MergeError::Tail(e) => fail(format!("{TAIL_NAME}: {e}")),
    })?;
    outcome.ring_events = w.events_written() - outcome.partial_events;
    outcome.threads = m.threads.values().map(Vec::len).sum::<usize>() as u32;
    outcome.lost = m.lost;
    outcome.reread_slots = reread_slots;
    gaps.sort_by_key(|g| std::cmp::Reverse(g.slots));
    outcome.gaps = gaps;
    let footer = lockscope_format::Footer {
        duration_ns: m.max_ns,
        events: w.events_written(),
        lost: m.lost,
        // Unknown: the recorder that would have reaped the program died.
        exit_status: -1,
    };
    let mut out = w.finish(&footer).map_err(|e| output_error(session, e))?;
    out.flush()
        .map_err(|e| output_error(session, FormatError::Io(e)))?;
    drop(lock);
    Ok(outcome)
}

fn output_error(session: &Path, e: FormatError) -> RecordError {
    RecordError::Recover {
        path: session.to_path_buf(),
        what: format!("cannot write the recovered trace: {e}"),
    }
}

/// The session's ring files with their thread's (pid, exec generation,
/// tid), after giving the earliest ring of each thread whose first ring
/// is gone the first ring's name (see [`recover`]).
fn first_rings_renamed(session: &Path) -> Vec<(PathBuf, (u32, u32, u32))> {
    use lockscope_ring::session::{parse_file_name, ring_file_name, SessionFile};
    let mut rings: Vec<(PathBuf, (u32, u32, u32), u32)> = Vec::new();
    for e in std::fs::read_dir(session).into_iter().flatten().flatten() {
        match parse_file_name(&e.file_name().to_string_lossy()) {
            Some(SessionFile::Ring { pid, gen, tid }) => rings.push((e.path(), (pid, gen, tid), 0)),
            Some(SessionFile::RingNext { pid, gen, tid, seq }) => {
                rings.push((e.path(), (pid, gen, tid), seq))
            }
            _ => {}
        }
    }
    let mut first: HashMap<(u32, u32, u32), (u32, usize)> = HashMap::new();
    for (i, r) in rings.iter().enumerate() {
        let f = first.entry(r.1).or_insert((r.2, i));
        if r.2 < f.0 {
            *f = (r.2, i);
        }
    }
    for ((pid, gen, tid), (seq, i)) in first {
        let base = session.join(ring_file_name(pid, gen, tid));
        if seq != 0 && std::fs::rename(&rings[i].0, &base).is_ok() {
            rings[i].0 = base;
        }
    }
    rings.into_iter().map(|(p, k, _)| (p, k)).collect()
}

/// Events of a thread compared to find where the first part ends among
/// the rings' events.
const WINDOW: usize = 32;

/// Whether the rings' last events `s` are the first part's last events
/// `p` (same length): every field but the call path id (numbered by each
/// part its own way) and the time are equal, and the times between
/// consecutive events agree. Not the times themselves: each part converts
/// ticks with its own estimate of the tick rate, which differ by some
/// parts per million, microseconds over a run; an interval of
/// microseconds differs by well under a ns.
fn same_events(p: &[Event], s: &[Event]) -> bool {
    let key = |e: &Event| (e.op, e.flags, e.addr, e.site, e.arg, e.arg2);
    if p.iter().zip(s).any(|(a, b)| key(a) != key(b)) {
        return false;
    }
    p.windows(2).zip(s.windows(2)).all(|(a, b)| {
        let da = a[1].time as i128 - a[0].time as i128;
        let db = b[1].time as i128 - b[0].time as i128;
        (da - db).abs() <= 2 + da.abs() / 100_000
    })
}

/// Fewest events a partial overlap is matched on ([`pick_partial`]).
const PARTIAL_MIN: usize = 2;

/// Events to skip for a thread whose overlap with the first part is
/// shorter than [`WINDOW`] (it wrote fewer events than that between the
/// dead recorder's last mark and its death): among `partial`, the matches
/// of the ring's first events with the first part's last ones (events to
/// skip, the signed difference of the two parts' times at the first
/// part's last event, that event's time), the one whose time difference
/// is the one the full matches of other threads measured (`offsets`:
/// signed difference, time), within 10 ns plus 10 ppm of the time between
/// them. None without such a match or without a full match to compare
/// with: then nothing is skipped, as before.
///
/// Why the clock and not the events alone: a short window of a lock loop
/// (lock, unlock, lock, unlock) also matches the first part's end shifted
/// by one iteration, and taking that for the overlap would drop events
/// silently; shifted by an iteration, the times differ by its length
/// (tens of ns at least), while the same event read twice differs by the
/// two rate estimates only. Without a partial match an overlap under 32
/// events was written twice: 5 events of one thread in a recovery under
/// load (`a_recorder_killed_while_the_program_runs_loses_nothing_it_does_not_count`),
/// at +156 ns where the other thread's full match was.
fn pick_partial(partial: &[(u64, i64, u64)], offsets: &[(i64, u64)]) -> Option<u64> {
    partial
        .iter()
        .filter_map(|&(k, signed, at)| {
            let fits = offsets.iter().any(|&(off, t)| {
                let tol = 10 + (at.abs_diff(t) / 100_000) as i64;
                (signed - off).abs() <= tol
            });
            fits.then_some((k, signed))
        })
        // The longest overlap that fits: a longer one has more events
        // checked.
        .max_by_key(|&(k, _)| k)
        .map(|(k, _)| k)
}

/// The matching of the rings' threads onto the first part's, and how many
/// leading events of each matched thread the first part already holds.
struct Overlap {
    /// Rings' thread id -> first part's.
    threads: HashMap<u32, u32>,
    /// Rings' thread id -> events to skip.
    skip: HashMap<u32, u64>,
}

/// The dead recorder's trace, opened.
struct Part {
    path: PathBuf,
    header: Header,
    reader: TraceReader<BufReader<std::fs::File>>,
    end: Option<String>,
}

impl Part {
    fn read(path: &Path) -> Result<Part, String> {
        let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
        let reader = TraceReader::new(BufReader::new(f)).map_err(|e| e.to_string())?;
        Ok(Part {
            path: path.to_path_buf(),
            header: reader.header().clone(),
            reader,
            end: None,
        })
    }
}

enum MergeError {
    Out(FormatError),
    Tail(FormatError),
}

/// What the merge knows of the first part, to map the second's ids onto
/// it.
#[derive(Default)]
struct Merge {
    strings: HashMap<String, u32>,
    max_string: u32,
    procs: HashMap<(u32, u32), u32>,
    max_proc: u32,
    /// Threads by (process, tid): (start, id).
    threads: HashMap<(u32, u32), Vec<(u64, u32)>>,
    /// Threads whose end the first part has.
    ended_threads: HashSet<u32>,
    tid_of: HashMap<u32, u32>,
    max_thread: u32,
    stacks: HashMap<(u32, Vec<u64>), u32>,
    max_stack: u32,
    locks: HashSet<(u32, u64)>,
    maps: HashSet<(u32, u64, u64, u64)>,
    overhead: HashSet<u32>,
    code_names: HashSet<(u32, u64)>,
    ended_procs: HashSet<u32>,
    /// Losses of the first part by (thread, reason): a ring's counter
    /// starts from zero in neither part, so the second part's count
    /// includes what the first already reported.
    losses: HashMap<(u32, u8), u64>,
    lost: u64,
    /// Last events of each thread in the first part (up to [`WINDOW`]).
    last_first: HashMap<u32, std::collections::VecDeque<Event>>,
    /// Slots lost for good, by OS pid.
    died: Vec<(u32, u64)>,
    max_ns: u64,
}

impl Merge {
    /// Copies the first part as written, learning its ids, up to where it
    /// ends (a truncated record: nobody wrote its end).
    fn copy_first<W: Write>(
        &mut self,
        f: &mut Part,
        w: &mut TraceWriter<W>,
    ) -> Result<(), FormatError> {
        loop {
            let rec = match f.reader.next() {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(e) => {
                    f.end = Some(e.to_string());
                    break;
                }
            };
            match &rec {
                Record::Footer(_) => continue,
                Record::String(s) => {
                    self.strings.entry(s.text.clone()).or_insert(s.id);
                    self.max_string = self.max_string.max(s.id);
                }
                Record::Process(p) => {
                    self.procs.insert((p.pid, p.exec_generation), p.id);
                    self.max_proc = self.max_proc.max(p.id);
                }
                Record::ProcessEnd(p) => {
                    self.ended_procs.insert(p.process);
                    self.max_ns = self.max_ns.max(p.end_ns);
                }
                Record::Thread(t) => {
                    self.threads
                        .entry((t.process, t.tid))
                        .or_default()
                        .push((t.start_ns, t.id));
                    self.tid_of.insert(t.id, t.tid);
                    self.max_thread = self.max_thread.max(t.id);
                }
                Record::ThreadEnd(e) => {
                    self.ended_threads.insert(e.thread);
                }
                Record::Stack(s) => {
                    self.stacks.insert((s.process, s.frames.clone()), s.id);
                    self.max_stack = self.max_stack.max(s.id);
                }
                Record::Lock(l) => {
                    self.locks.insert((l.process, l.addr));
                }
                Record::Map(m) => {
                    self.maps.insert((m.process, m.start, m.end, m.offset));
                }
                Record::Overhead(o) => {
                    self.overhead.insert(o.process);
                }
                Record::CodeName(c) => {
                    self.code_names.insert((c.process, c.addr));
                }
                Record::Loss(l) => {
                    *self.losses.entry((l.thread, l.reason.code())).or_default() += l.events;
                    self.lost += l.events;
                }
                Record::Events(c) => {
                    let last = self.last_first.entry(c.thread).or_default();
                    let max_ns = &mut self.max_ns;
                    // A chunk that does not decode is copied all the same
                    // (the readers report it); it adds nothing here.
                    let _ = c.for_each(|e| {
                        *max_ns = (*max_ns).max(e.time);
                        if last.len() == WINDOW {
                            last.pop_front();
                        }
                        last.push_back(e);
                    });
                }
                _ => {}
            }
            w.write(&rec)?;
        }
        Ok(())
    }

    /// First pass over the rings' trace: which of its threads are the
    /// first part's (same process, tid and start), and where, in each, the
    /// first part's last event of that thread is (what precedes it,
    /// itself included, was written by the dead recorder after its last
    /// mark and is read again from the ring).
    fn find_overlap<R: std::io::Read>(
        &self,
        mut tail: TraceReader<R>,
    ) -> Result<Overlap, FormatError> {
        let mut procs: HashMap<u32, u32> = HashMap::new();
        let mut o = Overlap {
            threads: HashMap::new(),
            skip: HashMap::new(),
        };
        let mut matched: HashSet<u32> = HashSet::new();
        // Per matched thread: events seen so far, the latest WINDOW of
        // them, the best full match yet and the partial matches (below),
        // each as (events to skip, the rings' time minus the first
        // part's at the first part's last event, that event's time).
        type Match = (u64, i64, u64);
        type Search = (
            u64,
            std::collections::VecDeque<Event>,
            Option<Match>,
            Vec<Match>,
        );
        let mut search: HashMap<u32, Search> = HashMap::new();
        while let Some(rec) = tail.next()? {
            match rec {
                Record::Process(p) => {
                    if let Some(&id) = self.procs.get(&(p.pid, p.exec_generation)) {
                        procs.insert(p.id, id);
                    }
                }
                Record::Thread(t) => {
                    let Some(&process) = procs.get(&t.process) else {
                        continue;
                    };
                    // The thread of the same process and tid that started
                    // last before this ring's start: a thread's first ring
                    // carries its start (the two clocks convert it within
                    // microseconds: 10 ms of slack), a ring it grew into
                    // the time it grew, later; an earlier thread with the
                    // same tid (reused) started before. Ended threads
                    // too: a ring the dead recorder had closed is removed
                    // only once its events are written, so an ended
                    // thread's ring may be read again (and then wholly
                    // skipped as overlap).
                    let same = self.threads.get(&(process, t.tid)).and_then(|v| {
                        v.iter()
                            .filter(|c| !matched.contains(&c.1))
                            .filter(|c| c.0 <= t.start_ns.saturating_add(10_000_000))
                            .max_by_key(|c| c.0)
                            .map(|c| c.1)
                    });
                    if let Some(id) = same {
                        matched.insert(id);
                        o.threads.insert(t.id, id);
                        if self.last_first.get(&id).is_some_and(|v| !v.is_empty()) {
                            search.insert(t.id, (0, Default::default(), None, Vec::new()));
                        }
                    }
                }
                Record::Events(c) => {
                    let Some((n, win, best, partial)) = search.get_mut(&c.thread) else {
                        continue;
                    };
                    let Some(p) = o
                        .threads
                        .get(&c.thread)
                        .and_then(|id| self.last_first.get(id))
                    else {
                        continue;
                    };
                    let p = p.iter().copied().collect::<Vec<_>>();
                    let p_last = p[p.len() - 1];
                    c.for_each(|e| {
                        *n += 1;
                        if win.len() == p.len() {
                            win.pop_front();
                        }
                        win.push_back(e);
                        // Cheap test first: the last event's fields. A
                        // full window, or every event of the ring so far
                        // (an overlap shorter than the window, see
                        // `pick_partial`), against as many of the first
                        // part's last events.
                        let m = win.len();
                        let full = m == p.len();
                        if (full || (*n as usize == m && m >= PARTIAL_MIN))
                            && e.op == p_last.op
                            && e.addr == p_last.addr
                            && e.arg == p_last.arg
                            && same_events(&p[p.len() - m..], win.make_contiguous())
                        {
                            let hit = (*n, e.time as i64 - p_last.time as i64, p_last.time);
                            if !full {
                                partial.push(hit);
                            } else if best.is_none_or(|b| hit.1.unsigned_abs() < b.1.unsigned_abs())
                            {
                                *best = Some(hit);
                            }
                        }
                    })?;
                }
                _ => {}
            }
        }
        // The two parts' clocks differ by the same amount for every
        // thread near the end (their rate estimates differ by parts per
        // million): the full matches measure it.
        let offsets: Vec<(i64, u64)> = search
            .values()
            .filter_map(|(_, _, best, _)| best.map(|(_, signed, at)| (signed, at)))
            .collect();
        for (t, (_, _, best, partial)) in search {
            if let Some(k) = best
                .map(|b| b.0)
                .or_else(|| pick_partial(&partial, &offsets))
            {
                o.skip.insert(t, k);
            }
        }
        Ok(o)
    }

    /// Writes the rings' trace with its ids mapped onto the first part's.
    fn merge_tail<R: std::io::Read, W: Write>(
        &mut self,
        mut tail: TraceReader<R>,
        mut overlap: Overlap,
        w: &mut TraceWriter<W>,
    ) -> Result<(), MergeError> {
        let out = MergeError::Out;
        let mut strings: HashMap<u32, u32> = HashMap::new();
        let mut procs: HashMap<u32, u32> = HashMap::new();
        let mut threads: HashMap<u32, u32> = HashMap::new();
        let matched: HashSet<u32> = overlap.threads.values().copied().collect();
        let mut stacks: HashMap<u32, u32> = HashMap::new();
        // Ends are written last, once the latest event is known: the
        // drain ends the threads of a dead program at the time it drains
        // them (minutes or days after the recording), which is clamped to
        // the recording's last event.
        let mut ends: Vec<Record> = Vec::new();
        let mut events: Vec<Event> = Vec::new();
        while let Some(rec) = tail.next().map_err(MergeError::Tail)? {
            match rec {
                Record::Footer(_) => {}
                Record::String(mut s) => {
                    let id = match self.strings.get(&s.text) {
                        Some(&id) => id,
                        None => {
                            self.max_string += 1;
                            self.strings.insert(s.text.clone(), self.max_string);
                            s.id = self.max_string;
                            w.write(&Record::String(s.clone())).map_err(out)?;
                            self.max_string
                        }
                    };
                    strings.insert(s.id, id);
                }
                Record::Process(mut p) => {
                    let old = p.id;
                    let id = match self.procs.get(&(p.pid, p.exec_generation)) {
                        Some(&id) => id,
                        None => {
                            self.max_proc += 1;
                            p.id = self.max_proc;
                            p.parent = procs.get(&p.parent).copied().unwrap_or(0);
                            self.procs.insert((p.pid, p.exec_generation), p.id);
                            w.write(&Record::Process(p)).map_err(out)?;
                            self.max_proc
                        }
                    };
                    procs.insert(old, id);
                }
                Record::Thread(mut t) => {
                    let old = t.id;
                    let process = procs.get(&t.process).copied().unwrap_or(0);
                    let id = match overlap.threads.get(&t.id) {
                        Some(&id) => id,
                        None => {
                            self.max_thread += 1;
                            t.id = self.max_thread;
                            t.process = process;
                            t.parent = threads.get(&t.parent).copied().unwrap_or(0);
                            self.threads
                                .entry((process, t.tid))
                                .or_default()
                                .push((t.start_ns, t.id));
                            self.tid_of.insert(t.id, t.tid);
                            w.write(&Record::Thread(t)).map_err(out)?;
                            self.max_thread
                        }
                    };
                    threads.insert(old, id);
                }
                Record::ThreadName(mut n) => {
                    n.thread = threads.get(&n.thread).copied().unwrap_or(0);
                    w.write(&Record::ThreadName(n)).map_err(out)?;
                }
                Record::ThreadEnd(mut e) => {
                    e.thread = threads.get(&e.thread).copied().unwrap_or(0);
                    if !self.ended_threads.contains(&e.thread) {
                        ends.push(Record::ThreadEnd(e));
                    }
                }
                Record::ProcessEnd(mut p) => {
                    p.process = procs.get(&p.process).copied().unwrap_or(0);
                    if !self.ended_procs.contains(&p.process) {
                        ends.push(Record::ProcessEnd(p));
                    }
                }
                Record::Map(mut m) => {
                    m.process = procs.get(&m.process).copied().unwrap_or(0);
                    m.path = strings.get(&m.path).copied().unwrap_or(0);
                    if self.maps.insert((m.process, m.start, m.end, m.offset)) {
                        w.write(&Record::Map(m)).map_err(out)?;
                    }
                }
                Record::Stack(mut s) => {
                    let old = s.id;
                    s.process = procs.get(&s.process).copied().unwrap_or(0);
                    let id = match self.stacks.get(&(s.process, s.frames.clone())) {
                        Some(&id) => id,
                        None => {
                            self.max_stack += 1;
                            s.id = self.max_stack;
                            self.stacks.insert((s.process, s.frames.clone()), s.id);
                            w.write(&Record::Stack(s)).map_err(out)?;
                            self.max_stack
                        }
                    };
                    stacks.insert(old, id);
                }
                Record::Lock(mut l) => {
                    l.process = procs.get(&l.process).copied().unwrap_or(0);
                    if self.locks.insert((l.process, l.addr)) {
                        w.write(&Record::Lock(l)).map_err(out)?;
                    }
                }
                Record::Overhead(mut o) => {
                    o.process = procs.get(&o.process).copied().unwrap_or(0);
                    if self.overhead.insert(o.process) {
                        w.write(&Record::Overhead(o)).map_err(out)?;
                    }
                }
                Record::CodeName(mut c) => {
                    c.process = procs.get(&c.process).copied().unwrap_or(0);
                    if self.code_names.insert((c.process, c.addr)) {
                        w.write(&Record::CodeName(c)).map_err(out)?;
                    }
                }
                Record::Loss(mut l) => {
                    l.thread = threads.get(&l.thread).copied().unwrap_or(0);
                    l.process = procs.get(&l.process).copied().unwrap_or(0);
                    let before = self
                        .losses
                        .remove(&(l.thread, l.reason.code()))
                        .unwrap_or(0);
                    l.events = l.events.saturating_sub(before);
                    if l.events > 0 {
                        self.lost += l.events;
                        w.write(&Record::Loss(l)).map_err(out)?;
                    }
                }
                Record::Events(c) => {
                    let thread = threads.get(&c.thread).copied().unwrap_or(0);
                    let mut skip = overlap.skip.remove(&c.thread).unwrap_or(0);
                    events.clear();
                    c.for_each(|mut e| {
                        if skip > 0 {
                            skip -= 1;
                            return;
                        }
                        if e.stack != 0 {
                            e.stack = stacks.get(&e.stack).copied().unwrap_or(0);
                        }
                        events.push(e);
                    })
                    .map_err(MergeError::Tail)?;
                    if skip > 0 {
                        overlap.skip.insert(c.thread, skip);
                    }
                    if let Some(b) = events.iter().map(|e| e.time).max() {
                        self.max_ns = self.max_ns.max(b);
                    }
                    if !events.is_empty() {
                        w.write_events(thread, &events).map_err(out)?;
                    }
                }
                rec @ Record::Unknown { .. } => w.write(&rec).map_err(out)?,
                _ => {}
            }
        }
        let by_pid: HashMap<u32, u32> = self.procs.iter().map(|(k, &v)| (k.0, v)).collect();
        for &(pid, slots) in &self.died {
            self.lost += slots;
            w.write(&Record::Loss(lockscope_format::Loss {
                thread: 0,
                process: by_pid.get(&pid).copied().unwrap_or(0),
                events: slots,
                reason: LossReason::RecorderDied,
            }))
            .map_err(out)?;
        }
        // Threads and processes of the first part that the rings did not
        // end (their rings were gone: the dead recorder had closed them
        // but not written the end) end with the recording.
        for v in self.threads.values() {
            for &(_, id) in v {
                if !self.ended_threads.contains(&id)
                    && !matched.contains(&id)
                    && !threads.values().any(|&t| t == id)
                {
                    ends.push(Record::ThreadEnd(lockscope_format::ThreadEnd {
                        thread: id,
                        end_ns: self.max_ns,
                    }));
                }
            }
        }
        let tail_ended: HashSet<u32> = ends
            .iter()
            .filter_map(|r| match r {
                Record::ProcessEnd(p) => Some(p.process),
                _ => None,
            })
            .collect();
        for &id in self.procs.values() {
            if !self.ended_procs.contains(&id) && !tail_ended.contains(&id) {
                ends.push(Record::ProcessEnd(lockscope_format::ProcessEnd {
                    process: id,
                    end_ns: self.max_ns,
                    status: -1,
                }));
            }
        }
        for mut rec in ends {
            match &mut rec {
                Record::ThreadEnd(e) => e.end_ns = e.end_ns.min(self.max_ns),
                Record::ProcessEnd(p) => p.end_ns = p.end_ns.min(self.max_ns),
                _ => {}
            }
            w.write(&rec).map_err(out)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // See issue 32: a thread that wrote 5 events between the dead
    // recorder's last mark and its death had them written twice.
    #[test]
    fn a_short_overlap_is_matched_where_the_other_threads_clock_difference_is() {
        // Another thread's full match: the rings' times are 156 ns later.
        let offsets = [(156, 3_021_070_942)];
        // The ring's first 5 events are the first part's last 5, at +157.
        assert_eq!(pick_partial(&[(5, 157, 3_020_698_552)], &offsets), Some(5));
    }

    #[test]
    fn a_short_match_shifted_by_a_loop_iteration_is_not_an_overlap() {
        let offsets = [(156, 3_021_070_942)];
        // lock/unlock/lock/unlock matched one iteration (60 ns) off.
        assert_eq!(pick_partial(&[(4, 96, 3_020_698_552)], &offsets), None);
        assert_eq!(pick_partial(&[(4, 216, 3_020_698_552)], &offsets), None);
        // Nothing to compare with: nothing skipped, as without the rule.
        assert_eq!(pick_partial(&[(5, 157, 3_020_698_552)], &[]), None);
    }

    #[test]
    fn of_several_short_matches_that_fit_the_longest_is_taken() {
        let offsets = [(-40, 1_000_000)];
        assert_eq!(
            pick_partial(&[(2, -41, 1_000_000), (6, -38, 1_000_000)], &offsets),
            Some(6)
        );
    }
}
