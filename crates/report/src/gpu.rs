//! CPU-GPU idleness by blame shifting (Chabbi's thesis, ch. 2, §2.5-2.6).
//!
//! Input: the GPU events of a trace ([`Op::GpuLaunch`], [`Op::GpuSync`],
//! [`Op::GpuActivity`]) and the lock waits of the same threads. Output
//! ([`GpuReport`], schema [`SCHEMA`]): the thesis's metrics of Table 2.1,
//!
//! - GPU_IDLE_CAUSE: time the GPU sat idle, charged to the CPU code that
//!   was responsible for not feeding it;
//! - CPU_IDLE: time CPU threads spent in synchronizing calls (per path);
//! - CPU_IDLE_CAUSE: that time charged to the GPU work it waited for,
//!   shared equally between work items running at the same moment
//!   (§2.6.3), only work the call actually waits for (a stream
//!   synchronize waits for its stream only);
//! - GPU_EXECUTION_TIME, bytes host-to-device and device-to-host per
//!   launch context; copy/kernel overlap.
//!
//! # Attribution rule for GPU idleness (documented in docs/gpu.md)
//! The thesis samples the CPU to see what runs while the GPU idles.
//! lockscope has no CPU samples but has every launch and every wait, so an
//! idle gap `[a, b)` of a device (no activity of any stream) is charged:
//! 1. while a CPU thread sits in a synchronizing call that began before
//!    the gap (the GPU has finished, the call has not returned yet), to
//!    that call's path — the thesis's "delay in return from
//!    synchronization" (§2.6.2), which it also charges to the caller;
//! 2. the rest, to the thread and call path of the launch that ended the
//!    gap: that thread ran other code instead of feeding the GPU (the
//!    deferred blame of an asynchronous launch). Where that thread was
//!    waiting for a lock during the gap, the lock is named: a lock that
//!    starves the GPU is exactly what a lock profiler must show.
//!
//! The window is from the first GPU call or activity to the last; time
//! before the program's first CUDA call is not GPU idleness.

use std::collections::HashMap;

use lockscope_format::{phase, Event, Op};
use serde::Serialize;

/// JSON schema id of [`GpuReport`].
pub const SCHEMA: &str = "lockscope.gpu/1";

/// What a [`Op::GpuSync`] waits for (its `arg`).
pub mod sync_kind {
    /// The whole device (`cudaDeviceSynchronize`, `cudaFree`...).
    pub const DEVICE: u64 = 0;
    /// One stream (`cudaStreamSynchronize`; stream 0 means all).
    pub const STREAM: u64 = 1;
    /// An event (`cudaEventSynchronize`): its stream is not known, so
    /// every stream is taken as waited for.
    pub const EVENT: u64 = 2;
    /// A blocking copy (`cudaMemcpy`): waits for the device.
    pub const COPY: u64 = 3;
    /// Any other call that blocks on the GPU.
    pub const OTHER: u64 = 4;

    /// Display name.
    pub fn name(k: u64) -> &'static str {
        match k {
            DEVICE => "device synchronize",
            STREAM => "stream synchronize",
            EVENT => "event synchronize",
            COPY => "blocking copy",
            _ => "other GPU wait",
        }
    }
}

/// Kind of work that ran on the GPU (the `flags` of [`Op::GpuActivity`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum ActivityKind {
    /// A kernel.
    #[default]
    Kernel,
    /// Copy from host to device.
    CopyHtoD,
    /// Copy from device to host.
    CopyDtoH,
    /// Copy within or between devices.
    CopyDtoD,
    /// A memset.
    Memset,
    /// Any other copy.
    CopyOther,
}

impl ActivityKind {
    /// From the event's flags (unknown values read as `CopyOther`).
    pub fn from_flags(f: u8) -> ActivityKind {
        match f {
            0 => ActivityKind::Kernel,
            1 => ActivityKind::CopyHtoD,
            2 => ActivityKind::CopyDtoH,
            3 => ActivityKind::CopyDtoD,
            4 => ActivityKind::Memset,
            _ => ActivityKind::CopyOther,
        }
    }
    /// The flags value written by the recorder.
    pub fn to_flags(self) -> u8 {
        self as u8
    }
    /// Display name of a non-kernel activity.
    pub fn name(self) -> &'static str {
        match self {
            ActivityKind::Kernel => "kernel",
            ActivityKind::CopyHtoD => "copy host-to-device",
            ActivityKind::CopyDtoH => "copy device-to-host",
            ActivityKind::CopyDtoD => "copy device-to-device",
            ActivityKind::Memset => "memset",
            ActivityKind::CopyOther => "copy",
        }
    }
    fn is_copy(self) -> bool {
        !matches!(self, ActivityKind::Kernel)
    }
}

/// Reads a trace file (bounded memory: the time-ordered merge of
/// [`lockscope_trace::input`]) and computes its [`GpuReport`]. With `symbolize`,
/// code addresses are named from the recorded binaries (function and
/// line), else `module+offset`.
pub fn analyze(
    path: &std::path::Path,
    symbolize: bool,
) -> Result<GpuReport, lockscope_trace::AnalysisError> {
    let meta = lockscope_trace::input::index(path, &mut |_, _| {})?;
    analyze_indexed(path, &meta, symbolize)
}

/// [`analyze`] of a trace already indexed as `meta` (the report indexes
/// once for all its sections).
pub fn analyze_indexed(
    path: &std::path::Path,
    meta: &lockscope_trace::input::Meta,
    symbolize: bool,
) -> Result<GpuReport, lockscope_trace::AnalysisError> {
    let threads = meta
        .threads
        .iter()
        .map(|(&t, th)| (t, th.process))
        .collect();
    let mut g = GpuAnalyzer::new(threads);
    let mut end = meta.thread_ends.values().copied().max().unwrap_or(0);
    // Lock waits come from the one interpreter of the lock protocol;
    // GPU events are data the layer passes through.
    lockscope_trace::sync::for_each_step(path, meta, false, |s, _| {
        end = end.max(s.time);
        g.step(s);
    })?;
    let mut sym = lockscope_symbols::Symbolizer::for_meta(meta, symbolize);
    if symbolize {
        g.prefer_sourced_frames(meta, &mut sym);
    }
    let mut name = |process: u32, pc: u64| {
        if pc == 0 {
            return "(unknown)".to_string();
        }
        sym.code(process, pc).short()
    };
    Ok(g.finish(end, &mut name))
}

