//! The detailed-mode view of a trace, shared by the ULCP, lockset and OCC
//! analyses: critical-section instances with their read and write sets,
//! every recorded access with the locks held at that moment, heap blocks,
//! and names for data objects.
//!
//! Built in one pass over the trace's synchronization steps
//! ([`lockscope_trace::sync`], the one interpreter of the lock protocol). A critical
//! section instance opens when a lock is acquired (or a condition wait
//! re-acquires its mutex) and closes at the matching release; accesses recorded
//! while several locks are held belong to every open instance (a nested
//! section's accesses are also its outer section's). `ReleaseValue`
//! events, which the runtime emits just before the release they belong to,
//! are attached to the instance that closes next, for the locations that
//! instance wrote.
//!
//! Data objects are named the way the thesis' data-centric attribution
//! (ch. 6) does: a static by its symbol (`name+0xoff`), a heap location by
//! the call path that allocated its block (`heap(24 B) main<-start +0x8`),
//! anything else by its address.
//!
//! The whole trace is held in memory: detailed mode is for test runs of a
//! program, not hours of production.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use lockscope_format::{repeat, Event, Op, Record, Trace};

use crate::hb::{Clock, HbClocks};
use lockscope_symbols::Symbolizer;
use lockscope_trace::sync::{for_each_trace_step, Step, StepKind};
use lockscope_trace::AnalysisError;

/// One recorded memory access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// Time, ns since trace start.
    pub time: u64,
    /// Trace thread id.
    pub thread: u32,
    /// Address.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// Write (else read).
    pub write: bool,
    /// pc of the access.
    pub site: u64,
    /// Index of the set of locks held ([`Detailed::locksets`]).
    pub lockset: u32,
    /// Index of the set of locks held in write mode (rwlocks held for
    /// reading protect only reads: Eraser's reader-writer refinement).
    pub write_lockset: u32,
    /// Index of the thread's vector clock at the access
    /// ([`Detailed::clocks`]; happens-before through create, join and
    /// barriers, see [`crate::hb`]).
    pub clock: u32,
}

/// One dynamic critical section.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Section {
    /// Lock address.
    pub lock: u64,
    /// Trace thread id.
    pub thread: u32,
    /// Trace process id.
    pub process: u32,
    /// Call site of the acquisition.
    pub site: u64,
    /// Call path of the acquisition (stack id, 0 if none).
    pub stack: u32,
    /// When the acquisition was attempted (ns).
    pub attempt: u64,
    /// When it was acquired (ns).
    pub acquired: u64,
    /// When it was released (ns); `acquired` if never released in the trace.
    pub released: u64,
    /// Held in shared (reader) mode.
    pub shared: bool,
    /// Read set: address -> largest size read there.
    pub reads: AccessSet,
    /// Write set: address -> largest size written there.
    pub writes: AccessSet,
    /// Read operations (every access counted, not only distinct ones).
    pub rdops: u64,
    /// Write operations.
    pub wrops: u64,
    /// Value of each written location at release (address -> value or
    /// hash), when the runtime saw the release.
    pub release_values: HashMap<u64, u64>,
    /// True if the release was seen (the section closed in the trace).
    pub closed: bool,
}

/// The locations a critical section read (or wrote): address -> largest
/// size accessed there, in address order, as a sorted vector.
///
/// Why not a `BTreeMap`: a map allocates a whole node (11 entries, ~190
/// bytes) for its first entry, and most sections touch a handful of
/// locations: on PARSEC fluidanimate's detailed trace the two maps of its
/// sections were a fifth of the analyses' memory (massif: 143 MB of
/// 775 MB for 3.7M events). Built by [`AccessSet::add`], which appends
/// (merging a repeat of the last address in place) and sorts and merges
/// now and then; [`AccessSet::seal`] leaves it sorted, merged and
/// exactly sized. Every lookup ([`AccessSet::get`], iteration) is on a
/// sealed set: the detailed view seals each section when it closes and
/// every section at the end of [`Detailed::from_trace`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessSet {
    v: Vec<(u64, u64)>,
    /// Length of the sorted, merged prefix of `v`.
    sorted: usize,
}

