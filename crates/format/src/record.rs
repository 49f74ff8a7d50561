//! Record types and their payload encodings.
//!
//! Payload fields are varints or length-prefixed strings, in the order
//! listed on each struct. A reader ignores trailing bytes after the fields
//! it knows: that is how a minor version adds a field.

use crate::wire::{put_bytes, put_str, put_varint, unzigzag, zigzag, Cursor};
use crate::FormatError;

/// Record kind bytes. Part of the file format: append only.
pub(crate) mod kind {
    pub const HEADER: u8 = 0;
    pub const STRING: u8 = 1;
    pub const PROCESS: u8 = 2;
    pub const THREAD: u8 = 3;
    pub const THREAD_NAME: u8 = 4;
    pub const THREAD_END: u8 = 5;
    pub const MAP: u8 = 6;
    pub const STACK: u8 = 7;
    pub const LOCK: u8 = 8;
    pub const EVENTS: u8 = 9;
    pub const LOSS: u8 = 10;
    pub const OVERHEAD: u8 = 11;
    pub const PROCESS_END: u8 = 12;
    pub const CODE_NAME: u8 = 13;
    pub const FOOTER: u8 = 255;
}

/// First record of every trace: how to read the rest.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Header {
    /// TSC ticks per second, measured at start against CLOCK_MONOTONIC.
    pub tsc_hz: f64,
    /// TSC value at time 0 of the trace.
    pub tsc_at_start: u64,
    /// CLOCK_MONOTONIC (ns) at time 0 of the trace.
    pub monotonic_ns_at_start: u64,
    /// Wall clock (ns since the Unix epoch) at time 0 of the trace.
    pub unix_ns_at_start: u64,
    /// The recorded command line.
    pub command: Vec<String>,
    /// Host name of the recording machine.
    pub host: String,
    /// lockscope version that wrote the trace.
    pub recorder_version: String,
    /// Online CPUs on the recording machine.
    pub cpus: u32,
    /// Cache line size in bytes on the recording machine.
    pub cache_line: u32,
    /// Free-form key/value facts (stack mode, kernel, capture mode...).
    pub extra: Vec<(String, String)>,
    /// Wake-up latency of a sleeping waiter on the recording machine, ns:
    /// the median time from a `FUTEX_WAKE` to the woken thread running,
    /// measured by the recorder before the program starts (since format
    /// 1.2). 0: not measured (an older trace, or the measurement failed).
    /// What a waiter that blocks in the kernel at every hand-off (a glibc
    /// rwlock's) pays in a what-if, where the recording only shows the
    /// hand-offs of the lock it had.
    pub sleeping_wake_ns: u64,
}

impl Header {
    /// Looks up an `extra` value.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.extra
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// An interned string (paths of mapped files).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StringEntry {
    /// Id referred to by other records (never 0).
    pub id: u32,
    /// The text.
    pub text: String,
}

/// A process image: one per exec, so a fork+exec child has two.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Process {
    /// Trace-unique id (never 0).
    pub id: u32,
    /// OS process id.
    pub pid: u32,
    /// Trace id of the parent process (fork parent, or the image this one
    /// replaced by exec), 0 for the root.
    pub parent: u32,
    /// 0 for the first image of a pid, 1 after the first exec, ...
    pub exec_generation: u32,
    /// Start time, ns since trace start.
    pub start_ns: u64,
    /// Command line.
    pub argv: Vec<String>,
    /// Executable path.
    pub exe: String,
    /// The lock algorithm that replaced the image's pthread mutexes
    /// (`lockscope run --lock ALG`: `ttas`, `mcs, spin`), empty when they
    /// are glibc's. A trailing field (format 1.1), written only when not
    /// empty: other traces are byte for byte what 1.0 wrote.
    pub swapped_lock: String,
}

