//! Whole-file tests: round trip, truncation at every offset, corruption,
//! newer versions.

use lockscope_format::*;

fn sample() -> (Header, Vec<Record>, Vec<Event>) {
    let header = Header {
        tsc_hz: 2.45e9,
        tsc_at_start: 123_456_789,
        monotonic_ns_at_start: 42,
        unix_ns_at_start: 1_700_000_000_000_000_000,
        command: vec!["./demo".into(), "--threads".into(), "4".into()],
        host: "box".into(),
        recorder_version: "0.1.0".into(),
        cpus: 2,
        cache_line: 64,
        extra: vec![("stacks".into(), "contended".into())],
        sleeping_wake_ns: 31_500,
    };
    let records = vec![
        Record::String(StringEntry {
            id: 1,
            text: "/usr/lib/libc.so.6".into(),
        }),
        Record::Process(Process {
            id: 1,
            pid: 100,
            parent: 0,
            exec_generation: 0,
            start_ns: 0,
            argv: vec!["demo".into()],
            exe: "/tmp/demo".into(),
            swapped_lock: String::new(),
        }),
        // An image run under `lockscope run --lock mcs --wait spin`: its
        // trailing field round-trips too.
        Record::Process(Process {
            id: 2,
            pid: 101,
            parent: 1,
            exec_generation: 0,
            start_ns: 3,
            argv: vec!["demo".into()],
            exe: "/tmp/demo".into(),
            swapped_lock: "mcs, spin".into(),
        }),
        Record::Thread(Thread {
            id: 1,
            process: 1,
            tid: 100,
            parent: 0,
            start_ns: 5,
            name: "main".into(),
        }),
        Record::Map(MapEntry {
            process: 1,
            start: 0x7f00_0000_0000,
            end: 0x7f00_0010_0000,
            offset: 0x1000,
            path: 1,
            build_id: vec![0xde, 0xad],
            perms: "r-xp".into(),
        }),
        Record::Stack(StackTrace {
            id: 1,
            process: 1,
            frames: vec![0x401000, 0x7f00_0000_1234, 0x401500],
        }),
        Record::Lock(LockInfo {
            process: 1,
            addr: 0x404040,
            first_op: Op::MutexLock as u8,
            first_ns: 10,
            first_site: 0x401010,
        }),
        Record::Loss(Loss {
            thread: 1,
            process: 1,
            events: 7,
            reason: LossReason::BufferFull,
        }),
        Record::Overhead(Overhead {
            process: 1,
            acquire_ns: 8.5,
            release_ns: 7.25,
            event_ns: 8.0,
        }),
        Record::ThreadName(ThreadName {
            thread: 1,
            time: 50,
            name: "worker".into(),
        }),
        Record::CodeName(CodeName {
            process: 1,
            addr: 0x5555_7777_0000,
            name: "_Z11spin_kernelxPi".into(),
        }),
        Record::ThreadEnd(ThreadEnd {
            thread: 1,
            end_ns: 1000,
        }),
        Record::ProcessEnd(ProcessEnd {
            process: 1,
            end_ns: 1001,
            status: 137,
        }),
    ];
    let events = (0..500u64)
        .map(|i| Event {
            time: i * 37,
            op: if i % 2 == 0 {
                Op::MutexLock as u8
            } else {
                Op::MutexUnlock as u8
            },
            flags: if i % 10 == 0 { phase::CONTENDED } else { 0 },
            addr: 0x404040 + (i % 3) * 64,
            site: 0x401010 + (i % 2) * 8,
            stack: if i % 10 == 0 { 1 } else { 0 },
            arg: i % 7,
            arg2: 0,
        })
        .collect();
    (header, records, events)
}

fn write_sample() -> Vec<u8> {
    let (h, recs, ev) = sample();
    let mut w = TraceWriter::new(Vec::new(), &h).unwrap();
    for r in &recs {
        w.write(r).unwrap();
    }
    w.write_events(1, &ev).unwrap();
    w.finish(&Footer {
        duration_ns: 1001,
        events: ev.len() as u64,
        lost: 7,
        exit_status: 137,
    })
    .unwrap()
}

#[test]
fn roundtrip_every_record_kind() {
    let bytes = write_sample();
    let t = Trace::read(&bytes[..]).unwrap();
    let (h, recs, ev) = sample();
    assert_eq!(t.header, h);
    assert_eq!(t.records, recs);
    assert_eq!(t.events[&1], ev);
    assert_eq!(t.footer.unwrap().exit_status, 137);
}

