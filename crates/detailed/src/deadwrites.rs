//! Dead writes (Chabbi's DeadSpy, thesis ch. 5): a write whose bytes are
//! all or partly overwritten before anything reads them.
//!
//! Every byte has a state: its last access was a read, a write (by which
//! write instance), or nothing recorded. A write to a byte whose last
//! access was a write makes that earlier write dead *on that byte*,
//! killed by the new one, whichever threads made the two. Bytes, not
//! locations: an 8-byte store partly overwritten by a 4-byte store before
//! an 8-byte load is dead on 4 bytes. Atomic read-modify-writes and
//! failed compare-exchanges read first; atomic loads are reads. Freeing a
//! heap block forgets its bytes (the next owner's write kills nothing).
//! Writes never overwritten (live at the end of the trace) are not dead.
//!
//! Attribution, as in the thesis, is to the pair of contexts (dead write,
//! killing write): the access site and, where the trace has one, its call
//! path (accesses inside critical sections carry one; elsewhere the
//! runtime records the site only unless `LOCKSCOPE_OUTSIDE_FRAMES=N`
//! asks for N frames). Reported per pair: dead bytes, the number of
//! (dead, killing) write instance pairs, and the bytes where the two were
//! different threads. The headline is DeadSpy's: dead bytes over all
//! bytes written.
//!
//! A coalesced run (`LOCKSCOPE_COALESCE=1`: [`Op::AccessRepeat`] after
//! the access it repeats) counts as that many more accesses: repeated
//! reads and failed compare-exchanges change nothing; N repeated writes of
//! the same bytes by the same context are N dead writes killed by that
//! context (the repeats are folded only when the thread recorded nothing
//! else in between; a read by another thread inside the run's time window
//! is not seen); N repeated exchanges that wrote the value they found are
//! N more writes, none dead (each reads first; a plain store by another
//! thread inside the run's window, which would kill one of them, is not
//! seen).
//!
//! Accesses are read from the sync layer's steps ([`lockscope_trace::sync`]). A
//! trace recorded without `LOCKSCOPE_ALL_ACCESSES=1` holds only accesses
//! inside critical sections: a read outside one is missing and makes the
//! write before it look dead, so the report says so.

use std::collections::HashMap;

use lockscope_format::{repeat, Op, Trace};
use serde::Serialize;

use crate::detailed::Detailed;
use lockscope_trace::sync::{for_each_trace_step, StepKind};

/// JSON schema identifier.
pub const SCHEMA: &str = "lockscope.deadwrites/1";

/// Most pairs and sites listed.
const TOP: usize = 20;

const PAGE: u64 = 4096;
/// Shadow value: nothing recorded.
const NONE: u32 = 0;
/// Shadow value: last access was a read.
const READ: u32 = 1;
/// Shadow values from here are write instance `v - FIRST_WRITE`.
const FIRST_WRITE: u32 = 2;

/// A code context: the access site and its call path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Ctx {
    process: u32,
    site: u64,
    stack: u32,
}

#[derive(Default)]
struct PairStat {
    bytes: u64,
    count: u64,
    cross_thread_bytes: u64,
}

#[derive(Default)]
struct SiteStat {
    bytes: u64,
    count: u64,
}

/// Per-byte shadow memory: pages of 4096 `u32`s.
#[derive(Default)]
struct Shadow {
    pages: HashMap<u64, Box<[u32]>>,
}

impl Shadow {
    fn get_mut(&mut self, addr: u64) -> &mut u32 {
        let p = self
            .pages
            .entry(addr / PAGE)
            .or_insert_with(|| vec![NONE; PAGE as usize].into_boxed_slice());
        &mut p[(addr % PAGE) as usize]
    }

    fn clear(&mut self, lo: u64, hi: u64) {
        let mut a = lo;
        while a < hi {
            let page_end = (a / PAGE + 1) * PAGE;
            let end = hi.min(page_end);
            if let Some(p) = self.pages.get_mut(&(a / PAGE)) {
                for v in &mut p[(a % PAGE) as usize..(a % PAGE + (end - a)) as usize] {
                    *v = NONE;
                }
            }
            a = end;
        }
    }
}

/// One end of a pair: a code context.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Context {
    /// Function containing the access.
    pub function: String,
    /// `function (file:line)` of the access.
    pub site: String,
    /// Call path, innermost first (function names), when recorded.
    pub path: Vec<String>,
}