impl AccessSet {
    /// Records an access of `size` bytes at `addr` (the largest size per
    /// address is kept).
    pub fn add(&mut self, addr: u64, size: u64) {
        if let Some(last) = self.v.last_mut() {
            if last.0 == addr {
                last.1 = last.1.max(size);
                return;
            }
        }
        self.v.push((addr, size));
        // Amortised: a section that alternates between a few locations
        // (a loop over two fields) is merged back to them before its
        // unsorted tail outgrows them.
        if self.v.len() > 2 * self.sorted + 32 {
            self.merge();
        }
    }

    fn merge(&mut self) {
        if self.sorted == self.v.len() {
            return;
        }
        // Stable: equal addresses keep their order, and only the largest
        // size of each survives.
        self.v.sort_by_key(|&(a, _)| a);
        let mut out = 0;
        for i in 0..self.v.len() {
            let (a, sz) = self.v[i];
            if out > 0 && self.v[out - 1].0 == a {
                self.v[out - 1].1 = self.v[out - 1].1.max(sz);
            } else {
                self.v[out] = (a, sz);
                out += 1;
            }
        }
        self.v.truncate(out);
        self.sorted = out;
    }

    /// Sorts, merges and trims the set (idempotent). A slack of a few
    /// entries is kept: trimming every small set was one reallocation per
    /// section and 7 % of `ulcp`'s time on fluidanimate's trace.
    pub fn seal(&mut self) {
        self.merge();
        if self.v.capacity() > self.v.len() + 4 {
            self.v.shrink_to_fit();
        }
    }

    /// The largest size accessed at exactly `addr`.
    pub fn get(&self, addr: &u64) -> Option<&u64> {
        debug_assert_eq!(self.sorted, self.v.len(), "lookup in an unsealed set");
        self.v
            .binary_search_by_key(addr, |&(a, _)| a)
            .ok()
            .map(|i| &self.v[i].1)
    }

    /// True if `addr` was accessed.
    pub fn contains_key(&self, addr: &u64) -> bool {
        self.get(addr).is_some()
    }

    /// Distinct addresses.
    pub fn len(&self) -> usize {
        self.v.len()
    }

    /// True if nothing was accessed.
    pub fn is_empty(&self) -> bool {
        self.v.is_empty()
    }

    /// (address, size), in address order.
    pub fn iter(&self) -> AccessIter<'_> {
        self.v.iter().map(|(a, s)| (a, s))
    }

    /// Addresses, in order.
    pub fn keys(&self) -> impl Iterator<Item = &u64> + '_ {
        self.v.iter().map(|(a, _)| a)
    }
}

/// The iterator of [`AccessSet::iter`].
pub type AccessIter<'a> =
    std::iter::Map<std::slice::Iter<'a, (u64, u64)>, fn(&'a (u64, u64)) -> (&'a u64, &'a u64)>;

impl<'a> IntoIterator for &'a AccessSet {
    type Item = (&'a u64, &'a u64);
    type IntoIter = AccessIter<'a>;
    fn into_iter(self) -> AccessIter<'a> {
        self.iter()
    }
}

impl FromIterator<(u64, u64)> for AccessSet {
    fn from_iter<I: IntoIterator<Item = (u64, u64)>>(it: I) -> AccessSet {
        let mut s = AccessSet::default();
        for (a, sz) in it {
            s.add(a, sz);
        }
        s.seal();
        s
    }
}

impl Section {
    /// True if the section touched no shared memory at all.
    pub fn is_empty(&self) -> bool {
        self.reads.is_empty() && self.writes.is_empty()
    }
}

/// A heap block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// Address.
    pub addr: u64,
    /// Requested size.
    pub size: u64,
    /// Allocation time (ns).
    pub alloc: u64,
    /// Free time (ns), `u64::MAX` if never freed.
    pub free: u64,
    /// Allocation call path (stack id).
    pub stack: u32,
    /// Allocation site (malloc's return address).
    pub site: u64,
    /// Process.
    pub process: u32,
}

/// Lifetime of a thread.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadSpan {
    /// Process.
    pub process: u32,
    /// OS thread id.
    pub tid: u32,
    /// Name.
    pub name: String,
    /// Start (ns).
    pub start: u64,
    /// End (ns).
    pub end: u64,
}

