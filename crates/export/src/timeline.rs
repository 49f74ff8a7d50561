//! The trace laid out in time, for the viewers that show it (Perfetto,
//! speedscope, the HTML report): per thread, spans of waiting, holding,
//! unlocking and blocking; hand-offs from a release to the contended
//! acquisition it unblocked; the number of waiters per lock over time.
//!
//! Built from the steps of [`lockscope_trace::sync`] (the one
//! interpreter of the lock protocol) while they stream by: memory is the
//! interpreter's plus one entry per lock, and items are handed to the
//! caller as they are known (a span when it ends). Times are the recorded
//! clock (ns since the trace start), the same for every thread; the
//! overhead-corrected clock is per thread and cannot place threads side by
//! side.

// Fx: the keys are small ids, hashed once or more per event (as in the
// analysis crate); SipHash was a visible share of the writers' time.
use rustc_hash::FxHashMap as HashMap;
use std::path::Path;

use lockscope_trace::input::Meta;
use lockscope_trace::sync::{self, BlockedOn, ObjId, SegKind, StepKind};

use crate::ExportError;

/// What a thread does during a span.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SpanKind {
    /// Waiting to acquire a lock.
    Wait,
    /// In a raw futex wait (Rust std's and parking_lot's locks and
    /// condition variables, runtimes' own words). What the word is, a
    /// lock or a condition variable, is told only by the report, from the
    /// symbols of the code that waits on it ([`lockscope_report::Report`]
    /// lists the condition variables among `conds`).
    FutexWait,
    /// Holding a lock (one critical section).
    Hold,
    /// Inside an unlock that entered the kernel.
    Unlocking,
    /// Blocked in a condition wait.
    Cond,
    /// Blocked at a barrier.
    Barrier,
    /// Blocked on a semaphore.
    Sem,
    /// Blocked in pthread_join.
    Join,
    /// Blocked in a CUDA call that waits for the GPU.
    Gpu,
    /// A GPU stream running a kernel, copy or memset (rows of GPU
    /// streams in the HTML timeline; never a CPU thread's span).
    GpuWork,
}

impl SpanKind {
    /// Short lower-case name (`wait`, `hold`, ...).
    pub fn name(self) -> &'static str {
        match self {
            SpanKind::Wait => "wait",
            SpanKind::FutexWait => "futex wait",
            SpanKind::Hold => "hold",
            SpanKind::Unlocking => "unlock",
            SpanKind::Cond => "cond wait",
            SpanKind::Barrier => "barrier",
            SpanKind::Sem => "sem wait",
            SpanKind::Join => "join",
            SpanKind::Gpu => "GPU wait",
            SpanKind::GpuWork => "GPU work",
        }
    }
}

/// One thread of the trace.
#[derive(Clone, Debug)]
pub struct ThreadInfo {
    /// Trace thread id.
    pub id: u32,
    /// Trace process id.
    pub process: u32,
    /// OS pid.
    pub pid: u32,
    /// OS tid.
    pub tid: u32,
    /// Name (its last name in the trace).
    pub name: String,
    /// Start, ns since the trace start.
    pub start_ns: u64,
    /// End, ns (the trace's end when not recorded).
    pub end_ns: u64,
}

/// The threads of a trace, ordered by process then start.
pub fn threads(meta: &Meta) -> Vec<ThreadInfo> {
    let trace_end = meta
        .thread_ends
        .values()
        .copied()
        .max()
        .unwrap_or(0)
        .max(meta.footer.as_ref().map_or(0, |f| f.duration_ns));
    let mut v: Vec<ThreadInfo> = meta
        .threads
        .values()
        .map(|t| ThreadInfo {
            id: t.id,
            process: t.process,
            pid: meta.processes.get(&t.process).map_or(0, |p| p.pid),
            tid: t.tid,
            name: meta
                .thread_names
                .get(&t.id)
                .cloned()
                .unwrap_or_else(|| t.name.clone()),
            start_ns: t.start_ns,
            end_ns: meta.thread_ends.get(&t.id).copied().unwrap_or(trace_end),
        })
        .collect();
    v.sort_by_key(|t| (t.process, t.start_ns, t.id));
    v
}

