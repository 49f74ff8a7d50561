//! `lockscope html`: one self-contained HTML file (inline script and
//! style, no network access at view time) with the report's verdict,
//! tables and recommendations, a per-thread timeline on a canvas, and
//! flame graphs of wait by waiter and by holder call path.
//!
//! The timeline is pre-aggregated while the trace streams by
//! ([`crate::timeline`]): per thread, the share of each fixed time bin
//! spent waiting, holding, blocked and unlocking (only non-zero bins are
//! written), plus the longest spans (and their hand-offs) individually
//! for hover details. The page decimates bins per pixel column when it
//! draws, so neither the file nor the drawing grows with the number of
//! events.
//!
//! Every name reaches the page as JSON data (with `<` escaped, so no name
//! can close the data's script element) and is put into the document as
//! text, never as markup.

// Fx: the keys are small ids, hashed once or more per span.
use rustc_hash::FxHashMap as HashMap;
use std::io::Write;
use std::path::Path;

use lockscope_analysis::full::Sections;
use lockscope_format::Trace;
use lockscope_report::Report;
use lockscope_report::ReportConfig;
use lockscope_trace::input::Meta;
use lockscope_trace::sync::ObjId;
use serde_json::{json, Value};

use crate::names::Names;
use crate::stacks::{self, WeightedStack};
use crate::timeline::{self, Item, SpanKind, Timeline};
use crate::ExportError;

mod sections;

const SCRIPT: &str = include_str!("html/report.js");
const STYLE: &str = include_str!("html/report.css");

/// Sizes of the page's pre-aggregation.
#[derive(Clone, Debug)]
pub struct HtmlOptions {
    /// Time bins per thread over the whole run.
    pub bins: usize,
    /// Spans kept individually (the longest).
    pub max_spans: usize,
    /// Resolve symbols.
    pub symbolize: bool,
}

impl Default for HtmlOptions {
    fn default() -> Self {
        HtmlOptions {
            bins: 1500,
            max_spans: 20_000,
            symbolize: true,
        }
    }
}

/// What was written.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Spans seen.
    pub spans: u64,
    /// Spans kept individually.
    pub spans_kept: u64,
    /// Bytes of the page.
    pub bytes: u64,
}

/// Escapes text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '&' => o.push_str("&amp;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// JSON that can sit inside a `<script>` element: `<` is written as
/// `\u003c`, so no string in it can end the element.
pub fn script_json(v: &Value) -> String {
    serde_json::to_string(v)
        .unwrap_or_else(|_| "null".into())
        .replace('<', "\\u003c")
}

#[derive(Clone, Copy)]
struct RawSpan {
    thread: u32,
    kind: SpanKind,
    obj: Option<ObjId>,
    start: u64,
    end: u64,
    site: u64,
    stack: u32,
    /// Index of its hand-off (into the hand-off list), if any.
    handoff: Option<(u32, u64)>,
}

/// The heat category of a span (a futex wait's is decided at the end,
/// see [`Agg::futex_heat`]).
fn cat(k: SpanKind) -> usize {
    match k {
        SpanKind::Wait | SpanKind::FutexWait => 0,
        // A busy GPU stream is drawn like a held lock (busy, blue).
        SpanKind::Hold | SpanKind::GpuWork => 1,
        SpanKind::Unlocking => 3,
        _ => 2,
    }
}

/// A flame graph tree: `{n: name, v: value, c: [children]}`, root first,
/// the lock on top of each path.
fn flame(v: &[WeightedStack]) -> Value {
    #[derive(Default)]
    struct Node {
        v: u64,
        c: Vec<(String, Node)>,
    }
    let mut root = Node::default();
    for s in v {
        if s.wait_ns == 0 {
            continue;
        }
        root.v += s.wait_ns;
        let mut n = &mut root;
        let names = s
            .frames
            .iter()
            .rev()
            .cloned()
            .chain(std::iter::once(format!("lock {}", s.lock)));
        for name in names {
            let k = match n.c.iter().position(|(m, _)| *m == name) {
                Some(k) => k,
                None => {
                    n.c.push((name, Node::default()));
                    n.c.len() - 1
                }
            };
            n = &mut n.c[k].1;
            n.v += s.wait_ns;
        }
    }
    fn out(name: &str, n: &Node) -> Value {
        let mut c: Vec<&(String, Node)> = n.c.iter().collect();
        c.sort_by_key(|x| std::cmp::Reverse(x.1.v));
        json!({"n": name, "v": n.v, "c": c.iter().map(|(m, k)| out(m, k)).collect::<Vec<_>>()})
    }
    out("all", &root)
}