#[test]
fn truncation_at_every_offset_is_an_error_or_a_clean_partial_read() {
    let bytes = write_sample();
    for cut in 0..bytes.len() {
        let r = Trace::read(&bytes[..cut]);
        match r {
            Err(e) => {
                let msg = e.to_string();
                assert!(
                    msg.contains("offset") || msg.contains("not a lockscope trace"),
                    "cut {cut}: {msg}"
                );
            }
            // A cut exactly between records reads cleanly but has no footer.
            Ok(t) => assert!(t.footer.is_none(), "cut {cut} read as complete"),
        }
    }
}

#[test]
fn flipped_byte_is_detected_with_its_record_offset() {
    let bytes = write_sample();
    let mut detected = 0;
    for pos in 12..bytes.len() {
        let mut b = bytes.clone();
        b[pos] ^= 0x55;
        if let Err(e) = Trace::read(&b[..]) {
            detected += 1;
            assert!(e.to_string().contains("offset"), "{e}");
        }
    }
    // CRC32 catches every single-byte change in a payload or checksum; a
    // changed kind byte or length is caught by the framing.
    assert_eq!(detected, bytes.len() - 12);
}

#[test]
fn newer_major_version_is_refused_readably() {
    let mut bytes = write_sample();
    // Version 2.0: major (u16 LE) at 8, minor at 10.
    bytes[8] = 2;
    bytes[10] = 0;
    bytes[11] = 0;
    let e = Trace::read(&bytes[..]).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("newer lockscope") && msg.contains("2.0"),
        "{msg}"
    );
}

#[test]
fn not_a_trace_is_refused() {
    let e = Trace::read(&b"\x7fELF\x02\x01\x01\0\0\0\0\0"[..]).unwrap_err();
    assert!(e.to_string().contains("not a lockscope trace"), "{e}");
}

#[test]
fn unknown_record_kinds_are_skipped() {
    let bytes = write_sample();
    // Splice a record of kind 77 right after the header.
    let mut tr = TraceReader::new(&bytes[..]).unwrap();
    let after_header = tr.offset() as usize;
    let payload = b"future";
    let mut spliced = bytes[..after_header].to_vec();
    spliced.push(77);
    spliced.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    spliced.extend_from_slice(payload);
    let mut framed = vec![77u8];
    framed.extend_from_slice(payload);
    spliced.extend_from_slice(&crc32fast_hash(&framed).to_le_bytes());
    spliced.extend_from_slice(&bytes[after_header..]);
    let t = Trace::read(&spliced[..]).unwrap();
    assert!(matches!(t.records[0], Record::Unknown { kind: 77, .. }));
    assert!(t.footer.is_some());
    let _ = tr.next();
}

#[test]
fn a_header_written_before_1_2_reads_as_no_sleeping_wake_up_latency() {
    let bytes = write_sample();
    // The header record: kind at 12, payload length at 13, payload from
    // 17, then its CRC. Drop the 1.2 trailing field (31,500: a 3-byte
    // varint) as a 1.1 writer would not have written it, and mark the
    // file 1.1.
    let len = u32::from_le_bytes(bytes[13..17].try_into().unwrap()) as usize;
    let payload = &bytes[17..17 + len - 3];
    let mut old = bytes[..12].to_vec();
    old[10] = 1;
    old.push(0);
    old.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    old.extend_from_slice(payload);
    let mut framed = vec![0u8];
    framed.extend_from_slice(payload);
    old.extend_from_slice(&crc32fast_hash(&framed).to_le_bytes());
    old.extend_from_slice(&bytes[17 + len + 4..]);
    let t = Trace::read(&old[..]).unwrap();
    assert_eq!(t.header.sleeping_wake_ns, 0);
    assert_eq!(t.header.extra, sample().0.extra);
    assert!(t.footer.is_some());
    // And the current writer's value round-trips.
    let t = Trace::read(&bytes[..]).unwrap();
    assert_eq!(t.header.sleeping_wake_ns, 31_500);
}

