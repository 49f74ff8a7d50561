//! Chrome trace-event JSON (the JSON object form), which Perfetto's UI
//! and `chrome://tracing` open: one process per traced process, one
//! track per thread with complete (`X`) slices for waits, holds,
//! unlocking and blocking, flow events (`s` -> `f`) for each hand-off from
//! a release to the acquisition it let in, and a counter track
//! (`waiters LOCK`) per lock with the number of queued threads.
//!
//! Slices on one track must nest; a thread that releases its locks out of
//! order (hand-over-hand locking) would overlap two holds, so such a
//! slice goes to an extra track of the same thread (`NAME [2]`), chosen
//! when the slice ends. Written while the trace streams by: memory is one
//! entry per lock and a short stack per track, not per event.

// Fx: the keys are small ids, hashed once or more per event (as in the
// analysis crate); SipHash was a visible share of the writers' time.
use rustc_hash::FxHashMap as HashMap;
use std::io::Write;
use std::path::Path;

use lockscope_trace::input::Meta;
use lockscope_trace::sync::ObjId;
use serde_json::json;

use crate::jsonout::JsonOut;
use crate::names::Names;
use crate::timeline::{self, Item, SpanKind};
use crate::ExportError;

/// Pseudo thread ids of extra tracks: above any Linux tid (at most 2^22).
const EXTRA_TID_BASE: u64 = 1 << 30;
/// Pseudo thread ids of GPU stream tracks (above the extra tracks).
const GPU_TID_BASE: u64 = 1 << 40;
/// How many finished slices a track keeps to test nesting against (a
/// new slice may only enclose or follow them).
const NEST_DEPTH: usize = 256;

/// Counts of what was written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Complete slices.
    pub slices: u64,
    /// Hand-off flows.
    pub flows: u64,
    /// Counter samples.
    pub counters: u64,
    /// Extra tracks opened for out-of-order releases.
    pub extra_tracks: u64,
    /// GPU work slices (kernels, copies, memsets).
    pub gpu_slices: u64,
}

/// One track's finished slices that a later one could still overlap:
/// (start, end), sorted, each enclosing or following the ones below it.
#[derive(Default)]
pub(crate) struct Lane {
    // A deque: past NEST_DEPTH the oldest is dropped at each slice, which
    // for a Vec moved the whole stack (most of the writer's time on a
    // thread doing many short sections in a row).
    open: std::collections::VecDeque<(u64, u64)>,
}

impl Lane {
    /// Places `[s, e]` (ends arrive in order) if it nests; false if it
    /// would partly overlap a slice already there.
    pub(crate) fn place(&mut self, s: u64, e: u64) -> bool {
        let mut k = self.open.len();
        while k > 0 && self.open[k - 1].0 >= s {
            k -= 1;
        }
        if k > 0 && self.open[k - 1].1 > s {
            return false;
        }
        self.open.truncate(k);
        self.open.push_back((s, e));
        if self.open.len() > NEST_DEPTH {
            self.open.pop_front();
        }
        true
    }
}

/// What a slice shows besides its times: the same in both Perfetto
/// writers (their tests compare them slice for slice), computed once per
/// (kind, object, process, site, path) by each.
pub(crate) struct SliceLook {
    /// `kind` alone, or `kind object`.
    pub(crate) name: String,
    /// The object's name, if the slice has one.
    pub(crate) object: Option<String>,
    /// The call site (user frame).
    pub(crate) site: String,
    /// The call path, innermost first; empty when none was recorded.
    pub(crate) path: Vec<String>,
}

impl SliceLook {
    pub(crate) fn new(
        names: &mut Names,
        kind: SpanKind,
        obj: Option<ObjId>,
        process: u32,
        site: u64,
        stack: u32,
    ) -> SliceLook {
        let object = obj.map(|o| names.object(o));
        let name = match &object {
            Some(n) => format!("{} {n}", kind.name()),
            None => kind.name().to_string(),
        };
        SliceLook {
            name,
            object,
            site: names.site(process, site, stack),
            path: names.path(process, stack),
        }
    }
}