/// End of a process image.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessEnd {
    /// Process id in the trace.
    pub process: u32,
    /// End time, ns since trace start.
    pub end_ns: u64,
    /// Exit status as a shell reports it (128+N when killed by signal N),
    /// or -1 when unknown (the image was replaced by exec, or not observed).
    pub status: i32,
}

/// A thread.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Thread {
    /// Trace-unique id (never 0).
    pub id: u32,
    /// Trace id of its process.
    pub process: u32,
    /// OS thread id.
    pub tid: u32,
    /// Trace id of the thread that created it, 0 if unknown or main.
    pub parent: u32,
    /// Start time, ns since trace start.
    pub start_ns: u64,
    /// Name at start (may change later, see [`ThreadName`]).
    pub name: String,
}

/// A thread was (re)named.
///
/// A thread's names may appear out of time order in the file (a name set
/// by another thread is written by whichever recorder worker converts
/// that thread's events): its name at a moment is the one with the
/// latest `time` up to that moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadName {
    /// Trace id of the thread.
    pub thread: u32,
    /// When, ns since trace start.
    pub time: u64,
    /// The new name.
    pub name: String,
}

/// A name for one code address that the program's files cannot give:
/// a GPU kernel launched through a runtime handle (CUDA 13's launch
/// stubs pass a heap handle, not the kernel's host function), named by
/// the CUDA runtime itself. Symbolizers use it for exactly `addr`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CodeName {
    /// Trace id of the process.
    pub process: u32,
    /// The address named.
    pub addr: u64,
    /// The name as the runtime gave it (a C++ kernel's is mangled).
    pub name: String,
}

/// A thread ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadEnd {
    /// Trace id of the thread.
    pub thread: u32,
    /// End time, ns since trace start.
    pub end_ns: u64,
}

/// One line of a process's memory map, for symbolization after the
/// program is gone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MapEntry {
    /// Trace id of the process.
    pub process: u32,
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// File offset mapped at `start`.
    pub offset: u64,
    /// Path of the mapped file ([`StringEntry`] id), 0 for anonymous.
    pub path: u32,
    /// GNU build-id of the file, empty if none.
    pub build_id: Vec<u8>,
    /// Permission string as in /proc/PID/maps ("r-xp").
    pub perms: String,
}

/// An interned call path, innermost frame first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackTrace {
    /// Id referred to by [`crate::Event::stack`] (never 0).
    pub id: u32,
    /// Trace id of the process whose addresses these are.
    pub process: u32,
    /// Return addresses, innermost first.
    pub frames: Vec<u64>,
}

/// First sighting of a synchronization object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockInfo {
    /// Trace id of the process.
    pub process: u32,
    /// Address of the object.
    pub addr: u64,
    /// Op of the first event that named it (tells mutex from rwlock, ...).
    pub first_op: u8,
    /// Time of that event.
    pub first_ns: u64,
    /// Call site of that event.
    pub first_site: u64,
}

/// A chunk of one thread's events, still encoded. Decoding is separate so
/// that a reader can skip or parallelize it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventChunk {
    /// Trace id of the thread.
    pub thread: u32,
    /// Number of events.
    pub count: u32,
    /// Encoded events (see [`crate::codec`]).
    pub data: Vec<u8>,
    /// File offset of `data[0]` (for error messages).
    pub offset: u64,
}

impl EventChunk {
    /// Decodes the events, calling `f` for each.
    pub fn for_each(&self, f: impl FnMut(crate::Event)) -> Result<(), FormatError> {
        crate::codec::decode_chunk(&self.data, self.offset, self.count, f)
    }
    /// Decodes the events into a vector.
    pub fn decode(&self) -> Result<Vec<crate::Event>, FormatError> {
        let mut v = Vec::with_capacity(self.count.min(1 << 20) as usize);
        self.for_each(|e| v.push(e))?;
        Ok(v)
    }
}