/// The detailed view of one trace.
pub struct Detailed {
    /// Cache line size of the recording machine (bytes; 64 if unknown).
    pub cache_line: u64,
    /// Threads by trace id.
    pub threads: BTreeMap<u32, ThreadSpan>,
    /// Every critical section instance, ordered by acquisition time.
    pub sections: Vec<Section>,
    /// Every recorded access, ordered by time.
    pub accesses: Vec<Access>,
    /// Distinct sets of held locks (sorted addresses); index 0 is empty.
    pub locksets: Vec<Vec<u64>>,
    /// Vector clocks referenced by [`Access::clock`].
    pub clocks: Vec<Clock>,
    /// Heap blocks, ordered by address.
    pub blocks: Vec<Block>,
    /// Call paths by stack id.
    pub stacks: HashMap<u32, Vec<u64>>,
    /// Accesses recorded while the thread held no lock (non-zero only if
    /// the program ran with `LOCKSCOPE_ALL_ACCESSES=1`).
    pub outside_accesses: u64,
    /// Events lost by the recorder (from the footer / loss records).
    pub lost: u64,
    /// Process of the first thread (for symbolizing when unknown).
    pub main_process: u32,
    sym: Symbolizer,
    object_cache: HashMap<(u32, u64), (String, u64)>,
    function_cache: HashMap<(u32, u64), String>,
}

struct Open {
    idx: usize,
}

#[derive(Default)]
struct ThreadScan {
    open: Vec<Open>,
    pending: HashMap<u64, (u64, u64)>,
    /// Held locks with their mode (true = write/exclusive).
    held: Vec<(u64, bool)>,
    lockset: u32,
    write_lockset: u32,
    /// Index into [`Detailed::clocks`] and the clock version it holds.
    clock: Option<(u32, u64)>,
}

impl Detailed {
    /// Reads a trace file and builds the view.
    pub fn open(path: &Path, symbolize: bool) -> Result<Detailed, AnalysisError> {
        let t = Trace::open(path)?;
        Ok(Detailed::from_trace(&t, symbolize))
    }

    /// Builds the view from a trace in memory.
    pub fn from_trace(t: &Trace, symbolize: bool) -> Detailed {
        let mut maps: HashMap<u32, Vec<lockscope_format::MapEntry>> = HashMap::new();
        let mut strings = HashMap::new();
        let mut threads = BTreeMap::new();
        let mut stacks = HashMap::new();
        let mut lost = t.footer.as_ref().map_or(0, |f| f.lost);
        for r in &t.records {
            match r {
                Record::Map(m) => maps.entry(m.process).or_default().push(m.clone()),
                Record::String(s) => {
                    strings.insert(s.id, s.text.clone());
                }
                Record::Thread(th) => {
                    threads.insert(
                        th.id,
                        ThreadSpan {
                            process: th.process,
                            tid: th.tid,
                            name: th.name.clone(),
                            start: th.start_ns,
                            end: th.start_ns,
                        },
                    );
                }
                Record::ThreadEnd(e) => {
                    if let Some(th) = threads.get_mut(&e.thread) {
                        th.end = th.end.max(e.end_ns);
                    }
                }
                Record::Stack(s) => {
                    stacks.insert(s.id, s.frames.clone());
                }
                Record::Loss(l) if t.footer.is_none() => lost += l.events,
                _ => {}
            }
        }
        let cache_line = if t.header.cache_line == 0 {
            64
        } else {
            u64::from(t.header.cache_line)
        };
        let main_process = threads.values().next().map_or(0, |th| th.process);
        let mut d = Detailed {
            cache_line,
            threads,
            sections: Vec::new(),
            accesses: Vec::new(),
            locksets: vec![Vec::new()],
            clocks: Vec::new(),
            blocks: Vec::new(),
            stacks,
            outside_accesses: 0,
            lost,
            main_process,
            sym: Symbolizer::new(maps, strings, symbolize),
            object_cache: HashMap::new(),
            function_cache: HashMap::new(),
        };
        let mut lockset_ids: HashMap<Vec<u64>, u32> = HashMap::new();
        lockset_ids.insert(Vec::new(), 0);
        for (&tid, evs) in &t.events {
            let process = d.threads.get(&tid).map_or(main_process, |th| th.process);
            let span = d.threads.entry(tid).or_insert_with(|| ThreadSpan {
                process,
                start: evs.first().map_or(0, |e| e.time),
                ..ThreadSpan::default()
            });
            if let Some(last) = evs.last() {
                span.end = span.end.max(last.time);
            }
            if let Some(first) = evs.first() {
                if span.start == 0 || span.start > first.time {
                    span.start = first.time;
                }
            }
        }
        let mut scans: HashMap<u32, ThreadScan> = HashMap::new();
        let mut hb = HbClocks::new(t);
        for_each_trace_step(t, false, |st, _| {
            if st.kind.is_synthetic() {
                return;
            }
            hb.step(st);
            let process = d
                .threads
                .get(&st.thread)
                .map_or(main_process, |th| th.process);
            let sc = scans.entry(st.thread).or_default();
            if matches!(st.kind, StepKind::Memory(Op::Read | Op::Write)) {
                let v = hb.version(st.thread);
                if sc.clock.is_none_or(|(_, have)| have != v) {
                    d.clocks
                        .push(hb.clock(st.thread).cloned().unwrap_or_default());
                    sc.clock = Some((d.clocks.len() as u32 - 1, v));
                }
            }
            d.step(st, process, sc, &mut lockset_ids);
        });
        // Sections never released in the trace were not sealed.
        for s in &mut d.sections {
            s.reads.seal();
            s.writes.seal();
        }
        d.sections.sort_by(|a, b| {
            (a.acquired, a.thread, a.attempt).cmp(&(b.acquired, b.thread, b.attempt))
        });
        d.accesses.sort_by_key(|a| (a.time, a.thread));
        d.blocks.sort_by_key(|b| (b.addr, b.alloc));
        d
    }

