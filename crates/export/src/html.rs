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

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use lockscope_analysis::input::Meta;
use lockscope_analysis::sync::ObjId;
use lockscope_analysis::Report;
use serde_json::{json, Value};

use crate::names::Names;
use crate::stacks::{self, WeightedStack};
use crate::timeline::{self, Item, SpanKind};
use crate::ExportError;

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

fn cat(k: SpanKind) -> usize {
    match k {
        SpanKind::Wait => 0,
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

/// The report part of the page: verdict, tables, recommendations.
fn report_data(r: &Report) -> Value {
    let locks: Vec<Value> = r
        .locks
        .iter()
        .map(|l| {
            json!([
                stacks::lock_label(l.name.as_deref(), &l.address),
                l.kind,
                l.pid,
                l.acquisitions,
                l.contended,
                l.contended_ratio,
                l.wait_ns.total,
                l.wait_ns.max,
                l.hold_ns.total,
                l.owner_changes,
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
        "duration_ns": r.duration_ns,
        "events": r.events,
        "lost_events": r.lost_events,
        "total_wait_ns": r.locks.iter().map(|l| l.wait_ns.total).sum::<u64>(),
        "locks": locks,
        "threads": threads,
        "blame": blame,
        "recommendations": recs,
        "notes": r.notes,
    })
}

/// Writes the page for the trace at `path`, whose report is `report`.
pub fn write(
    path: &Path,
    meta: &Meta,
    report: &Report,
    opts: &HtmlOptions,
    out: &mut dyn Write,
) -> Result<Summary, ExportError> {
    let mut threads = timeline::threads(meta);
    let by_id: HashMap<u32, usize> = threads.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
    // GPU streams get rows of their own after the threads, as they appear.
    let mut gpu_rows: HashMap<(u32, u32, u32), usize> = HashMap::new();
    let end = threads
        .iter()
        .map(|t| t.end_ns)
        .max()
        .unwrap_or(0)
        .max(report.duration_ns)
        .max(1);
    let nb = opts.bins.max(1);
    let bin_ns = end.div_ceil(nb as u64).max(1);
    // Per thread, per category: ns in each bin (sparse).
    let mut heat: Vec<[HashMap<u32, u64>; 4]> =
        threads.iter().map(|_| Default::default()).collect();
    let mut kept: Vec<RawSpan> = Vec::new();
    let mut sum = Summary::default();
    let max = opts.max_spans.max(1);
    let trim = |kept: &mut Vec<RawSpan>| {
        kept.sort_by_key(|s| std::cmp::Reverse(s.end - s.start));
        kept.truncate(max);
    };
    timeline::scan(path, meta, |item| match item {
        Item::Span {
            thread,
            kind,
            obj,
            start_ns,
            end_ns,
            site,
            stack,
        } => {
            let Some(&ti) = by_id.get(&thread) else {
                return;
            };
            sum.spans += 1;
            let h = &mut heat[ti][cat(kind)];
            let mut t = start_ns;
            while t < end_ns {
                let b = (t / bin_ns).min(nb as u64 - 1);
                let bend = ((b + 1) * bin_ns).min(end_ns).max(t + 1);
                *h.entry(b as u32).or_default() += bend.min(end_ns) - t;
                t = bend;
            }
            kept.push(RawSpan {
                thread: ti as u32,
                kind,
                obj,
                start: start_ns,
                end: end_ns,
                site,
                stack,
                handoff: None,
            });
            if kept.len() >= 2 * max {
                trim(&mut kept);
            }
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
            let ti = *gpu_rows
                .entry((process, device, stream))
                .or_insert_with(|| {
                    threads.push(timeline::ThreadInfo {
                        id: u32::MAX,
                        process,
                        pid: meta.processes.get(&process).map_or(0, |p| p.pid),
                        tid: 0,
                        name: format!("GPU {device} stream {stream}"),
                        start_ns: 0,
                        end_ns: end,
                    });
                    heat.push(Default::default());
                    threads.len() - 1
                });
            sum.spans += 1;
            let h = &mut heat[ti][cat(SpanKind::GpuWork)];
            let mut t = start_ns;
            while t < end_ns {
                let b = (t / bin_ns).min(nb as u64 - 1);
                let bend = ((b + 1) * bin_ns).min(end_ns).max(t + 1);
                *h.entry(b as u32).or_default() += bend.min(end_ns) - t;
                t = bend;
            }
            kept.push(RawSpan {
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
            if kept.len() >= 2 * max {
                trim(&mut kept);
            }
        }
        Item::HandOff {
            from,
            from_ns,
            to,
            to_ns,
            ..
        } => {
            // It follows the waiter's span, the last one pushed.
            if let (Some(&fi), Some(last)) = (by_id.get(&from), kept.last_mut()) {
                if by_id.get(&to) == Some(&(last.thread as usize))
                    && last.kind == SpanKind::Wait
                    && last.end == to_ns
                {
                    last.handoff = Some((fi as u32, from_ns));
                }
            }
        }
        _ => {}
    })?;
    trim(&mut kept);
    kept.sort_by_key(|s| (s.thread, s.start));
    sum.spans_kept = kept.len() as u64;

    let mut names = Names::new(meta, opts.symbolize);
    let mut strings: Vec<String> = Vec::new();
    let mut sid: HashMap<String, usize> = HashMap::new();
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
        let obj = s.obj.map_or(-1, |o| intern(names.object(o)) as i64);
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
        "report": report_data(report),
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
}
