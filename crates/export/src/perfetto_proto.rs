//! Perfetto's native protobuf trace (`perfetto.protos.Trace`: a stream of
//! `TracePacket`s with `TrackDescriptor`s and `TrackEvent`s), the same
//! content as [`crate::perfetto`]'s JSON in a form several times smaller
//! and faster to write and to load, for long recordings.
//!
//! Layout: a process track per traced process, a thread track per thread
//! (extra tracks `NAME [k]`, children of the thread's, for holds released
//! out of order, as in the JSON), slices as `TYPE_SLICE_BEGIN` /
//! `TYPE_SLICE_END` pairs, a counter track `waiters LOCK` per lock under
//! its process, and a flow per hand-off: from an instant `release LOCK`
//! at the end of the releasing hold (an instant because the hold's packets
//! are already written when the hand-off is known) to the wait it ended.
//!
//! Written while the trace streams by, like the JSON: a slice's two
//! packets are written when it ends (Perfetto's trace processor sorts
//! packets by time when it loads them), names, sites and call paths are
//! interned on one packet sequence (each written once), and memory holds
//! the interning tables (one entry per distinct name or site), one entry
//! per lock and a short stack per track, not the events.
//!
//! The encoder is written by hand (a dozen fields of six messages; field
//! numbers from Perfetto's `perfetto_trace.proto`, checked by the test
//! that parses the output with Perfetto's own compiled protos): a
//! generated encoder (prost) would bring a build script and protoc for
//! what is one function per message here, and could not stream.

// Fx: the keys are small ids, hashed once or more per event (as in the
// analysis crate); SipHash was a visible share of the writers' time.
use rustc_hash::FxHashMap as HashMap;
use std::io::Write;
use std::path::Path;

use lockscope_trace::input::Meta;
use lockscope_trace::sync::ObjId;

use crate::names::Names;
use crate::perfetto::{Lanes, SliceLook, Summary};
use crate::timeline::{self, Item, SpanKind};
use crate::ExportError;

/// Field numbers of Perfetto's trace protos (`perfetto_trace.proto`).
mod field {
    pub const TRACE_PACKET: u32 = 1;
    // TracePacket
    pub const TIMESTAMP: u32 = 8;
    pub const SEQUENCE_ID: u32 = 10;
    pub const TRACK_EVENT: u32 = 11;
    pub const INTERNED_DATA: u32 = 12;
    pub const SEQUENCE_FLAGS: u32 = 13;
    pub const TRACK_DESCRIPTOR: u32 = 60;
    // TrackDescriptor
    pub const TD_UUID: u32 = 1;
    pub const TD_NAME: u32 = 2;
    pub const TD_PROCESS: u32 = 3;
    pub const TD_THREAD: u32 = 4;
    pub const TD_PARENT_UUID: u32 = 5;
    pub const TD_COUNTER: u32 = 8;
    pub const TD_SIBLING_ORDER_RANK: u32 = 12;
    // ProcessDescriptor
    pub const PD_PID: u32 = 1;
    pub const PD_NAME: u32 = 6;
    // ThreadDescriptor
    pub const THD_PID: u32 = 1;
    pub const THD_TID: u32 = 2;
    pub const THD_NAME: u32 = 5;
    // TrackEvent
    pub const TE_CATEGORY_IIDS: u32 = 3;
    pub const TE_DEBUG_ANNOTATIONS: u32 = 4;
    pub const TE_TYPE: u32 = 9;
    pub const TE_NAME_IID: u32 = 10;
    pub const TE_TRACK_UUID: u32 = 11;
    pub const TE_COUNTER_VALUE: u32 = 30;
    pub const TE_FLOW_IDS: u32 = 47;
    pub const TE_TERMINATING_FLOW_IDS: u32 = 48;
    // DebugAnnotation
    pub const DA_NAME_IID: u32 = 1;
    pub const DA_UINT_VALUE: u32 = 3;
    pub const DA_STRING_VALUE_IID: u32 = 17;
    // InternedData
    pub const ID_EVENT_CATEGORIES: u32 = 1;
    pub const ID_EVENT_NAMES: u32 = 2;
    pub const ID_DEBUG_ANNOTATION_NAMES: u32 = 3;
    pub const ID_DEBUG_ANNOTATION_STRINGS: u32 = 29;
    // EventName, EventCategory, DebugAnnotationName, InternedString
    pub const IID: u32 = 1;
    pub const STR: u32 = 2;
}