/// One thing on the timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Item {
    /// A thread spent `[start_ns, end_ns]` in `kind` (on `obj`, if any).
    Span {
        /// Trace thread id.
        thread: u32,
        /// What.
        kind: SpanKind,
        /// The lock, condition variable, barrier or semaphore.
        obj: Option<ObjId>,
        /// Start, ns.
        start_ns: u64,
        /// End, ns.
        end_ns: u64,
        /// Return address of the call (0 if none).
        site: u64,
        /// Call path id (0 if none).
        stack: u32,
    },
    /// `to` acquired `lock` at `to_ns` after waiting, and `from` had
    /// released it at `from_ns` (the release that let it in). Comes right
    /// after the waiter's [`SpanKind::Wait`] span.
    HandOff {
        /// The lock.
        lock: ObjId,
        /// Releasing thread.
        from: u32,
        /// Release time, ns.
        from_ns: u64,
        /// Acquiring thread.
        to: u32,
        /// Acquisition time, ns.
        to_ns: u64,
    },
    /// A span of `thread` opens (its [`Item::Span`] follows when it ends;
    /// a wait whose call never completed has none). For consumers that
    /// must open frames in time order (speedscope).
    Begin {
        /// Trace thread id.
        thread: u32,
        /// What.
        kind: SpanKind,
        /// The object, if any.
        obj: Option<ObjId>,
        /// Start, ns.
        time_ns: u64,
        /// Return address of the call (0 if none).
        site: u64,
        /// Call path id (0 if none).
        stack: u32,
    },
    /// `thread`'s hold of `obj` ended at an unknown time (its release was
    /// lost, proved by another thread's section): no span follows.
    Dropped {
        /// Trace thread id.
        thread: u32,
        /// The lock.
        obj: ObjId,
        /// When it was noticed, ns.
        time_ns: u64,
    },
    /// Work that ran on a GPU (a kernel, copy or memset, from CUPTI's
    /// activity records), with what launched it when that was recorded.
    GpuWork {
        /// Trace process id.
        process: u32,
        /// Device.
        device: u32,
        /// CUDA stream id.
        stream: u32,
        /// Kernel, copy or memset.
        kind: lockscope_report::gpu::ActivityKind,
        /// Start on the GPU, ns.
        start_ns: u64,
        /// End, ns.
        end_ns: u64,
        /// CUPTI correlation id.
        correlation: u32,
        /// Trace thread that launched it (0: launch not recorded).
        launched_by: u32,
        /// The kernel's host function (0: unknown or not a kernel).
        func: u64,
        /// Launch call site (0: unknown).
        site: u64,
    },
    /// From `time_ns` on, `count` threads wait for `lock`.
    Waiters {
        /// The lock.
        lock: ObjId,
        /// When, ns.
        time_ns: u64,
        /// Threads queued.
        count: u32,
    },
}

/// Streams the timeline of a trace file (bounded memory). The
/// interpreter runs with overhead correction, which only affects the wait
/// figures it reports, not the recorded times used here (so steps of an
/// interpreter run either way give the same timeline).
pub fn scan(path: &Path, meta: &Meta, mut f: impl FnMut(Item)) -> Result<(), ExportError> {
    let mut tl = Timeline::new();
    sync::for_each_step(path, meta, true, |step, _| tl.step(step, &mut f))?;
    Ok(())
}

/// The timeline's state between steps: [`scan`]'s walk, for a caller that
/// gets the steps from a pass of its own (the HTML report takes them from
/// the report's analysis, [`lockscope_report::analyze_observed`], so
/// that the trace is read once for both).
#[derive(Default)]
pub struct Timeline {
    waiters: HashMap<ObjId, u32>,
    last_release: HashMap<ObjId, (u32, u64)>,
    pending_futex: HashMap<u32, ObjId>,
    // GPU launches by (process, correlation id): who launched the work
    // reported later (the launch comes first in time).
    launches: HashMap<(u32, u32), (u32, u64, u64)>,
}

