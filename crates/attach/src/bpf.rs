//! The BPF side: loading `bpf/futex.bpf.c` (compiled by build.rs),
//! attaching it, and decoding what it reports. Layouts here mirror the C
//! structs field for field.

use aya::maps::{Array, HashMap, MapData, RingBuf};
use aya::programs::raw_trace_point::RawTracePointLinkId;
use aya::programs::RawTracePoint;
use aya::Ebpf;

use crate::AttachError;

/// The compiled program (empty when clang was missing at build time).
#[cfg(not(lockscope_no_bpf))]
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/futex.bpf.o"));

/// Bytes of user stack the program copies per event (`STACK_BYTES`).
pub const STACK_BYTES: usize = 8192;
/// Size of `struct event`.
pub const EVENT_BYTES: usize = 80 + STACK_BYTES;

/// What the kernel side reported.
#[derive(Clone, Debug)]
pub struct RawEvent {
    /// A wait that slept (true) or a wake that woke a thread (false).
    pub wait: bool,
    /// Process id.
    pub tgid: u32,
    /// Thread id.
    pub tid: u32,
    /// The futex word.
    pub uaddr: u64,
    /// CLOCK_MONOTONIC at the call's entry, ns.
    pub start: u64,
    /// CLOCK_MONOTONIC at its return, ns.
    pub end: u64,
    /// The system call's return value (threads woken; 0 or -errno).
    pub ret: i64,
    /// The futex op, flags included.
    pub op: u32,
    /// The expected value of a wait.
    pub val: u32,
    /// User registers at the call.
    pub ip: u64,
    /// Stack pointer.
    pub sp: u64,
    /// Frame pointer.
    pub bp: u64,
    /// The top of the user stack, from `sp` up.
    pub stack: Vec<u8>,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or_default())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default())
}

impl RawEvent {
    /// Decodes one ring-buffer record; `None` when it is not the size of
    /// `struct event` (a program from another build).
    pub fn parse(b: &[u8]) -> Option<RawEvent> {
        if b.len() < EVENT_BYTES {
            return None;
        }
        let len = (u32_at(b, 12) as usize).min(STACK_BYTES);
        Some(RawEvent {
            wait: u32_at(b, 0) == 1,
            tgid: u32_at(b, 4),
            tid: u32_at(b, 8),
            uaddr: u64_at(b, 16),
            start: u64_at(b, 24),
            end: u64_at(b, 32),
            ret: u64_at(b, 40) as i64,
            op: u32_at(b, 48),
            val: u32_at(b, 52),
            ip: u64_at(b, 56),
            sp: u64_at(b, 64),
            bp: u64_at(b, 72),
            stack: b[80..80 + len].to_vec(),
        })
    }
}

/// A wait still in progress when the recording ended.
#[derive(Clone, Copy, Debug)]
pub struct OpenCall {
    /// Thread id.
    pub tid: u32,
    /// When it started, CLOCK_MONOTONIC ns.
    pub start: u64,
    /// The futex word.
    pub uaddr: u64,
    /// The futex op.
    pub op: u32,
    /// The expected value.
    pub val: u32,
}

/// The loaded and attached program.
pub struct Loaded {
    bpf: Ebpf,
    /// The event ring, taken out of `bpf`.
    pub ring: RingBuf<MapData>,
    /// The attached programs, in the order to detach them.
    links: Vec<(&'static str, RawTracePointLinkId)>,
}

/// Counters the kernel side keeps (`COUNTERS`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    /// Events dropped: the ring was full.
    pub ring_full: u64,
    /// Calls not followed: the table of calls in progress was full.
    pub pending_full: u64,
    /// Stacks that could not be copied.
    pub stack_failed: u64,
}

