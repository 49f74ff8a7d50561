//! speedscope's file format (`https://www.speedscope.app/file-format-schema.json`):
//! one evented profile per thread, whose frames are the thread's states
//! (`wait LOCK at FUNCTION`, `hold LOCK at FUNCTION`, `cond wait COND`,
//! ...), opened and closed in time, so speedscope's time-order view is a
//! per-thread timeline and its left-heavy view sums time per state.
//!
//! Frames must close in the reverse order they opened. A lock released
//! out of order (hand-over-hand) closes the frames above it and reopens
//! them at the same instant; a thread blocked in a call can start nothing
//! else, so a blocking frame still open when the thread begins something
//! (its call never completed: events were lost) is closed then.
//!
//! Memory is bounded: the format puts each thread's events together, so
//! they are buffered (16 bytes per open or close), and when the buffers
//! pass [`SPILL_EVENTS`] they are appended to one temporary file per
//! thread (removed at the end), read back in order when the thread's
//! profile is written.
//!
//! Speed: a frame is named once per (kind, object, site, call path), not
//! once per event (naming it formats, parses and hashes several strings),
//! and the events are written through `crate::jsonout` (itoa into one
//! buffer) rather than `write!` per event.

// Fx: the keys are small ids, hashed once per event (as in the other
// timeline writers).
use rustc_hash::FxHashMap as HashMap;
use std::io::{Read, Write};
use std::path::Path;

use lockscope_trace::input::Meta;
use lockscope_trace::sync::ObjId;
use serde_json::json;

use crate::jsonout::JsonOut;
use crate::names::Names;
use crate::stacks::parse_frame;
use crate::timeline::{self, Item, SpanKind};
use crate::ExportError;

/// The schema URL the file names.
pub const SCHEMA: &str = "https://www.speedscope.app/file-format-schema.json";

/// Buffered events (all threads) above which they go to temporary files
/// (8 MB of buffers, up to twice that allocated). 4 Mi before: a peak
/// RSS of 135 MB on a long trace, for no measurable speed-up over this
/// (the spill is a sequential append and read, a small share of the
/// export's time; 1 Mi: 57 MB for `lockscope export` on 100 M events).
pub const SPILL_EVENTS: usize = 512 << 10;

/// The temporary directory of spilled events, removed when dropped.
struct Spill {
    /// Created at the first spill (most exports never spill): a private
    /// directory of its own under $TMPDIR (mode 0700, removed with its
    /// files when the export ends), so that no predictable name in a
    /// shared /tmp is used.
    dir: Option<tempfile::TempDir>,
}

impl Spill {
    fn new() -> Spill {
        Spill { dir: None }
    }
    fn file(&self, thread: usize) -> std::path::PathBuf {
        match &self.dir {
            Some(d) => d.path().join(format!("t{thread}")),
            // Nothing was spilled: no file of any thread exists.
            None => std::path::PathBuf::new(),
        }
    }
    /// Appends every thread's buffered events to its file.
    fn spill(&mut self, st: &mut [ThreadState]) -> std::io::Result<()> {
        if self.dir.is_none() {
            self.dir = Some(
                tempfile::Builder::new()
                    .prefix("lockscope-speedscope-")
                    .tempdir()?,
            );
        }
        for (i, s) in st.iter_mut().enumerate() {
            if s.events.is_empty() {
                continue;
            }
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.file(i))?;
            let mut w = std::io::BufWriter::with_capacity(1 << 16, f);
            for &(open, frame, at) in &s.events {
                let mut rec = [0u8; 12];
                rec[..4].copy_from_slice(&(frame | (u32::from(open) << 31)).to_le_bytes());
                rec[4..].copy_from_slice(&at.to_le_bytes());
                w.write_all(&rec)?;
            }
            w.flush()?;
            s.spilled += s.events.len() as u64;
            s.events = Vec::new();
        }
        Ok(())
    }
}

/// One open frame of a thread.
#[derive(Clone, Copy)]
struct Open {
    frame: u32,
    kind: SpanKind,
    obj: Option<ObjId>,
}

#[derive(Default)]
struct ThreadState {
    stack: Vec<Open>,
    /// (open?, frame, at).
    events: Vec<(bool, u32, u64)>,
    last: u64,
    /// Time of its first event.
    first: Option<u64>,
    /// Events already in its temporary file.
    spilled: u64,
}