/// Packs the fields of an [`Op::GpuActivity`] event (used by the recorder
/// and by tests; the inverse of what [`GpuAnalyzer`] reads).
#[allow(clippy::too_many_arguments)]
pub fn activity_event(
    delivered: u64,
    kind: ActivityKind,
    start: u64,
    end: u64,
    correlation: u32,
    bytes: u64,
    stream: u32,
    device: u32,
) -> Event {
    Event {
        time: delivered,
        op: Op::GpuActivity as u8,
        flags: kind.to_flags(),
        addr: start,
        arg: end,
        arg2: u64::from(correlation) | (bytes.min(u64::from(u32::MAX)) << 32),
        site: u64::from(stream) | (u64::from(device) << 32),
        stack: 0,
    }
}

/// How [`GpuReport`] names code: `(process, pc) -> text`. The CLI passes
/// a symbolizer; tests pass a table.
pub type Namer<'a> = dyn FnMut(u32, u64) -> String + 'a;

#[derive(Clone, Copy, Debug)]
struct Launch {
    thread: u32,
    time: u64,
    stream: u64,
    site: u64,
    /// The call's recorded path (0: none), the site first.
    stack: u32,
    func: u64,
}

#[derive(Clone, Copy, Debug)]
struct Activity {
    process: u32,
    kind: ActivityKind,
    start: u64,
    end: u64,
    corr: u32,
    bytes: u64,
    device: u32,
}

#[derive(Clone, Copy, Debug)]
struct SyncCall {
    thread: u32,
    process: u32,
    begin: u64,
    end: u64,
    stream: u64,
    kind: u64,
    site: u64,
    /// The call's recorded path (0: none), the site first.
    stack: u32,
}

/// Streaming collector: feed every event of every thread (each thread's
/// events in their recorded order; threads in any order), then
/// [`GpuAnalyzer::finish`].
#[derive(Default)]
pub struct GpuAnalyzer {
    thread_process: HashMap<u32, u32>,
    launches: HashMap<(u32, u32), Launch>,
    activities: Vec<Activity>,
    syncs: Vec<SyncCall>,
    open_sync: HashMap<u32, Event>,
    /// Contended lock waits per thread: (begin, end, lock address).
    waits: HashMap<u32, Vec<(u64, u64, u64)>>,
    /// Sync calls that never returned (still waiting at the end).
    unreturned: u64,
    /// Launches with a correlation id seen twice (kept: the first).
    duplicate_correlations: u64,
}

/// Code nvcc writes for every kernel: the host stub of `kernel<<<...>>>`
/// (`__device_stub__...` in a `*.stub.c` file, with the runtime's
/// `__cudaLaunchKernel_helper` inlined into it). It has source lines, but
/// names the kernel, not the program's call: the caller is the site.
fn nvcc_generated(loc: &lockscope_symbols::Location) -> bool {
    loc.frames.iter().any(|f| {
        f.function.as_deref().is_some_and(|n| {
            n.starts_with("__device_stub__") || n.starts_with("__cudaLaunchKernel")
        }) || f.file.as_deref().is_some_and(|p| p.ends_with(".stub.c"))
    })
}

impl GpuAnalyzer {
    /// An empty analyzer. `thread_process` maps trace thread ids to trace
    /// process ids (correlation ids are per process).
    pub fn new(thread_process: HashMap<u32, u32>) -> Self {
        GpuAnalyzer {
            thread_process,
            ..Default::default()
        }
    }

    /// Feeds one step of the synchronization layer (every step of every
    /// thread, in time order): lock waits from `Acquired` steps, GPU
    /// events from their raw event.
    pub fn step(&mut self, s: &lockscope_trace::sync::Step<'_>) {
        use lockscope_trace::sync::StepKind;
        match s.kind {
            StepKind::Acquired {
                section,
                waited: true,
                ..
            } => {
                // Only waits inside the GPU window can overlap its idle
                // gaps; before the first GPU call nothing is kept (a
                // lock-heavy program must not grow this list for nothing).
                if self.launches.is_empty() && self.syncs.is_empty() && self.open_sync.is_empty() {
                    return;
                }
                if section.begin_ns > section.attempt_ns {
                    self.waits.entry(s.thread).or_default().push((
                        section.attempt_ns,
                        section.begin_ns,
                        section.lock.addr,
                    ));
                }
            }
            _ => {
                let op = s.event.op;
                if (Op::GpuLaunch as u8..=Op::GpuActivity as u8).contains(&op) {
                    self.event(s.thread, s.event);
                }
            }
        }
    }

    /// Feeds one GPU event ([`Op::GpuLaunch`], [`Op::GpuSync`],
    /// [`Op::GpuActivity`]) of trace thread `thread`; other events are
    /// ignored (lock waits come through [`GpuAnalyzer::step`]).
    pub fn event(&mut self, thread: u32, e: &Event) {
        let process = self.thread_process.get(&thread).copied().unwrap_or(0);
        let Some(op) = e.op() else { return };
        match op {
            Op::GpuLaunch => {
                let key = (process, e.arg as u32);
                if self.launches.contains_key(&key) {
                    self.duplicate_correlations += 1;
                    return;
                }
                self.launches.insert(
                    key,
                    Launch {
                        thread,
                        time: e.time,
                        stream: e.addr,
                        site: e.site,
                        stack: e.stack,
                        func: e.arg2,
                    },
                );
            }
            Op::GpuSync => match e.phase() {
                phase::BEGIN => {
                    self.open_sync.insert(thread, *e);
                }
                _ => {
                    // END (or DONE for a call recorded in one event).
                    let b = self.open_sync.remove(&thread);
                    let begin = match (e.phase(), b) {
                        (phase::DONE, _) => e.time,
                        (_, Some(b)) => b.time,
                        (_, None) => return,
                    };
                    let (site, stack) = b
                        .map(|b| (b.site, b.stack))
                        .filter(|&(s, _)| s != 0)
                        .unwrap_or((e.site, e.stack));
                    self.syncs.push(SyncCall {
                        thread,
                        process,
                        begin,
                        end: e.time.max(begin),
                        stream: e.addr,
                        kind: e.arg,
                        site,
                        stack,
                    });
                }
            },
            Op::GpuActivity => {
                let (start, end) = (e.addr, e.arg);
                if end < start {
                    return;
                }
                self.activities.push(Activity {
                    process,
                    kind: ActivityKind::from_flags(e.flags),
                    start,
                    end,
                    corr: e.arg2 as u32,
                    bytes: e.arg2 >> 32,
                    device: (e.site >> 32) as u32,
                });
            }
            _ => {}
        }
    }