/// A (dead, killing) pair of contexts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Pair {
    /// Where the dead write was made.
    pub dead: Context,
    /// Where the write that overwrote it was made.
    pub killing: Context,
    /// Dead bytes.
    pub bytes: u64,
    /// (dead, killing) write instance pairs.
    pub count: u64,
    /// Of `bytes`, those where the two writes were made by different
    /// threads.
    pub cross_thread_bytes: u64,
}

/// A context with its dead (or killing) bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SiteTotal {
    /// The context.
    pub context: Context,
    /// Bytes.
    pub bytes: u64,
    /// Write instances (dead ones for a dead site; for a killing site,
    /// the writes that killed something).
    pub count: u64,
}

/// The dead-write report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeadWritesReport {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// Whether accesses outside critical sections were recorded.
    pub all_accesses: bool,
    /// Write accesses recorded.
    pub writes: u64,
    /// Bytes they wrote.
    pub bytes_written: u64,
    /// Write instances that were dead on at least one byte.
    pub dead_writes: u64,
    /// Dead bytes.
    pub dead_bytes: u64,
    /// `dead_bytes / bytes_written` (DeadSpy's deadness), 0 if nothing
    /// was written.
    pub dead_fraction: f64,
    /// Dead bytes killed by another thread.
    pub cross_thread_dead_bytes: u64,
    /// Top (dead, killing) pairs by dead bytes.
    pub pairs: Vec<Pair>,
    /// Top dead-write contexts by dead bytes.
    pub dead_sites: Vec<SiteTotal>,
    /// Top killing contexts by bytes they killed.
    pub killing_sites: Vec<SiteTotal>,
    /// Caveats.
    pub notes: Vec<String>,
}

fn access_size(flags: u8, arg2: u64) -> u64 {
    if flags == 0 {
        arg2
    } else {
        u64::from(flags)
    }
}

/// What an op does to memory: (reads first, writes) and the width.
fn atomic_effect(op: Op, flags: u8) -> Option<(bool, bool, u64)> {
    let width = 1u64 << (flags & 7).min(4);
    Some(match op {
        Op::AtomicLoad => (true, false, width),
        Op::AtomicStore => (false, true, width),
        Op::AtomicCas if flags & 0x40 != 0 => (true, false, width),
        Op::AtomicExchange
        | Op::AtomicFetchAdd
        | Op::AtomicFetchSub
        | Op::AtomicFetchAnd
        | Op::AtomicFetchOr
        | Op::AtomicFetchXor
        | Op::AtomicFetchNand
        | Op::AtomicCas
        | Op::AtomicRmw => (true, true, width),
        _ => return None,
    })
}