/// One thread's lanes: lane 0 is the thread's own track; a slice that
/// partly overlaps a slice of every lane (an out-of-order release) opens
/// another. Both Perfetto writers place slices through this.
pub(crate) struct Lanes(Vec<Lane>);

impl Lanes {
    /// The thread's own lane alone.
    pub(crate) fn new() -> Lanes {
        Lanes(vec![Lane::default()])
    }

    /// The lane `[s, e]` goes to (the first it nests in), and whether it
    /// was opened for it.
    pub(crate) fn place(&mut self, s: u64, e: u64) -> (usize, bool) {
        if let Some(k) = self.0.iter_mut().position(|l| l.place(s, e)) {
            return (k, false);
        }
        let mut l = Lane::default();
        l.place(s, e);
        self.0.push(l);
        (self.0.len() - 1, true)
    }
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// Per lock, its two names as JSON strings, escaped once: the hand-off
/// flows' (`"hand-off LOCK"`) and the waiter counter's (`"waiters LOCK"`).
/// Formatting and escaping them per event was a visible share of the
/// writer's time (a counter sample per queue change, a flow pair per
/// hand-off).
struct LockNames {
    handoff: Vec<u8>,
    waiters: Vec<u8>,
}

/// Writes the trace at `path` as trace-event JSON.
pub fn write(
    path: &Path,
    meta: &Meta,
    symbolize: bool,
    out: &mut dyn Write,
) -> Result<Summary, ExportError> {
    let mut names = Names::new(meta, symbolize);
    let threads = timeline::threads(meta);
    let by_id: HashMap<u32, usize> = threads.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
    // Every event goes through one buffered writer: the metadata (rare)
    // serialized by serde_json as before, the per-event objects written
    // field by field in the same key order (serde_json's maps are sorted
    // by key), so the output is byte for byte what it was.
    let mut w = JsonOut::new(out);
    let mut first = true;
    let mut sep = |w: &mut JsonOut| {
        if !first {
            w.raw(b",\n");
        }
        first = false;
    };
    w.raw(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
    let mut procs: Vec<(u32, u32)> = meta.processes.values().map(|p| (p.id, p.pid)).collect();
    procs.sort_unstable();
    for &(id, pid) in &procs {
        let p = &meta.processes[&id];
        let name = p.argv.first().cloned().unwrap_or_else(|| p.exe.clone());
        sep(&mut w);
        w.value(&json!({"ph":"M","name":"process_name","pid":pid,"tid":0,
            "args":{"name": name}}));
    }
    for (i, t) in threads.iter().enumerate() {
        sep(&mut w);
        w.value(
            &json!({"ph":"M","name":"thread_name","pid":t.pid,"tid":t.tid,
            "args":{"name": t.name}}),
        );
        sep(&mut w);
        w.value(
            &json!({"ph":"M","name":"thread_sort_index","pid":t.pid,"tid":t.tid,
            "args":{"sort_index": i}}),
        );
    }
    w.maybe_flush()?;
    let mut sum = Summary::default();
    // Per thread: its lanes (0 is the thread's own track).
    let mut lanes: Vec<Lanes> = threads.iter().map(|_| Lanes::new()).collect();
    // Last hold per lock (pid, track tid, start, end) and last wait per
    // thread (track tid, start, end): the ends of a hand-off's arrow.
    let mut last_hold: HashMap<ObjId, (u32, u64, u64, u64)> = HashMap::default();
    let mut last_wait: HashMap<u32, (u64, u64, u64)> = HashMap::default();
    let mut pid_of_process: HashMap<u32, u32> = HashMap::default();
    for &(id, pid) in &procs {
        pid_of_process.insert(id, pid);
    }
    let mut lock_names: HashMap<ObjId, LockNames> = HashMap::default();
    let mut err: Option<std::io::Error> = None;
    let mut flow_id = 0u64;
    type FragKey = (SpanKind, Option<ObjId>, u32, u64, u32);
    let mut fragments: HashMap<FragKey, String> = HashMap::default();
    // GPU stream tracks named so far: (pid, device, stream).
    let mut gpu_tracks: std::collections::HashSet<(u32, u32, u32)> = Default::default();
    timeline::scan(path, meta, |item| {
        if err.is_some() {
            return;
        }
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
                let Some(&ti) = by_id.get(&thread) else {
                    return;
                };
                let t = &threads[ti];
                let (lane, opened) = lanes[ti].place(start_ns, end_ns);
                if opened {
                    sum.extra_tracks += 1;
                    sep(&mut w);
                    w.value(&json!({"ph":"M","name":"thread_name","pid":t.pid,
                        "tid": EXTRA_TID_BASE + u64::from(t.tid) * 64 + lane as u64,
                        "args":{"name": format!("{} [{}]", t.name, lane + 1)}}));
                }
                let tid = if lane == 0 {
                    u64::from(t.tid)
                } else {
                    EXTRA_TID_BASE + u64::from(t.tid) * 64 + lane as u64
                };
                // The category, name and args of a slice depend on
                // its kind, object, site and path only: serialized
                // once per combination (a trace has few).
                let key = (kind, obj, t.process, site, stack);
                let frag = fragments.entry(key).or_insert_with(|| {
                    let l = SliceLook::new(&mut names, kind, obj, t.process, site, stack);
                    let mut args = serde_json::Map::new();
                    if let Some(n) = &l.object {
                        args.insert("object".into(), json!(n));
                    }
                    args.insert("site".into(), json!(l.site));
                    if !l.path.is_empty() {
                        args.insert("path".into(), json!(l.path));
                    }
                    format!(
                        "\"cat\":{},\"name\":{},\"args\":{}",
                        json!(kind.name()),
                        json!(l.name),
                        serde_json::Value::Object(args)
                    )
                });
                sep(&mut w);
                slice_start(&mut w, t.pid, tid, start_ns, end_ns);
                w.raw(b",");
                w.raw(frag.as_bytes());
                w.raw(b"}");
                sum.slices += 1;
                match kind {
                    SpanKind::Hold => {
                        if let Some(o) = obj {
                            last_hold.insert(o, (t.pid, tid, start_ns, end_ns));
                        }
                    }
                    SpanKind::Wait | SpanKind::FutexWait => {
                        last_wait.insert(thread, (tid, start_ns, end_ns));
                    }
                    _ => {}
                }
            }
            Item::HandOff {
                lock,
                from: _,
                from_ns,
                to,
                to_ns,
            } => {
                let (Some(&(hpid, htid, hs, he)), Some(&(wtid, ws, we)), Some(&ti)) =
                    (last_hold.get(&lock), last_wait.get(&to), by_id.get(&to))
                else {
                    return;
                };
                if he != from_ns || we != to_ns {
                    return;
                }
                // Inside the slices they bind to: the releasing hold's
                // last nanosecond, the unblocked wait's last one.
                let s_ts = he.saturating_sub(1).max(hs);
                let f_ts = we.saturating_sub(1).max(ws);
                flow_id += 1;
                let ln = lock_names
                    .entry(lock)
                    .or_insert_with(|| lock_names_of(&mut names, lock));
                // serde_json's key order (sorted), as before.
                sep(&mut w);
                w.raw(b"{\"cat\":\"handoff\",\"id\":");
                w.u64(flow_id);
                w.raw(b",\"name\":");
                w.raw(&ln.handoff);
                w.raw(b",\"ph\":\"s\",\"pid\":");
                w.u64(u64::from(hpid));
                w.raw(b",\"tid\":");
                w.u64(htid);
                w.raw(b",\"ts\":");
                w.f64(us(s_ts));
                w.raw(b"}");
                sep(&mut w);
                w.raw(b"{\"bp\":\"e\",\"cat\":\"handoff\",\"id\":");
                w.u64(flow_id);
                w.raw(b",\"name\":");
                w.raw(&ln.handoff);
                w.raw(b",\"ph\":\"f\",\"pid\":");
                w.u64(u64::from(threads[ti].pid));
                w.raw(b",\"tid\":");
                w.u64(wtid);
                w.raw(b",\"ts\":");
                w.f64(us(f_ts));
                w.raw(b"}");
                sum.flows += 1;
            }
            Item::GpuWork {
                process,
                device,
                stream,
                kind,
                start_ns,
                end_ns,
                correlation,
                launched_by,
                func,
                site,
            } => {
                // One track per GPU stream, in the process that
                // launched the work (streams of one device side by
                // side; CUDA's own timeline shows them so).
                let pid = pid_of_process.get(&process).copied().unwrap_or(0);
                let tid = GPU_TID_BASE + (u64::from(device) << 20) + u64::from(stream);
                if gpu_tracks.insert((pid, device, stream)) {
                    sep(&mut w);
                    w.value(&json!({"ph":"M","name":"thread_name","pid":pid,"tid":tid,
                        "args":{"name": format!("GPU {device} stream {stream}")}}));
                    sep(&mut w);
                    w.value(&json!({"ph":"M","name":"thread_sort_index","pid":pid,
                        "tid":tid,"args":{"sort_index": 1_000_000 + gpu_tracks.len()}}));
                }
                let name = if func != 0 {
                    // A function's entry, named like a return address.
                    names.site(process, func + 1, 0)
                } else {
                    kind.name().to_string()
                };
                let mut args = serde_json::Map::new();
                args.insert("correlation".into(), json!(correlation));
                if launched_by != 0 {
                    args.insert("launched_by_thread".into(), json!(launched_by));
                    args.insert("launch_site".into(), json!(names.site(process, site, 0)));
                }
                sep(&mut w);
                slice_start(&mut w, pid, tid, start_ns, end_ns);
                w.raw(b",\"cat\":\"gpu\",\"name\":");
                w.value(&name);
                w.raw(b",\"args\":");
                w.value(&serde_json::Value::Object(args));
                w.raw(b"}");
                sum.slices += 1;
                sum.gpu_slices += 1;
            }
            Item::Begin { .. } | Item::Dropped { .. } => {}
            Item::Waiters {
                lock,
                time_ns,
                count,
            } => {
                let pid = pid_of_process.get(&lock.process).copied().unwrap_or(0);
                let ln = lock_names
                    .entry(lock)
                    .or_insert_with(|| lock_names_of(&mut names, lock));
                sep(&mut w);
                w.raw(b"{\"args\":{\"waiters\":");
                w.u64(u64::from(count));
                w.raw(b"},\"name\":");
                w.raw(&ln.waiters);
                w.raw(b",\"ph\":\"C\",\"pid\":");
                w.u64(u64::from(pid));
                w.raw(b",\"tid\":0,\"ts\":");
                w.f64(us(time_ns));
                w.raw(b"}");
                sum.counters += 1;
            }
        }
        if let Err(e) = w.maybe_flush() {
            err = Some(e);
        }
    })?;
    if let Some(e) = err {
        return Err(e.into());
    }
    // The trace's labels (`host`, `command`, `record --label`), in the
    // trace-event format's free-form `otherData` dictionary.
    w.raw(b"\n],\"otherData\":{\"labels\":");
    w.value(&lockscope_format::labels(&meta.header));
    w.raw(b"}}\n");
    w.finish()?;
    Ok(sum)
}

