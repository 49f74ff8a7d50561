//! One attach-mode recording: the loop that drains the kernel's events
//! and the trace they become, streamed (tables before the first event
//! that names them, events in per-thread chunks), so memory does not grow
//! with the recording's length.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use lockscope_format::{
    phase, Event, Footer, Header, LockInfo, Loss, LossReason, MapEntry, Op, Process, ProcessEnd,
    Record, StackTrace, StringEntry, Thread, ThreadEnd, TraceWriter,
};

use crate::bpf::{Loaded, RawEvent};
use crate::unwind::ProcessUnwinder;
use crate::{monotonic_ns, AttachConfig, AttachError, AttachSummary, Ended};

/// Events buffered per thread before they are encoded as one chunk.
const CHUNK: usize = 4096;
/// How often the ring is drained when it was empty.
const POLL: Duration = Duration::from_millis(5);
/// How often the attached processes are checked for exit.
const LIVENESS: Duration = Duration::from_millis(100);

const FUTEX_CMD_MASK: u32 = !(128 | 256);

/// The effective capabilities of this process (`CapEff`).
fn effective_caps() -> u64 {
    lockscope_record::self_status("CapEff")
        .and_then(|v| u64::from_str_radix(&v, 16).ok())
        .unwrap_or(0)
}

fn check_caps() -> Result<(), AttachError> {
    const CAP_SYS_ADMIN: u64 = 1 << 21;
    const CAP_PERFMON: u64 = 1 << 38;
    const CAP_BPF: u64 = 1 << 39;
    let c = effective_caps();
    if c & CAP_SYS_ADMIN != 0 {
        return Ok(());
    }
    if c & CAP_BPF == 0 {
        return Err(AttachError::Capability("CAP_BPF"));
    }
    if c & CAP_PERFMON == 0 {
        return Err(AttachError::Capability("CAP_PERFMON"));
    }
    Ok(())
}

fn read_trimmed(p: impl AsRef<Path>) -> String {
    std::fs::read_to_string(p)
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default()
}

fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// True while the process runs: it exists and is not a zombie (a process
/// that exited but whose parent has not reaped it yet keeps its /proc
/// entry; waiting for the reap could wait for ever, the parent being the
/// one waiting for the recording to end).
fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `pid (comm) S ...`: the state follows the last ')' (a command name
    // may hold parentheses and spaces).
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    !matches!(state, Some("Z" | "X") | None)
}

/// What the trace knows of one process.
struct Proc {
    id: u32,
    unwinder: ProcessUnwinder,
    /// Call paths already written, by frames.
    stacks: HashMap<Vec<u64>, u32>,
    /// Futex words already named by a `Lock` record.
    locks: HashSet<u64>,
    ended: bool,
    /// Its threads' trace ids, by tid.
    threads: HashMap<u32, u32>,
    /// Threads that existed when the recording started (start time 0).
    at_start: Vec<u32>,
}

struct Out {
    w: TraceWriter<BufWriter<File>>,
    strings: HashMap<String, u32>,
    next_stack: u32,
    next_thread: u32,
    next_process: u32,
    /// Events not yet encoded, per trace thread id.
    pending: HashMap<u32, Vec<Event>>,
}

impl Out {
    fn intern(&mut self, s: &str) -> Result<u32, AttachError> {
        if let Some(&id) = self.strings.get(s) {
            return Ok(id);
        }
        let id = self.strings.len() as u32 + 1;
        self.strings.insert(s.to_string(), id);
        self.w.write(&Record::String(StringEntry {
            id,
            text: s.to_string(),
        }))?;
        Ok(id)
    }

    fn push(&mut self, thread: u32, e: Event) -> Result<(), AttachError> {
        let v = self.pending.entry(thread).or_default();
        v.push(e);
        if v.len() >= CHUNK {
            let v = std::mem::take(v);
            self.w.write_events(thread, &v)?;
        }
        Ok(())
    }
}