/// Flame graphs per lock: `[[lock, waiters tree, holders tree], ...]`, by
/// wait, descending (at most 50 locks).
fn per_lock(waiters: &[WeightedStack], holders: &[WeightedStack]) -> Value {
    let mut locks: Vec<(String, u64)> = Vec::new();
    for s in waiters {
        match locks.iter_mut().find(|(l, _)| *l == s.lock) {
            Some(e) => e.1 += s.wait_ns,
            None => locks.push((s.lock.clone(), s.wait_ns)),
        }
    }
    locks.sort_by_key(|x| std::cmp::Reverse(x.1));
    locks.truncate(50);
    let of = |v: &[WeightedStack], lock: &str| -> Vec<WeightedStack> {
        v.iter().filter(|s| s.lock == lock).cloned().collect()
    };
    Value::Array(
        locks
            .iter()
            .filter(|(_, w)| *w > 0)
            .map(|(l, _)| json!([l, flame(&of(waiters, l)), flame(&of(holders, l))]))
            .collect(),
    )
}

/// The report part of the page: verdict, tables, recommendations, and
/// every other section of the report (`sections`).
fn report_data(r: &Report, extra: &Sections) -> Value {
    let locks: Vec<Value> = r
        .locks
        .iter()
        .map(|l| {
            // Unseen for a futex word: null, shown "-" (not 0).
            let seen = !l.futex_only();
            json!([
                l.label.clone(),
                // `mutex (ttas)` for a mutex `lockscope run` replaced.
                l.kind_label(),
                l.pid,
                seen.then_some(l.acquisitions),
                l.contended,
                seen.then_some(l.contended_ratio),
                l.wait_ns.total,
                l.wait_ns.max,
                seen.then_some(l.hold_ns.total),
                seen.then_some(l.owner_changes),
                l.sites.first().map_or("", |s| s.name.as_str()),
            ])
        })
        .collect();
    let threads: Vec<Value> = r
        .threads
        .iter()
        .map(|t| {
            json!([
                t.name,
                t.tid,
                t.lifetime_ns,
                t.free_ns,
                t.lock_ns,
                t.hold_ns,
                t.unlock_ns,
                t.cond_wait_ns + t.barrier_wait_ns + t.sem_wait_ns + t.join_wait_ns,
            ])
        })
        .collect();
    let blame: Vec<Value> = r
        .blame_matrix
        .iter()
        .take(200)
        .map(|b| {
            json!([
                b.lock_name,
                b.waiter_site,
                b.holder_site,
                b.wait_ns,
                b.waits
            ])
        })
        .collect();
    let recs: Vec<Value> = r
        .recommendations
        .iter()
        .map(|x| json!({"lock": x.lock, "advice": x.advice, "evidence": x.evidence_text, "command": x.command}))
        .collect();
    json!({
        "verdict": r.verdict.text,
        "command": r.command.join(" "),
        "labels": r.labels,
        "duration_ns": r.duration_ns,
        "events": r.events,
        "lost_events": r.lost_events,
        // Nothing silently partial: a trace cut short or read past its
        // damage says so on the page as in the text report.
        "warnings": r
            .truncated
            .iter()
            .chain(r.damaged.iter())
            .chain(r.recovered.iter())
            .collect::<Vec<_>>(),
        "total_wait_ns": r.locks.iter().map(|l| l.wait_ns.total).sum::<u64>(),
        "locks": locks,
        "threads": threads,
        "blame": blame,
        "recommendations": recs,
        "notes": r.notes,
        "sections": sections::sections(r, extra),
    })
}

/// Futex words whose waits one timeline row keeps apart (see
/// [`Agg::futex_heat`]): a program's threads wait on a handful; past this
/// many, a row's further words are drawn as lock waits.
const MAX_FUTEX_WORDS: u32 = 64;