impl ThreadState {
    fn push(&mut self, open: bool, frame: u32, at: u64) {
        let at = at.max(self.last);
        self.last = at;
        self.first.get_or_insert(at);
        self.events.push((open, frame, at));
    }
    /// Closes the open frame at `k`: the ones above it close first and
    /// reopen after.
    fn close_at(&mut self, k: usize, at: u64) {
        let above: Vec<Open> = self.stack.drain(k + 1..).collect();
        for o in above.iter().rev() {
            self.push(false, o.frame, at);
        }
        let o = self.stack.pop().expect("k is in the stack");
        self.push(false, o.frame, at);
        for o in above {
            self.push(true, o.frame, at);
            self.stack.push(o);
        }
    }
    fn close(&mut self, kind: SpanKind, obj: Option<ObjId>, at: u64) {
        if let Some(k) = self
            .stack
            .iter()
            .rposition(|o| o.kind == kind && o.obj == obj)
        {
            self.close_at(k, at);
        }
    }
}

fn blocking(k: SpanKind) -> bool {
    !matches!(k, SpanKind::Hold | SpanKind::Unlocking)
}

/// Counts of what was written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Profiles (threads).
    pub profiles: u64,
    /// Frames.
    pub frames: u64,
    /// Open and close events.
    pub events: u64,
}

/// Writes the trace at `path` as a speedscope file.
pub fn write(
    path: &Path,
    meta: &Meta,
    symbolize: bool,
    out: &mut dyn Write,
) -> Result<Summary, ExportError> {
    write_with(path, meta, symbolize, SPILL_EVENTS, out)
}