struct Session<'a> {
    cfg: &'a AttachConfig,
    t0: u64,
    out: Out,
    procs: HashMap<u32, Proc>,
    build_ids: HashMap<String, Vec<u8>>,
    summary: AttachSummary,
    /// Events of processes or threads the filters leave out.
    filtered: u64,
    /// The site and call path of each thread's latest wait on each word:
    /// a wait still blocked at the end gets them (the kernel side copies
    /// a stack only when a call returns).
    last_wait: HashMap<(u32, u64), (u64, u32)>,
}

impl Session<'_> {
    fn rel(&self, t: u64) -> u64 {
        t.saturating_sub(self.t0)
    }

    /// The process's trace record, its maps and the unwinder of its
    /// modules, on first sight. `None` for a process the filters leave
    /// out or that is already gone.
    fn process(&mut self, pid: u32, at: u64) -> Result<Option<&mut Proc>, AttachError> {
        if !self.procs.contains_key(&pid) {
            let comm = read_trimmed(format!("/proc/{pid}/comm"));
            if !self.cfg.comms.is_empty() && !self.cfg.comms.contains(&comm) {
                return Ok(None);
            }
            let maps_text = std::fs::read(format!("/proc/{pid}/maps")).unwrap_or_default();
            if maps_text.is_empty() {
                return Ok(None);
            }
            let id = self.out.next_process;
            self.out.next_process += 1;
            let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            let mut argv = cmdline(pid);
            if argv.is_empty() {
                argv.push(comm);
            }
            self.out.w.write(&Record::Process(Process {
                id,
                pid,
                parent: 0,
                exec_generation: 0,
                start_ns: self.rel(at),
                argv,
                exe,
                swapped_lock: String::new(),
            }))?;
            let mut p = Proc {
                id,
                unwinder: ProcessUnwinder::new(),
                stacks: HashMap::new(),
                locks: HashSet::new(),
                ended: false,
                threads: HashMap::new(),
                at_start: Vec::new(),
            };
            if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) {
                p.at_start = rd
                    .flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse().ok())
                    .collect();
            }
            self.procs.insert(pid, p);
            self.add_maps(pid, &maps_text)?;
            self.summary.processes += 1;
        }
        Ok(self.procs.get_mut(&pid))
    }

    /// Writes the map lines not written yet and gives their executable
    /// files to the unwinder.
    fn add_maps(&mut self, pid: u32, text: &[u8]) -> Result<(), AttachError> {
        let (lines, _) = lockscope_record::parse_maps(text);
        let Some(p) = self.procs.get(&pid) else {
            return Ok(());
        };
        let process = p.id;
        for l in &lines {
            let path = if l.path.is_empty() {
                0
            } else {
                self.out.intern(&l.path)?
            };
            let build_id = if l.path.starts_with('/') && !l.path.ends_with(" (deleted)") {
                let root = format!("/proc/{pid}/root{}", l.path);
                self.build_ids
                    .entry(l.path.clone())
                    .or_insert_with(|| {
                        lockscope_record::build_id(Path::new(&root))
                            .or_else(|| lockscope_record::build_id(Path::new(&l.path)))
                            .unwrap_or_default()
                    })
                    .clone()
            } else {
                Vec::new()
            };
            self.out.w.write(&Record::Map(MapEntry {
                process,
                start: l.start,
                end: l.end,
                offset: l.offset,
                path,
                build_id,
                perms: l.perms.clone(),
            }))?;
        }
        if let Some(p) = self.procs.get_mut(&pid) {
            p.unwinder.add_maps(pid, &lines);
        }
        Ok(())
    }

    /// The trace id of a thread, written on first sight.
    fn thread(&mut self, pid: u32, tid: u32, at: u64) -> Result<u32, AttachError> {
        let t0 = self.t0;
        let p = self.procs.get_mut(&pid).expect("process seen first");
        if let Some(&id) = p.threads.get(&tid) {
            return Ok(id);
        }
        let id = self.out.next_thread;
        self.out.next_thread += 1;
        p.threads.insert(tid, id);
        let start_ns = if p.at_start.contains(&tid) {
            0
        } else {
            at.saturating_sub(t0)
        };
        let process = p.id;
        let name = read_trimmed(format!("/proc/{pid}/task/{tid}/comm"));
        self.out.w.write(&Record::Thread(Thread {
            id,
            process,
            tid,
            parent: 0,
            start_ns,
            name,
        }))?;
        self.summary.threads += 1;
        Ok(id)
    }

    /// The interned call path of an event's copied stack.
    fn call_path(&mut self, pid: u32, e: &RawEvent) -> Result<u32, AttachError> {
        let mut frames = {
            let p = self.procs.get_mut(&pid).expect("process seen first");
            p.unwinder.walk(e.ip, e.sp, e.bp, &e.stack)
        };
        // An address in no known mapping: a library loaded since the maps
        // were read. Read them again once and walk again.
        let known = self.procs[&pid].unwinder.is_code(e.ip);
        if !known {
            if let Ok(text) = std::fs::read(format!("/proc/{pid}/maps")) {
                self.add_maps(pid, &text)?;
                let p = self.procs.get_mut(&pid).expect("process seen first");
                frames = p.unwinder.walk(e.ip, e.sp, e.bp, &e.stack);
            }
        }
        let p = self.procs.get_mut(&pid).expect("process seen first");
        if let Some(&id) = p.stacks.get(&frames) {
            return Ok(id);
        }
        let id = self.out.next_stack;
        self.out.next_stack += 1;
        p.stacks.insert(frames.clone(), id);
        let process = p.id;
        self.out.w.write(&Record::Stack(StackTrace {
            id,
            process,
            frames,
        }))?;
        Ok(id)
    }

    fn lock_seen(
        &mut self,
        pid: u32,
        addr: u64,
        op: Op,
        at: u64,
        site: u64,
    ) -> Result<(), AttachError> {
        let first_ns = self.rel(at);
        let p = self.procs.get_mut(&pid).expect("process seen first");
        if !p.locks.insert(addr) {
            return Ok(());
        }
        let process = p.id;
        self.out.w.write(&Record::Lock(LockInfo {
            process,
            addr,
            first_op: op as u8,
            first_ns,
            first_site: site,
        }))?;
        Ok(())
    }

    fn event(&mut self, e: RawEvent) -> Result<(), AttachError> {
        if (!self.cfg.tids.is_empty() && !self.cfg.tids.contains(&e.tid))
            || (!self.cfg.locks.is_empty() && !self.cfg.locks.contains(&e.uaddr))
        {
            self.filtered += 1;
            return Ok(());
        }
        if self.process(e.tgid, e.start)?.is_none() {
            self.filtered += 1;
            return Ok(());
        }
        let thread = self.thread(e.tgid, e.tid, e.start)?;
        let stack = self.call_path(e.tgid, &e)?;
        let op = if e.wait { Op::FutexWait } else { Op::FutexWake };
        self.lock_seen(e.tgid, e.uaddr, op, e.start, e.ip)?;
        let base = Event {
            time: self.rel(e.start),
            op: op as u8,
            flags: 0,
            addr: e.uaddr,
            site: e.ip,
            stack,
            arg: 0,
            arg2: 0,
        };
        if e.wait {
            self.last_wait.insert((e.tid, e.uaddr), (e.ip, stack));
            // As the LD_PRELOAD recorder writes a futex wait: BEGIN with
            // the expected value and the op, then DONE, or FAIL with the
            // errno.
            self.out.push(
                thread,
                Event {
                    flags: phase::BEGIN,
                    arg: u64::from(e.val),
                    arg2: u64::from(e.op),
                    ..base
                },
            )?;
            let done = if e.ret == 0 {
                Event {
                    time: self.rel(e.end),
                    flags: phase::DONE,
                    ..base
                }
            } else {
                Event {
                    time: self.rel(e.end),
                    flags: phase::FAIL,
                    arg: e.ret.unsigned_abs(),
                    ..base
                }
            };
            self.out.push(thread, done)?;
            self.summary.waits += 1;
            self.summary.slept += u64::from(e.ret == 0);
        } else {
            self.out.push(
                thread,
                Event {
                    flags: phase::DONE,
                    arg: e.ret.max(0) as u64,
                    ..base
                },
            )?;
            self.summary.wakes += 1;
        }
        Ok(())
    }
}