/// Adds `[start_ns, end_ns)` to sparse bins `h` (`nb` bins of `bin_ns`).
fn add_bins(h: &mut HashMap<u32, u64>, nb: usize, bin_ns: u64, start_ns: u64, end_ns: u64) {
    let nb = nb as u64;
    let mut t = start_ns;
    while t < end_ns {
        let b = (t / bin_ns).min(nb - 1);
        let bend = ((b + 1) * bin_ns).min(end_ns).max(t + 1);
        *h.entry(b as u32).or_default() += bend.min(end_ns) - t;
        t = bend;
    }
}

/// The page's timeline, aggregated while the timeline's items stream by
/// (from [`timeline::scan`], or from the report's own pass).
struct Agg {
    threads: Vec<timeline::ThreadInfo>,
    by_id: HashMap<u32, usize>,
    /// GPU streams get rows of their own after the threads, as they
    /// appear: (process, device, stream) -> row.
    gpu_rows: HashMap<(u32, u32, u32), usize>,
    /// Trace process id -> OS pid, for the GPU rows.
    pids: HashMap<u32, u32>,
    end: u64,
    nb: usize,
    bin_ns: u64,
    /// Per thread, per category: ns in each bin (sparse).
    heat: Vec<[HashMap<u32, u64>; 4]>,
    /// Raw futex waits, per (row, futex word): ns in each bin. Whether a
    /// word is a lock (waiting, red) or a condition variable (blocked,
    /// grey) is known only from the finished report, so their bins wait
    /// here and are added to `heat` by [`finish`]. Not taken: drawing
    /// them all as lock waits (a barrier built on a Rust `Condvar` then
    /// showed as lock contention the report itself does not claim).
    /// Bounded by the futex words waited on per row: beyond
    /// [`MAX_FUTEX_WORDS`] words on one row, further words count as lock
    /// waits at once.
    futex_heat: HashMap<(usize, ObjId), HashMap<u32, u64>>,
    /// Futex words with their own bins, per row.
    futex_words: HashMap<usize, u32>,
    kept: Vec<RawSpan>,
    max: usize,
    /// Once `kept` was trimmed: the duration of its shortest span. A
    /// later span no longer than that cannot be among the longest
    /// `max` (the earlier ones win ties), so it is not pushed at all:
    /// most spans of a long trace are skipped this way instead of being
    /// pushed and sorted away.
    floor: Option<u64>,
    /// Whether the last span seen is `kept`'s last (its hand-off, which
    /// follows it, is then attached to it).
    last_kept: bool,
    sum: Summary,
}

impl Agg {
    /// For a run of `duration_ns` (the report's duration).
    fn new(meta: &Meta, duration_ns: u64, opts: &HtmlOptions) -> Agg {
        let threads = timeline::threads(meta);
        let by_id = threads.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
        let end = threads
            .iter()
            .map(|t| t.end_ns)
            .max()
            .unwrap_or(0)
            .max(duration_ns)
            .max(1);
        let nb = opts.bins.max(1);
        let bin_ns = end.div_ceil(nb as u64).max(1);
        let heat = threads.iter().map(|_| Default::default()).collect();
        Agg {
            threads,
            by_id,
            gpu_rows: HashMap::default(),
            pids: meta.processes.values().map(|p| (p.id, p.pid)).collect(),
            end,
            nb,
            bin_ns,
            heat,
            futex_heat: HashMap::default(),
            futex_words: HashMap::default(),
            kept: Vec::new(),
            max: opts.max_spans.max(1),
            floor: None,
            last_kept: false,
            sum: Summary::default(),
        }
    }

    /// Adds `[start_ns, end_ns)` of category `cat` to row `ti`'s bins.
    fn bin(&mut self, ti: usize, cat: usize, start_ns: u64, end_ns: u64) {
        add_bins(
            &mut self.heat[ti][cat],
            self.nb,
            self.bin_ns,
            start_ns,
            end_ns,
        );
    }

    /// Adds a futex wait of row `ti` on `word` to its own bins (or to the
    /// lock waits when the row has too many words).
    fn bin_futex(&mut self, ti: usize, word: ObjId, start_ns: u64, end_ns: u64) {
        let h = match self.futex_heat.get_mut(&(ti, word)) {
            Some(h) => h,
            None => {
                let n = self.futex_words.entry(ti).or_default();
                if *n >= MAX_FUTEX_WORDS {
                    return self.bin(ti, cat(SpanKind::Wait), start_ns, end_ns);
                }
                *n += 1;
                self.futex_heat.entry((ti, word)).or_default()
            }
        };
        add_bins(h, self.nb, self.bin_ns, start_ns, end_ns);
    }

