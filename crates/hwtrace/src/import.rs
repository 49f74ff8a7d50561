//! Parsed rows -> an ordinary lockscope trace.

use std::collections::HashMap;
use std::io::Write;

use lockscope_format::{
    Event, Footer, Header, Op, Process, Record, Thread, ThreadEnd, Trace, TraceWriter,
};

use crate::parse::{Operation, Parsed, Row, Value};
use crate::{HwtraceError, ACCESS_VALUES_KEY, CORES_KEY, DEFAULT_CLOCK_HZ};

/// Import settings.
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// Cycles per second of the time column; overrides the files'
    /// `clock_hz` directive (default 1 GHz: one cycle is one ns).
    pub clock_hz: Option<u64>,
    /// CPUs of the traced system; overrides the `cpus` directive
    /// (default: the number of cores seen).
    pub cpus: Option<u32>,
}

struct ThreadInfo {
    id: u32,
    tid: u32,
    name: String,
    events: Vec<Event>,
}

/// The index of thread `tid` in `threads`, added on first sight; a name
/// given later fills an empty one.
fn thread_of(
    threads: &mut Vec<ThreadInfo>,
    by_tid: &mut HashMap<u32, usize>,
    tid: u32,
    name: Option<&str>,
) -> usize {
    let i = *by_tid.entry(tid).or_insert_with(|| {
        threads.push(ThreadInfo {
            id: threads.len() as u32 + 1,
            tid,
            name: String::new(),
            events: Vec::new(),
        });
        threads.len() - 1
    });
    if let Some(n) = name {
        if threads[i].name.is_empty() {
            threads[i].name = n.to_string();
        }
    }
    i
}

fn log2(w: u8) -> u8 {
    w.trailing_zeros() as u8
}

fn agree(
    a: Option<u64>,
    files: &[Parsed],
    pick: impl Fn(&Parsed) -> Option<u64>,
    what: &str,
) -> Result<Option<u64>, HwtraceError> {
    if a.is_some() {
        return Ok(a);
    }
    let mut seen: Option<(u64, &str)> = None;
    for f in files {
        if let Some(v) = pick(f) {
            match seen {
                Some((w, g)) if w != v => {
                    return Err(HwtraceError::Invalid(format!(
                        "{} says {what}={v} but {g} says {what}={w}: give the option instead",
                        f.file
                    )))
                }
                _ => seen = Some((v, &f.file)),
            }
        }
    }
    Ok(seen.map(|s| s.0))
}