// Bitwise CRC-32 (IEEE), to build test input without a dev-dependency.
fn crc32fast_hash(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A trace of the sample's tables and `chunks` event chunks of 100
/// events each on threads 1..=chunks, with the byte range of each chunk.
fn chunked_sample(chunks: u32) -> (Vec<u8>, Vec<std::ops::Range<usize>>) {
    let (h, recs, ev) = sample();
    let mut w = TraceWriter::new(Vec::new(), &h).unwrap();
    for r in &recs {
        w.write(r).unwrap();
    }
    let mut ranges = Vec::new();
    for t in 1..=chunks {
        let at = w.bytes_written() as usize;
        w.write_events(t, &ev[..100]).unwrap();
        ranges.push(at..w.bytes_written() as usize);
    }
    let bytes = w
        .finish(&Footer {
            duration_ns: 1001,
            events: 100 * u64::from(chunks),
            lost: 0,
            exit_status: 0,
        })
        .unwrap();
    (bytes, ranges)
}

/// Reads `bytes` skipping damage: (events per thread, skipped, footer
/// read, the error that ended it).
fn read_skipping(
    bytes: &[u8],
) -> (
    std::collections::BTreeMap<u32, usize>,
    Vec<Skipped>,
    bool,
    Option<FormatError>,
) {
    let mut r = TraceReader::new(std::io::Cursor::new(bytes))
        .unwrap()
        .skipping_corrupt()
        .unwrap();
    let mut per = std::collections::BTreeMap::new();
    let mut end = None;
    loop {
        match r.next() {
            Ok(Some(Record::Events(c))) => {
                *per.entry(c.thread).or_insert(0) += c.count as usize;
            }
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(e) => {
                end = Some(e);
                break;
            }
        }
    }
    (per, r.skipped().to_vec(), r.footer().is_some(), end)
}

// See issue 32: one flipped byte rejected the whole trace, with no way to
// read the rest.
#[test]
fn skip_corrupt_loses_exactly_the_damaged_chunk_wherever_its_byte_flips() {
    let (bytes, ranges) = chunked_sample(5);
    let victim = &ranges[2];
    // Every byte of the third chunk: its kind, its length, its payload,
    // its checksum.
    for pos in victim.clone() {
        let mut b = bytes.clone();
        b[pos] ^= 0x55;
        let (per, skipped, footer, end) = read_skipping(&b);
        assert!(end.is_none(), "byte {pos}: {end:?}");
        assert!(footer, "byte {pos}: the footer after the damage is read");
        let want: std::collections::BTreeMap<u32, usize> =
            [1, 2, 4, 5].into_iter().map(|t| (t, 100)).collect();
        assert_eq!(per, want, "byte {pos}");
        assert_eq!(
            skipped,
            vec![Skipped {
                offset: victim.start as u64,
                bytes: victim.len() as u64
            }],
            "byte {pos}"
        );
    }
    // Not damaged: nothing skipped.
    let (per, skipped, footer, end) = read_skipping(&bytes);
    assert!(end.is_none() && footer && skipped.is_empty());
    assert_eq!(per.values().sum::<usize>(), 500);
}

#[test]
fn skip_corrupt_ends_on_every_flipped_byte_and_loses_at_most_one_record() {
    let (bytes, ranges) = chunked_sample(4);
    // The header must be whole (it says how to read the rest).
    let header_end = TraceReader::new(&bytes[..]).unwrap().offset() as usize;
    let footer_at = ranges.last().unwrap().end;
    for pos in header_end..bytes.len() {
        let mut b = bytes.clone();
        b[pos] ^= 0xa5;
        let (per, skipped, _, end) = read_skipping(&b);
        // A flipped length in the last record (the footer) claims bytes
        // that are not there, with nothing whole after it: that is what
        // a trace cut short looks like, and it is read as one.
        if pos >= footer_at && matches!(end, Some(FormatError::Truncated { .. })) {
            assert!(skipped.is_empty(), "byte {pos}: {skipped:?}");
            assert_eq!(per.values().sum::<usize>(), 400, "byte {pos}");
            continue;
        }
        assert!(end.is_none(), "byte {pos}: {end:?}");
        assert_eq!(skipped.len(), 1, "byte {pos}: {skipped:?}");
        let s = skipped[0];
        assert!(
            s.offset as usize <= pos && pos < (s.offset + s.bytes) as usize,
            "byte {pos} is in the stretch skipped, {s:?}"
        );
        let lost_chunks = ranges.iter().filter(|r| r.contains(&pos)).count();
        assert_eq!(
            per.values().sum::<usize>(),
            400 - 100 * lost_chunks,
            "byte {pos}"
        );
    }
}

#[test]
fn skip_corrupt_still_reports_a_trace_cut_short() {
    let (bytes, ranges) = chunked_sample(3);
    let cut = &bytes[..ranges[1].start + 20];
    let (per, skipped, footer, end) = read_skipping(cut);
    assert!(
        matches!(end, Some(FormatError::Truncated { .. })),
        "{end:?}"
    );
    assert!(skipped.is_empty() && !footer);
    assert_eq!(per.values().sum::<usize>(), 100);
}

#[test]
fn labels_are_host_and_command_by_default_and_the_users_replace_them() {
    let (mut h, _, _) = sample();
    let want = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    assert_eq!(labels(&h), want(&[("command", "demo"), ("host", "box")]));
    h.extra.push(("label:service".into(), "db".into()));
    h.extra.push(("label:host".into(), "web-7".into()));
    // Not a label: an extra pair without the prefix.
    h.extra.push(("service".into(), "other".into()));
    assert_eq!(
        labels(&h),
        want(&[("command", "demo"), ("host", "web-7"), ("service", "db")])
    );
}