/// Why events were lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// The thread's buffer was full when the event was produced.
    BufferFull,
    /// More threads than the recorder has buffers for.
    ThreadLimit,
    /// The trace reached its size limit.
    TraceLimit,
    /// The recorder disabled itself after an internal error.
    RecorderDisabled,
    /// Slots of a thread buffer were found corrupt (overwritten by the
    /// program) and skipped; counts slots, an upper bound on events.
    CorruptBuffer,
    /// A hooked call made while its thread was already inside the
    /// recorder (a signal handler interrupting the recording code).
    Nested,
    /// The recorder died after taking the events out of the thread's
    /// buffer and before writing them, and the program overwrote them
    /// since (a recovered trace, `lockscope recover`); counts slots, an
    /// upper bound on events.
    RecorderDied,
    /// A reason this build does not know.
    Other(u8),
}

impl LossReason {
    /// The reason's number in the trace file (what [`LossReason`]s are
    /// told apart by, `Other` included).
    pub fn code(self) -> u8 {
        match self {
            LossReason::BufferFull => 1,
            LossReason::ThreadLimit => 2,
            LossReason::TraceLimit => 3,
            LossReason::RecorderDisabled => 4,
            LossReason::CorruptBuffer => 5,
            LossReason::Nested => 6,
            LossReason::RecorderDied => 7,
            LossReason::Other(v) => v,
        }
    }
    fn from_u8(v: u8) -> Self {
        match v {
            1 => LossReason::BufferFull,
            2 => LossReason::ThreadLimit,
            3 => LossReason::TraceLimit,
            4 => LossReason::RecorderDisabled,
            5 => LossReason::CorruptBuffer,
            6 => LossReason::Nested,
            7 => LossReason::RecorderDied,
            v => LossReason::Other(v),
        }
    }
    /// Human-readable description.
    pub fn describe(self) -> &'static str {
        match self {
            LossReason::BufferFull => "thread buffer full",
            LossReason::ThreadLimit => "too many threads",
            LossReason::TraceLimit => "trace size limit reached",
            LossReason::RecorderDisabled => "recorder disabled after an internal error",
            LossReason::CorruptBuffer => "corrupt thread buffer (overwritten by the program)",
            LossReason::Nested => "called from a signal handler inside the recorder",
            LossReason::RecorderDied => {
                "taken by a recorder that died before writing them (recovered trace)"
            }
            LossReason::Other(_) => "unknown reason",
        }
    }
}

/// Events that were not recorded, counted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loss {
    /// Trace id of the thread (0: the process as a whole or unknown).
    pub thread: u32,
    /// Trace id of the process.
    pub process: u32,
    /// Number of events lost.
    pub events: u64,
    /// Why.
    pub reason: LossReason,
}

/// The recorder's own cost, measured at start-up (PinCS §2.2), so that
/// analysis can subtract it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overhead {
    /// Trace id of the process where it was measured.
    pub process: u32,
    /// Extra ns per recorded acquisition (lock call) on the calling thread.
    pub acquire_ns: f64,
    /// Extra ns per recorded release.
    pub release_ns: f64,
    /// Extra ns per other recorded event.
    pub event_ns: f64,
}

/// Last record of a complete trace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Footer {
    /// Duration of the recording, ns.
    pub duration_ns: u64,
    /// Events written.
    pub events: u64,
    /// Events lost (sum of all [`Loss`] records).
    pub lost: u64,
    /// Exit status of the recorded program (128+N for signal N).
    pub exit_status: i32,
}

/// One record of a trace.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Record {
    /// An interned string.
    String(StringEntry),
    /// A process image started.
    Process(Process),
    /// A process image ended.
    ProcessEnd(ProcessEnd),
    /// A thread started.
    Thread(Thread),
    /// A thread was named.
    ThreadName(ThreadName),
    /// A thread ended.
    ThreadEnd(ThreadEnd),
    /// A memory map entry.
    Map(MapEntry),
    /// An interned call path.
    Stack(StackTrace),
    /// First sighting of a lock.
    Lock(LockInfo),
    /// Encoded events of one thread.
    Events(EventChunk),
    /// Counted loss.
    Loss(Loss),
    /// Recorder cost measured at start-up.
    Overhead(Overhead),
    /// A name for a code address (a GPU kernel's handle).
    CodeName(CodeName),
    /// The end of the trace.
    Footer(Footer),
    /// A record kind this build does not know (from a newer minor version).
    Unknown {
        /// Its kind byte.
        kind: u8,
        /// File offset of the record.
        offset: u64,
    },
}