    fn intern(ids: &mut HashMap<Vec<u64>, u32>, sets: &mut Vec<Vec<u64>>, mut v: Vec<u64>) -> u32 {
        v.sort_unstable();
        v.dedup();
        if let Some(&i) = ids.get(&v) {
            return i;
        }
        let i = sets.len() as u32;
        sets.push(v.clone());
        ids.insert(v, i);
        i
    }

    fn held_changed(&mut self, sc: &mut ThreadScan, ids: &mut HashMap<Vec<u64>, u32>) {
        let all: Vec<u64> = sc.held.iter().map(|h| h.0).collect();
        let wr: Vec<u64> = sc.held.iter().filter(|h| h.1).map(|h| h.0).collect();
        sc.lockset = Self::intern(ids, &mut self.locksets, all);
        sc.write_lockset = Self::intern(ids, &mut self.locksets, wr);
    }

    #[allow(clippy::too_many_arguments)]
    fn open_section(
        &mut self,
        thread: u32,
        process: u32,
        e: &Event,
        lock: u64,
        attempt: u64,
        shared: bool,
        sc: &mut ThreadScan,
        ids: &mut HashMap<Vec<u64>, u32>,
    ) {
        self.sections.push(Section {
            lock,
            thread,
            process,
            site: e.site,
            stack: e.stack,
            attempt,
            acquired: e.time,
            released: e.time,
            shared,
            ..Section::default()
        });
        sc.open.push(Open {
            idx: self.sections.len() - 1,
        });
        sc.held.push((lock, !shared));
        self.held_changed(sc, ids);
    }

    fn close_section(
        &mut self,
        lock: u64,
        time: u64,
        sc: &mut ThreadScan,
        ids: &mut HashMap<Vec<u64>, u32>,
    ) {
        let pending = std::mem::take(&mut sc.pending);
        let Some(pos) = sc
            .open
            .iter()
            .rposition(|o| self.sections[o.idx].lock == lock)
        else {
            // A release of a lock taken before recording began.
            return;
        };
        let o = sc.open.remove(pos);
        let s = &mut self.sections[o.idx];
        s.released = time;
        s.closed = true;
        s.reads.seal();
        s.writes.seal();
        for (addr, (size, v)) in pending {
            if s.writes.get(&addr).is_some_and(|&w| w <= size) {
                s.release_values.insert(addr, v);
            }
        }
        if let Some(h) = sc.held.iter().rposition(|h| h.0 == lock) {
            sc.held.remove(h);
        }
        self.held_changed(sc, ids);
    }

