"""Reads `lockscope export --format perfetto-proto` with Perfetto's own
compiled trace protos (PyPI `perfetto`, installed by
scripts/test-viewers.sh) and prints what a trace processor would build
from it, as JSON on stdout: tracks, slices, flows, counters.

Strict: the file must parse as `perfetto.protos.Trace` with no unknown
field anywhere (a wrong field number or wire type shows up as one), every
interned id must be defined before it is used on its sequence, and the
slices' begin and end events must pair up per track. Any violation exits
non-zero with a message naming it.

Usage: python3 perfetto_proto.py FILE
"""

import json
import sys

from google.protobuf import unknown_fields
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb


def fail(msg):
    print(f"perfetto_proto.py: {msg}", file=sys.stderr)
    sys.exit(1)


def no_unknown(msg, where):
    if len(unknown_fields.UnknownFieldSet(msg)):
        fail(f"unknown fields in {msg.DESCRIPTOR.full_name} at {where}")
    for f, v in msg.ListFields():
        if f.message_type is None:
            continue
        rep = f.is_repeated if hasattr(f, "is_repeated") else f.label == f.LABEL_REPEATED
        if rep:
            for i, x in enumerate(v):
                no_unknown(x, f"{where}.{f.name}[{i}]")
        else:
            no_unknown(v, f"{where}.{f.name}")


def main():
    data = open(sys.argv[1], "rb").read()
    trace = pb.Trace()
    trace.ParseFromString(data)
    # The parsed trace re-encodes to as many bytes as the file: no field
    # was given twice (the last would win silently) or dropped.
    if trace.ByteSize() != len(data):
        fail(f"the parsed trace encodes to {trace.ByteSize()} bytes, the file has {len(data)}")
    tracks = {}
    names, cats, arg_names, strings = {}, {}, {}, {}
    cleared = False
    events = []  # (ts, index, track, type, name, args, flows, terminating, counter)
    for i, p in enumerate(trace.packet):
        no_unknown(p, f"packet[{i}]")
        if p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            cleared = True
            names, cats, arg_names, strings = {}, {}, {}, {}
        if p.HasField("interned_data"):
            if not cleared:
                fail(f"packet[{i}] interns before the sequence was cleared")
            d = p.interned_data
            for e in d.event_names:
                names[e.iid] = e.name
            for e in d.event_categories:
                cats[e.iid] = e.name
            for e in d.debug_annotation_names:
                arg_names[e.iid] = e.name
            for e in d.debug_annotation_string_values:
                strings[e.iid] = e.str.decode()
        if p.HasField("track_descriptor"):
            t = p.track_descriptor
            if t.uuid in tracks:
                fail(f"track {t.uuid} described twice")
            rec = {"uuid": t.uuid, "parent": t.parent_uuid, "name": t.name}
            if t.HasField("process"):
                rec["pid"] = t.process.pid
                rec["name"] = t.process.process_name
                rec["kind"] = "process"
            elif t.HasField("thread"):
                rec["pid"] = t.thread.pid
                rec["tid"] = t.thread.tid
                rec["name"] = t.thread.thread_name
                rec["kind"] = "thread"
            elif t.HasField("counter"):
                rec["kind"] = "counter"
            else:
                rec["kind"] = "child"
            if t.parent_uuid and t.parent_uuid not in tracks:
                fail(f"track {t.uuid}'s parent {t.parent_uuid} is not described before it")
            tracks[t.uuid] = rec
        if p.HasField("track_event"):
            e = p.track_event
            if not p.HasField("timestamp"):
                fail(f"packet[{i}]: a track event without a timestamp")
            if not (p.sequence_flags & pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE):
                fail(f"packet[{i}]: interned ids on a packet that does not say it needs them")
            if e.track_uuid not in tracks:
                fail(f"packet[{i}]: event on undescribed track {e.track_uuid}")
            name = None
            if e.HasField("name_iid"):
                if e.name_iid not in names:
                    fail(f"packet[{i}]: name iid {e.name_iid} not interned")
                name = names[e.name_iid]
            for c in e.category_iids:
                if c not in cats:
                    fail(f"packet[{i}]: category iid {c} not interned")
            args = {}
            for a in e.debug_annotations:
                if a.name_iid not in arg_names:
                    fail(f"packet[{i}]: annotation name iid {a.name_iid} not interned")
                k = arg_names[a.name_iid]
                if a.HasField("string_value_iid"):
                    if a.string_value_iid not in strings:
                        fail(f"packet[{i}]: string iid {a.string_value_iid} not interned")
                    args[k] = strings[a.string_value_iid]
                else:
                    args[k] = a.uint_value
            events.append((p.timestamp, i, e.track_uuid, e.type, name, args,
                           list(e.flow_ids), list(e.terminating_flow_ids),
                           e.counter_value))
    # As the trace processor does: events sorted by time (stable), then
    # begin/end paired per track.
    events.sort(key=lambda x: (x[0], x[1]))
    stacks = {}
    slices = []
    flows_out, flows_in = {}, {}
    counters = 0
    for ts, i, track, typ, name, args, fl, term, cv in events:
        if typ == pb.TrackEvent.TYPE_SLICE_BEGIN:
            if name is None:
                fail(f"packet[{i}]: a slice without a name")
            stacks.setdefault(track, []).append((ts, name, args, i))
            for f in term:
                flows_in[f] = (track, name, ts)
        elif typ == pb.TrackEvent.TYPE_SLICE_END:
            st = stacks.get(track)
            if not st:
                fail(f"packet[{i}]: slice end with no open slice on track {track}")
            b, n, a, _ = st.pop()
            slices.append({"track": track, "name": n, "ts": b, "dur": ts - b, "args": a})
        elif typ == pb.TrackEvent.TYPE_INSTANT:
            for f in fl:
                if f in flows_out:
                    fail(f"flow {f} started twice")
                flows_out[f] = (track, name, ts)
        elif typ == pb.TrackEvent.TYPE_COUNTER:
            if tracks[track]["kind"] != "counter":
                fail(f"packet[{i}]: counter value on a non-counter track")
            counters += 1
        else:
            fail(f"packet[{i}]: event type {typ}")
    for track, st in stacks.items():
        if st:
            fail(f"{len(st)} slices left open on track {track}")
    if set(flows_out) != set(flows_in):
        fail("flows started and terminated differ")
    print(json.dumps({
        "tracks": list(tracks.values()),
        "slices": slices,
        "flows": len(flows_out),
        "counters": counters,
    }))


main()