    /// Moves each launch's and wait's site to the first frame of its
    /// recorded path that has a source line and is not nvcc's launch stub,
    /// when its own site is not such a frame.
    /// Why: a program linked with nvcc's default static CUDA runtime
    /// calls CUDA through the runtime's code inside its own executable,
    /// which the recorder cannot tell from the program's (both are the
    /// same file), so the recorded site is the runtime's and has no line;
    /// the program's own frame is a few callers out (seen on an H100:
    /// every launch and wait named `program+0x703fd`). A path with no
    /// sourced frame keeps its site.
    pub fn prefer_sourced_frames(
        &mut self,
        meta: &lockscope_trace::input::Meta,
        sym: &mut lockscope_symbols::Symbolizer,
    ) {
        let mut chosen: HashMap<(u32, u32), Option<u64>> = HashMap::new();
        let mut pick = |process: u32, site: u64, stack: u32| -> u64 {
            if stack == 0 {
                return site;
            }
            let best = *chosen.entry((process, stack)).or_insert_with(|| {
                let frames = meta.stacks.get(&stack).map(|s| s.frames.as_slice())?;
                let mut users = |f: &u64| {
                    let loc = sym.code(process, *f);
                    loc.file_line().is_some() && !nvcc_generated(&loc)
                };
                if frames.first().is_some_and(&mut users) {
                    return None;
                }
                frames.iter().find(|f| users(f)).copied()
            });
            best.unwrap_or(site)
        };
        for ((process, _), l) in self.launches.iter_mut() {
            l.site = pick(*process, l.site, l.stack);
        }
        for s in &mut self.syncs {
            s.site = pick(s.process, s.site, s.stack);
        }
    }

    /// Computes the report. `end_ns` is the end of the trace (a sync call
    /// still open then is closed there); `name_code` names code addresses.
    pub fn finish(mut self, end_ns: u64, name_code: &mut Namer<'_>) -> GpuReport {
        for (thread, b) in std::mem::take(&mut self.open_sync) {
            self.unreturned += 1;
            let process = self.thread_process.get(&thread).copied().unwrap_or(0);
            self.syncs.push(SyncCall {
                thread,
                process,
                begin: b.time,
                end: end_ns.max(b.time),
                stream: b.addr,
                kind: b.arg,
                site: b.site,
                stack: b.stack,
            });
        }
        self.activities
            .sort_by_key(|a| (a.start, a.end, a.process, a.corr));
        self.syncs.sort_by_key(|s| (s.begin, s.thread));
        for v in self.waits.values_mut() {
            v.sort_unstable();
        }
        let mut r = GpuReport {
            schema: SCHEMA,
            ..Default::default()
        };
        if self.activities.is_empty() && self.launches.is_empty() && self.syncs.is_empty() {
            r.verdict = "no GPU activity in this trace (the program made no CUDA calls, \
                         or it was recorded without GPU capture)"
                .into();
            return r;
        }
        r.has_gpu = true;
        r.unreturned_syncs = self.unreturned;
        r.duplicate_correlations = self.duplicate_correlations;
        // The window: first GPU call or activity to the last.
        let first = self
            .activities
            .iter()
            .map(|a| a.start)
            .chain(self.launches.values().map(|l| l.time))
            .chain(self.syncs.iter().map(|s| s.begin))
            .min()
            .unwrap_or(0);
        let last = self
            .activities
            .iter()
            .map(|a| a.end)
            .chain(self.launches.values().map(|l| l.time))
            .chain(self.syncs.iter().map(|s| s.end))
            .max()
            .unwrap_or(first);
        r.window_start_ns = first;
        r.window_ns = last - first;

        self.gpu_time(&mut r, name_code);
        self.cpu_idle(&mut r, name_code);
        self.gpu_idle(&mut r, first, last, name_code);
        r.finalize();
        r
    }

    /// GPU_EXECUTION_TIME and bytes per (kind, name, launch context);
    /// copy/kernel overlap.
    fn gpu_time(&self, r: &mut GpuReport, name_code: &mut Namer<'_>) {
        let mut rows: HashMap<(ActivityKind, String, String), WorkRow> = HashMap::new();
        for a in &self.activities {
            let (name, ctx, thread) = self.describe(a, name_code);
            let row = rows
                .entry((a.kind, name.clone(), ctx.clone()))
                .or_insert_with(|| WorkRow {
                    kind: a.kind,
                    name,
                    launched_at: ctx,
                    thread,
                    ..Default::default()
                });
            row.count += 1;
            row.gpu_ns += a.end - a.start;
            row.bytes += a.bytes;
            match a.kind {
                ActivityKind::CopyHtoD => r.h2d_bytes += a.bytes,
                ActivityKind::CopyDtoH => r.d2h_bytes += a.bytes,
                _ => {}
            }
            if self.launches.contains_key(&(a.process, a.corr)) {
                r.correlated += 1;
            } else {
                r.uncorrelated += 1;
            }
        }
        r.work = rows.into_values().collect();
        let kernels = union(
            self.activities
                .iter()
                .filter(|a| !a.kind.is_copy())
                .map(|a| (a.start, a.end)),
        );
        let copies = union(
            self.activities
                .iter()
                .filter(|a| a.kind.is_copy())
                .map(|a| (a.start, a.end)),
        );
        r.kernel_ns = total(&kernels);
        r.copy_ns = total(&copies);
        r.copy_kernel_overlap_ns = intersect_len(&kernels, &copies);
    }

    /// Name of an activity (kernel name or copy kind), its launch context
    /// and launching thread.
    fn describe(&self, a: &Activity, name_code: &mut Namer<'_>) -> (String, String, u32) {
        match self.launches.get(&(a.process, a.corr)) {
            Some(l) => {
                let name = match a.kind {
                    // The namer reads return addresses (it looks up
                    // pc - 1); a function's entry is named through pc + 1.
                    ActivityKind::Kernel if l.func != 0 => name_code(a.process, l.func + 1),
                    ActivityKind::Kernel => "kernel".to_string(),
                    k => k.name().to_string(),
                };
                (name, name_code(a.process, l.site), l.thread)
            }
            None => (a.kind.name().to_string(), "(launch not recorded)".into(), 0),
        }
    }

