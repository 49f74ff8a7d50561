//! Reading a trace for analysis: one indexing pass that also collects
//! every record other than events ([`Meta`]), then a time-ordered merge
//! of all threads' events in bounded memory.
//!
//! The chunk index, the random access to one chunk and the merge live in
//! the format crate ([`lockscope_format::index`], re-exported here); this
//! module adds the tables the analyses need.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use lockscope_format::{
    FormatError, Header, LockInfo, Loss, MapEntry, Overhead, Process, ProcessEnd, Record,
    StackTrace, Thread, TraceReader,
};

pub use lockscope_format::index::{ChunkEntry, ChunkReader, Merge, TraceIndex};

use crate::AnalysisError;

/// Everything in a trace except the events, plus the chunk index.
#[derive(Debug, Default)]
pub struct Meta {
    /// The header.
    pub header: Header,
    /// Processes by trace id.
    pub processes: HashMap<u32, Process>,
    /// Process ends by process trace id.
    pub process_ends: HashMap<u32, ProcessEnd>,
    /// Threads by trace id.
    pub threads: HashMap<u32, Thread>,
    /// Latest name of each thread (from `ThreadName` records: the one set
    /// last in time, whatever their order in the file).
    pub thread_names: HashMap<u32, String>,
    /// End time of each thread.
    pub thread_ends: HashMap<u32, u64>,
    /// Memory maps per process.
    pub maps: HashMap<u32, Vec<MapEntry>>,
    /// Interned strings.
    pub strings: HashMap<u32, String>,
    /// Names of code addresses the files cannot give (GPU kernel
    /// handles), by (process, address).
    pub code_names: HashMap<(u32, u64), String>,
    /// Interned call paths by id.
    pub stacks: HashMap<u32, StackTrace>,
    /// First sightings of locks.
    pub locks: Vec<LockInfo>,
    /// Recorder overhead per process.
    pub overhead: HashMap<u32, Overhead>,
    /// Loss records.
    pub losses: Vec<Loss>,
    /// Footer, if the trace is complete.
    pub footer: Option<lockscope_format::Footer>,
    /// Set when the file ended early: (offset, message). The analysis goes
    /// on with what was read and the report says so.
    pub truncated: Option<String>,
    /// The same: where the file ended early and what was being read (for
    /// front ends that word the warning themselves).
    pub cut_short: Option<(u64, &'static str)>,
    /// Damaged stretches stepped over ([`index_with`] with
    /// `skip_corrupt`): the events and records they held are missing.
    pub skipped: Vec<lockscope_format::Skipped>,
    /// Events in the index.
    pub events: u64,
    /// File size in bytes.
    pub file_bytes: u64,
    /// The chunk index (for [`Merge`] and random access).
    pub index: TraceIndex,
    /// Semaphores used as locks, decided over the whole trace
    /// ([`crate::sync::SemLockFinder`]); the interpreter reports them as
    /// locks of kind `semaphore-lock`.
    pub semaphore_locks: Vec<crate::sync::ObjId>,
}

/// Reads a trace's records (not its events) and indexes its event chunks.
/// `progress(done, total)` is called now and then with byte counts.
pub fn index(path: &Path, progress: &mut dyn FnMut(u64, u64)) -> Result<Meta, AnalysisError> {
    index_with(path, false, progress)
}

/// [`index`], and with `skip_corrupt` past damaged records
/// ([`lockscope_format::TraceReader::skipping_corrupt`]): they are left
/// out of the index and listed in [`Meta::skipped`] (in words:
/// [`damaged_line`]), and every pass over the events reads only the
/// chunks indexed, so no later reader meets the damage again.
pub fn index_with(
    path: &Path,
    skip_corrupt: bool,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Meta, AnalysisError> {
    let io = |e| AnalysisError::Io {
        path: path.display().to_string(),
        source: e,
    };
    let f = File::open(path).map_err(io)?;
    let file_bytes = f.metadata().map_err(io)?.len();
    let mut tr = TraceReader::new(BufReader::with_capacity(1 << 20, f))?;
    if skip_corrupt {
        tr = tr.skipping_corrupt()?;
    }
    let prefix = TraceIndex::read_prefix(path, tr.offset())?;
    let mut m = Meta {
        header: tr.header().clone(),
        file_bytes,
        index: TraceIndex::new(prefix),
        ..Meta::default()
    };
    let mut last_progress = 0u64;
    let mut name_times: HashMap<u32, u64> = HashMap::new();
    loop {
        let at = tr.offset();
        if at - last_progress > 64 << 20 {
            progress(at, file_bytes);
            last_progress = at;
        }
        let rec = match tr.next() {
            Ok(Some(r)) => r,
            Ok(None) => break,
            // A recording cut short (crash, full disk) still deserves a
            // report of what it holds; corruption does not.
            Err(FormatError::Truncated { offset, what }) => {
                m.cut_short = Some((offset, what));
                m.truncated = Some(format!(
                    "the trace ends early at byte {offset} (while reading {what}); \
                     the report covers what was recorded before"
                ));
                break;
            }
            Err(e) => return Err(e.into()),
        };
        match rec {
            Record::Events(c) => {
                m.events += u64::from(c.count);
                // Where the chunk really starts: not `at` when damage
                // before it was stepped over.
                m.index.add(&c, tr.record_offset(), tr.offset());
            }
            Record::String(s) => {
                m.strings.insert(s.id, s.text);
            }
            Record::Process(p) => {
                m.processes.insert(p.id, p);
            }
            Record::ProcessEnd(p) => {
                m.process_ends.insert(p.process, p);
            }
            Record::Thread(t) => {
                m.threads.insert(t.id, t);
            }
            Record::ThreadName(t) => {
                // By time, not file order: a name set by another thread is
                // written by that thread's converter, which may run ahead
                // of the named thread's own (several recorder workers).
                let newer = name_times.get(&t.thread).is_none_or(|&at| t.time >= at);
                if newer {
                    name_times.insert(t.thread, t.time);
                    m.thread_names.insert(t.thread, t.name);
                }
            }
            Record::ThreadEnd(t) => {
                m.thread_ends.insert(t.thread, t.end_ns);
            }
            Record::Map(e) => m.maps.entry(e.process).or_default().push(e),
            Record::CodeName(n) => {
                m.code_names.insert((n.process, n.addr), n.name);
            }
            Record::Stack(s) => {
                m.stacks.insert(s.id, s);
            }
            Record::Lock(l) => m.locks.push(l),
            Record::Loss(l) => m.losses.push(l),
            Record::Overhead(o) => {
                m.overhead.insert(o.process, o);
            }
            Record::Footer(f) => m.footer = Some(f),
            _ => {}
        }
    }
    m.skipped = tr.skipped().to_vec();
    m.semaphore_locks = semaphore_locks(path, &m)?;
    progress(file_bytes, file_bytes);
    Ok(m)
}

/// The report's sentence for damaged stretches stepped over.
pub fn damaged_line(skipped: &[lockscope_format::Skipped]) -> Option<String> {
    let first = skipped.first()?;
    let bytes: u64 = skipped.iter().map(|s| s.bytes).sum();
    let n = skipped.len();
    Some(format!(
        "{n} damaged stretch{} of the trace ({bytes} bytes, the first at byte {}) \
         {} skipped (--skip-corrupt): the events and records in {} are missing",
        if n == 1 { "" } else { "es" },
        first.offset,
        if n == 1 { "was" } else { "were" },
        if n == 1 { "it" } else { "them" },
    ))
}

/// The trace's semaphores used as locks. A second, time-ordered pass over
/// the events, made only when the trace has a semaphore at all (its Lock
/// record names the op that first used it), so that traces without
/// semaphores pay nothing. The alternative, deciding as the interpreter
/// goes, would have to report a semaphore's first acquisitions before
/// knowing whether a later post from another thread makes it a signal.
fn semaphore_locks(path: &Path, m: &Meta) -> Result<Vec<crate::sync::ObjId>, AnalysisError> {
    use lockscope_format::Op;
    let has_sem = m.locks.iter().any(|l| {
        matches!(
            Op::from_u8(l.first_op),
            Some(Op::SemWait | Op::SemTrywait | Op::SemTimedwait | Op::SemPost)
        )
    });
    if !has_sem || m.events == 0 {
        return Ok(Vec::new());
    }
    let process: HashMap<u32, u32> = m.threads.values().map(|t| (t.id, t.process)).collect();
    let mut finder = crate::sync::SemLockFinder::default();
    let mut merge = Merge::new(path, &m.index)?;
    merge.run_runs(
        |thread, buf, a, b| {
            let p = process.get(&thread).copied().unwrap_or(0);
            for e in &buf[a..b] {
                finder.event(p, thread, e);
            }
        },
        &mut |_, _| {},
    )?;
    Ok(finder.finish())
}

impl Meta {
    /// Trace thread ids that have events, sorted.
    pub fn threads_with_events(&self) -> Vec<u32> {
        self.index.threads()
    }
    /// Number of events of one thread.
    pub fn event_count(&self, thread: u32) -> u64 {
        self.index.event_count(thread)
    }
}

/// Reads a little of a file to tell whether it looks like a trace (used
/// by the CLI for a friendlier message).
pub fn looks_like_trace(path: &Path) -> bool {
    let mut b = [0u8; 8];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok()
        && b == lockscope_format::MAGIC
}