/// Runs the analysis over a trace (`d`, its detailed view, names code).
pub fn analyze(t: &Trace, d: &mut Detailed) -> DeadWritesReport {
    let mut shadow = Shadow::default();
    // Per write instance: context index and thread.
    let mut inst: Vec<(u32, u32)> = Vec::new();
    let mut inst_dead: Vec<bool> = Vec::new();
    let mut ctxs: Vec<Ctx> = Vec::new();
    let mut ctx_ids: HashMap<Ctx, u32> = HashMap::new();
    let mut pairs: HashMap<(u32, u32), PairStat> = HashMap::new();
    let mut killing: HashMap<u32, SiteStat> = HashMap::new();
    let mut live: HashMap<(u32, u64), u64> = HashMap::new();
    let (mut writes, mut bytes_written, mut dead_bytes, mut cross) = (0u64, 0u64, 0u64, 0u64);
    let mut outside = false;
    let mut killed_by_this: Vec<u32> = Vec::new();
    // Per thread, the context of its last write (for repeats).
    let mut last_write: HashMap<u32, (u32, u64, u32)> = HashMap::new();
    let mut extra_dead = 0u64;
    let mut extra_ctx: HashMap<u32, u64> = HashMap::new();
    for_each_trace_step(t, false, |st, interp| {
        let e = st.event;
        if st.kind == StepKind::Memory(Op::AccessRepeat) {
            // Repeated reads and atomic loads change nothing.
            if e.arg2 == repeat::WRITE {
                let size = access_size(e.flags, 0).max(1);
                if let Some(&(ci, lo, w)) = last_write.get(&st.thread) {
                    // The first repeat kills the recorded write; each
                    // further one kills the repeat before it (same bytes,
                    // same context, same thread). The last one is live.
                    let n = e.arg;
                    writes += n;
                    bytes_written += n * size;
                    dead_bytes += n * size;
                    let p = pairs.entry((ci, ci)).or_default();
                    p.bytes += n * size;
                    p.count += n;
                    if let Some(d) = inst_dead.get_mut(w as usize) {
                        *d = true;
                    }
                    extra_dead += n.saturating_sub(1);
                    *extra_ctx.entry(ci).or_default() += n.saturating_sub(1);
                    killing.entry(ci).or_default().count += n;
                    let me = inst.len() as u32;
                    inst.push((ci, st.thread));
                    inst_dead.push(false);
                    for a in lo..lo.saturating_add(size) {
                        *shadow.get_mut(a) = me.saturating_add(FIRST_WRITE);
                    }
                    last_write.insert(st.thread, (ci, lo, me));
                }
            } else if e.arg2 == repeat::XCHG_UNCHANGED {
                // Exchanges that wrote the value they found (a
                // test-and-set spinning on a taken lock): each reads the
                // bytes before writing them, so none of them is dead, but
                // each is a write. Failed compare-exchanges (5, 6) only
                // read.
                let size = access_size(e.flags, 0).max(1);
                writes += e.arg;
                bytes_written += e.arg * size;
            }
            return;
        }
        let (reads, writes_now, size) = match st.kind {
            StepKind::Memory(Op::Read) => (true, false, access_size(e.flags, e.arg2)),
            StepKind::Memory(Op::Write) => (false, true, access_size(e.flags, e.arg2)),
            StepKind::Memory(Op::Alloc) => {
                live.insert((st.process, e.addr), e.arg);
                shadow.clear(e.addr, e.addr.saturating_add(e.arg));
                return;
            }
            StepKind::Memory(Op::Free) => {
                if let Some(n) = live.remove(&(st.process, e.addr)) {
                    shadow.clear(e.addr, e.addr.saturating_add(n));
                }
                return;
            }
            StepKind::Memory(op) => match atomic_effect(op, e.flags) {
                Some(x) => x,
                None => return,
            },
            _ => return,
        };
        // Only a plain access proves that accesses outside critical
        // sections were recorded: atomics are recorded in every mode.
        if !outside
            && interp.held(st.thread).is_empty()
            && matches!(st.kind, StepKind::Memory(Op::Read | Op::Write))
        {
            outside = true;
        }
        let lo = e.addr;
        let hi = e.addr.saturating_add(size);
        if reads {
            for a in lo..hi {
                *shadow.get_mut(a) = READ;
            }
        }
        if !writes_now {
            return;
        }
        writes += 1;
        bytes_written += size;
        let c = Ctx {
            process: st.process,
            site: e.site,
            stack: e.stack,
        };
        let next = ctx_ids.len() as u32;
        let ci = *ctx_ids.entry(c).or_insert_with(|| {
            ctxs.push(c);
            next
        });
        let me = inst.len() as u32;
        last_write.insert(st.thread, (ci, lo, me));
        inst.push((ci, st.thread));
        inst_dead.push(false);
        killed_by_this.clear();
        for a in lo..hi {
            let v = shadow.get_mut(a);
            if *v >= FIRST_WRITE {
                let w = (*v - FIRST_WRITE) as usize;
                let (dc, dt) = inst[w];
                let p = pairs.entry((dc, ci)).or_default();
                p.bytes += 1;
                dead_bytes += 1;
                if dt != st.thread {
                    p.cross_thread_bytes += 1;
                    cross += 1;
                }
                if !killed_by_this.contains(&(w as u32)) {
                    killed_by_this.push(w as u32);
                    p.count += 1;
                    inst_dead[w] = true;
                }
            }
            *v = me.saturating_add(FIRST_WRITE);
        }
        if !killed_by_this.is_empty() {
            let k = killing.entry(ci).or_default();
            k.count += 1;
        }
    });

    let dead_writes = inst_dead.iter().filter(|&&x| x).count() as u64 + extra_dead;
    let mut dead_site: HashMap<u32, SiteStat> = HashMap::new();
    for (w, &dead) in inst_dead.iter().enumerate() {
        if dead {
            dead_site.entry(inst[w].0).or_default().count += 1;
        }
    }
    for (&ci, &n) in &extra_ctx {
        dead_site.entry(ci).or_default().count += n;
    }
    for (&(dc, kc), p) in &pairs {
        dead_site.entry(dc).or_default().bytes += p.bytes;
        killing.entry(kc).or_default().bytes += p.bytes;
    }
    let mut names: HashMap<u32, Context> = HashMap::new();
    let mut name = |i: u32, d: &mut Detailed| -> Context {
        names
            .entry(i)
            .or_insert_with(|| context(d, ctxs[i as usize]))
            .clone()
    };
    let mut pv: Vec<(&(u32, u32), &PairStat)> = pairs.iter().collect();
    pv.sort_by_key(|(k, p)| (std::cmp::Reverse(p.bytes), std::cmp::Reverse(p.count), **k));
    let pairs_out: Vec<Pair> = pv
        .into_iter()
        .take(TOP)
        .map(|(&(dc, kc), p)| Pair {
            dead: name(dc, d),
            killing: name(kc, d),
            bytes: p.bytes,
            count: p.count,
            cross_thread_bytes: p.cross_thread_bytes,
        })
        .collect();
    let mut sites = |m: HashMap<u32, SiteStat>, d: &mut Detailed| -> Vec<SiteTotal> {
        let mut v: Vec<(u32, SiteStat)> = m.into_iter().filter(|(_, s)| s.bytes > 0).collect();
        v.sort_by_key(|(k, s)| (std::cmp::Reverse(s.bytes), std::cmp::Reverse(s.count), *k));
        v.into_iter()
            .take(TOP)
            .map(|(k, s)| SiteTotal {
                context: name(k, d),
                bytes: s.bytes,
                count: s.count,
            })
            .collect()
    };
    let dead_sites = sites(dead_site, d);
    let killing_sites = sites(killing, d);
    let mut notes = Vec::new();
    if !outside {
        notes.push(
            "only accesses inside critical sections were recorded: a read outside one is \
             missing and makes the write before it look dead. Record with \
             `lockscope record --all-accesses`."
                .into(),
        );
    }
    if d.lost > 0 {
        notes.push(format!(
            "{} events were lost while recording: a lost read makes a write look dead",
            d.lost
        ));
    }
    DeadWritesReport {
        schema: SCHEMA,
        all_accesses: outside,
        writes,
        bytes_written,
        dead_writes,
        dead_bytes,
        dead_fraction: if bytes_written == 0 {
            0.0
        } else {
            dead_bytes as f64 / bytes_written as f64
        },
        cross_thread_dead_bytes: cross,
        pairs: pairs_out,
        dead_sites,
        killing_sites,
        notes,
    }
}