impl Timeline {
    /// No step seen yet.
    pub fn new() -> Timeline {
        Timeline::default()
    }

    /// Takes the next step (in the order [`sync::for_each_step`] gives
    /// them) and hands what it ends or begins to `f`.
    #[inline]
    pub fn step(&mut self, step: &sync::Step<'_>, f: &mut impl FnMut(Item)) {
        let Timeline {
            waiters,
            last_release,
            pending_futex,
            launches,
        } = self;
        let mut queue = |lock: ObjId, time_ns: u64, delta: i32, f: &mut dyn FnMut(Item)| {
            let n = waiters.entry(lock).or_default();
            let new = (*n as i64 + i64::from(delta)).max(0) as u32;
            if new != *n {
                *n = new;
                f(Item::Waiters {
                    lock,
                    time_ns,
                    count: new,
                });
            }
        };
        let t = step.time;
        let seg_start = t.saturating_sub(step.segment.raw_ns);
        let span = |kind, obj, start_ns: u64, site, stack| Item::Span {
            thread: step.thread,
            kind,
            obj,
            start_ns: start_ns.min(t),
            end_ns: t,
            site,
            stack,
        };
        match step.kind {
            StepKind::AcquireBegin { lock } => queue(lock, t, 1, &mut *f),
            StepKind::FutexWaitBegin { futex } => {
                pending_futex.insert(step.thread, futex);
                queue(futex, t, 1, &mut *f);
            }
            StepKind::Acquired {
                section,
                waited,
                matched,
                ..
            } => {
                if matched {
                    queue(section.lock, t, -1, &mut *f);
                }
                if waited {
                    f(span(
                        SpanKind::Wait,
                        Some(section.lock),
                        section.attempt_ns,
                        section.site,
                        section.stack,
                    ));
                    if let Some(&(from, from_ns)) = last_release.get(&section.lock) {
                        if from != step.thread && from_ns >= section.attempt_ns && from_ns <= t {
                            f(Item::HandOff {
                                lock: section.lock,
                                from,
                                from_ns,
                                to: step.thread,
                                to_ns: t,
                            });
                        }
                    }
                }
            }
            StepKind::AcquireFailed { lock, matched, .. } if matched => {
                queue(lock, t, -1, &mut *f);
                f(span(
                    SpanKind::Wait,
                    Some(lock),
                    seg_start,
                    step.event.site,
                    0,
                ));
            }
            StepKind::Abandoned {
                queued: Some((lock, _)),
            } => queue(lock, t, -1, &mut *f),
            StepKind::FutexWaitEnd { futex, .. } => {
                if pending_futex.remove(&step.thread).is_some() {
                    queue(futex, t, -1, &mut *f);
                }
                if step.segment.kind == SegKind::Blocked(BlockedOn::Lock) {
                    f(span(
                        SpanKind::FutexWait,
                        Some(futex),
                        seg_start,
                        step.event.site,
                        0,
                    ));
                }
            }
            StepKind::Released(s) | StepKind::HeldAtExit(s) => {
                f(span(
                    SpanKind::Hold,
                    Some(s.lock),
                    s.begin_ns,
                    s.site,
                    s.stack,
                ));
                last_release.insert(s.lock, (step.thread, t));
            }
            StepKind::CondWaitBegin {
                released: Some(s), ..
            } => {
                f(span(
                    SpanKind::Hold,
                    Some(s.lock),
                    s.begin_ns,
                    s.site,
                    s.stack,
                ));
                last_release.insert(s.lock, (step.thread, t));
            }
            StepKind::ReleaseEnd { lock, .. } if step.segment.kind == SegKind::Unlocking => {
                f(span(
                    SpanKind::Unlocking,
                    Some(lock),
                    seg_start,
                    step.event.site,
                    0,
                ));
            }
            StepKind::CondWaitEnd { cond, .. } => f(span(
                SpanKind::Cond,
                Some(cond),
                seg_start,
                step.event.site,
                0,
            )),
            StepKind::BarrierDepart { barrier, .. }
                if step.segment.kind == SegKind::Blocked(BlockedOn::Barrier) =>
            {
                f(span(
                    SpanKind::Barrier,
                    Some(barrier),
                    seg_start,
                    step.event.site,
                    0,
                ));
            }
            StepKind::SemWaitEnd { sem, waited, .. } if waited => {
                f(span(
                    SpanKind::Sem,
                    Some(sem),
                    seg_start,
                    step.event.site,
                    0,
                ));
            }
            StepKind::JoinEnd { .. } if step.segment.kind == SegKind::Blocked(BlockedOn::Join) => {
                f(span(SpanKind::Join, None, seg_start, step.event.site, 0));
            }
            StepKind::GpuWaitEnd { .. }
                if step.segment.kind == SegKind::Blocked(BlockedOn::Gpu) =>
            {
                f(span(SpanKind::Gpu, None, seg_start, step.event.site, 0));
            }
            StepKind::HoldDropped(s) => f(Item::Dropped {
                thread: step.thread,
                obj: s.lock,
                time_ns: t,
            }),
            _ => {
                let e = step.event;
                if e.op == lockscope_format::Op::GpuLaunch as u8 {
                    launches.entry((step.process, e.arg as u32)).or_insert((
                        step.thread,
                        e.arg2,
                        e.site,
                    ));
                } else if e.op == lockscope_format::Op::GpuActivity as u8 && e.arg >= e.addr {
                    let corr = e.arg2 as u32;
                    let (launched_by, func, site) = launches
                        .get(&(step.process, corr))
                        .copied()
                        .unwrap_or((0, 0, 0));
                    f(Item::GpuWork {
                        process: step.process,
                        device: (e.site >> 32) as u32,
                        stream: e.site as u32,
                        kind: lockscope_report::gpu::ActivityKind::from_flags(e.flags),
                        start_ns: e.addr,
                        end_ns: e.arg,
                        correlation: corr,
                        launched_by,
                        func,
                        site,
                    });
                }
            }
        }
        // Openings, after what the step closed (a condition wait closes
        // the hold of its mutex, then opens the wait).
        let (e_site, e_stack) = (step.event.site, step.event.stack);
        let begin = match step.kind {
            StepKind::AcquireBegin { lock } => Some((SpanKind::Wait, Some(lock), e_site, e_stack)),
            StepKind::FutexWaitBegin { futex } => {
                Some((SpanKind::FutexWait, Some(futex), e_site, e_stack))
            }
            StepKind::Acquired { section, .. } | StepKind::CondWaitEnd { section, .. } => Some((
                SpanKind::Hold,
                Some(section.lock),
                section.site,
                section.stack,
            )),
            StepKind::CondWaitBegin { cond, .. } => {
                Some((SpanKind::Cond, Some(cond), e_site, e_stack))
            }
            StepKind::BarrierArrive { barrier, .. } => {
                Some((SpanKind::Barrier, Some(barrier), e_site, e_stack))
            }
            StepKind::SemWaitBegin { sem } => Some((SpanKind::Sem, Some(sem), e_site, e_stack)),
            StepKind::JoinBegin { .. } => Some((SpanKind::Join, None, e_site, e_stack)),
            StepKind::GpuWaitBegin { .. } => Some((SpanKind::Gpu, None, e_site, e_stack)),
            _ => None,
        };
        if let Some((kind, obj, site, stack)) = begin {
            f(Item::Begin {
                thread: step.thread,
                kind,
                obj,
                time_ns: t,
                site,
                stack,
            });
        }
    }
}