    /// CPU_IDLE per sync path and CPU_IDLE_CAUSE per GPU work item.
    fn cpu_idle(&self, r: &mut GpuReport, name_code: &mut Namer<'_>) {
        let mut cause: HashMap<(ActivityKind, String, String), u64> = HashMap::new();
        let mut paths: HashMap<(u32, String, u64), CpuRow> = HashMap::new();
        for s in &self.syncs {
            let len = s.end - s.begin;
            r.cpu_wait_ns += len;
            let path = name_code(s.process, s.site);
            let row = paths
                .entry((s.thread, path.clone(), s.kind))
                .or_insert_with(|| CpuRow {
                    thread: s.thread,
                    path,
                    what: sync_kind::name(s.kind),
                    ..Default::default()
                });
            row.calls += 1;
            row.cpu_wait_ns += len;
            // The GPU work this call waits for, clipped to the call.
            let all_streams = s.kind != sync_kind::STREAM || s.stream == 0;
            let mut items: Vec<(u64, u64, usize)> = Vec::new();
            let hi = self.activities.partition_point(|a| a.start < s.end);
            for (i, a) in self.activities[..hi].iter().enumerate() {
                if a.process != s.process || a.end <= s.begin {
                    continue;
                }
                if !all_streams {
                    match self.launches.get(&(a.process, a.corr)) {
                        Some(l) if l.stream == s.stream => {}
                        _ => continue,
                    }
                }
                items.push((a.start.max(s.begin), a.end.min(s.end), i));
            }
            // §2.6.3: sweep the boundaries; in each elementary interval
            // the n items running share its length equally.
            let mut bounds: Vec<u64> = items.iter().flat_map(|&(b, e, _)| [b, e]).collect();
            bounds.sort_unstable();
            bounds.dedup();
            let mut blamed = 0u64;
            for w in bounds.windows(2) {
                let (x, y) = (w[0], w[1]);
                let active: Vec<usize> = items
                    .iter()
                    .filter(|&&(b, e, _)| b <= x && e >= y)
                    .map(|&(_, _, i)| i)
                    .collect();
                if active.is_empty() {
                    continue;
                }
                let n = active.len() as u64;
                let share = (y - x) / n;
                let rem = (y - x) % n;
                for (k, &i) in active.iter().enumerate() {
                    let a = &self.activities[i];
                    let (name, ctx, _) = self.describe(a, name_code);
                    // The remainder goes to the first items, so shares sum
                    // exactly to the interval.
                    *cause.entry((a.kind, name, ctx)).or_default() +=
                        share + u64::from((k as u64) < rem);
                }
                blamed += y - x;
            }
            row.blamed_on_gpu_ns += blamed;
        }
        for w in &mut r.work {
            w.cpu_idle_caused_ns = cause
                .remove(&(w.kind, w.name.clone(), w.launched_at.clone()))
                .unwrap_or(0);
        }
        r.cpu_paths = paths.into_values().collect();
    }

    /// GPU_IDLE_CAUSE: the idle gaps of each device, charged by the rule
    /// in the module doc.
    fn gpu_idle(&self, r: &mut GpuReport, first: u64, last: u64, name_code: &mut Namer<'_>) {
        let mut devices: Vec<u32> = self.activities.iter().map(|a| a.device).collect();
        devices.sort_unstable();
        devices.dedup();
        if devices.is_empty() {
            devices.push(0);
        }
        r.devices = devices.len() as u32;
        // Launches in time order, for "the launch that ended the gap".
        let mut launches: Vec<(u64, u32, u32)> = self
            .launches
            .iter()
            .map(|(&(p, c), l)| (l.time, p, c))
            .collect();
        launches.sort_unstable();
        let mut blame: HashMap<(u32, String, &'static str), IdleRow> = HashMap::new();
        for &dev in &devices {
            let busy = union(
                self.activities
                    .iter()
                    .filter(|a| a.device == dev)
                    .map(|a| (a.start, a.end)),
            );
            for (a, b) in gaps(&busy, first, last) {
                r.gpu_idle_ns += b - a;
                let mut rest = vec![(a, b)];
                // Rule 1: syncs that began before the gap and are still
                // waiting (the GPU is done; the call has not returned).
                for s in &self.syncs {
                    if s.begin > a || s.end <= a {
                        continue;
                    }
                    let part = (a, s.end.min(b));
                    let taken = take(&mut rest, part);
                    if taken > 0 {
                        let path = name_code(s.process, s.site);
                        let row = blame
                            .entry((s.thread, path.clone(), "sync"))
                            .or_insert_with(|| IdleRow {
                                thread: s.thread,
                                path,
                                why: "returning from a GPU wait after the GPU finished",
                                ..Default::default()
                            });
                        row.gpu_idle_caused_ns += taken;
                    }
                }
                let left: u64 = rest.iter().map(|&(x, y)| y - x).sum();
                if left == 0 {
                    continue;
                }
                // Rule 2: the first launch issued after the gap began (to
                // this device), else the launch of the work that ended it.
                let i = launches.partition_point(|&(t, _, _)| t < a);
                let next = launches[i..]
                    .iter()
                    .find(|&&(_, p, c)| self.launch_device(p, c).is_none_or(|d| d == dev))
                    .copied()
                    .or_else(|| {
                        self.activities
                            .iter()
                            .find(|x| x.device == dev && x.start >= b)
                            .and_then(|x| {
                                self.launches
                                    .get(&(x.process, x.corr))
                                    .map(|l| (l.time, x.process, x.corr))
                            })
                    });
                let Some((_, p, c)) = next else {
                    r.gpu_idle_unattributed_ns += left;
                    continue;
                };
                let l = self.launches[&(p, c)];
                let path = name_code(p, l.site);
                let row = blame
                    .entry((l.thread, path.clone(), "launch"))
                    .or_insert_with(|| IdleRow {
                        thread: l.thread,
                        path,
                        why: "running other code before this launch",
                        ..Default::default()
                    });
                row.gpu_idle_caused_ns += left;
                row.gaps += 1;
                // Which locks that thread waited for meanwhile.
                if let Some(w) = self.waits.get(&l.thread) {
                    for &(x, y) in &rest {
                        let lo = w.partition_point(|&(_, e, _)| e <= x);
                        for &(wb, we, lock) in &w[lo..] {
                            if wb >= y {
                                break;
                            }
                            let ov = we.min(y).saturating_sub(wb.max(x));
                            if ov > 0 {
                                *row.lock_waits.entry(lock).or_default() += ov;
                            }
                        }
                    }
                }
            }
        }
        r.gpu_idle_causes = blame
            .into_values()
            .map(|mut row| {
                let mut locks: Vec<(u64, u64)> = row.lock_waits.drain().collect();
                locks.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                row.waiting_for_locks = locks
                    .into_iter()
                    .map(|(addr, ns)| LockShare {
                        lock: format!("{addr:#x}"),
                        ns,
                    })
                    .collect();
                row
            })
            .collect();
    }

    fn launch_device(&self, process: u32, corr: u32) -> Option<u32> {
        self.activities
            .iter()
            .find(|a| a.process == process && a.corr == corr)
            .map(|a| a.device)
    }
}

/// One GPU work item kind, by name and launch context.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WorkRow {
    /// Kernel, copy or memset.
    pub kind: ActivityKind,
    /// Kernel name (symbolized host function) or the copy's kind.
    pub name: String,
    /// Call path (innermost frame) of the launch.
    pub launched_at: String,
    /// Trace id of the launching thread (0 if the launch is unknown).
    pub thread: u32,
    /// Executions.
    pub count: u64,
    /// GPU_EXECUTION_TIME: time on the GPU, ns.
    pub gpu_ns: u64,
    /// Bytes moved (copies).
    pub bytes: u64,
    /// CPU_IDLE_CAUSE: CPU time spent waiting for this work, ns.
    pub cpu_idle_caused_ns: u64,
}