fn opt_i32(v: i32) -> u64 {
    zigzag(i64::from(v))
}

fn get_i32(c: &mut Cursor, what: &'static str) -> Result<i32, FormatError> {
    let at = c.offset();
    let v = unzigzag(c.varint(what)?);
    i32::try_from(v).map_err(|_| FormatError::Corrupt {
        offset: at,
        what: format!("{what} = {v} out of range"),
    })
}

fn put_strings(out: &mut Vec<u8>, v: &[String]) {
    put_varint(out, v.len() as u64);
    for s in v {
        put_str(out, s);
    }
}

fn get_strings(c: &mut Cursor, what: &'static str) -> Result<Vec<String>, FormatError> {
    let n = c.count(1, what)?;
    (0..n).map(|_| c.string(what)).collect()
}

pub(crate) fn encode_header(h: &Header, out: &mut Vec<u8>) {
    out.extend_from_slice(&h.tsc_hz.to_bits().to_le_bytes());
    put_varint(out, h.tsc_at_start);
    put_varint(out, h.monotonic_ns_at_start);
    put_varint(out, h.unix_ns_at_start);
    put_strings(out, &h.command);
    put_str(out, &h.host);
    put_str(out, &h.recorder_version);
    put_varint(out, u64::from(h.cpus));
    put_varint(out, u64::from(h.cache_line));
    put_varint(out, h.extra.len() as u64);
    for (k, v) in &h.extra {
        put_str(out, k);
        put_str(out, v);
    }
    // 1.2: a trailing field, skipped by older readers.
    put_varint(out, h.sleeping_wake_ns);
}

pub(crate) fn decode_header(c: &mut Cursor) -> Result<Header, FormatError> {
    let tsc_hz = f64::from_bits(c.u64_le("header tsc_hz")?);
    let mut h = Header {
        tsc_hz,
        tsc_at_start: c.varint("header tsc_at_start")?,
        monotonic_ns_at_start: c.varint("header monotonic start")?,
        unix_ns_at_start: c.varint("header wall-clock start")?,
        command: get_strings(c, "header command line")?,
        host: c.string("header host")?,
        recorder_version: c.string("header recorder version")?,
        cpus: c.varint_u32("header cpus")?,
        cache_line: c.varint_u32("header cache line")?,
        extra: Vec::new(),
        sleeping_wake_ns: 0,
    };
    let n = c.count(2, "header extra count")?;
    for _ in 0..n {
        let k = c.string("header extra key")?;
        let v = c.string("header extra value")?;
        h.extra.push((k, v));
    }
    // Absent before 1.2: 0, not measured.
    if !c.is_empty() {
        h.sleeping_wake_ns = c.varint("header sleeping wake-up latency")?;
    }
    Ok(h)
}