/// Attaches, records until the duration, the stop flag or the end of
/// every attached process, detaches, and writes the trace.
pub fn record(cfg: &AttachConfig, stop: &AtomicBool) -> Result<AttachSummary, AttachError> {
    if !cfg.all {
        if cfg.pids.is_empty() {
            return Err(AttachError::Config(
                "no process to attach to: give -p PID or -a".into(),
            ));
        }
        for &p in &cfg.pids {
            if !alive(p) {
                return Err(AttachError::NoProcess(p));
            }
        }
    }
    check_caps()?;
    // Time 0 is read just before the entry side goes live (the trace
    // says nothing of before), so that no call it follows started
    // earlier; calls that enter while it attaches (microseconds) are
    // missed, never placed before time 0.
    let (mut loaded, t0) = Loaded::attach(&cfg.pids, cfg.all, cfg.min_wait_ns)?;
    let unix_ns = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let started = Instant::now();

    let file = File::create(&cfg.output).map_err(|source| AttachError::Io {
        path: cfg.output.clone(),
        source,
    })?;
    let mut extra = vec![
        ("capture".to_string(), "attach".to_string()),
        (
            "attach.processes".to_string(),
            if cfg.all {
                "all".to_string()
            } else {
                cfg.pids
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(" ")
            },
        ),
        (
            "attach.min_wait_ns".to_string(),
            cfg.min_wait_ns.to_string(),
        ),
    ];
    for (k, v) in &cfg.labels {
        extra.push((format!("{}{k}", lockscope_format::LABEL_PREFIX), v.clone()));
    }
    let command = if cfg.all {
        vec!["(every process)".to_string()]
    } else {
        cmdline(cfg.pids[0])
    };
    let header = Header {
        tsc_hz: 1e9,
        tsc_at_start: t0,
        monotonic_ns_at_start: t0,
        unix_ns_at_start: unix_ns,
        command,
        host: read_trimmed("/proc/sys/kernel/hostname"),
        recorder_version: env!("CARGO_PKG_VERSION").to_string(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        cache_line: 64,
        extra,
        sleeping_wake_ns: 0,
    };
    let w = TraceWriter::new(BufWriter::new(file), &header)?;
    let mut s = Session {
        cfg,
        t0,
        out: Out {
            w,
            strings: HashMap::new(),
            next_stack: 1,
            next_thread: 1,
            next_process: 1,
            pending: HashMap::new(),
        },
        procs: HashMap::new(),
        build_ids: HashMap::new(),
        summary: AttachSummary::default(),
        filtered: 0,
        last_wait: HashMap::new(),
    };
    // The attached processes are in the trace from the start, even if
    // they never wait.
    for &p in &cfg.pids {
        s.process(p, t0)?;
    }
    let mut last_check = Instant::now();
    let ended = loop {
        let mut any = false;
        while let Some(item) = loaded.ring.next() {
            any = true;
            let e = RawEvent::parse(&item);
            drop(item);
            if let Some(e) = e {
                s.event(e)?;
            }
        }
        if stop.load(Ordering::Relaxed) {
            break Ended::Stopped;
        }
        if cfg.duration.is_some_and(|d| started.elapsed() >= d) {
            break Ended::Duration;
        }
        if last_check.elapsed() >= LIVENESS {
            last_check = Instant::now();
            let now = monotonic_ns();
            let mut all_gone = !cfg.all;
            for (&pid, p) in s.procs.iter_mut() {
                if !p.ended && !alive(pid) {
                    p.ended = true;
                    s.out.w.write(&Record::ProcessEnd(ProcessEnd {
                        process: p.id,
                        end_ns: now.saturating_sub(t0),
                        status: -1,
                    }))?;
                }
            }
            for &pid in &cfg.pids {
                if alive(pid) {
                    all_gone = false;
                }
            }
            if all_gone {
                break Ended::Exited;
            }
        }
        if !any {
            std::thread::sleep(POLL);
        }
    };
    // Detached first, so that the end of the trace is where the kernel
    // stopped looking; then what the ring still holds, then the waits
    // still blocked.
    loaded.detach();
    let end = monotonic_ns();
    while let Some(item) = loaded.ring.next() {
        let e = RawEvent::parse(&item);
        drop(item);
        if let Some(e) = e {
            s.event(e)?;
        }
    }
    let open = loaded.open_calls();
    let counters = loaded.counters();
    drop(loaded);
    for c in open {
        let cmd = c.op & FUTEX_CMD_MASK;
        if cmd != 0 && cmd != 9 {
            continue;
        }
        // The thread's process: the one whose task directory has it.
        let Some(pid) = s
            .procs
            .iter()
            .find(|(pid, _)| Path::new(&format!("/proc/{pid}/task/{}", c.tid)).exists())
            .map(|(&pid, _)| pid)
        else {
            continue;
        };
        if (!cfg.tids.is_empty() && !cfg.tids.contains(&c.tid))
            || (!cfg.locks.is_empty() && !cfg.locks.contains(&c.uaddr))
        {
            continue;
        }
        let thread = s.thread(pid, c.tid, c.start)?;
        let (site, stack) = s
            .last_wait
            .get(&(c.tid, c.uaddr))
            .copied()
            .unwrap_or((0, 0));
        s.lock_seen(pid, c.uaddr, Op::FutexWait, c.start, site)?;
        let time = s.rel(c.start);
        s.out.push(
            thread,
            Event {
                time,
                op: Op::FutexWait as u8,
                flags: phase::BEGIN,
                addr: c.uaddr,
                site,
                stack,
                arg: u64::from(c.val),
                arg2: u64::from(c.op),
            },
        )?;
        s.summary.waits += 1;
        s.summary.open_waits += 1;
    }
    let duration_ns = end.saturating_sub(t0);
    let pending = std::mem::take(&mut s.out.pending);
    let mut threads: Vec<_> = pending.into_iter().collect();
    threads.sort_by_key(|(t, _)| *t);
    for (t, v) in threads {
        if !v.is_empty() {
            s.out.w.write_events(t, &v)?;
        }
    }
    let all_threads: Vec<u32> = s
        .procs
        .values()
        .flat_map(|p| p.threads.values().copied())
        .collect();
    for thread in all_threads {
        s.out.w.write(&Record::ThreadEnd(ThreadEnd {
            thread,
            end_ns: duration_ns,
        }))?;
    }
    let mut lost = 0;
    for (events, reason) in [
        (counters.ring_full, LossReason::BufferFull),
        (counters.pending_full, LossReason::TraceLimit),
    ] {
        if events > 0 {
            lost += events;
            s.out.w.write(&Record::Loss(Loss {
                thread: 0,
                process: 0,
                events,
                reason,
            }))?;
        }
    }
    let events = s.out.w.events_written();
    let w = s.out.w.finish(&Footer {
        duration_ns,
        events,
        lost,
        exit_status: -1,
    })?;
    w.into_inner()
        .map_err(|e| AttachError::Io {
            path: cfg.output.clone(),
            source: e.into_error(),
        })?
        .sync_all()
        .map_err(|source| AttachError::Io {
            path: cfg.output.clone(),
            source,
        })?;
    let filtered = s.filtered;
    let mut summary = s.summary;
    summary.lost = lost;
    summary.filtered = filtered;
    summary.duration_ns = duration_ns;
    summary.ended = ended;
    Ok(summary)
}