/// Names a code context: its function, `function (file:line)`, and the
/// function names of its call path (innermost first, at most 6, repeats
/// of one function folded).
pub(crate) fn context_of(
    d: &mut Detailed,
    process: u32,
    site: u64,
    stack: u32,
) -> (String, String, Vec<String>) {
    let function = d.function(process, site);
    let s = d.site(process, site);
    let frames = d.stacks.get(&stack).cloned().unwrap_or_default();
    let mut path: Vec<String> = Vec::new();
    for pc in frames.into_iter().take(16) {
        let f = d.function(process, pc);
        if path.last() != Some(&f) {
            path.push(f);
        }
        if path.len() == 6 {
            break;
        }
    }
    (function, s, path)
}

fn context(d: &mut Detailed, c: Ctx) -> Context {
    let (function, site, path) = context_of(d, c.process, c.site, c.stack);
    Context {
        function,
        site,
        path,
    }
}

/// Recommendations for a report section: the dead-write contexts that
/// hold at least 1% of the bytes written ("remove the store at ...").
pub fn advice(r: &DeadWritesReport) -> Vec<String> {
    // One line per site: the same store reached through several call
    // paths is one thing to change.
    let mut by_site: Vec<(String, u64, u64)> = Vec::new();
    for d in &r.dead_sites {
        match by_site.iter_mut().find(|x| x.0 == d.context.site) {
            Some(x) => {
                x.1 += d.bytes;
                x.2 += d.count;
            }
            None => by_site.push((d.context.site.clone(), d.bytes, d.count)),
        }
    }
    by_site.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    by_site
        .into_iter()
        .filter(|s| r.bytes_written > 0 && s.1 * 100 >= r.bytes_written)
        .take(5)
        .map(|(site, bytes, count)| {
            format!(
                "remove or delay the store at {site}: {bytes} B in {count} write(s) overwritten \
                 before any read ({:.1}% of the bytes written)",
                bytes as f64 * 100.0 / r.bytes_written as f64
            )
        })
        .collect()
}

