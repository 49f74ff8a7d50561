//! Synthetic traces with ground truth known by construction.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use lockscope_format::*;

pub const DONE: u8 = phase::DONE;
pub const BEGIN: u8 = phase::BEGIN;
pub const FAIL: u8 = phase::FAIL;
pub const END: u8 = phase::END;
pub const CONT: u8 = phase::DONE | phase::CONTENDED;
pub const CONT_FAIL: u8 = phase::FAIL | phase::CONTENDED;

pub struct Tb {
    pub header: Header,
    pub records: Vec<Record>,
    pub events: BTreeMap<u32, Vec<Event>>,
    pub duration: u64,
    /// Write threads' chunks in reverse id order (exercises the merge).
    pub reverse: bool,
    pub chunk: usize,
    pub truncate_by: usize,
}

impl Tb {
    pub fn new() -> Tb {
        let header = Header {
            tsc_hz: 1e9,
            command: vec!["./synthetic".into()],
            host: "test".into(),
            recorder_version: "test".into(),
            cpus: 2,
            cache_line: 64,
            ..Header::default()
        };
        let records = vec![Record::Process(Process {
            id: 1,
            pid: 100,
            parent: 0,
            exec_generation: 0,
            start_ns: 0,
            argv: vec!["./synthetic".into()],
            exe: "/nonexistent/synthetic".into(),
            swapped_lock: String::new(),
        })];
        Tb {
            header,
            records,
            events: BTreeMap::new(),
            duration: 0,
            reverse: true,
            chunk: 3,
            truncate_by: 0,
        }
    }

    /// A thread with trace id `id`, tid 100+id, living [start, end].
    pub fn thread(&mut self, id: u32, name: &str, start: u64, end: u64) -> &mut Self {
        self.records.push(Record::Thread(Thread {
            id,
            process: 1,
            tid: 100 + id,
            parent: 0,
            start_ns: start,
            name: name.into(),
        }));
        self.records.push(Record::ThreadEnd(ThreadEnd {
            thread: id,
            end_ns: end,
        }));
        self.duration = self.duration.max(end);
        self
    }

    pub fn overhead(&mut self, acquire: f64, release: f64, event: f64) -> &mut Self {
        self.records.push(Record::Overhead(Overhead {
            process: 1,
            acquire_ns: acquire,
            release_ns: release,
            event_ns: event,
        }));
        self
    }

    pub fn ev(
        &mut self,
        thread: u32,
        time: u64,
        op: Op,
        flags: u8,
        addr: u64,
        site: u64,
    ) -> &mut Self {
        self.ev_full(thread, time, op, flags, addr, site, 0, 0)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn ev_full(
        &mut self,
        thread: u32,
        time: u64,
        op: Op,
        flags: u8,
        addr: u64,
        site: u64,
        arg: u64,
        stack: u32,
    ) -> &mut Self {
        self.events.entry(thread).or_default().push(Event {
            time,
            op: op as u8,
            flags,
            addr,
            site,
            stack,
            arg,
            arg2: 0,
        });
        self
    }

    /// Uncontended lock at `t`, unlock at `u`.
    pub fn section(&mut self, thread: u32, t: u64, u: u64, addr: u64, site: u64) -> &mut Self {
        self.ev(thread, t, Op::MutexLock, DONE, addr, site);
        self.ev(thread, u, Op::MutexUnlock, DONE, addr, site + 0x100)
    }

    /// Contended: BEGIN at `b`, acquired at `a`, unlock at `u`.
    pub fn waited_section(
        &mut self,
        thread: u32,
        b: u64,
        a: u64,
        u: u64,
        addr: u64,
        site: u64,
    ) -> &mut Self {
        self.ev(thread, b, Op::MutexLock, BEGIN, addr, site);
        self.ev(thread, a, Op::MutexLock, CONT, addr, site);
        self.ev(thread, u, Op::MutexUnlock, DONE, addr, site + 0x100)
    }

    pub fn write(&self) -> tempfile::TempPath {
        let f = tempfile::Builder::new()
            .suffix(".lstrace")
            .tempfile()
            .unwrap();
        let (file, path) = f.into_parts();
        let mut w = TraceWriter::new(std::io::BufWriter::new(file), &self.header).unwrap();
        for r in &self.records {
            if !matches!(r, Record::ThreadEnd(_)) {
                w.write(r).unwrap();
            }
        }
        let mut threads: Vec<_> = self.events.keys().copied().collect();
        if self.reverse {
            threads.reverse();
        }
        // Interleave chunks of `chunk` events round-robin, in the order
        // above: thread order in the file disagrees with time order.
        let mut pos: BTreeMap<u32, usize> = BTreeMap::new();
        let mut n = 0u64;
        loop {
            let mut any = false;
            for &t in &threads {
                let ev = &self.events[&t];
                let p = pos.entry(t).or_default();
                if *p < ev.len() {
                    let end = (*p + self.chunk).min(ev.len());
                    w.write_events(t, &ev[*p..end]).unwrap();
                    n += (end - *p) as u64;
                    *p = end;
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
        for r in &self.records {
            if matches!(r, Record::ThreadEnd(_)) {
                w.write(r).unwrap();
            }
        }
        let inner = w
            .finish(&Footer {
                duration_ns: self.duration,
                events: n,
                lost: 0,
                exit_status: 0,
            })
            .unwrap();
        drop(inner);
        if self.truncate_by > 0 {
            let len = std::fs::metadata(&path).unwrap().len();
            let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            f.set_len(len - self.truncate_by as u64).unwrap();
        }
        path
    }
}

pub fn cfg() -> lockscope_report::ReportConfig {
    lockscope_report::ReportConfig {
        symbolize: false,
        ..Default::default()
    }
}

pub fn report(tb: &Tb) -> lockscope_report::Report {
    report_with(tb, &cfg())
}

pub fn report_with(tb: &Tb, c: &lockscope_report::ReportConfig) -> lockscope_report::Report {
    let p = tb.write();
    let path: PathBuf = p.to_path_buf();
    lockscope_report::analyze(&path, c, &mut |_, _, _| {}).unwrap()
}

pub fn lock(r: &lockscope_report::Report, addr: u64) -> &lockscope_report::report::LockOut {
    let a = format!("{addr:#x}");
    r.locks
        .iter()
        .find(|l| l.address == a)
        .unwrap_or_else(|| panic!("lock {a} not in report"))
}

pub fn thread(r: &lockscope_report::Report, id: u32) -> &lockscope_report::report::ThreadOut {
    r.threads.iter().find(|t| t.tid == 100 + id).unwrap()
}

/// Every thread's breakdown sums to its lifetime exactly.
pub fn assert_sums(r: &lockscope_report::Report) {
    for t in &r.threads {
        assert_eq!(
            t.free_ns + t.lock_ns + t.unlock_ns + t.hold_ns + t.unknown_ns,
            t.lifetime_ns,
            "thread {} breakdown",
            t.tid
        );
    }
}