/// One CPU call path that waited for the GPU.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CpuRow {
    /// Trace id of the thread.
    pub thread: u32,
    /// The synchronizing call's site.
    pub path: String,
    /// Kind of wait.
    pub what: &'static str,
    /// Calls.
    pub calls: u64,
    /// CPU_IDLE: time in the calls, ns.
    pub cpu_wait_ns: u64,
    /// Of that, time some GPU work it waited for was running (the rest:
    /// the GPU had finished or not started).
    pub blamed_on_gpu_ns: u64,
}

/// A lock a thread waited for while the GPU idled.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LockShare {
    /// Lock address.
    pub lock: String,
    /// Overlap of its waits with the GPU's idle time, ns.
    pub ns: u64,
}

/// CPU code charged with GPU idleness (GPU_IDLE_CAUSE).
#[derive(Clone, Debug, Default, Serialize)]
pub struct IdleRow {
    /// Trace id of the thread.
    pub thread: u32,
    /// Call path (innermost frame) of the launch or wait charged.
    pub path: String,
    /// Why it is charged.
    pub why: &'static str,
    /// GPU idle time charged, ns.
    pub gpu_idle_caused_ns: u64,
    /// Idle gaps this launch ended.
    pub gaps: u64,
    /// Locks the thread waited for during those gaps, most first.
    pub waiting_for_locks: Vec<LockShare>,
    #[serde(skip)]
    lock_waits: HashMap<u64, u64>,
}

/// Result of [`GpuAnalyzer::finish`] (schema [`SCHEMA`]).
#[derive(Clone, Debug, Default, Serialize)]
pub struct GpuReport {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// False when the trace has no GPU events (the rest is empty).
    pub has_gpu: bool,
    /// Start of the GPU window, ns since trace start.
    pub window_start_ns: u64,
    /// Length of the window (first GPU call or activity to the last).
    pub window_ns: u64,
    /// GPUs seen (devices that ran work).
    pub devices: u32,
    /// Time no work ran on the GPU(s) within the window, summed over
    /// devices.
    pub gpu_idle_ns: u64,
    /// `gpu_idle_ns / (window_ns * devices)`.
    pub gpu_idle_fraction: f64,
    /// GPU idle time that no launch or wait could be charged with.
    pub gpu_idle_unattributed_ns: u64,
    /// Time CPU threads spent in synchronizing calls.
    pub cpu_wait_ns: u64,
    /// Time kernels ran (union over streams).
    pub kernel_ns: u64,
    /// Time copies ran (union).
    pub copy_ns: u64,
    /// Time copies and kernels ran at once.
    pub copy_kernel_overlap_ns: u64,
    /// Bytes copied host to device.
    pub h2d_bytes: u64,
    /// Bytes copied device to host.
    pub d2h_bytes: u64,
    /// Activities matched to their launch.
    pub correlated: u64,
    /// Activities whose launch was not recorded.
    pub uncorrelated: u64,
    /// Synchronizing calls still waiting when the trace ended.
    pub unreturned_syncs: u64,
    /// Launch events whose correlation id had been seen before.
    pub duplicate_correlations: u64,
    /// GPU work, most CPU idleness caused first.
    pub work: Vec<WorkRow>,
    /// CPU waits for the GPU, longest first.
    pub cpu_paths: Vec<CpuRow>,
    /// CPU code charged with GPU idleness, most first.
    pub gpu_idle_causes: Vec<IdleRow>,
    /// One line: what dominates, and what to do.
    pub verdict: String,
}

impl GpuReport {
    fn finalize(&mut self) {
        // Idle is summed over devices; the window is per device.
        let devices = u64::from(self.devices.max(1));
        self.gpu_idle_fraction = if self.window_ns == 0 {
            0.0
        } else {
            self.gpu_idle_ns as f64 / (self.window_ns * devices) as f64
        };
        self.work.sort_by(|a, b| {
            (b.cpu_idle_caused_ns, b.gpu_ns, &a.name, &a.launched_at).cmp(&(
                a.cpu_idle_caused_ns,
                a.gpu_ns,
                &b.name,
                &b.launched_at,
            ))
        });
        self.cpu_paths.sort_by(|a, b| {
            (b.cpu_wait_ns, a.thread, &a.path).cmp(&(a.cpu_wait_ns, b.thread, &b.path))
        });
        self.gpu_idle_causes.sort_by(|a, b| {
            (b.gpu_idle_caused_ns, a.thread, &a.path).cmp(&(
                a.gpu_idle_caused_ns,
                b.thread,
                &b.path,
            ))
        });
        self.verdict = self.make_verdict();
    }