fn ctx_text(c: &Context) -> String {
    if c.path.len() > 1 {
        format!("{} [{}]", c.site, c.path.join(" <- "))
    } else {
        c.site.clone()
    }
}

/// Text rendering.
pub fn render_text(r: &DeadWritesReport, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    writeln!(
        out,
        "Dead writes (DeadSpy): {} of {} bytes written were overwritten before any read \
         ({:.1}%); {} of {} writes dead on at least one byte; {} dead bytes killed by \
         another thread",
        r.dead_bytes,
        r.bytes_written,
        r.dead_fraction * 100.0,
        r.dead_writes,
        r.writes,
        r.cross_thread_dead_bytes
    )?;
    writeln!(out, "\ntop (dead, killing) pairs")?;
    if r.pairs.is_empty() {
        writeln!(out, "  (none)")?;
    }
    for p in &r.pairs {
        writeln!(
            out,
            "  {:>8} B in {:>6} pair(s){}\n    dead:    {}\n    killing: {}",
            p.bytes,
            p.count,
            if p.cross_thread_bytes > 0 {
                format!(" ({} B across threads)", p.cross_thread_bytes)
            } else {
                String::new()
            },
            ctx_text(&p.dead),
            ctx_text(&p.killing)
        )?;
    }
    writeln!(out, "\ndead-write sites (remove or delay the store)")?;
    if r.dead_sites.is_empty() {
        writeln!(out, "  (none)")?;
    }
    for s in &r.dead_sites {
        writeln!(
            out,
            "  {:>8} B in {:>6} write(s)  {}",
            s.bytes,
            s.count,
            ctx_text(&s.context)
        )?;
    }
    lockscope_text::text::advice_and_notes(out, &advice(r), &r.notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detailed::testutil::*;
    use lockscope_format::Event;

    fn w(time: u64, a: u64, size: u8, site: u64) -> Event {
        Event {
            time,
            op: Op::Write as u8,
            flags: size,
            addr: a,
            site,
            ..Event::default()
        }
    }
    fn r(time: u64, a: u64, size: u8) -> Event {
        Event {
            time,
            op: Op::Read as u8,
            flags: size,
            addr: a,
            site: 0x9999,
            ..Event::default()
        }
    }

    #[test]
    fn bytes_partial_overlaps_and_threads() {
        let t = trace(vec![
            vec![
                w(1, 0x100, 8, 0xA), // dead on 8 bytes
                w(2, 0x100, 8, 0xB), // kills A
                r(3, 0x100, 8),      //
                w(4, 0x200, 8, 0xC), // dead on 4 bytes (low half)
                w(5, 0x200, 4, 0xD), // kills C on 4; dead on 2
                w(6, 0x202, 2, 0xE), // kills D on 2
                r(7, 0x200, 8),      //
                w(8, 0x300, 4, 0xF), // killed by thread 2
                r(30, 0x300, 4),     //
            ],
            vec![w(20, 0x300, 4, 0x10), rd(21, 0x999)],
        ]);
        let mut d = Detailed::from_trace(&t, false);
        let rep = analyze(&t, &mut d);
        assert_eq!(rep.writes, 7);
        assert_eq!(rep.bytes_written, 8 + 8 + 8 + 4 + 2 + 4 + 4);
        assert_eq!(rep.dead_bytes, 8 + 4 + 2 + 4);
        assert_eq!(rep.dead_writes, 4);
        assert_eq!(rep.cross_thread_dead_bytes, 4);
        let got: Vec<(String, String, u64, u64)> = rep
            .pairs
            .iter()
            .map(|p| {
                (
                    p.dead.site.clone(),
                    p.killing.site.clone(),
                    p.bytes,
                    p.count,
                )
            })
            .collect();
        let s = |x: &str| format!("?+{x}");
        assert_eq!(
            got,
            vec![
                (s("0xa"), s("0xb"), 8, 1),
                (s("0xc"), s("0xd"), 4, 1),
                (s("0xf"), s("0x10"), 4, 1),
                (s("0xd"), s("0xe"), 2, 1),
            ]
        );
        assert!(rep.all_accesses);
        let adv = advice(&rep);
        assert!(
            adv[0].starts_with("remove or delay the store at ?+0xa: 8 B"),
            "{adv:?}"
        );
    }

    #[test]
    fn free_forgets_and_rmw_reads() {
        let alloc = Event {
            time: 1,
            op: Op::Alloc as u8,
            addr: 0x1000,
            arg: 16,
            ..Event::default()
        };
        let free = Event {
            time: 3,
            op: Op::Free as u8,
            addr: 0x1000,
            ..Event::default()
        };
        let rmw = Event {
            time: 6,
            op: Op::AtomicFetchAdd as u8,
            flags: 3,
            addr: 0x2000,
            ..Event::default()
        };
        let t = trace(vec![vec![
            alloc,
            w(2, 0x1000, 8, 0xA),
            free,
            Event { time: 4, ..alloc },
            w(5, 0x1000, 8, 0xB), // new block: kills nothing
            w(5, 0x2000, 8, 0xC),
            rmw,                  // reads 0x2000 first, then writes
            w(7, 0x2000, 8, 0xD), // kills the RMW's write
        ]]);
        let mut d = Detailed::from_trace(&t, false);
        let rep = analyze(&t, &mut d);
        assert_eq!(rep.dead_bytes, 8, "{rep:#?}");
        assert_eq!(rep.pairs.len(), 1);
        assert_eq!(rep.pairs[0].killing.site, "?+0xd");
    }

    #[test]
    fn coalesced_repeats_count_as_accesses() {
        let rep = |time, a, n, kind| repeat(time, a, 8, n, kind);
        let t = trace(vec![vec![
            w(1, 0x100, 8, 0xA),
            rep(2, 0x100, 3, 2), // 3 more stores: 3 dead (the first and 2 repeats)
            r(3, 0x100, 8),
            r(4, 0x100, 8),
            rep(5, 0x100, 10, 1), // repeated reads: nothing
            w(6, 0x100, 8, 0xB),
            w(7, 0x100, 8, 0xC), // kills B
        ]]);
        let mut d = Detailed::from_trace(&t, false);
        let rep = analyze(&t, &mut d);
        assert_eq!(rep.writes, 6);
        assert_eq!(rep.dead_bytes, 3 * 8 + 8);
        assert_eq!(rep.dead_writes, 4);
        assert_eq!(rep.pairs[0].count, 3);
        assert_eq!(rep.dead_sites[0].count, 3, "{rep:#?}");
    }

    /// A test-and-set spin coalesced: an exchange that wrote the value it
    /// found, then 5 more (kind 4), each reading before it writes: 6
    /// writes, none dead; then a failed compare-exchange and 7 more
    /// (kinds 5, 6: reads only). The store after them kills the last
    /// exchange's write only if nothing read it: the failed
    /// compare-exchanges did.
    #[test]
    fn coalesced_exchanges_are_writes_and_none_dead() {
        let at = |time, op: Op, flags| Event {
            time,
            op: op as u8,
            flags,
            addr: 0x300,
            site: 0xA,
            ..Event::default()
        };
        let t = trace(vec![vec![
            at(1, Op::AtomicExchange, 2),
            repeat(2, 0x300, 4, 5, 4),
            at(3, Op::AtomicCas, 2 | 0x40),
            repeat(4, 0x300, 4, 7, 5),
            w(5, 0x300, 4, 0xB),
            at(6, Op::AtomicExchange, 2),
            repeat(7, 0x300, 4, 2, 4),
            w(8, 0x300, 4, 0xC), // kills the last exchange's write
        ]]);
        let mut d = Detailed::from_trace(&t, false);
        let rep = analyze(&t, &mut d);
        assert_eq!(rep.writes, 6 + 1 + 3 + 1, "{rep:#?}");
        assert_eq!(rep.bytes_written, 4 * (6 + 1 + 3 + 1));
        assert_eq!(rep.dead_writes, 1, "{rep:#?}");
        assert_eq!(rep.dead_bytes, 4);
    }
}