    /// Keeps `s` if it may be among the longest spans.
    fn keep(&mut self, s: RawSpan) {
        if self.floor.is_some_and(|f| s.end - s.start <= f) {
            self.last_kept = false;
            return;
        }
        // Trimmed before a push, not after: the span just pushed stays
        // `kept`'s last until the next one, for its hand-off to find.
        // (Trimming after the push sorted it away from the end, and the
        // hand-off of a span kept through that trim was lost.)
        if self.kept.len() >= 2 * self.max {
            self.trim();
        }
        self.kept.push(s);
        self.last_kept = true;
    }

    /// Down to the `max` longest spans (the earlier first among equals).
    fn trim(&mut self) {
        self.kept
            .sort_by_key(|s| std::cmp::Reverse(s.end - s.start));
        self.kept.truncate(self.max);
        if self.kept.len() == self.max {
            self.floor = self.kept.last().map(|s| s.end - s.start);
        }
    }

    fn item(&mut self, item: Item) {
        match item {
            Item::Span {
                thread,
                kind,
                obj,
                start_ns,
                end_ns,
                site,
                stack,
            } => {
                let Some(&ti) = self.by_id.get(&thread) else {
                    return;
                };
                self.sum.spans += 1;
                match (kind, obj) {
                    (SpanKind::FutexWait, Some(word)) => self.bin_futex(ti, word, start_ns, end_ns),
                    _ => self.bin(ti, cat(kind), start_ns, end_ns),
                }
                self.keep(RawSpan {
                    thread: ti as u32,
                    kind,
                    obj,
                    start: start_ns,
                    end: end_ns,
                    site,
                    stack,
                    handoff: None,
                });
            }
            Item::GpuWork {
                process,
                device,
                stream,
                start_ns,
                end_ns,
                func,
                site,
                ..
            } => {
                let ti = match self.gpu_rows.get(&(process, device, stream)) {
                    Some(&ti) => ti,
                    None => {
                        self.threads.push(timeline::ThreadInfo {
                            id: u32::MAX,
                            process,
                            pid: self.pids.get(&process).copied().unwrap_or(0),
                            tid: 0,
                            name: format!("GPU {device} stream {stream}"),
                            start_ns: 0,
                            end_ns: self.end,
                        });
                        self.heat.push(Default::default());
                        let ti = self.threads.len() - 1;
                        self.gpu_rows.insert((process, device, stream), ti);
                        ti
                    }
                };
                self.sum.spans += 1;
                self.bin(ti, cat(SpanKind::GpuWork), start_ns, end_ns);
                self.keep(RawSpan {
                    thread: ti as u32,
                    kind: SpanKind::GpuWork,
                    obj: None,
                    start: start_ns,
                    end: end_ns,
                    // The kernel's host function names it (a function's
                    // entry is named like a return address: + 1); a copy
                    // is named by its launch site.
                    site: if func != 0 { func + 1 } else { site },
                    stack: 0,
                    handoff: None,
                });
            }
            Item::HandOff {
                from,
                from_ns,
                to,
                to_ns,
                ..
            } => {
                // It follows the waiter's span, the last one seen.
                if !self.last_kept {
                    return;
                }
                if let (Some(&fi), Some(last)) = (self.by_id.get(&from), self.kept.last_mut()) {
                    if self.by_id.get(&to) == Some(&(last.thread as usize))
                        && last.kind == SpanKind::Wait
                        && last.end == to_ns
                    {
                        last.handoff = Some((fi as u32, from_ns));
                    }
                }
            }
            _ => {}
        }
    }
}

/// Writes the page for the trace at `path`, whose report is `report`
/// with the added `sections` (the trace is read again for the timeline;
/// [`write_analyzed`] reads it once for both).
pub fn write(
    path: &Path,
    meta: &Meta,
    report: &Report,
    sections: &Sections,
    opts: &HtmlOptions,
    out: &mut dyn Write,
) -> Result<Summary, ExportError> {
    let mut agg = Agg::new(meta, report.duration_ns, opts);
    timeline::scan(path, meta, |item| agg.item(item))?;
    finish(agg, meta, report, sections, opts, out)
}