    fn step(
        &mut self,
        st: &Step<'_>,
        process: u32,
        sc: &mut ThreadScan,
        ids: &mut HashMap<Vec<u64>, u32>,
    ) {
        let (e, thread) = (st.event, st.thread);
        match st.kind {
            StepKind::Memory(op @ (Op::Read | Op::Write)) => {
                let size = if e.flags == 0 {
                    e.arg2.max(1)
                } else {
                    u64::from(e.flags)
                };
                let write = op == Op::Write;
                for o in &sc.open {
                    let s = &mut self.sections[o.idx];
                    let set = if write { &mut s.writes } else { &mut s.reads };
                    set.add(e.addr, size);
                    if write {
                        s.wrops += 1;
                    } else {
                        s.rdops += 1;
                    }
                }
                if sc.open.is_empty() {
                    self.outside_accesses += 1;
                }
                self.accesses.push(Access {
                    time: e.time,
                    thread,
                    addr: e.addr,
                    size,
                    write,
                    site: e.site,
                    lockset: sc.lockset,
                    write_lockset: sc.write_lockset,
                    clock: sc.clock.map_or(0, |c| c.0),
                });
            }
            // A coalesced run (`AccessRepeat`, on by default): `arg` more
            // of the plain access before it (a repeated atomic is not a
            // plain access). The sets do not change;
            // the access counts do. A run never spans a lock operation,
            // so the open sections are the first access's.
            StepKind::Memory(Op::AccessRepeat)
                if matches!(Op::repeated(e.arg2), Some(Op::Read | Op::Write)) =>
            {
                for o in &sc.open {
                    let s = &mut self.sections[o.idx];
                    if e.arg2 == repeat::WRITE {
                        s.wrops += e.arg;
                    } else {
                        s.rdops += e.arg;
                    }
                }
                if sc.open.is_empty() {
                    self.outside_accesses += e.arg;
                }
            }
            StepKind::Memory(Op::ReleaseValue) => {
                let size = if e.flags == 0 {
                    e.arg2
                } else {
                    u64::from(e.flags)
                };
                sc.pending.insert(e.addr, (size, e.arg));
            }
            StepKind::Memory(Op::Alloc) => self.blocks.push(Block {
                addr: e.addr,
                size: e.arg,
                alloc: e.time,
                free: u64::MAX,
                stack: e.stack,
                site: e.site,
                process,
            }),
            StepKind::Memory(Op::Free) => {
                if let Some(b) = self
                    .blocks
                    .iter_mut()
                    .rev()
                    .find(|b| b.addr == e.addr && b.free == u64::MAX && b.process == process)
                {
                    b.free = e.time;
                }
            }
            StepKind::Acquired { section, .. } => self.open_section(
                thread,
                process,
                e,
                section.lock.addr,
                section.attempt_ns,
                section.shared(),
                sc,
                ids,
            ),
            // Re-acquired after the wait (signalled or timed out): the
            // section is on the wait's mutex, whatever `arg` now holds.
            StepKind::CondWaitEnd { section, .. } => self.open_section(
                thread,
                process,
                e,
                section.lock.addr,
                section.attempt_ns,
                false,
                sc,
                ids,
            ),
            StepKind::CondWaitBegin { mutex, .. } => {
                self.close_section(mutex.addr, e.time, sc, ids)
            }
            StepKind::Released(section) => self.close_section(section.lock.addr, e.time, sc, ids),
            // A release of a lock taken before recording began, or of a
            // hold the protocol dropped as stale: close it here if this
            // view still has it open.
            StepKind::UnmatchedRelease { lock } => self.close_section(lock.addr, e.time, sc, ids),
            _ => {}
        }
    }

    /// The heap block containing `addr` at `time`, if any.
    ///
    /// `time` is best the end of the critical section that accessed the
    /// address: a block allocated inside the section is live then. A block
    /// freed at exactly `time` still counts.
    pub fn block_at(&self, addr: u64, time: u64) -> Option<&Block> {
        let i = self.blocks.partition_point(|b| b.addr <= addr);
        self.blocks[..i]
            .iter()
            .rev()
            .take(256)
            .find(|b| addr < b.addr + b.size.max(1) && b.alloc <= time && time <= b.free)
    }

    /// Name of the function containing a code address (a call site).
    pub fn function(&mut self, process: u32, pc: u64) -> String {
        if let Some(s) = self.function_cache.get(&(process, pc)) {
            return s.clone();
        }
        let loc = self.sym.code(process, pc);
        // The function that physically contains the call, not the
        // innermost inlined one: for `std::lock_guard` that is the user's
        // function rather than `__gthread_mutex_lock`.
        let s = loc
            .frames
            .iter()
            .rev()
            .find_map(|f| f.function.as_deref().map(short_name))
            .unwrap_or_else(|| loc.module_offset());
        self.function_cache.insert((process, pc), s.clone());
        s
    }

