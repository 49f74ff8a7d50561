//! A lockscope trace -> the hardware-trace text format, so that the
//! import path can be checked against a detailed-mode recording.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use lockscope_format::{Op, Trace};

use crate::{HwtraceError, ACCESS_VALUES_KEY, CORES_KEY, DEFAULT_CLOCK_HZ};

/// Most rows one plain access (a `memcpy` of many bytes) becomes.
const MAX_SPLIT: u64 = 64;

/// Most rows one `AccessRepeat` (a coalesced run) becomes.
const MAX_REPEAT_ROWS: u64 = 1 << 20;

/// Export settings.
#[derive(Clone, Debug)]
pub struct ExportOptions {
    /// Cycles per second written in the time column.
    pub clock_hz: u64,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            clock_hz: DEFAULT_CLOCK_HZ,
        }
    }
}

/// Row order: (cycle, class, trace thread, event index, part).
type RowKey = (u64, u8, u32, usize, u32);

/// What a row does to the core-to-thread schedule.
enum Tag {
    /// A `THREAD` row: the core runs this thread from now on (0: idle).
    Sched(String, u32),
    /// An access by this thread on this core.
    Access(String, u32),
    /// An `IP` row.
    Plain,
}

/// What an export wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportSummary {
    /// Rows written (not counting comments and the header).
    pub rows: u64,
    /// Events with no hardware-trace form (lock calls, allocations...).
    pub skipped: u64,
    /// Plain accesses cut short at `MAX_SPLIT` rows, and repeats of a
    /// coalesced run beyond 2^20 rows.
    pub truncated: u64,
}