/// TrackEvent.Type values.
const SLICE_BEGIN: u64 = 1;
const SLICE_END: u64 = 2;
const INSTANT: u64 = 3;
const COUNTER: u64 = 4;
/// TracePacket.SequenceFlags.
const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u64 = 2;
/// The one packet sequence of the file.
const SEQUENCE: u64 = 1;

fn varint(b: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        b.push((v as u8) | 0x80);
        v >>= 7;
    }
    b.push(v as u8);
}

fn key(b: &mut Vec<u8>, field: u32, wire: u8) {
    varint(b, (u64::from(field) << 3) | u64::from(wire));
}

/// A varint field, written even when zero (proto2 fields have presence).
fn uint(b: &mut Vec<u8>, field: u32, v: u64) {
    key(b, field, 0);
    varint(b, v);
}

fn bytes(b: &mut Vec<u8>, field: u32, v: &[u8]) {
    key(b, field, 2);
    varint(b, v.len() as u64);
    b.extend_from_slice(v);
}

fn fixed64(b: &mut Vec<u8>, field: u32, v: u64) {
    key(b, field, 1);
    b.extend_from_slice(&v.to_le_bytes());
}

/// Interning tables of the sequence: a string's iid, and the entries
/// added since the last packet (written in that packet's InternedData).
#[derive(Default)]
struct Interned {
    names: HashMap<String, u64>,
    cats: HashMap<&'static str, u64>,
    arg_names: HashMap<&'static str, u64>,
    strings: HashMap<String, u64>,
    /// Pending InternedData body.
    new: Vec<u8>,
}

impl Interned {
    fn entry(new: &mut Vec<u8>, field: u32, iid: u64, s: &str) {
        let mut e = Vec::with_capacity(s.len() + 8);
        uint(&mut e, field::IID, iid);
        bytes(&mut e, field::STR, s.as_bytes());
        bytes(new, field, &e);
    }
    fn name(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.names.get(s) {
            return i;
        }
        let i = self.names.len() as u64 + 1;
        self.names.insert(s.to_string(), i);
        Self::entry(&mut self.new, field::ID_EVENT_NAMES, i, s);
        i
    }
    fn cat(&mut self, s: &'static str) -> u64 {
        if let Some(&i) = self.cats.get(s) {
            return i;
        }
        let i = self.cats.len() as u64 + 1;
        self.cats.insert(s, i);
        Self::entry(&mut self.new, field::ID_EVENT_CATEGORIES, i, s);
        i
    }
    fn arg_name(&mut self, s: &'static str) -> u64 {
        if let Some(&i) = self.arg_names.get(s) {
            return i;
        }
        let i = self.arg_names.len() as u64 + 1;
        self.arg_names.insert(s, i);
        Self::entry(&mut self.new, field::ID_DEBUG_ANNOTATION_NAMES, i, s);
        i
    }
    fn string(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.strings.len() as u64 + 1;
        self.strings.insert(s.to_string(), i);
        Self::entry(&mut self.new, field::ID_DEBUG_ANNOTATION_STRINGS, i, s);
        i
    }
}

/// An annotation value: interned string or number.
#[derive(Clone, Copy)]
enum Arg {
    Str(u64),
    Uint(u64),
}

/// What a slice's begin packet carries, interned.
struct Look {
    name: u64,
    cat: u64,
    args: Vec<(u64, Arg)>,
}

/// Bytes of packets buffered before they are handed to the output.
const FLUSH_AT: usize = 256 << 10;