    /// `function (file:line)` of a code address.
    pub fn site(&mut self, process: u32, pc: u64) -> String {
        self.sym.code(process, pc).short()
    }

    /// The allocation context of a block: the named functions of its
    /// call path, innermost first, joined by `<-` (frames that cannot be
    /// named and runtime frames, like libc's start-up code, are left out).
    pub fn alloc_context(&mut self, b: &Block) -> String {
        let mut frames = self.stacks.get(&b.stack).cloned().unwrap_or_default();
        if frames.is_empty() && b.site != 0 {
            frames.push(b.site);
        }
        let mut names: Vec<String> = Vec::new();
        for pc in frames.into_iter().take(8) {
            // Runtime code (libc's start-up, which `.dynsym` now names)
            // is not part of a user's allocation context.
            let Some(loc) = self.sym.code(b.process, pc).user_view() else {
                continue;
            };
            let Some(f) = loc.frames.iter().rev().find_map(|f| f.function.as_deref()) else {
                continue;
            };
            let f = short_name(f);
            if names.last() != Some(&f) {
                names.push(f);
            }
            if names.len() == 4 {
                break;
            }
        }
        if names.is_empty() {
            format!("{:#x}", b.site)
        } else {
            names.join("<-")
        }
    }

    /// The data object at `addr` as seen at `time` and the offset inside
    /// it: a static's symbol, a heap block's allocation context, or the
    /// address itself.
    pub fn object_parts(&mut self, process: u32, addr: u64, time: u64) -> (String, u64) {
        if let Some(b) = self.block_at(addr, time).cloned() {
            let ctx = self.alloc_context(&b);
            return (format!("heap({} B) {ctx}", b.size), addr - b.addr);
        }
        if let Some(s) = self.object_cache.get(&(process, addr)) {
            return s.clone();
        }
        // `Symbolizer::data_indexed` gives `name` or `name+0xoff`.
        let parts = match self.sym.data_indexed(process, addr) {
            Some(s) => match s.rsplit_once("+0x") {
                Some((name, off)) => match u64::from_str_radix(off, 16) {
                    Ok(off) => (name.to_string(), off),
                    Err(_) => (s, 0),
                },
                None => (s, 0),
            },
            None => (format!("{addr:#x}"), 0),
        };
        self.object_cache.insert((process, addr), parts.clone());
        parts
    }

    /// Name of the data object at `addr` with the offset inside it
    /// (`counter`, `slots+0x8`, `heap(24 B) make_node<-main +0x8`).
    pub fn object(&mut self, process: u32, addr: u64, time: u64) -> String {
        match self.object_parts(process, addr, time) {
            (name, 0) => name,
            (name, off) if name.starts_with("heap(") => format!("{name} +{off:#x}"),
            (name, off) => format!("{name}+{off:#x}"),
        }
    }

    /// Name of the data object at `addr` without the offset (so that the
    /// elements of an array or the fields of a heap node group together).
    pub fn object_base(&mut self, process: u32, addr: u64, time: u64) -> String {
        let (name, _) = self.object_parts(process, addr, time);
        // Heap objects group by allocation context, whatever their size
        // (a vector's buffer grows).
        match name.strip_prefix("heap(").and_then(|r| r.split_once(") ")) {
            Some((_, ctx)) => format!("heap {ctx}"),
            None => name,
        }
    }

    /// Name of a lock: its symbol, its heap block's allocation context, or
    /// its address.
    pub fn lock_name(&mut self, process: u32, addr: u64, time: u64) -> String {
        self.object(process, addr, time)
    }

    /// True if `addr` lies in a heap block at `time` (a dynamically
    /// allocated lock: PinCS then names the section by acquisition site).
    pub fn is_heap(&self, addr: u64, time: u64) -> bool {
        self.block_at(addr, time).is_some()
    }

    /// Messages about binaries that could not be symbolized.
    pub fn symbol_problems(&self) -> &[String] {
        self.sym.problems()
    }
}

/// A demangled C++ name without its argument list (`cs_add(int, long)` ->
/// `cs_add`): the list makes names long and adds nothing to a report that
/// names code sites. `operator()` (lambdas) keeps its parentheses.
pub fn short_name(f: &str) -> String {
    if f.ends_with("operator()") {
        return f.to_string();
    }
    match f.find('(') {
        Some(i) if i > 0 && !f[..i].ends_with("operator") => f[..i].to_string(),
        _ => f.to_string(),
    }
}