/// Analyses the trace at `path` (indexed as `meta`) with `cfg` and writes
/// its page: the report (returned) and the timeline come from the same
/// read of the trace, its steps handed to both as they are interpreted.
///
/// The timeline's bins need the run's duration before the first span;
/// a complete trace states it in its footer (the report's duration is
/// that). A trace cut short (no footer) has its end known only after
/// the pass, so it is read twice: analysed, then walked for the timeline
/// as [`write()`] does (reading and keeping every span until the end is
/// known was the alternative, memory growing with the trace).
///
/// The report's other sections (spinlocks, barrier instances, dead
/// writes, GPU, what-if gains) come from
/// [`lockscope_analysis::full::sections`], as in the text and JSON
/// reports; `open_whole` loads the whole trace for the in-memory ones
/// (`None`: left out).
pub fn write_analyzed(
    path: &Path,
    meta: &Meta,
    cfg: &ReportConfig,
    opts: &HtmlOptions,
    open_whole: &mut dyn FnMut(u64) -> Option<Trace>,
    out: &mut dyn Write,
) -> Result<(Report, Summary), ExportError> {
    let Some(duration_ns) = meta.footer.as_ref().map(|f| f.duration_ns) else {
        let report =
            lockscope_report::analyze_observed(path, meta, cfg, &mut |_, _, _| {}, |_| {})?;
        let extra =
            lockscope_analysis::full::sections(path, meta, &report, opts.symbolize, open_whole);
        let sum = write(path, meta, &report, &extra, opts, out)?;
        return Ok((report, sum));
    };
    let mut agg = Agg::new(meta, duration_ns, opts);
    let mut tl = Timeline::new();
    let report = lockscope_report::analyze_observed(path, meta, cfg, &mut |_, _, _| {}, |step| {
        tl.step(step, &mut |item| agg.item(item))
    })?;
    let extra = lockscope_analysis::full::sections(path, meta, &report, opts.symbolize, open_whole);
    let sum = finish(agg, meta, &report, &extra, opts, out)?;
    Ok((report, sum))
}