    fn make_verdict(&self) -> String {
        let pct = |x: u64| 100.0 * x as f64 / self.window_ns.max(1) as f64;
        let idle = 100.0 * self.gpu_idle_fraction;
        let mut s = format!("the GPU is idle {idle:.0}% of the time");
        if let Some(top) = self
            .gpu_idle_causes
            .first()
            .filter(|t| t.gpu_idle_caused_ns > 0)
        {
            s += &format!(
                "; {:.0}% of the run it waits while thread {} is {} ({})",
                pct(top.gpu_idle_caused_ns),
                top.thread,
                if top.why.starts_with("returning") {
                    "returning from a GPU wait"
                } else {
                    "running other code before its next launch"
                },
                top.path
            );
            if let Some(l) = top.waiting_for_locks.first() {
                s += &format!(
                    ", {:.0}% of that waiting for lock {}",
                    100.0 * l.ns as f64 / top.gpu_idle_caused_ns as f64,
                    l.lock
                );
            }
        }
        if let Some(c) = self.cpu_paths.first().filter(|c| c.cpu_wait_ns > 0) {
            s += &format!(
                "; CPU threads wait {:.0}% of the run for the GPU, most in {} on thread {}",
                pct(self.cpu_wait_ns),
                c.what,
                c.thread
            );
            if let Some(k) = self.work.first().filter(|k| k.cpu_idle_caused_ns > 0) {
                s += &format!(", mostly for {} ({})", k.name, k.launched_at);
            }
        }
        s
    }
}

/// Renders the report as text.
pub fn render_text(r: &GpuReport, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    if !r.has_gpu {
        return writeln!(out, "{}", r.verdict);
    }
    use lockscope_text::units::pct;
    // Column figures below are numbers in a column headed "ms".
    let ms = |ns: u64| ns as f64 / 1e6;
    let ms_text = lockscope_text::units::ms;
    writeln!(out, "GPU: {}", r.verdict)?;
    writeln!(
        out,
        "window {}: GPU idle {} ({}), kernels {}, copies {} \
         ({} overlapped with kernels), CPU waiting for the GPU {}",
        ms_text(r.window_ns),
        ms_text(r.gpu_idle_ns),
        pct(r.gpu_idle_fraction),
        ms_text(r.kernel_ns),
        ms_text(r.copy_ns),
        ms_text(r.copy_kernel_overlap_ns),
        ms_text(r.cpu_wait_ns)
    )?;
    writeln!(
        out,
        "bytes host-to-device {}, device-to-host {}",
        r.h2d_bytes, r.d2h_bytes
    )?;
    writeln!(out, "\nWHO MAKES THE GPU WAIT (GPU_IDLE_CAUSE)")?;
    writeln!(
        out,
        "{:>12}  {:>6}  {:<40}  why",
        "idle ms", "thread", "path"
    )?;
    for c in r.gpu_idle_causes.iter().take(10) {
        writeln!(
            out,
            "{:>12.3}  {:>6}  {:<40}  {}",
            ms(c.gpu_idle_caused_ns),
            c.thread,
            c.path,
            c.why
        )?;
        for l in c.waiting_for_locks.iter().take(3) {
            writeln!(
                out,
                "{:>12}  {:>6}    waiting for lock {} {}",
                "",
                "",
                l.lock,
                ms_text(l.ns)
            )?;
        }
    }
    if r.gpu_idle_unattributed_ns > 0 {
        writeln!(
            out,
            "{:>12.3}  (no launch or wait to charge)",
            ms(r.gpu_idle_unattributed_ns)
        )?;
    }
    writeln!(out, "\nWHAT THE CPU WAITS FOR (CPU_IDLE_CAUSE)")?;
    writeln!(
        out,
        "{:>12}  {:>10}  {:>7}  {:<24}  {:<30}",
        "caused ms", "gpu ms", "count", "work", "launched at"
    )?;
    for w in r.work.iter().take(10) {
        writeln!(
            out,
            "{:>12.3}  {:>10.3}  {:>7}  {:<24}  {:<30}",
            ms(w.cpu_idle_caused_ns),
            ms(w.gpu_ns),
            w.count,
            w.name,
            w.launched_at
        )?;
    }
    writeln!(out, "\nCPU WAITS (CPU_IDLE)")?;
    writeln!(
        out,
        "{:>12}  {:>6}  {:>6}  {:<20}  path",
        "wait ms", "thread", "calls", "kind"
    )?;
    for c in r.cpu_paths.iter().take(10) {
        writeln!(
            out,
            "{:>12.3}  {:>6}  {:>6}  {:<20}  {}",
            ms(c.cpu_wait_ns),
            c.thread,
            c.calls,
            c.what,
            c.path
        )?;
    }
    if r.uncorrelated > 0 || r.unreturned_syncs > 0 {
        writeln!(
            out,
            "\nnote: {} GPU activities had no recorded launch; {} GPU waits had not returned \
             when the trace ended",
            r.uncorrelated, r.unreturned_syncs
        )?;
    }
    Ok(())
}