/// [`write()`] with the number of buffered events above which they go to
/// temporary files (tests use a small one).
pub fn write_with(
    path: &Path,
    meta: &Meta,
    symbolize: bool,
    spill_events: usize,
    out: &mut dyn Write,
) -> Result<Summary, ExportError> {
    let mut names = Names::new(meta, symbolize);
    let threads = timeline::threads(meta);
    let by_id: HashMap<u32, usize> = threads.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
    let mut st: Vec<ThreadState> = threads.iter().map(|_| ThreadState::default()).collect();
    let mut frame_ids: HashMap<(String, String), u32> = HashMap::default();
    // The frame of each (kind, object, process, site, call path): what
    // the frame's name is made of, so the name is built (and looked up in
    // `frame_ids`) once per combination; a trace has few.
    type FrameKey = (SpanKind, Option<ObjId>, u32, u64, u32);
    let mut frame_of: HashMap<FrameKey, u32> = HashMap::default();
    let mut frames: Vec<serde_json::Value> = Vec::new();
    let mut spill = Spill::new();
    let mut spill_err: Option<std::io::Error> = None;
    let mut items = 0u64;
    // Per thread, the time spent waiting for locks: the profile shown
    // first is the thread that waited longest (the one to look at).
    let mut waited: Vec<u64> = vec![0; threads.len()];
    timeline::scan(path, meta, |item| {
        items += 1;
        if items.is_multiple_of(1024) && spill_err.is_none() {
            let buffered: usize = st.iter().map(|s| s.events.len()).sum();
            if buffered > spill_events {
                if let Err(e) = spill.spill(&mut st) {
                    spill_err = Some(e);
                }
            }
        }
        match item {
            Item::Begin {
                thread,
                kind,
                obj,
                time_ns,
                site,
                stack,
            } => {
                let Some(&ti) = by_id.get(&thread) else {
                    return;
                };
                let process = threads[ti].process;
                let s = &mut st[ti];
                while let Some(k) = s.stack.iter().rposition(|o| blocking(o.kind)) {
                    s.close_at(k, time_ns);
                }
                let id = *frame_of
                    .entry((kind, obj, process, site, stack))
                    .or_insert_with(|| {
                        let site = names.site(process, site, stack);
                        let name = match obj {
                            Some(o) => format!("{} {}", kind.name(), names.object(o)),
                            None => kind.name().to_string(),
                        };
                        let line = parse_frame(&site).into_iter().next();
                        let full = match &line {
                            Some(l) if site != "?" => format!("{name} at {}", l.function),
                            _ => name,
                        };
                        // Two combinations may still name one frame (the
                        // same text and site): one id for both, as before.
                        *frame_ids.entry((full.clone(), site)).or_insert_with(|| {
                            let mut f = json!({ "name": full });
                            if let Some(l) = &line {
                                if let Some(file) = &l.file {
                                    f["file"] = json!(file);
                                    f["line"] = json!(l.line);
                                }
                            }
                            frames.push(f);
                            frames.len() as u32 - 1
                        })
                    });
                s.push(true, id, time_ns);
                s.stack.push(Open {
                    frame: id,
                    kind,
                    obj,
                });
            }
            Item::Span {
                thread,
                kind,
                obj,
                start_ns,
                end_ns,
                ..
            } => {
                if let Some(&ti) = by_id.get(&thread) {
                    if matches!(kind, SpanKind::Wait | SpanKind::FutexWait) {
                        waited[ti] += end_ns - start_ns;
                    }
                    st[ti].close(kind, obj, end_ns);
                }
            }
            Item::Dropped {
                thread,
                obj,
                time_ns,
            } => {
                if let Some(&ti) = by_id.get(&thread) {
                    st[ti].close(SpanKind::Hold, Some(obj), time_ns);
                }
            }
            _ => {}
        }
    })?;
    if let Some(e) = spill_err {
        return Err(e.into());
    }
    let mut sum = Summary {
        frames: frames.len() as u64,
        ..Summary::default()
    };
    let command = meta
        .processes
        .values()
        .min_by_key(|p| p.id)
        .map(|p| p.argv.join(" "))
        .unwrap_or_default();
    // The first of the threads that waited longest (0 when none waited).
    let active = (0..threads.len())
        .max_by_key(|&i| (waited[i], std::cmp::Reverse(i)))
        .unwrap_or(0);
    let mut w = JsonOut::new(out);
    w.raw(b"{\"$schema\":");
    w.value(SCHEMA);
    w.raw(b",\"exporter\":");
    w.value(&format!("lockscope {}", env!("CARGO_PKG_VERSION")));
    // The user's labels (`record --label`) in the profile's name, the
    // one free-form field the format has; host and command are there
    // without them, as before.
    let user: Vec<String> = lockscope_format::labels(&meta.header)
        .into_iter()
        .filter(|(k, _)| k != "host" && k != "command")
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let labels = if user.is_empty() {
        String::new()
    } else {
        format!(" [{}]", user.join(", "))
    };
    w.raw(b",\"name\":");
    w.value(&format!("lockscope: {command}{labels}"));
    w.raw(b",\"activeProfileIndex\":");
    w.u64(active as u64);
    w.raw(b",\"shared\":{\"frames\":");
    w.value(&frames);
    w.raw(b"},\"profiles\":[\n");
    for (i, t) in threads.iter().enumerate() {
        let s = &mut st[i];
        let end = t.end_ns.max(s.last);
        while !s.stack.is_empty() {
            s.close_at(s.stack.len() - 1, end);
        }
        if i > 0 {
            w.raw(b",\n");
        }
        w.raw(b"{\"type\":\"evented\",\"name\":");
        w.value(&format!("{} (tid {})", t.name, t.tid));
        w.raw(b",\"unit\":\"nanoseconds\",\"startValue\":");
        w.u64(t.start_ns.min(s.first.unwrap_or(u64::MAX)));
        w.raw(b",\"endValue\":");
        w.u64(end);
        w.raw(b",\"events\":[");
        let mut k = 0u64;
        let mut event = |w: &mut JsonOut, open: bool, frame: u32, at: u64| -> std::io::Result<()> {
            if k > 0 {
                w.raw(b",");
            }
            k += 1;
            w.raw(if open {
                b"{\"type\":\"O\",\"frame\":"
            } else {
                b"{\"type\":\"C\",\"frame\":"
            });
            w.u64(u64::from(frame));
            w.raw(b",\"at\":");
            w.u64(at);
            w.raw(b"}");
            w.maybe_flush()
        };
        if s.spilled > 0 {
            let mut r =
                std::io::BufReader::with_capacity(1 << 16, std::fs::File::open(spill.file(i))?);
            let mut rec = [0u8; 12];
            for _ in 0..s.spilled {
                r.read_exact(&mut rec)?;
                let v = u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]);
                let mut at = [0u8; 8];
                at.copy_from_slice(&rec[4..]);
                event(
                    &mut w,
                    v >> 31 == 1,
                    v & 0x7fff_ffff,
                    u64::from_le_bytes(at),
                )?;
            }
            let _ = std::fs::remove_file(spill.file(i));
        }
        for &(open, frame, at) in s.events.iter() {
            event(&mut w, open, frame, at)?;
        }
        w.raw(b"]}");
        sum.events += k;
        sum.profiles += 1;
        // Free it as soon as it is written.
        *s = ThreadState::default();
    }
    w.raw(b"\n]}\n");
    w.finish()?;
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_order_close_reopens_the_frames_above() {
        let mut s = ThreadState::default();
        for (f, at) in [(0u32, 1u64), (1, 2)] {
            s.push(true, f, at);
            s.stack.push(Open {
                frame: f,
                kind: SpanKind::Hold,
                obj: Some(ObjId {
                    process: 1,
                    addr: u64::from(f),
                }),
            });
        }
        s.close(
            SpanKind::Hold,
            Some(ObjId {
                process: 1,
                addr: 0,
            }),
            5,
        );
        assert_eq!(
            s.events,
            vec![
                (true, 0, 1),
                (true, 1, 2),
                (false, 1, 5),
                (false, 0, 5),
                (true, 1, 5)
            ]
        );
        assert_eq!(s.stack.len(), 1);
    }
}