impl Record {
    /// Kind byte and payload.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) -> u8 {
        match self {
            Record::String(s) => {
                put_varint(out, u64::from(s.id));
                put_str(out, &s.text);
                kind::STRING
            }
            Record::Process(p) => {
                for v in [p.id, p.pid, p.parent, p.exec_generation] {
                    put_varint(out, u64::from(v));
                }
                put_varint(out, p.start_ns);
                put_strings(out, &p.argv);
                put_str(out, &p.exe);
                if !p.swapped_lock.is_empty() {
                    put_str(out, &p.swapped_lock);
                }
                kind::PROCESS
            }
            Record::ProcessEnd(p) => {
                put_varint(out, u64::from(p.process));
                put_varint(out, p.end_ns);
                put_varint(out, opt_i32(p.status));
                kind::PROCESS_END
            }
            Record::Thread(t) => {
                for v in [t.id, t.process, t.tid, t.parent] {
                    put_varint(out, u64::from(v));
                }
                put_varint(out, t.start_ns);
                put_str(out, &t.name);
                kind::THREAD
            }
            Record::ThreadName(t) => {
                put_varint(out, u64::from(t.thread));
                put_varint(out, t.time);
                put_str(out, &t.name);
                kind::THREAD_NAME
            }
            Record::ThreadEnd(t) => {
                put_varint(out, u64::from(t.thread));
                put_varint(out, t.end_ns);
                kind::THREAD_END
            }
            Record::Map(m) => {
                put_varint(out, u64::from(m.process));
                put_varint(out, m.start);
                put_varint(out, m.end);
                put_varint(out, m.offset);
                put_varint(out, u64::from(m.path));
                put_bytes(out, &m.build_id);
                put_str(out, &m.perms);
                kind::MAP
            }
            Record::Stack(s) => {
                put_varint(out, u64::from(s.id));
                put_varint(out, u64::from(s.process));
                put_varint(out, s.frames.len() as u64);
                let mut prev = 0u64;
                for &f in &s.frames {
                    put_varint(out, zigzag(f.wrapping_sub(prev) as i64));
                    prev = f;
                }
                kind::STACK
            }
            Record::Lock(l) => {
                put_varint(out, u64::from(l.process));
                put_varint(out, l.addr);
                out.push(l.first_op);
                put_varint(out, l.first_ns);
                put_varint(out, l.first_site);
                kind::LOCK
            }
            Record::Events(e) => {
                put_varint(out, u64::from(e.thread));
                put_varint(out, u64::from(e.count));
                out.extend_from_slice(&e.data);
                kind::EVENTS
            }
            Record::Loss(l) => {
                put_varint(out, u64::from(l.thread));
                put_varint(out, u64::from(l.process));
                put_varint(out, l.events);
                out.push(l.reason.code());
                kind::LOSS
            }
            Record::Overhead(o) => {
                put_varint(out, u64::from(o.process));
                for v in [o.acquire_ns, o.release_ns, o.event_ns] {
                    out.extend_from_slice(&v.to_bits().to_le_bytes());
                }
                kind::OVERHEAD
            }
            Record::CodeName(n) => {
                put_varint(out, u64::from(n.process));
                put_varint(out, n.addr);
                put_str(out, &n.name);
                kind::CODE_NAME
            }
            Record::Footer(f) => {
                put_varint(out, f.duration_ns);
                put_varint(out, f.events);
                put_varint(out, f.lost);
                put_varint(out, opt_i32(f.exit_status));
                kind::FOOTER
            }
            Record::Unknown { .. } => unreachable!("Record::Unknown is never written"),
        }
    }

    /// Decodes the payload of a record of kind `k`.
    pub(crate) fn decode(k: u8, c: &mut Cursor, record_offset: u64) -> Result<Record, FormatError> {
        Ok(match k {
            kind::STRING => Record::String(StringEntry {
                id: c.varint_u32("string id")?,
                text: c.string("string text")?,
            }),
            kind::PROCESS => Record::Process(Process {
                id: c.varint_u32("process id")?,
                pid: c.varint_u32("process pid")?,
                parent: c.varint_u32("process parent")?,
                exec_generation: c.varint_u32("process exec generation")?,
                start_ns: c.varint("process start")?,
                argv: get_strings(c, "process argv")?,
                exe: c.string("process exe")?,
                swapped_lock: if c.is_empty() {
                    String::new()
                } else {
                    c.string("process swapped lock")?
                },
            }),
            kind::PROCESS_END => Record::ProcessEnd(ProcessEnd {
                process: c.varint_u32("process-end process")?,
                end_ns: c.varint("process-end time")?,
                status: get_i32(c, "process-end status")?,
            }),
            kind::THREAD => Record::Thread(Thread {
                id: c.varint_u32("thread id")?,
                process: c.varint_u32("thread process")?,
                tid: c.varint_u32("thread tid")?,
                parent: c.varint_u32("thread parent")?,
                start_ns: c.varint("thread start")?,
                name: c.string("thread name")?,
            }),
            kind::THREAD_NAME => Record::ThreadName(ThreadName {
                thread: c.varint_u32("thread-name thread")?,
                time: c.varint("thread-name time")?,
                name: c.string("thread-name name")?,
            }),
            kind::THREAD_END => Record::ThreadEnd(ThreadEnd {
                thread: c.varint_u32("thread-end thread")?,
                end_ns: c.varint("thread-end time")?,
            }),
            kind::MAP => Record::Map(MapEntry {
                process: c.varint_u32("map process")?,
                start: c.varint("map start")?,
                end: c.varint("map end")?,
                offset: c.varint("map offset")?,
                path: c.varint_u32("map path")?,
                build_id: c.bytes("map build-id")?.to_vec(),
                perms: c.string("map perms")?,
            }),
            kind::STACK => {
                let id = c.varint_u32("stack id")?;
                let process = c.varint_u32("stack process")?;
                let n = c.count(1, "stack depth")?;
                let mut frames = Vec::with_capacity(n);
                let mut prev = 0u64;
                for _ in 0..n {
                    prev = prev.wrapping_add(unzigzag(c.varint("stack frame")?) as u64);
                    frames.push(prev);
                }
                Record::Stack(StackTrace {
                    id,
                    process,
                    frames,
                })
            }
            kind::LOCK => Record::Lock(LockInfo {
                process: c.varint_u32("lock process")?,
                addr: c.varint("lock address")?,
                first_op: c.u8("lock first op")?,
                first_ns: c.varint("lock first time")?,
                first_site: c.varint("lock first site")?,
            }),
            kind::EVENTS => {
                let thread = c.varint_u32("events thread")?;
                let count = c.varint_u32("events count")?;
                // Each event takes at least 3 bytes: reject counts the
                // payload cannot hold before anything is sized by them.
                if u64::from(count) * 3 > c.remaining() as u64 {
                    return Err(FormatError::Corrupt {
                        offset: c.offset(),
                        what: format!(
                            "event chunk claims {count} events in {} bytes",
                            c.remaining()
                        ),
                    });
                }
                let offset = c.offset();
                let data = c.take(c.remaining(), "event data")?.to_vec();
                Record::Events(EventChunk {
                    thread,
                    count,
                    data,
                    offset,
                })
            }
            kind::LOSS => Record::Loss(Loss {
                thread: c.varint_u32("loss thread")?,
                process: c.varint_u32("loss process")?,
                events: c.varint("loss count")?,
                reason: LossReason::from_u8(c.u8("loss reason")?),
            }),
            kind::OVERHEAD => Record::Overhead(Overhead {
                process: c.varint_u32("overhead process")?,
                acquire_ns: f64::from_bits(c.u64_le("overhead acquire")?),
                release_ns: f64::from_bits(c.u64_le("overhead release")?),
                event_ns: f64::from_bits(c.u64_le("overhead event")?),
            }),
            kind::CODE_NAME => Record::CodeName(CodeName {
                process: c.varint_u32("code-name process")?,
                addr: c.varint("code-name address")?,
                name: c.string("code-name name")?,
            }),
            kind::FOOTER => Record::Footer(Footer {
                duration_ns: c.varint("footer duration")?,
                events: c.varint("footer events")?,
                lost: c.varint("footer lost")?,
                exit_status: get_i32(c, "footer exit status")?,
            }),
            kind::HEADER => {
                return Err(FormatError::Corrupt {
                    offset: record_offset,
                    what: "a second header record".into(),
                })
            }
            k => Record::Unknown {
                kind: k,
                offset: record_offset,
            },
        })
    }
}