/// Formats an address the way every detailed analysis prints it.
pub fn hex(a: u64) -> String {
    format!("{a:#x}")
}

#[cfg(test)]
pub(crate) mod testutil {
    //! Builds small synthetic traces for the analyses' unit tests.
    use super::*;
    use lockscope_format::{phase, Header, Thread};

    /// A synthetic trace: events per thread, no maps (names stay hex).
    pub fn trace(threads: Vec<Vec<Event>>) -> Trace {
        let mut t = Trace {
            header: Header {
                cache_line: 64,
                ..Header::default()
            },
            ..Trace::default()
        };
        for (i, evs) in threads.into_iter().enumerate() {
            let id = i as u32 + 1;
            t.records.push(Record::Thread(Thread {
                id,
                process: 1,
                tid: 100 + id,
                parent: 0,
                start_ns: 0,
                name: format!("t{id}"),
            }));
            t.events.insert(id, evs);
        }
        t
    }

    fn ev(time: u64, op: Op, flags: u8, addr: u64) -> Event {
        Event {
            time,
            op: op as u8,
            flags,
            addr,
            site: 0x1000 + op as u64,
            ..Event::default()
        }
    }

    /// Lock acquired at once.
    pub fn lock(time: u64, l: u64) -> Event {
        ev(time, Op::MutexLock, phase::DONE, l)
    }
    /// Contended attempt.
    pub fn lock_begin(time: u64, l: u64) -> Event {
        ev(time, Op::MutexLock, phase::BEGIN, l)
    }
    /// Contended acquisition.
    pub fn lock_done_contended(time: u64, l: u64) -> Event {
        ev(time, Op::MutexLock, phase::DONE | phase::CONTENDED, l)
    }
    /// Release.
    pub fn unlock(time: u64, l: u64) -> Event {
        ev(time, Op::MutexUnlock, phase::DONE, l)
    }
    /// 4-byte read.
    pub fn rd(time: u64, a: u64) -> Event {
        ev(time, Op::Read, 4, a)
    }
    /// 4-byte write.
    pub fn wr(time: u64, a: u64) -> Event {
        ev(time, Op::Write, 4, a)
    }
    /// Value at release.
    pub fn rv(time: u64, a: u64, v: u64) -> Event {
        Event {
            arg: v,
            ..ev(time, Op::ReleaseValue, 4, a)
        }
    }
    /// `n` more accesses of `size` bytes at `a` like the one before
    /// (coalesced): `kind` 1 read, 2 write, 3 atomic load.
    pub fn repeat(time: u64, a: u64, size: u8, n: u64, kind: u64) -> Event {
        Event {
            arg: n,
            arg2: kind,
            // A repeat has no site of its own: it is the access before.
            site: 0,
            ..ev(time, Op::AccessRepeat, size, a)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;
    use lockscope_format::phase;

    /// A section's access set keeps each address once, with its largest
    /// size, in address order, whatever order and repetition the accesses
    /// came in (a loop alternating between locations merges back into
    /// them as it goes), and equals the map it replaced.
    #[test]
    fn an_access_set_is_the_largest_size_per_address_in_order() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut set = AccessSet::default();
        let mut want = std::collections::BTreeMap::new();
        for i in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Runs of one address, alternations between two, and a few
            // hundred others.
            let addr = match i % 10 {
                0..=3 => 0x1000,
                4..=6 => 0x2000 + (i % 2) * 8,
                _ => 0x3000 + (x % 300) * 4,
            };
            let size = 1 << ((x >> 40) % 4);
            set.add(addr, size);
            let w = want.entry(addr).or_insert(0);
            *w = size.max(*w);
            // Merged as it goes: never far more than the distinct addresses.
            assert!(
                set.v.len() <= 2 * want.len() + 33,
                "{} entries",
                set.v.len()
            );
        }
        set.seal();
        let got: Vec<(u64, u64)> = set.iter().map(|(&a, &s)| (a, s)).collect();
        let want_v: Vec<(u64, u64)> = want.iter().map(|(&a, &s)| (a, s)).collect();
        assert_eq!(got, want_v);
        assert_eq!(set.len(), want.len());
        for (a, s) in &want {
            assert_eq!(set.get(a), Some(s));
        }
        assert_eq!(set.get(&0xfff), None);
        assert!(set.keys().copied().eq(want.keys().copied()));
        let again: AccessSet = want.iter().map(|(&a, &s)| (a, s)).collect();
        assert_eq!(again, set, "sealed sets compare equal");
        let mut twice = set.clone();
        twice.seal();
        assert_eq!(twice, set, "seal is idempotent");
        assert!(AccessSet::default().is_empty());
    }