/// Builds a trace from one or more parsed files (a trace and, optionally,
/// a separate schedule holding `THREAD` rows). Rows are merged in time
/// order; rows of equal time keep file order, `THREAD` rows first.
pub fn import(files: &[Parsed], opts: &ImportOptions) -> Result<Trace, HwtraceError> {
    let hz = agree(opts.clock_hz, files, |f| f.directives.clock_hz, "clock_hz")?
        .unwrap_or(DEFAULT_CLOCK_HZ);
    if hz == 0 {
        return Err(HwtraceError::Invalid(
            "the clock frequency must not be 0".into(),
        ));
    }
    let cpus = agree(
        opts.cpus.map(u64::from),
        files,
        |f| f.directives.cpus.map(u64::from),
        "cpus",
    )?;
    let mut rows: Vec<(usize, usize, &Row)> = Vec::new();
    for (fi, f) in files.iter().enumerate() {
        for (ri, r) in f.rows.iter().enumerate() {
            rows.push((fi, ri, r));
        }
    }
    if rows.is_empty() {
        return Err(HwtraceError::Invalid(
            "the hardware trace has no row after its header line".into(),
        ));
    }
    rows.sort_by_key(|&(fi, ri, r)| (r.time, r.operation != Operation::Thread, fi, ri));
    let scheduled = rows.iter().any(|r| r.2.operation == Operation::Thread);
    let mut cores: Vec<String> = Vec::new();
    let mut core_ids: HashMap<String, u32> = HashMap::new();
    let mut running: Vec<Option<u32>> = Vec::new();
    let mut last_ip: Vec<u64> = Vec::new();
    let mut on_core: HashMap<u32, u32> = HashMap::new();
    let mut threads: Vec<ThreadInfo> = Vec::new();
    let mut by_tid: HashMap<u32, usize> = HashMap::new();
    let mut last_ns = 0u64;
    for &(fi, _, r) in &rows {
        let file = &files[fi].file;
        let ns =
            u64::try_from(u128::from(r.time) * 1_000_000_000 / u128::from(hz)).map_err(|_| {
                HwtraceError::Parse {
                    file: file.clone(),
                    line: r.line,
                    column: 1,
                    message: format!("time {} cycles at {hz} Hz overflows 64-bit ns", r.time),
                }
            })?;
        last_ns = last_ns.max(ns);
        let core = match core_ids.get(&r.origin) {
            Some(&c) => c,
            None => {
                let c = cores.len() as u32;
                cores.push(r.origin.clone());
                core_ids.insert(r.origin.clone(), c);
                running.push(None);
                last_ip.push(0);
                c
            }
        };
        let ci = core as usize;
        let ev = |op: Op, flags: u8, arg: u64, arg2: u64, site: u64| Event {
            time: ns,
            op: op as u8,
            flags,
            addr: 0,
            site,
            stack: 0,
            arg,
            arg2,
        };
        match r.operation {
            Operation::Thread => {
                let tid = r.address as u32;
                if let Some(y) = running[ci] {
                    if y != tid {
                        if let Some(&i) = by_tid.get(&y) {
                            threads[i]
                                .events
                                .push(ev(Op::CpuOut, 0, u64::from(core), 0, 0));
                        }
                        on_core.remove(&y);
                        running[ci] = None;
                    }
                }
                if tid == 0 {
                    continue;
                }
                let name = match &r.value {
                    Value::Name(n) => Some(n.as_str()),
                    _ => None,
                };
                let i = thread_of(&mut threads, &mut by_tid, tid, name);
                if let Some(&c2) = on_core.get(&tid) {
                    if c2 != core {
                        threads[i]
                            .events
                            .push(ev(Op::CpuOut, 0, u64::from(c2), 0, 0));
                        running[c2 as usize] = None;
                    }
                }
                if running[ci] != Some(tid) {
                    running[ci] = Some(tid);
                    on_core.insert(tid, core);
                    threads[i]
                        .events
                        .push(ev(Op::CpuIn, 0, u64::from(core), 0, 0));
                }
            }
            Operation::Ip => last_ip[ci] = r.address,
            op => {
                let i = if scheduled {
                    let Some(t) = running[ci] else {
                        return Err(HwtraceError::Parse {
                            file: file.clone(),
                            line: r.line,
                            column: r.origin_column,
                            message: format!(
                                "core {} runs no thread at cycle {}: a THREAD row must say \
                                 which thread runs there first",
                                r.origin, r.time
                            ),
                        });
                    };
                    thread_of(&mut threads, &mut by_tid, t, None)
                } else {
                    thread_of(&mut threads, &mut by_tid, core + 1, Some(&r.origin))
                };
                let w = op.width();
                let site = last_ip[ci];
                let mut e = match (op, &r.value) {
                    (Operation::Read(_), Value::Known(v)) => ev(Op::Read, w, *v, 1, site),
                    (Operation::Read(_), _) => ev(Op::Read, w, 0, 0, site),
                    (Operation::Write(_), Value::Known(v)) => ev(Op::Write, w, *v, 1, site),
                    (Operation::Write(_), Value::Change(o, n)) => {
                        ev(Op::AtomicStore, log2(w), *o, *n, site)
                    }
                    (Operation::Write(_), _) => ev(Op::Write, w, 0, 0, site),
                    (Operation::Atomic(_), Value::Known(v)) => {
                        ev(Op::AtomicRmw, log2(w), 0, *v, site)
                    }
                    (Operation::Atomic(_), Value::Change(o, n)) => {
                        ev(Op::AtomicExchange, log2(w), *o, *n, site)
                    }
                    // The parser refuses A rows without a value.
                    _ => continue,
                };
                e.addr = r.address;
                threads[i].events.push(e);
            }
        }
    }
    let mut t = Trace {
        header: Header {
            tsc_hz: hz as f64,
            command: std::iter::once("lockscope import --format hwtrace".to_string())
                .chain(files.iter().map(|f| f.file.clone()))
                .collect(),
            recorder_version: env!("CARGO_PKG_VERSION").to_string(),
            cpus: cpus.map_or(cores.len() as u32, |c| c as u32),
            cache_line: 64,
            extra: vec![
                ("source".into(), "hwtrace".into()),
                ("clock_hz".into(), hz.to_string()),
                (ACCESS_VALUES_KEY.into(), "1".into()),
                (CORES_KEY.into(), cores.join("\n")),
            ],
            ..Header::default()
        },
        ..Trace::default()
    };
    t.records.push(Record::Process(Process {
        id: 1,
        pid: 1,
        parent: 0,
        exec_generation: 0,
        start_ns: 0,
        argv: files.iter().map(|f| f.file.clone()).collect(),
        exe: files.first().map_or_else(String::new, |f| f.file.clone()),
        swapped_lock: String::new(),
    }));
    let mut events = 0u64;
    for th in &threads {
        t.records.push(Record::Thread(Thread {
            id: th.id,
            process: 1,
            tid: th.tid,
            parent: 0,
            start_ns: th.events.first().map_or(0, |e| e.time),
            name: if th.name.is_empty() {
                format!("thread {}", th.tid)
            } else {
                th.name.clone()
            },
        }));
    }
    for th in threads {
        t.records.push(Record::ThreadEnd(ThreadEnd {
            thread: th.id,
            end_ns: th.events.last().map_or(0, |e| e.time),
        }));
        events += th.events.len() as u64;
        t.events.insert(th.id, th.events);
    }
    t.footer = Some(Footer {
        duration_ns: last_ns,
        events,
        lost: 0,
        exit_status: 0,
    });
    Ok(t)
}

/// Writes a trace held in memory as a lockscope trace file.
pub fn write_trace<W: Write>(t: &Trace, w: W) -> Result<W, HwtraceError> {
    let mut tw = TraceWriter::new(w, &t.header)?;
    for r in &t.records {
        if !matches!(r, Record::ThreadEnd(_)) {
            tw.write(r)?;
        }
    }
    for (&id, evs) in &t.events {
        tw.write_events(id, evs)?;
    }
    for r in &t.records {
        if matches!(r, Record::ThreadEnd(_)) {
            tw.write(r)?;
        }
    }
    let footer = t.footer.clone().unwrap_or_default();
    Ok(tw.finish(&footer)?)
}