/// A lock's names as the flows and counters write them.
fn lock_names_of(names: &mut Names, lock: ObjId) -> LockNames {
    let n = names.object(lock);
    LockNames {
        handoff: JsonOut::string(&format!("hand-off {n}")),
        waiters: JsonOut::string(&format!("waiters {n}")),
    }
}

/// The opening of a complete ("X") slice up to its duration: pid, tid,
/// start and length in microseconds (the thread and GPU slices share it).
fn slice_start(w: &mut JsonOut<'_>, pid: u32, tid: u64, start_ns: u64, end_ns: u64) {
    w.raw(b"{\"ph\":\"X\",\"pid\":");
    w.u64(u64::from(pid));
    w.raw(b",\"tid\":");
    w.u64(tid);
    w.raw(b",\"ts\":");
    w.us3(start_ns);
    w.raw(b",\"dur\":");
    w.us3(end_ns - start_ns);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_accept_nested_and_sequential_slices_only() {
        let mut l = Lane::default();
        assert!(l.place(5, 8)); // inner, ends first
        assert!(l.place(1, 10)); // encloses it
        assert!(l.place(12, 15)); // follows
        assert!(!l.place(14, 20)); // starts inside [12,15], ends after
        assert!(l.place(11, 21)); // encloses [12,15]
    }
}