/// Union of intervals, sorted and merged.
fn union(it: impl Iterator<Item = (u64, u64)>) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = it.filter(|&(a, b)| b > a).collect();
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (a, b) in v {
        match out.last_mut() {
            Some(l) if a <= l.1 => l.1 = l.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

fn total(v: &[(u64, u64)]) -> u64 {
    v.iter().map(|&(a, b)| b - a).sum()
}

/// Length of the intersection of two sorted, disjoint interval lists.
fn intersect_len(x: &[(u64, u64)], y: &[(u64, u64)]) -> u64 {
    let (mut i, mut j, mut n) = (0, 0, 0);
    while i < x.len() && j < y.len() {
        let lo = x[i].0.max(y[j].0);
        let hi = x[i].1.min(y[j].1);
        if hi > lo {
            n += hi - lo;
        }
        if x[i].1 < y[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    n
}

/// The complement of `busy` within `[first, last)`.
fn gaps(busy: &[(u64, u64)], first: u64, last: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut t = first;
    for &(a, b) in busy {
        if a > t {
            out.push((t, a.min(last)));
        }
        t = t.max(b);
    }
    if last > t {
        out.push((t, last));
    }
    out.retain(|&(a, b)| b > a);
    out
}

/// Removes `part` from the interval list `rest`; returns how much of it
/// was still there.
fn take(rest: &mut Vec<(u64, u64)>, part: (u64, u64)) -> u64 {
    let (p0, p1) = part;
    if p1 <= p0 {
        return 0;
    }
    let mut taken = 0;
    let mut out = Vec::with_capacity(rest.len() + 1);
    for &(a, b) in rest.iter() {
        let lo = a.max(p0);
        let hi = b.min(p1);
        if hi <= lo {
            out.push((a, b));
            continue;
        }
        taken += hi - lo;
        if a < lo {
            out.push((a, lo));
        }
        if hi < b {
            out.push((hi, b));
        }
    }
    *rest = out;
    taken
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn launch(t: u64, corr: u64, stream: u64, site: u64, func: u64) -> Event {
        Event {
            time: t,
            op: Op::GpuLaunch as u8,
            flags: phase::DONE,
            addr: stream,
            arg: corr,
            arg2: func,
            site,
            stack: 0,
        }
    }
    fn sync(t: u64, ph: u8, kind: u64, stream: u64, site: u64) -> Event {
        Event {
            time: t,
            op: Op::GpuSync as u8,
            flags: ph,
            addr: stream,
            arg: kind,
            arg2: 0,
            site,
            stack: 0,
        }
    }
    fn kernel(delivered: u64, start: u64, end: u64, corr: u32, stream: u32) -> Event {
        activity_event(
            delivered,
            ActivityKind::Kernel,
            start,
            end,
            corr,
            0,
            stream,
            0,
        )
    }
    fn namer() -> impl FnMut(u32, u64) -> String {
        |_, pc| match pc {
            0x100 => "launch_a()".into(),
            0x200 => "launch_b()".into(),
            0x300 => "sync_site()".into(),
            0xA1 => "kernelA".into(),
            0xB1 => "kernelB".into(),
            0xC1 => "kernelC".into(),
            x => format!("{x:#x}"),
        }
    }
    fn run(events: &[(u32, Event)], end: u64) -> GpuReport {
        let mut tp = HashMap::new();
        let mut interp = lockscope_trace::sync::SyncInterp::new(false, &[]);
        for &(t, _) in events {
            if tp.insert(t, 1).is_none() {
                interp.add_thread(t, 1, 0);
            }
        }
        let mut g = GpuAnalyzer::new(tp);
        // Each thread's events in order; threads one after the other
        // would break the interpreter's time order, so sort by time.
        let mut evs = events.to_vec();
        evs.sort_by_key(|(_, e)| e.time);
        for (t, e) in &evs {
            interp.event(*t, e, &mut |s, _| g.step(s));
        }
        let mut n = namer();
        g.finish(end, &mut n)
    }

    /// The thesis's Fig. 2.4/2.5 schedule: launch K at 0 (runs 1..5 ms);
    /// the CPU overlaps until 2 ms, then synchronizes until 6 ms; then
    /// computes until 10 ms and launches K2 (10.5..12 ms).
    #[test]
    fn single_stream_blame_matches_hand_computed_schedule() {
        let ev = vec![
            (1, launch(0, 1, 0, 0x100, 0xA0)),
            (1, sync(2 * MS, phase::BEGIN, sync_kind::DEVICE, 0, 0x300)),
            (1, sync(6 * MS, phase::END, sync_kind::DEVICE, 0, 0x300)),
            (1, launch(10 * MS, 2, 0, 0x200, 0xB0)),
            (2, kernel(7 * MS, MS, 5 * MS, 1, 7)),
            (2, kernel(13 * MS, 10 * MS + MS / 2, 12 * MS, 2, 7)),
        ];
        let r = run(&ev, 20 * MS);
        assert!(r.has_gpu);
        assert_eq!(r.window_start_ns, 0);
        assert_eq!(r.window_ns, 12 * MS);
        // Busy 1..5 and 10.5..12: idle 0..1, 5..10.5 = 6.5 ms.
        assert_eq!(r.gpu_idle_ns, MS + 5 * MS + MS / 2);
        assert_eq!(r.kernel_ns, 4 * MS + 3 * MS / 2);
        // CPU_IDLE: 4 ms in the device sync; 3 of it while K ran (2..5).
        assert_eq!(r.cpu_wait_ns, 4 * MS);
        let c = &r.cpu_paths[0];
        assert_eq!((c.thread, c.path.as_str(), c.calls), (1, "sync_site()", 1));
        assert_eq!(c.blamed_on_gpu_ns, 3 * MS);
        let k = r.work.iter().find(|w| w.name == "kernelA").unwrap();
        assert_eq!(k.cpu_idle_caused_ns, 3 * MS);
        assert_eq!(k.launched_at, "launch_a()");
        assert_eq!(k.gpu_ns, 4 * MS);
        // GPU_IDLE_CAUSE: 5..6 to the sync (return delay); 0..1 to the
        // launch of K (latency, the first launch after 0); 6..10.5 to
        // launch_b, which ended that gap.
        let by = |p: &str| {
            r.gpu_idle_causes
                .iter()
                .find(|c| c.path == p)
                .map(|c| c.gpu_idle_caused_ns)
                .unwrap_or(0)
        };
        assert_eq!(by("sync_site()"), MS);
        assert_eq!(by("launch_b()"), 4 * MS + MS / 2);
        assert_eq!(by("launch_a()"), MS);
        assert_eq!(r.gpu_idle_unattributed_ns, 0);
        let sum: u64 = r.gpu_idle_causes.iter().map(|c| c.gpu_idle_caused_ns).sum();
        assert_eq!(sum, r.gpu_idle_ns, "every idle ns charged exactly once");
        assert!(r.verdict.contains("thread 1"), "{}", r.verdict);
    }

    /// §2.6.3's Fig. 2.6: K1 (stream 2), K2 (stream 1), K3 (stream 2)
    /// overlapping inside one device sync: shared parts split equally.
    #[test]
    fn multi_stream_cpu_idle_is_shared_between_overlapping_kernels() {
        let ev = vec![
            (1, launch(0, 1, 2, 0x100, 0xA0)),
            (1, launch(0, 2, 1, 0x100, 0xB0)),
            (1, launch(0, 3, 2, 0x100, 0xC0)),
            (1, sync(MS, phase::BEGIN, sync_kind::DEVICE, 0, 0x300)),
            (1, sync(20 * MS, phase::END, sync_kind::DEVICE, 0, 0x300)),
            // K1 1..5, K2 3..9, K3 5..8 (after K1 on its stream) — then
            // K2 alone 8..9; sync returns at 20 (11 ms delay).
            (2, kernel(30 * MS, MS, 5 * MS, 1, 2)),
            (2, kernel(30 * MS, 3 * MS, 9 * MS, 2, 1)),
            (2, kernel(30 * MS, 5 * MS, 8 * MS, 3, 2)),
        ];
        let r = run(&ev, 40 * MS);
        let cause = |n: &str| {
            r.work
                .iter()
                .find(|w| w.name == n)
                .unwrap()
                .cpu_idle_caused_ns
        };
        // alpha = 1..3 (2 ms) alone, beta = 3..5 shared (1 ms each).
        assert_eq!(cause("kernelA"), 2 * MS + MS);
        // K2: beta/2 (1) + delta/2 over 5..8 (1.5) + alone 8..9 (1).
        assert_eq!(cause("kernelB"), MS + 3 * MS / 2 + MS);
        // K3: delta/2 = 1.5.
        assert_eq!(cause("kernelC"), 3 * MS / 2);
        assert_eq!(r.cpu_paths[0].blamed_on_gpu_ns, 8 * MS);
        assert_eq!(r.cpu_wait_ns, 19 * MS);
        // The return delay 9..20 is GPU idleness charged to the sync.
        let s = r
            .gpu_idle_causes
            .iter()
            .find(|c| c.path == "sync_site()")
            .unwrap();
        assert_eq!(s.gpu_idle_caused_ns, 11 * MS);
    }

    /// A stream synchronize waits only for its own stream's work.
    #[test]
    fn stream_sync_blames_only_its_stream() {
        let ev = vec![
            (1, launch(0, 1, 0x51, 0x100, 0xA0)),
            (1, launch(0, 2, 0x52, 0x100, 0xB0)),
            (1, sync(0, phase::BEGIN, sync_kind::STREAM, 0x52, 0x300)),
            (1, sync(4 * MS, phase::END, sync_kind::STREAM, 0x52, 0x300)),
            (2, kernel(9 * MS, 0, 4 * MS, 1, 1)),
            (2, kernel(9 * MS, 0, 4 * MS, 2, 2)),
        ];
        let r = run(&ev, 10 * MS);
        let cause = |n: &str| {
            r.work
                .iter()
                .find(|w| w.name == n)
                .unwrap()
                .cpu_idle_caused_ns
        };
        assert_eq!(cause("kernelA"), 0);
        assert_eq!(cause("kernelB"), 4 * MS);
    }

    /// A launching thread that waits for a lock while the GPU idles: the
    /// lock is named with the overlap.
    #[test]
    fn gpu_idle_names_the_lock_the_feeding_thread_waited_for() {
        let lock = |t: u64, ph: u8| Event {
            time: t,
            op: Op::MutexLock as u8,
            flags: ph,
            addr: 0xbeef,
            site: 0x999,
            ..Event::default()
        };
        let ev = vec![
            (1, launch(0, 1, 0, 0x100, 0xA0)),
            (1, lock(2 * MS, phase::BEGIN)),
            (1, lock(8 * MS, phase::DONE)),
            (1, launch(9 * MS, 2, 0, 0x200, 0xB0)),
            (2, kernel(20 * MS, 0, MS, 1, 7)),
            (2, kernel(20 * MS, 9 * MS, 10 * MS, 2, 7)),
        ];
        let r = run(&ev, 20 * MS);
        assert_eq!(r.gpu_idle_ns, 8 * MS);
        let top = &r.gpu_idle_causes[0];
        assert_eq!(
            (top.path.as_str(), top.gpu_idle_caused_ns),
            ("launch_b()", 8 * MS)
        );
        assert_eq!(top.waiting_for_locks[0].lock, "0xbeef");
        assert_eq!(top.waiting_for_locks[0].ns, 6 * MS);
        assert!(r.verdict.contains("lock 0xbeef"), "{}", r.verdict);
    }

    #[test]
    fn copies_bytes_and_overlap() {
        let copy = |k, s, e, c, b| activity_event(50 * MS, k, s, e, c, b, 3, 0);
        let ev = vec![
            (1, launch(0, 1, 0, 0x100, 0)),
            (1, launch(0, 2, 0, 0x100, 0xA0)),
            (1, launch(0, 3, 0, 0x100, 0)),
            (2, copy(ActivityKind::CopyHtoD, 0, 2 * MS, 1, 4096)),
            (2, kernel(50 * MS, MS, 4 * MS, 2, 4)),
            (2, copy(ActivityKind::CopyDtoH, 3 * MS, 5 * MS, 3, 1 << 40)),
        ];
        let r = run(&ev, 50 * MS);
        assert_eq!(r.h2d_bytes, 4096);
        // Saturated at 2^32-1 by the event encoding.
        assert_eq!(r.d2h_bytes, u64::from(u32::MAX));
        assert_eq!(r.copy_ns, 4 * MS);
        assert_eq!(r.kernel_ns, 3 * MS);
        assert_eq!(r.copy_kernel_overlap_ns, 2 * MS);
        assert_eq!(r.correlated, 3);
    }

    #[test]
    fn no_gpu_events_says_so() {
        let ev = [(1, launch(0, 1, 0, 0, 0))];
        let mut g = GpuAnalyzer::new(HashMap::new());
        let mut n = namer();
        let empty = GpuAnalyzer::new(HashMap::new()).finish(10, &mut n);
        assert!(!empty.has_gpu);
        assert!(empty.verdict.contains("no GPU activity"));
        g.event(ev[0].0, &ev[0].1);
        assert!(g.finish(10, &mut n).has_gpu);
    }

    #[test]
    fn sync_still_open_at_the_end_is_closed_there_and_counted() {
        let ev = vec![
            (1, launch(0, 1, 0, 0x100, 0xA0)),
            (1, sync(MS, phase::BEGIN, sync_kind::DEVICE, 0, 0x300)),
            (2, kernel(MS, 0, 100 * MS, 1, 7)),
        ];
        let r = run(&ev, 50 * MS);
        assert_eq!(r.unreturned_syncs, 1);
        assert_eq!(r.cpu_wait_ns, 49 * MS);
        assert_eq!(r.work[0].cpu_idle_caused_ns, 49 * MS);
    }

    #[test]
    fn interval_helpers() {
        assert_eq!(
            union([(5, 7), (1, 3), (2, 4), (9, 9)].into_iter()),
            vec![(1, 4), (5, 7)]
        );
        assert_eq!(
            gaps(&[(1, 4), (5, 7)], 0, 10),
            vec![(0, 1), (4, 5), (7, 10)]
        );
        assert_eq!(intersect_len(&[(0, 10)], &[(2, 3), (5, 20)]), 6);
        let mut r = vec![(0, 10)];
        assert_eq!(take(&mut r, (2, 4)), 2);
        assert_eq!(r, vec![(0, 2), (4, 10)]);
        assert_eq!(take(&mut r, (3, 5)), 1);
    }
}