/// Keeps a name usable in one field: no delimiter, no line break.
fn field(s: &str) -> String {
    let s: String = s
        .chars()
        .map(|c| {
            if c == ',' || c == '\t' || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .take(64)
        .collect();
    let s = s.trim().to_string();
    if s.is_empty() || s == "-" || s.starts_with('#') {
        format!("_{s}")
    } else {
        s
    }
}

fn mask(v: u64, w: u64) -> u64 {
    if w >= 8 {
        v
    } else {
        v & ((1u64 << (w * 8)) - 1)
    }
}

/// Writes `t` in the hardware-trace format. Each thread that has events
/// gets a core of its own (`CPU0`, `CPU1`... in thread order) unless the
/// trace carries a schedule (an imported one does), which is kept.
pub fn export(
    t: &Trace,
    opts: &ExportOptions,
    out: &mut dyn Write,
) -> Result<ExportSummary, HwtraceError> {
    let io = |e| HwtraceError::Io {
        path: "output".into(),
        source: e,
    };
    if opts.clock_hz == 0 {
        return Err(HwtraceError::Invalid(
            "the clock frequency must not be 0".into(),
        ));
    }
    let values = t.header.get(ACCESS_VALUES_KEY) == Some("1");
    let core_names: Vec<String> = t
        .header
        .get(CORES_KEY)
        .map(|s| s.split('\n').map(field).collect())
        .unwrap_or_default();
    let mut names: HashMap<u32, (u32, String)> = HashMap::new();
    let mut starts: HashMap<u32, u64> = HashMap::new();
    let mut tid_count: HashMap<u32, u32> = HashMap::new();
    for r in &t.records {
        match r {
            lockscope_format::Record::Thread(th) => {
                names.insert(th.id, (th.tid, th.name.clone()));
                starts.insert(th.id, th.start_ns);
                *tid_count.entry(th.tid).or_default() += 1;
            }
            lockscope_format::Record::ThreadName(n) => {
                if let Some(e) = names.get_mut(&n.thread) {
                    e.1.clone_from(&n.name);
                }
            }
            _ => {}
        }
    }
    // The id a thread gets in the file: its OS tid when unique, else its
    // trace id (threads of two processes may share a tid).
    let ident = |id: u32| match names.get(&id) {
        Some((tid, _)) if *tid != 0 && tid_count.get(tid) == Some(&1) => *tid,
        _ => id,
    };
    let scheduled = t
        .events
        .values()
        .flatten()
        .any(|e| e.op() == Some(Op::CpuIn));
    let core_name = |c: u64| {
        core_names
            .get(c as usize)
            .cloned()
            .unwrap_or_else(|| format!("CPU{c}"))
    };
    // Rounded up: the importer rounds cycles down to ns, so for clocks up
    // to 1 GHz this gives back the very cycle an imported row had.
    let cycles = |ns: u64| {
        let c = (u128::from(ns) * u128::from(opts.clock_hz)).div_ceil(1_000_000_000);
        u64::try_from(c).unwrap_or(u64::MAX)
    };
    // (time, class, thread, index, part) -> row; class orders what the
    // importer must see first at equal times: cores going idle, then
    // threads placed, then accesses.
    let mut rows: BTreeMap<RowKey, (Tag, String)> = BTreeMap::new();
    let mut thread_names: HashMap<u32, String> = HashMap::new();
    let mut sum = ExportSummary::default();
    let mut own_core: HashMap<u32, String> = HashMap::new();
    for (k, (&id, evs)) in t.events.iter().enumerate() {
        let name = names.get(&id).map_or_else(String::new, |n| n.1.clone());
        let nm = if name.is_empty() {
            "-".to_string()
        } else {
            field(&name)
        };
        thread_names.insert(ident(id), nm.clone());
        if !scheduled {
            let core = format!("CPU{k}");
            // Placed on its core when it started, so that the import has
            // the same thread start (the lockset's hand-over at thread
            // creation uses it).
            if let Some(first) = evs.first() {
                let c = cycles(
                    starts
                        .get(&id)
                        .copied()
                        .unwrap_or(first.time)
                        .min(first.time),
                );
                rows.insert(
                    (c, 1, id, 0, 0),
                    (
                        Tag::Sched(core.clone(), ident(id)),
                        format!("{c},{core},{core},{},THREAD,{nm}", ident(id)),
                    ),
                );
            }
            own_core.insert(id, core);
        }
        let mut core = own_core.get(&id).cloned().unwrap_or_else(|| "CPU0".into());
        let mut last_ip = 0u64;
        // The thread's last single-row access (address, op, cycle, row
        // text): what a following `AccessRepeat` repeats.
        let mut last_row: Option<(u64, Op, u64, String)> = None;
        for (i, e) in evs.iter().enumerate() {
            let c = cycles(e.time);
            let Some(op) = e.op() else {
                sum.skipped += 1;
                continue;
            };
            if op == Op::AccessRepeat {
                // A coalesced run (`LOCKSCOPE_COALESCE`): `arg` more of the
                // thread's last access, the last one at this event's time.
                // A hardware trace has every one: one row each, spread
                // evenly from the first access to the last repeat (their
                // own times were not recorded).
                let kind = Op::repeated(e.arg2);
                match &last_row {
                    Some((addr, op, c0, text)) if *addr == e.addr && kind == Some(*op) => {
                        let n = e.arg.min(MAX_REPEAT_ROWS);
                        sum.truncated += u64::from(e.arg > n);
                        // Everything after the first field (the time).
                        let rest = text.split_once(',').map_or("", |x| x.1);
                        let span = c.saturating_sub(*c0);
                        for k in 1..=n {
                            let ck = c0 + (u128::from(span) * u128::from(k) / u128::from(n)) as u64;
                            let part = (2 * k) as u32;
                            if scheduled {
                                rows.insert(
                                    (ck, 2, id, i, part),
                                    (Tag::Plain, format!("{ck},{core},{core},{:#x},IP,-", e.site)),
                                );
                            }
                            rows.insert(
                                (ck, 2, id, i, part + 1),
                                (Tag::Access(core.clone(), ident(id)), format!("{ck},{rest}")),
                            );
                            sum.rows += 1;
                        }
                    }
                    _ => sum.skipped += 1,
                }
                continue;
            }
            if op.is_atomic() || matches!(op, Op::Read | Op::Write) {
                // Any other access ends a run; the ones that start one
                // set it again below.
                last_row = None;
            }
            let w_atomic = 1u64 << (e.flags & 7).min(3);
            let access = |kind: &str, w: u64, addr: u64, value: String| {
                format!("{c},{core},{core},{addr:#x},{kind}{},{value}", w * 8)
            };
            let text = match op {
                Op::CpuIn => {
                    core = core_name(e.arg);
                    rows.insert(
                        (c, 1, id, i, 0),
                        (
                            Tag::Sched(core.clone(), ident(id)),
                            format!("{c},{core},{core},{},THREAD,{nm}", ident(id)),
                        ),
                    );
                    continue;
                }
                Op::CpuOut => {
                    let cn = core_name(e.arg);
                    rows.insert(
                        (c, 0, id, i, 0),
                        (
                            Tag::Sched(cn.clone(), 0),
                            format!("{c},{cn},{cn},0,THREAD,-"),
                        ),
                    );
                    continue;
                }
                Op::AtomicLoad => access(
                    "R",
                    w_atomic,
                    e.addr,
                    format!("{:#x}", mask(e.arg, w_atomic)),
                ),
                Op::AtomicStore => access(
                    "W",
                    w_atomic,
                    e.addr,
                    format!("{:#x}>{:#x}", mask(e.arg, w_atomic), mask(e.arg2, w_atomic)),
                ),
                Op::AtomicRmw => access(
                    "A",
                    w_atomic,
                    e.addr,
                    format!("{:#x}", mask(e.arg2, w_atomic)),
                ),
                Op::AtomicFence => {
                    sum.skipped += 1;
                    continue;
                }
                op if op.is_atomic() => access(
                    "A",
                    w_atomic,
                    e.addr,
                    format!("{:#x}>{:#x}", mask(e.arg, w_atomic), mask(e.arg2, w_atomic)),
                ),
                Op::Read | Op::Write => {
                    let kind = if op == Op::Read { "R" } else { "W" };
                    let size = if e.flags == 0 {
                        e.arg2
                    } else {
                        u64::from(e.flags)
                    };
                    let known = values && e.arg2 == 1 && e.flags != 0;
                    if e.site != last_ip || scheduled {
                        rows.insert(
                            (c, 2, id, i, 0),
                            (Tag::Plain, format!("{c},{core},{core},{:#x},IP,-", e.site)),
                        );
                        last_ip = e.site;
                    }
                    if matches!(size, 1 | 2 | 4 | 8) {
                        let v = if known {
                            format!("{:#x}", mask(e.arg, size))
                        } else {
                            "-".into()
                        };
                        let text = access(kind, size, e.addr, v);
                        last_row = Some((e.addr, op, c, text.clone()));
                        rows.insert(
                            (c, 2, id, i, 1),
                            (Tag::Access(core.clone(), ident(id)), text),
                        );
                        sum.rows += 1;
                    } else {
                        // No value is known for these (detailed mode
                        // records none for plain accesses).
                        let (mut off, mut part) = (0u64, 1u32);
                        while off < size.max(1) {
                            if u64::from(part) > MAX_SPLIT {
                                sum.truncated += 1;
                                break;
                            }
                            let left = size.max(1) - off;
                            let w = [8u64, 4, 2, 1]
                                .into_iter()
                                .find(|&w| w <= left)
                                .unwrap_or(1);
                            rows.insert(
                                (c, 2, id, i, part),
                                (
                                    Tag::Access(core.clone(), ident(id)),
                                    access(kind, w, e.addr.wrapping_add(off), "-".into()),
                                ),
                            );
                            sum.rows += 1;
                            off += w;
                            part += 1;
                        }
                    }
                    continue;
                }
                _ => {
                    sum.skipped += 1;
                    continue;
                }
            };
            // The importer keeps the last IP of each core as the site of
            // the accesses that follow; a core shared by several threads
            // (a schedule) needs it before every access.
            if e.site != last_ip || scheduled {
                rows.insert(
                    (c, 2, id, i, 0),
                    (Tag::Plain, format!("{c},{core},{core},{:#x},IP,-", e.site)),
                );
                last_ip = e.site;
            }
            if matches!(op, Op::AtomicLoad | Op::AtomicExchange | Op::AtomicCas) {
                last_row = Some((e.addr, op, c, text.clone()));
            }
            rows.insert(
                (c, 2, id, i, 1),
                (Tag::Access(core.clone(), ident(id)), text),
            );
            sum.rows += 1;
        }
    }
    writeln!(
        out,
        "# lockscope hardware trace (written by `lockscope export --format hwtrace`)"
    )
    .map_err(io)?;
    writeln!(out, "#! clock_hz={}", opts.clock_hz).map_err(io)?;
    if t.header.cpus > 0 {
        writeln!(out, "#! cpus={}", t.header.cpus).map_err(io)?;
    }
    writeln!(out, "time,opoint,origin,address,operation,value").map_err(io)?;
    // The importer gives an access to the thread its core runs. Events of
    // different threads at one time have no order in a lockscope trace,
    // so schedule rows of equal times may come out in another order than
    // they went in: a THREAD row goes before any access whose core would
    // otherwise run another thread (and, for a trace without a schedule,
    // before each thread's first access on its own core).
    let mut running: HashMap<&str, u32> = HashMap::new();
    for ((c, ..), (tag, text)) in &rows {
        match tag {
            Tag::Sched(core, 0) => {
                running.remove(core.as_str());
            }
            Tag::Sched(core, who) => {
                running.retain(|_, w| w != who);
                running.insert(core, *who);
            }
            Tag::Access(core, who) if running.get(core.as_str()) != Some(who) => {
                let nm = thread_names.get(who).map_or("-", String::as_str);
                writeln!(out, "{c},{core},{core},{who},THREAD,{nm}").map_err(io)?;
                running.retain(|_, w| w != who);
                running.insert(core, *who);
            }
            _ => {}
        }
        writeln!(out, "{text}").map_err(io)?;
    }
    out.flush().map_err(io)?;
    Ok(sum)
}