    #[test]
    fn coalesced_repeats_count_as_accesses_not_locations() {
        let rep = |time, a, n, kind| repeat(time, a, 4, n, kind);
        let t = trace(vec![vec![
            lock(10, 0xA),
            rd(11, 0x100),
            rep(12, 0x100, 5, 1),
            wr(13, 0x200),
            rep(14, 0x200, 3, 2),
            unlock(15, 0xA),
            rd(16, 0x400),
            rep(17, 0x400, 2, 1),
        ]]);
        let d = Detailed::from_trace(&t, false);
        let a = &d.sections[0];
        assert_eq!((a.rdops, a.wrops), (6, 4));
        assert_eq!(a.reads.len() + a.writes.len(), 2);
        assert_eq!(d.outside_accesses, 3);
        assert_eq!(d.accesses.len(), 3);
    }

    #[test]
    fn sections_collect_sets_nested_and_release_values() {
        let t = trace(vec![vec![
            lock(10, 0xA),
            rd(11, 0x100),
            lock(12, 0xB),
            wr(13, 0x200),
            rv(14, 0x200, 7),
            unlock(15, 0xB),
            wr(16, 0x300),
            rv(17, 0x200, 7),
            rv(17, 0x300, 9),
            unlock(18, 0xA),
            rd(19, 0x400),
        ]]);
        let d = Detailed::from_trace(&t, false);
        assert_eq!(d.sections.len(), 2);
        let a = &d.sections[0];
        assert_eq!((a.lock, a.acquired, a.released), (0xA, 10, 18));
        assert_eq!(a.reads.keys().copied().collect::<Vec<_>>(), vec![0x100]);
        assert_eq!(
            a.writes.keys().copied().collect::<Vec<_>>(),
            vec![0x200, 0x300]
        );
        assert_eq!(a.release_values.get(&0x300), Some(&9));
        let b = &d.sections[1];
        assert_eq!(b.lock, 0xB);
        assert_eq!(b.writes.len(), 1);
        assert_eq!(b.release_values.get(&0x200), Some(&7));
        assert_eq!(d.outside_accesses, 1);
        let last = d.accesses.last().unwrap();
        assert_eq!(d.locksets[last.lockset as usize], Vec::<u64>::new());
        let nested = d.accesses[1];
        assert_eq!(d.locksets[nested.lockset as usize], vec![0xA, 0xB]);
    }

    #[test]
    fn contended_acquisition_keeps_attempt_time() {
        let t = trace(vec![vec![
            lock_begin(5, 0xA),
            lock_done_contended(9, 0xA),
            unlock(12, 0xA),
        ]]);
        let d = Detailed::from_trace(&t, false);
        assert_eq!(
            (
                d.sections[0].attempt,
                d.sections[0].acquired,
                d.sections[0].released
            ),
            (5, 9, 12)
        );
    }

    #[test]
    fn condvar_timeout_reopens_section_on_the_mutex() {
        const M: u64 = 0xA0;
        const C: u64 = 0xC0;
        let cond = |time, flags, arg| Event {
            time,
            op: Op::CondTimedwait as u8,
            flags,
            addr: C,
            site: 0x2000,
            arg,
            ..Event::default()
        };
        let t = trace(vec![vec![
            lock(10, M),
            cond(11, phase::BEGIN, M),
            // Timed out: `arg` is ETIMEDOUT (110), the mutex is re-acquired.
            cond(20, phase::FAIL, 110),
            wr(21, 0x300),
            unlock(22, M),
        ]]);
        let d = Detailed::from_trace(&t, false);
        let got: Vec<(u64, u64, u64, bool)> = d
            .sections
            .iter()
            .map(|s| (s.lock, s.acquired, s.released, s.closed))
            .collect();
        assert_eq!(got, vec![(M, 10, 11, true), (M, 20, 22, true)]);
        assert_eq!(
            d.sections[1].writes.keys().copied().collect::<Vec<_>>(),
            vec![0x300]
        );
        assert_eq!(d.outside_accesses, 0);
        assert_eq!(d.locksets[d.accesses[0].lockset as usize], vec![M]);
    }
}