/// The packet writer: reused buffers, one packet at a time.
struct Out<'a> {
    out: &'a mut dyn Write,
    /// Whole packets not yet handed to `out`: two `write_all` calls per
    /// packet through `&mut dyn Write` were a visible share of the
    /// writer's time (two packets per slice).
    buf: Vec<u8>,
    pkt: Vec<u8>,
    ev: Vec<u8>,
    tmp: Vec<u8>,
    interned: Interned,
}

impl Out<'_> {
    /// Writes `pkt` (with any pending interned data) as one packet.
    fn flush_packet(&mut self) -> std::io::Result<()> {
        if !self.interned.new.is_empty() {
            bytes(&mut self.pkt, field::INTERNED_DATA, &self.interned.new);
            self.interned.new.clear();
        }
        // The packet's key and length, then the packet (no allocation).
        let mut head = [0u8; 11];
        head[0] = (field::TRACE_PACKET << 3) as u8 | 2;
        let mut n = 1;
        let mut len = self.pkt.len() as u64;
        while len >= 0x80 {
            head[n] = (len as u8) | 0x80;
            len >>= 7;
            n += 1;
        }
        head[n] = len as u8;
        n += 1;
        self.buf.extend_from_slice(&head[..n]);
        self.buf.extend_from_slice(&self.pkt);
        self.pkt.clear();
        if self.buf.len() >= FLUSH_AT {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Hands what is buffered to the output and flushes it.
    fn finish(&mut self) -> std::io::Result<()> {
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        self.out.flush()
    }

    /// A TrackDescriptor packet. `kind`: the process or thread
    /// descriptor body and its field, or a counter track.
    fn track(
        &mut self,
        uuid: u64,
        parent: u64,
        name: &str,
        desc: Option<(u32, &[u8])>,
        rank: Option<u64>,
    ) -> std::io::Result<()> {
        let mut td = Vec::with_capacity(name.len() + 32);
        uint(&mut td, field::TD_UUID, uuid);
        if parent != 0 {
            uint(&mut td, field::TD_PARENT_UUID, parent);
        }
        if !name.is_empty() {
            bytes(&mut td, field::TD_NAME, name.as_bytes());
        }
        if let Some((f, body)) = desc {
            bytes(&mut td, f, body);
        }
        if let Some(r) = rank {
            uint(&mut td, field::TD_SIBLING_ORDER_RANK, r);
        }
        uint(&mut self.pkt, field::SEQUENCE_ID, SEQUENCE);
        bytes(&mut self.pkt, field::TRACK_DESCRIPTOR, &td);
        self.flush_packet()
    }

    /// A TrackEvent packet at `ts` on `track`.
    #[allow(clippy::too_many_arguments)]
    fn event(
        &mut self,
        ts: u64,
        kind: u64,
        track: u64,
        look: Option<&Look>,
        counter: Option<u64>,
        flow: Option<u64>,
        terminating_flow: Option<u64>,
    ) -> std::io::Result<()> {
        self.ev.clear();
        uint(&mut self.ev, field::TE_TYPE, kind);
        uint(&mut self.ev, field::TE_TRACK_UUID, track);
        if let Some(l) = look {
            uint(&mut self.ev, field::TE_CATEGORY_IIDS, l.cat);
            uint(&mut self.ev, field::TE_NAME_IID, l.name);
            for &(n, v) in &l.args {
                self.tmp.clear();
                uint(&mut self.tmp, field::DA_NAME_IID, n);
                match v {
                    Arg::Str(i) => uint(&mut self.tmp, field::DA_STRING_VALUE_IID, i),
                    Arg::Uint(x) => uint(&mut self.tmp, field::DA_UINT_VALUE, x),
                }
                bytes(&mut self.ev, field::TE_DEBUG_ANNOTATIONS, &self.tmp);
            }
        }
        if let Some(c) = counter {
            uint(&mut self.ev, field::TE_COUNTER_VALUE, c);
        }
        if let Some(f) = flow {
            fixed64(&mut self.ev, field::TE_FLOW_IDS, f);
        }
        if let Some(f) = terminating_flow {
            fixed64(&mut self.ev, field::TE_TERMINATING_FLOW_IDS, f);
        }
        uint(&mut self.pkt, field::TIMESTAMP, ts);
        uint(&mut self.pkt, field::SEQUENCE_ID, SEQUENCE);
        uint(
            &mut self.pkt,
            field::SEQUENCE_FLAGS,
            SEQ_NEEDS_INCREMENTAL_STATE,
        );
        bytes(&mut self.pkt, field::TRACK_EVENT, &self.ev);
        self.flush_packet()
    }

    /// A slice `[start, end]` as its begin and end packets.
    fn slice(
        &mut self,
        track: u64,
        start: u64,
        end: u64,
        look: &Look,
        terminating_flow: Option<u64>,
    ) -> std::io::Result<()> {
        self.event(
            start,
            SLICE_BEGIN,
            track,
            Some(look),
            None,
            None,
            terminating_flow,
        )?;
        self.event(end, SLICE_END, track, None, None, None, None)
    }
}

/// A wait slice held back until the next item, which may be its hand-off.
struct PendingWait {
    thread: u32,
    track: u64,
    start: u64,
    end: u64,
    /// Index into the looks.
    look: usize,
}

/// Writes the trace at `path` as Perfetto protobuf.
pub fn write(
    path: &Path,
    meta: &Meta,
    symbolize: bool,
    out: &mut dyn Write,
) -> Result<Summary, ExportError> {
    let mut names = Names::new(meta, symbolize);
    let threads = timeline::threads(meta);
    let by_id: HashMap<u32, usize> = threads.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
    let mut o = Out {
        out,
        buf: Vec::with_capacity(FLUSH_AT + 4096),
        pkt: Vec::with_capacity(256),
        ev: Vec::with_capacity(128),
        tmp: Vec::with_capacity(32),
        interned: Interned::default(),
    };
    // Track uuids: any distinct non-zero numbers; handed out in order.
    let mut next_uuid = 0u64;
    let mut uuid = || {
        next_uuid += 1;
        next_uuid
    };
    // The first packet clears the sequence's incremental state (interned
    // data), as every sequence must before it interns.
    uint(&mut o.pkt, field::SEQUENCE_ID, SEQUENCE);
    uint(
        &mut o.pkt,
        field::SEQUENCE_FLAGS,
        SEQ_INCREMENTAL_STATE_CLEARED,
    );
    o.flush_packet()?;

    let mut procs: Vec<(u32, u32)> = meta.processes.values().map(|p| (p.id, p.pid)).collect();
    procs.sort_unstable();
    let mut proc_track: HashMap<u32, u64> = HashMap::default();
    for &(id, pid) in &procs {
        let p = &meta.processes[&id];
        let name = p.argv.first().cloned().unwrap_or_else(|| p.exe.clone());
        let mut pd = Vec::new();
        uint(&mut pd, field::PD_PID, u64::from(pid));
        bytes(&mut pd, field::PD_NAME, name.as_bytes());
        let u = uuid();
        o.track(u, 0, "", Some((field::TD_PROCESS, &pd)), None)?;
        proc_track.insert(id, u);
    }
    // Per thread: its lanes (0 is the thread's own track) and their uuids.
    let mut lanes: Vec<(Lanes, Vec<u64>)> = Vec::with_capacity(threads.len());
    for (i, t) in threads.iter().enumerate() {
        let mut td = Vec::new();
        uint(&mut td, field::THD_PID, u64::from(t.pid));
        uint(&mut td, field::THD_TID, u64::from(t.tid));
        bytes(&mut td, field::THD_NAME, t.name.as_bytes());
        let u = uuid();
        let parent = proc_track.get(&t.process).copied().unwrap_or(0);
        o.track(u, parent, "", Some((field::TD_THREAD, &td)), Some(i as u64))?;
        lanes.push((Lanes::new(), vec![u]));
    }

    let mut sum = Summary::default();
    // Last hold per lock (track, start, end) and last wait per thread
    // (start, end): the ends of a hand-off's arrow, as in the JSON.
    let mut last_hold: HashMap<ObjId, (u64, u64, u64)> = HashMap::default();
    let mut counters: HashMap<ObjId, u64> = HashMap::default();
    let mut flow_names: HashMap<ObjId, u64> = HashMap::default();
    let mut gpu_tracks: HashMap<(u32, u32, u32), u64> = HashMap::default();
    type LookKey = (SpanKind, Option<ObjId>, u32, u64, u32);
    // Each distinct look once; a slice refers to it by index.
    let mut look_ids: HashMap<LookKey, usize> = HashMap::default();
    let mut looks: Vec<Look> = Vec::new();
    let mut pending: Option<PendingWait> = None;
    let mut flow_id = 0u64;
    let mut err: Option<std::io::Error> = None;

    timeline::scan(path, meta, |item| {
        if err.is_some() {
            return;
        }
        let r = (|| -> std::io::Result<()> {
            // A hand-off binds to the wait right before it; anything else
            // releases that wait as it is.
            if let Some(w) = pending.take() {
                let mut term = None;
                if let Item::HandOff {
                    lock,
                    from_ns,
                    to,
                    to_ns,
                    ..
                } = item
                {
                    if let Some(&(htrack, hs, he)) = last_hold.get(&lock) {
                        if to == w.thread && w.end == to_ns && he == from_ns {
                            flow_id += 1;
                            // The name's iid, interned at the lock's
                            // first hand-off (the same packet as before):
                            // formatted and hashed once per lock, not
                            // per hand-off.
                            let name = match flow_names.get(&lock) {
                                Some(&i) => i,
                                None => {
                                    let n = format!("release {}", names.object(lock));
                                    let i = o.interned.name(&n);
                                    flow_names.insert(lock, i);
                                    i
                                }
                            };
                            let look = Look {
                                name,
                                cat: o.interned.cat("handoff"),
                                args: Vec::new(),
                            };
                            // Inside the releasing hold, as in the JSON.
                            let ts = he.saturating_sub(1).max(hs);
                            o.event(ts, INSTANT, htrack, Some(&look), None, Some(flow_id), None)?;
                            term = Some(flow_id);
                            sum.flows += 1;
                        }
                    }
                }
                o.slice(w.track, w.start, w.end, &looks[w.look], term)?;
                sum.slices += 1;
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
                        return Ok(());
                    };
                    let t = &threads[ti];
                    let (tl, uuids) = &mut lanes[ti];
                    let (lane, opened) = tl.place(start_ns, end_ns);
                    if opened {
                        let u = uuid();
                        uuids.push(u);
                        sum.extra_tracks += 1;
                        o.track(
                            u,
                            uuids[0],
                            &format!("{} [{}]", t.name, lane + 1),
                            None,
                            None,
                        )?;
                    }
                    let track = uuids[lane];
                    let key = (kind, obj, t.process, site, stack);
                    let look = match look_ids.entry(key) {
                        std::collections::hash_map::Entry::Occupied(e) => *e.get(),
                        std::collections::hash_map::Entry::Vacant(slot) => {
                            let l = SliceLook::new(&mut names, kind, obj, t.process, site, stack);
                            let mut args = Vec::new();
                            if let Some(n) = &l.object {
                                args.push((
                                    o.interned.arg_name("object"),
                                    Arg::Str(o.interned.string(n)),
                                ));
                            }
                            args.push((
                                o.interned.arg_name("site"),
                                Arg::Str(o.interned.string(&l.site)),
                            ));
                            if !l.path.is_empty() {
                                let p = l.path.join("; ");
                                args.push((
                                    o.interned.arg_name("path"),
                                    Arg::Str(o.interned.string(&p)),
                                ));
                            }
                            let look = Look {
                                name: o.interned.name(&l.name),
                                cat: o.interned.cat(kind.name()),
                                args,
                            };
                            looks.push(look);
                            *slot.insert(looks.len() - 1)
                        }
                    };
                    match kind {
                        SpanKind::Wait | SpanKind::FutexWait => {
                            pending = Some(PendingWait {
                                thread,
                                track,
                                start: start_ns,
                                end: end_ns,
                                look,
                            });
                            return Ok(());
                        }
                        SpanKind::Hold => {
                            if let Some(x) = obj {
                                last_hold.insert(x, (track, start_ns, end_ns));
                            }
                        }
                        _ => {}
                    }
                    o.slice(track, start_ns, end_ns, &looks[look], None)?;
                    sum.slices += 1;
                }
                Item::HandOff { .. } | Item::Begin { .. } | Item::Dropped { .. } => {}
                Item::Waiters {
                    lock,
                    time_ns,
                    count,
                } => {
                    let track = match counters.get(&lock) {
                        Some(&u) => u,
                        None => {
                            let u = uuid();
                            let parent = proc_track.get(&lock.process).copied().unwrap_or(0);
                            let name = format!("waiters {}", names.object(lock));
                            // An empty CounterDescriptor makes it a counter track.
                            o.track(u, parent, &name, Some((field::TD_COUNTER, &[])), None)?;
                            counters.insert(lock, u);
                            u
                        }
                    };
                    o.event(
                        time_ns,
                        COUNTER,
                        track,
                        None,
                        Some(u64::from(count)),
                        None,
                        None,
                    )?;
                    sum.counters += 1;
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
                    let track = match gpu_tracks.get(&(process, device, stream)) {
                        Some(&u) => u,
                        None => {
                            let u = uuid();
                            let parent = proc_track.get(&process).copied().unwrap_or(0);
                            let rank = 1_000_000 + gpu_tracks.len() as u64;
                            o.track(
                                u,
                                parent,
                                &format!("GPU {device} stream {stream}"),
                                None,
                                Some(rank),
                            )?;
                            gpu_tracks.insert((process, device, stream), u);
                            u
                        }
                    };
                    let name = if func != 0 {
                        names.site(process, func + 1, 0)
                    } else {
                        kind.name().to_string()
                    };
                    let mut args = vec![(
                        o.interned.arg_name("correlation"),
                        Arg::Uint(u64::from(correlation)),
                    )];
                    if launched_by != 0 {
                        args.push((
                            o.interned.arg_name("launched_by_thread"),
                            Arg::Uint(u64::from(launched_by)),
                        ));
                        let s = names.site(process, site, 0);
                        args.push((
                            o.interned.arg_name("launch_site"),
                            Arg::Str(o.interned.string(&s)),
                        ));
                    }
                    let look = Look {
                        name: o.interned.name(&name),
                        cat: o.interned.cat("gpu"),
                        args,
                    };
                    o.slice(track, start_ns, end_ns, &look, None)?;
                    sum.slices += 1;
                    sum.gpu_slices += 1;
                }
            }
            Ok(())
        })();
        if let Err(e) = r {
            err = Some(e);
        }
    })?;
    if let Some(e) = err {
        return Err(e.into());
    }
    if let Some(w) = pending.take() {
        o.slice(w.track, w.start, w.end, &looks[w.look], None)?;
        sum.slices += 1;
    }
    o.finish()?;
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_encoding() {
        let mut b = Vec::new();
        uint(&mut b, field::TIMESTAMP, 300);
        assert_eq!(b, [8 << 3, 0xAC, 0x02]);
        b.clear();
        fixed64(&mut b, field::TE_FLOW_IDS, 1);
        assert_eq!(b, [0xF9, 0x02, 1, 0, 0, 0, 0, 0, 0, 0]);
        b.clear();
        bytes(&mut b, field::TRACK_DESCRIPTOR, b"ab");
        assert_eq!(b, [0xE2, 0x03, 2, b'a', b'b']);
    }

    #[test]
    fn interning_writes_each_string_once() {
        let mut i = Interned::default();
        assert_eq!(i.name("hold x"), 1);
        assert_eq!(i.name("wait x"), 2);
        assert_eq!(i.name("hold x"), 1);
        let once = i.new.len();
        i.name("wait x");
        assert_eq!(i.new.len(), once);
    }
}