impl Loaded {
    /// Loads the program, sets its filter, and attaches it; returns it
    /// with CLOCK_MONOTONIC read just before the entry side went live.
    pub fn attach(pids: &[u32], all: bool, min_wait_ns: u64) -> Result<(Loaded, u64), AttachError> {
        #[cfg(lockscope_no_bpf)]
        {
            let _ = (pids, all, min_wait_ns);
            Err(AttachError::NotBuilt)
        }
        #[cfg(not(lockscope_no_bpf))]
        {
            let bpf_err = |what: &'static str| {
                // Debug, not Display: aya's Display of a refused load
                // leaves out the errno (EPERM: a capability or a locked
                // down kernel), which is what the user needs.
                move |e: &dyn std::fmt::Debug| AttachError::Bpf {
                    what,
                    detail: format!("{e:?}"),
                }
            };
            let mut bpf = aya::EbpfLoader::new()
                .load(OBJECT)
                .map_err(|e| bpf_err("loading the BPF program")(&e))?;
            {
                let map = bpf.map_mut("CONFIG").ok_or(AttachError::Bpf {
                    what: "the CONFIG map",
                    detail: "missing".into(),
                })?;
                let mut cfg: Array<_, [u64; 2]> =
                    Array::try_from(map).map_err(|e| bpf_err("the CONFIG map")(&e))?;
                cfg.set(0, [min_wait_ns, u64::from(all)], 0)
                    .map_err(|e| bpf_err("setting the configuration")(&e))?;
            }
            {
                let map = bpf.map_mut("PIDS").ok_or(AttachError::Bpf {
                    what: "the PIDS map",
                    detail: "missing".into(),
                })?;
                let mut m: HashMap<_, u32, u32> =
                    HashMap::try_from(map).map_err(|e| bpf_err("the PIDS map")(&e))?;
                for &p in pids {
                    m.insert(p, 1, 0)
                        .map_err(|e| bpf_err("adding a process")(&e))?;
                }
            }
            // The return side first: with nothing in the table of calls
            // in progress it does nothing until the entry side is live, so
            // every call followed has both. Detached in the other order
            // (`detach`).
            let mut links = Vec::new();
            let mut t0 = 0;
            for (prog, tp) in [("futex_exit", "sys_exit"), ("futex_enter", "sys_enter")] {
                let p: &mut RawTracePoint = bpf
                    .program_mut(prog)
                    .ok_or(AttachError::Bpf {
                        what: "a program",
                        detail: format!("{prog} missing"),
                    })?
                    .try_into()
                    .map_err(|e| bpf_err("a program's type")(&e))?;
                p.load().map_err(|e| bpf_err("verifying the program")(&e))?;
                t0 = crate::monotonic_ns();
                let id = p
                    .attach(tp)
                    .map_err(|e| bpf_err("attaching to the sys_enter/sys_exit tracepoints")(&e))?;
                links.push((prog, id));
            }
            links.reverse();
            let ring = bpf.take_map("EVENTS").ok_or(AttachError::Bpf {
                what: "the EVENTS ring",
                detail: "missing".into(),
            })?;
            let ring = RingBuf::try_from(ring).map_err(|e| bpf_err("the EVENTS ring")(&e))?;
            Ok((Loaded { bpf, ring, links }, t0))
        }
    }

    /// Detaches the programs (the entry side first: no new call is
    /// followed, and those in progress either return, and are reported,
    /// or stay in the table of calls in progress, which [`Self::open_calls`]
    /// reads). The maps stay readable.
    pub fn detach(&mut self) {
        for (prog, id) in std::mem::take(&mut self.links) {
            if let Some(p) = self.bpf.program_mut(prog) {
                let p: Result<&mut RawTracePoint, _> = p.try_into();
                if let Ok(p) = p {
                    let _ = p.detach(id);
                }
            }
        }
    }

    /// The kernel side's loss counters.
    pub fn counters(&self) -> Counters {
        let mut c = Counters::default();
        if let Some(map) = self.bpf.map("COUNTERS") {
            if let Ok(a) = Array::<_, u64>::try_from(map) {
                c.ring_full = a.get(&0, 0).unwrap_or(0);
                c.pending_full = a.get(&1, 0).unwrap_or(0);
                c.stack_failed = a.get(&2, 0).unwrap_or(0);
            }
        }
        c
    }

    /// The calls in progress now (read at the end: waits still blocked).
    pub fn open_calls(&self) -> Vec<OpenCall> {
        let mut out = Vec::new();
        if let Some(map) = self.bpf.map("PENDING") {
            if let Ok(h) = HashMap::<_, u32, [u64; 3]>::try_from(map) {
                for (tid, v) in h.iter().flatten() {
                    out.push(OpenCall {
                        tid,
                        start: v[0],
                        uaddr: v[1],
                        op: v[2] as u32,
                        val: (v[2] >> 32) as u32,
                    });
                }
            }
        }
        out
    }
}