/// The page, from the aggregated timeline and the report.
fn finish(
    agg: Agg,
    meta: &Meta,
    report: &Report,
    extra: &Sections,
    opts: &HtmlOptions,
    out: &mut dyn Write,
) -> Result<Summary, ExportError> {
    let Agg {
        threads,
        end,
        nb,
        bin_ns,
        mut heat,
        futex_heat,
        mut kept,
        max,
        mut sum,
        ..
    } = agg;
    // The futex words the report found to be condition variables: their
    // waits are blocked time, drawn and named as condition waits; every
    // other futex word's are lock waits.
    let pids: HashMap<u32, u32> = meta.processes.values().map(|p| (p.id, p.pid)).collect();
    let conds: std::collections::HashSet<(u32, &str)> = report
        .conds
        .iter()
        .map(|c| (c.pid, c.address.as_str()))
        .collect();
    let is_cond = |o: ObjId| {
        let pid = pids.get(&o.process).copied().unwrap_or(0);
        conds.contains(&(pid, format!("{:#x}", o.addr).as_str()))
    };
    for ((ti, word), bins) in futex_heat {
        let c = if is_cond(word) {
            cat(SpanKind::Cond)
        } else {
            cat(SpanKind::Wait)
        };
        for (b, ns) in bins {
            *heat[ti][c].entry(b).or_default() += ns;
        }
    }
    let rwlock_of: HashMap<(u32, u64), &str> = report
        .locks
        .iter()
        .filter(|l| l.kind == "futex-rwlock")
        .filter_map(|l| {
            let a = u64::from_str_radix(l.address.trim_start_matches("0x"), 16).ok()?;
            Some(((l.pid, a), l.label.as_str()))
        })
        .collect();
    for s in kept.iter_mut().filter(|s| s.kind == SpanKind::FutexWait) {
        s.kind = match s.obj {
            Some(o) if is_cond(o) => SpanKind::Cond,
            _ => SpanKind::Wait,
        };
    }
    kept.sort_by_key(|s| std::cmp::Reverse(s.end - s.start));
    kept.truncate(max);
    kept.sort_by_key(|s| (s.thread, s.start));
    sum.spans_kept = kept.len() as u64;

    let mut names = Names::new(meta, opts.symbolize);
    let mut strings: Vec<String> = Vec::new();
    let mut sid: HashMap<String, usize> = HashMap::default();
    let mut intern = |s: String| -> usize {
        if let Some(&i) = sid.get(&s) {
            return i;
        }
        strings.push(s.clone());
        sid.insert(s, strings.len() - 1);
        strings.len() - 1
    };
    let mut spans: Vec<Value> = Vec::with_capacity(kept.len());
    let mut handoffs: Vec<Value> = Vec::new();
    for s in &kept {
        let process = threads[s.thread as usize].process;
        let obj = s.obj.map_or(-1, |o| {
            // The writers' word of a Rust RwLock (4 bytes after its
            // state) is the same lock, one row in the report.
            let rw = rwlock_of.get(&(
                pids.get(&o.process).copied().unwrap_or(0),
                o.addr.wrapping_sub(4),
            ));
            intern(rw.map_or_else(|| names.object(o), |l| l.to_string())) as i64
        });
        let site = intern(names.site(process, s.site, s.stack));
        let path = names.path(process, s.stack);
        let path = if path.is_empty() {
            -1
        } else {
            intern(path.join("\n")) as i64
        };
        spans.push(json!([
            s.thread,
            s.kind.name(),
            s.start,
            s.end,
            obj,
            site,
            path
        ]));
        if let Some((from, from_ns)) = s.handoff {
            handoffs.push(json!([from, from_ns, s.thread, s.end, obj]));
        }
    }
    let heat: Vec<Value> = heat
        .iter()
        .map(|cats| {
            Value::Array(
                cats.iter()
                    .map(|m| {
                        let mut v: Vec<(u32, u64)> = m.iter().map(|(&b, &ns)| (b, ns)).collect();
                        v.sort_unstable();
                        Value::Array(v.into_iter().map(|(b, ns)| json!([b, ns])).collect())
                    })
                    .collect(),
            )
        })
        .collect();
    let st = stacks::from_report(report);
    let data = json!({
        "duration_ns": end,
        "bin_ns": bin_ns,
        "bins": nb,
        "threads": threads.iter().map(|t| json!({"name": t.name, "tid": t.tid, "pid": t.pid,
            "start": t.start_ns, "end": t.end_ns})).collect::<Vec<_>>(),
        "heat": heat,
        "spans": spans,
        "spans_total": sum.spans,
        "handoffs": handoffs,
        "strings": strings,
        "report": report_data(report, extra),
        "flame": {"waiters": flame(&st.waiters), "holders": flame(&st.holders),
            "per_lock": per_lock(&st.waiters, &st.holders)},
    });
    let title = format!("lockscope: {}", report.command.join(" "));
    let page = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width\">\n\
         <title>{}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n\
         <script>\n{}</script>\n\
         <script type=\"application/json\" id=\"lockscope-data\">{}</script>\n\
         <div id=\"app\"></div>\n<script>\n{SCRIPT}</script>\n</body></html>\n",
        escape(&title),
        // First of all: errors of the page are collected (the browser
        // test reads them).
        "window.__lockscopeErrors=[];addEventListener('error',function(e){__lockscopeErrors.push(String(e.message))});\
         (function(){var ce=console.error;console.error=function(){__lockscopeErrors.push(Array.prototype.join.call(arguments,' '));return ce.apply(console,arguments)}})();\n",
        script_json(&data)
    );
    out.write_all(page.as_bytes())?;
    sum.bytes = page.len() as u64;
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cannot_become_markup() {
        assert_eq!(escape("<script>&\"'"), "&lt;script&gt;&amp;&quot;&#39;");
        let v = json!({"name": "</script><script>alert(1)</script>"});
        let s = script_json(&v);
        assert!(!s.contains('<'), "{s}");
        let back: Value = serde_json::from_str(&s).unwrap();
        assert_eq!(back, v);
    }

    /// The page's embedded data (the JSON of its data script element).
    fn page_data(page: &[u8]) -> Value {
        let page = std::str::from_utf8(page).unwrap();
        let start = page
            .find("id=\"lockscope-data\">")
            .map(|i| i + "id=\"lockscope-data\">".len())
            .unwrap();
        let len = page[start..].find("</script>").unwrap();
        serde_json::from_str(&page[start..start + len]).unwrap()
    }

    /// The page of `trace` from one pass (`write_analyzed`) and from the
    /// report computed apart then a second read (`write`): same report,
    /// same bytes.
    fn one_pass_equals_two(trace: &Path) -> (Report, Vec<u8>) {
        let cfg = ReportConfig {
            symbolize: false,
            ..ReportConfig::default()
        };
        let opts = HtmlOptions {
            symbolize: false,
            ..HtmlOptions::default()
        };
        let meta = lockscope_trace::input::index(trace, &mut |_, _| {}).unwrap();
        let mut one = Vec::new();
        let (r1, s1) = write_analyzed(trace, &meta, &cfg, &opts, &mut |_| None, &mut one).unwrap();
        let r2 = lockscope_report::analyze(trace, &cfg, &mut |_, _, _| {}).unwrap();
        assert_eq!(
            serde_json::to_value(&r1).unwrap(),
            serde_json::to_value(&r2).unwrap(),
            "{}",
            trace.display()
        );
        let extra = lockscope_analysis::full::sections(trace, &meta, &r2, false, &mut |_| None);
        // Compared as the page holds it: written, then read back (the
        // parser may land a float on its neighbour, as on both sides).
        let want: Value = serde_json::from_str(&script_json(&report_data(&r2, &extra))).unwrap();
        assert_eq!(page_data(&one)["report"], want);
        let mut two = Vec::new();
        let s2 = write(trace, &meta, &r2, &extra, &opts, &mut two).unwrap();
        assert!(one == two, "{}: the one-pass page differs", trace.display());
        assert_eq!((s1.spans, s1.spans_kept), (s2.spans, s2.spans_kept));
        assert!(s1.spans > 0);
        (r2, one)
    }

    #[test]
    fn html_one_pass_report_equals_analyze() {
        let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden");
        for name in ["sleep_hold.lstrace", "rust_std_mutex.lstrace"] {
            let trace = golden.join(name);
            let meta = lockscope_trace::input::index(&trace, &mut |_, _| {}).unwrap();
            assert!(meta.footer.is_some(), "{name}: the one-pass case");
            let (r, page) = one_pass_equals_two(&trace);
            assert!(r.events > 0 && !r.locks.is_empty(), "{name}");
            let data = page_data(&page);
            assert_eq!(data["report"]["events"], r.events);
            assert!(!data["spans"].as_array().unwrap().is_empty(), "{name}");
        }
        // A trace cut short has no footer: read twice, same result.
        let bytes = std::fs::read(golden.join("sleep_hold.lstrace")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cut = dir.path().join("cut.lstrace");
        std::fs::write(&cut, &bytes[..bytes.len() * 3 / 4]).unwrap();
        let meta = lockscope_trace::input::index(&cut, &mut |_, _| {}).unwrap();
        assert!(meta.footer.is_none());
        one_pass_equals_two(&cut);
    }

    /// A complete trace of `threads` threads taking one lock in turn,
    /// most acquisitions contended (a hand-off each), sections of varied
    /// lengths: many spans and hand-offs, for the trims of the kept spans.
    fn contended_trace(path: &Path, threads: u32, rounds: u32) {
        use lockscope_format::*;
        let header = Header {
            tsc_hz: 1e9,
            command: vec!["contended".into()],
            ..Header::default()
        };
        let f = std::fs::File::create(path).unwrap();
        let mut w = TraceWriter::new(std::io::BufWriter::new(f), &header).unwrap();
        w.write(&Record::Process(Process {
            id: 1,
            pid: 100,
            argv: vec!["contended".into()],
            ..Process::default()
        }))
        .unwrap();
        for t in 1..=threads {
            w.write(&Record::Thread(Thread {
                id: t,
                process: 1,
                tid: 100 + t,
                name: format!("t{t}"),
                start_ns: 0,
                parent: 0,
            }))
            .unwrap();
        }
        let lock = 0x5000u64;
        let ev = |time, op: Op, flags, site| Event {
            time,
            op: op as u8,
            flags,
            addr: lock,
            site,
            ..Event::default()
        };
        let mut events: Vec<Vec<Event>> = vec![Vec::new(); threads as usize];
        let mut want = vec![10u64; threads as usize];
        let mut free_at = 0u64;
        let mut n = 0u64;
        for r in 0..rounds {
            for ti in 0..threads as usize {
                let site = 0x1000 + 0x100 * ti as u64;
                let b = &mut events[ti];
                let got = if want[ti] < free_at {
                    b.push(ev(want[ti], Op::MutexLock, phase::BEGIN, site));
                    b.push(ev(
                        free_at + 5,
                        Op::MutexLock,
                        phase::DONE | phase::CONTENDED,
                        site,
                    ));
                    n += 2;
                    free_at + 5
                } else {
                    b.push(ev(want[ti], Op::MutexLock, phase::DONE, site));
                    n += 1;
                    want[ti]
                };
                // Section lengths varied and repeated (ties among spans).
                let rel = got + 20 + u64::from((r * 7 + ti as u32 * 13) % 50) * 3;
                b.push(ev(rel, Op::MutexUnlock, phase::DONE, site + 0x20));
                n += 1;
                free_at = rel;
                want[ti] = rel + 1 + u64::from((r * 5 + ti as u32) % 4);
            }
        }
        let end = free_at + 10;
        for (ti, b) in events.iter().enumerate() {
            w.write_events(ti as u32 + 1, b).unwrap();
            w.write(&Record::ThreadEnd(ThreadEnd {
                thread: ti as u32 + 1,
                end_ns: end,
            }))
            .unwrap();
        }
        w.finish(&Footer {
            duration_ns: end,
            events: n,
            lost: 0,
            exit_status: 0,
        })
        .unwrap();
    }

    #[test]
    fn html_longest_spans_keep_their_hand_offs_through_trims() {
        // More spans than kept: the page keeps the longest, and a kept
        // wait keeps its hand-off whenever the buffer was trimmed.
        let dir = tempfile::tempdir().unwrap();
        let trace = dir.path().join("contended.lstrace");
        contended_trace(&trace, 3, 400);
        one_pass_equals_two(&trace);
        let meta = lockscope_trace::input::index(&trace, &mut |_, _| {}).unwrap();
        let cfg = ReportConfig {
            symbolize: false,
            ..ReportConfig::default()
        };
        let all = HtmlOptions {
            symbolize: false,
            max_spans: 1 << 20,
            ..HtmlOptions::default()
        };
        let mut page = Vec::new();
        let (_, s) = write_analyzed(&trace, &meta, &cfg, &all, &mut |_| None, &mut page).unwrap();
        let full = page_data(&page);
        assert_eq!(s.spans, s.spans_kept);
        assert!(full["handoffs"].as_array().unwrap().len() > 500);
        for max in [1usize, 2, 3, 7, 50, 333, 1000] {
            let opts = HtmlOptions {
                max_spans: max,
                ..all.clone()
            };
            let mut page = Vec::new();
            let (_, s) =
                write_analyzed(&trace, &meta, &cfg, &opts, &mut |_| None, &mut page).unwrap();
            let d = page_data(&page);
            assert_eq!(s.spans_kept as usize, max.min(s.spans as usize));
            // The kept spans are the longest of all (ties: the earlier).
            let dur = |v: &Value| v[3].as_u64().unwrap() - v[2].as_u64().unwrap();
            let mut want: Vec<&Value> = full["spans"].as_array().unwrap().iter().collect();
            want.sort_by_key(|v| std::cmp::Reverse(dur(v)));
            let shortest_kept = d["spans"]
                .as_array()
                .unwrap()
                .iter()
                .map(dur)
                .min()
                .unwrap();
            assert_eq!(
                shortest_kept,
                dur(want[max.min(want.len()) - 1]),
                "max {max}"
            );
            // Every hand-off of a kept wait is there, as in the full page.
            let kept: Vec<(u64, u64)> = d["spans"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| (v[0].as_u64().unwrap(), v[3].as_u64().unwrap()))
                .collect();
            let want_h: Vec<&Value> = full["handoffs"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|h| kept.contains(&(h[2].as_u64().unwrap(), h[3].as_u64().unwrap())))
                .collect();
            let got_h: Vec<&Value> = d["handoffs"].as_array().unwrap().iter().collect();
            assert_eq!(got_h.len(), want_h.len(), "max {max}");
        }
    }
}
