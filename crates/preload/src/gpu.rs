//! GPU capture through NVIDIA CUPTI, loaded at run time.
//!
//! # How it is switched on
//! `lockscope record` sets `CUDA_INJECTION64_PATH` to this library (unless
//! the user already set it, or passed `--gpu off`). When the program's
//! CUDA driver initialises, it loads that library (already loaded: it is
//! preloaded) and calls its `InitializeInjection`. That is the one moment
//! at which CUPTI can be attached to every context, and it only happens
//! in programs that really use CUDA: other programs never reach this code.
//! Interposing `cudaLaunchKernel` & co. by symbol was the alternative not
//! taken: the CUDA runtime is usually linked statically into the program,
//! and it resolves driver entry points through `cuGetProcAddress`, so
//! symbol interposition misses most calls.
//!
//! # What is recorded (see `lockscope_format::Op`)
//! - `GpuLaunch` when a thread enters a call that queues GPU work (kernel
//!   launches, asynchronous copies and memsets, graph launches), with the
//!   call's CUPTI correlation id, the stream and the kernel's host
//!   function when the runtime API names it.
//! - `GpuSync` BEGIN/END around calls that make the CPU wait for the GPU
//!   (device/stream/event synchronize, blocking copies, `cudaFree`).
//! - `GpuActivity` for every kernel, copy and memset that ran, from
//!   CUPTI's activity buffers: start and end on the GPU converted to TSC
//!   ticks (the recorder turns them into trace nanoseconds), kind, bytes,
//!   stream, device and correlation id.
//!
//! Nothing here links against CUDA: libcupti is `dlopen`ed, so lockscope
//! builds and runs on machines without it. Without libcupti,
//! `InitializeInjection` says so once on stderr and returns 0 (the driver
//! goes on without us).
//!
//! # Struct layouts
//! CUPTI's C structs are read at fixed offsets (no bindings to generate
//! without the CUDA headers). The offsets below are those of the CUPTI
//! headers of CUDA 11 and 12: `CUpti_CallbackData`,
//! `CUpti_ActivityKernel4`..`9` (their common prefix), `CUpti_ActivityMemcpy`
//! (and `Memcpy5`'s identical prefix) and `CUpti_ActivityMemset`. Every
//! record read is sanity-checked (end >= start, a plausible duration);
//! one that fails is dropped and counted in [`status`].

use core::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use lockscope_capture::thread;
use lockscope_format::{phase, Op};
use lockscope_ring::raw::{Head, MAX_FRAMES, OP_CODE_NAME};
use lockscope_ring::tsc;

use crate::common::{emit_frames, guarded};

/// CUPTI_ACTIVITY_KIND_MEMCPY.
const KIND_MEMCPY: u32 = 1;
/// CUPTI_ACTIVITY_KIND_MEMSET.
const KIND_MEMSET: u32 = 2;
/// CUPTI_ACTIVITY_KIND_KERNEL.
const KIND_KERNEL: u32 = 3;
/// CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL.
const KIND_CONCURRENT_KERNEL: u32 = 10;
/// CUPTI_CB_DOMAIN_RUNTIME_API.
const DOMAIN_RUNTIME: u32 = 1;
/// CUPTI_CB_DOMAIN_DRIVER_API.
const DOMAIN_DRIVER: u32 = 2;
/// CUPTI_API_ENTER / CUPTI_API_EXIT.
const SITE_ENTER: u32 = 0;
/// Activity buffer size handed to CUPTI (its documentation suggests a few
/// MB; 8 MB holds ~50k kernel records).
const BUFFER_BYTES: usize = 8 << 20;
/// A kernel or copy longer than this is taken as a misread record.
const MAX_PLAUSIBLE_NS: u64 = 3_600 * 1_000_000_000;

type BufferRequested = unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize);
type BufferCompleted = unsafe extern "C" fn(*mut c_void, u32, *mut u8, usize, usize);
type CallbackFn = unsafe extern "C" fn(*mut c_void, u32, u32, *const c_void);

type RegisterFn = unsafe extern "C" fn(BufferRequested, BufferCompleted) -> c_int;
type U32Fn = unsafe extern "C" fn(u32) -> c_int;
type NextFn = unsafe extern "C" fn(*mut u8, usize, *mut *mut u8) -> c_int;
type TimestampFn = unsafe extern "C" fn(*mut u64) -> c_int;
type SubscribeFn = unsafe extern "C" fn(*mut *mut c_void, CallbackFn, *mut c_void) -> c_int;
type EnableDomainFn = unsafe extern "C" fn(u32, *mut c_void, u32) -> c_int;

/// The CUPTI entry points we use, resolved once by `dlsym`.
struct Api {
    register_callbacks: RegisterFn,
    activity_enable: U32Fn,
    flush_all: U32Fn,
    next_record: NextFn,
    timestamp: TimestampFn,
    subscribe: SubscribeFn,
    enable_domain: EnableDomainFn,
}

static API: std::sync::OnceLock<Api> = std::sync::OnceLock::new();

/// Capture state, for tests and for the one-line message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// `InitializeInjection` has not been called (no CUDA in this program).
    Off = 0,
    /// CUPTI is attached and recording.
    On = 1,
    /// libcupti could not be loaded.
    NoCupti = 2,
    /// libcupti loaded but a function or a call failed.
    CuptiFailed = 3,
    /// Not recording (no lockscope session in this process).
    NoSession = 4,
}

static STATUS: AtomicU8 = AtomicU8::new(Status::Off as u8);
/// Activity records dropped because they failed the sanity checks.
static MALFORMED: AtomicU64 = AtomicU64::new(0);
/// Activity records delivered as events.
static DELIVERED: AtomicU64 = AtomicU64::new(0);
/// Calibration of CUPTI's clock against the TSC: (cupti ns, tsc) at
/// attach time; the rate comes from this and a fresh pair per buffer.
static CAL_NS: AtomicU64 = AtomicU64::new(0);
static CAL_TSC: AtomicU64 = AtomicU64::new(0);
/// Number of successful `InitializeInjection` calls (it must attach once).
static ATTACHED: AtomicU32 = AtomicU32::new(0);
/// Bytes of activity buffers outstanding (malloc'd, not yet returned).
static OUTSTANDING: AtomicUsize = AtomicUsize::new(0);

/// Where capture stands, and (malformed, delivered) record counts.
pub fn status() -> (Status, u64, u64) {
    let s = match STATUS.load(Ordering::Acquire) {
        1 => Status::On,
        2 => Status::NoCupti,
        3 => Status::CuptiFailed,
        4 => Status::NoSession,
        _ => Status::Off,
    };
    (
        s,
        MALFORMED.load(Ordering::Relaxed),
        DELIVERED.load(Ordering::Relaxed),
    )
}

thread_local! {
    /// Depth of runtime-API calls on this thread: a runtime call runs
    /// driver calls inside it, and only the outermost is recorded (CUPTI
    /// correlates the GPU work with the outermost API call).
    static RUNTIME_DEPTH: core::cell::Cell<u32> = const { core::cell::Cell::new(0) };
}

/// Called by the CUDA driver when `CUDA_INJECTION64_PATH` names this
/// library. Returns 1 when CUPTI was attached, 0 otherwise (the driver
/// ignores the value; a program must never fail because of us).
#[cfg_attr(not(test), no_mangle)]
#[allow(non_snake_case)] // the name the CUDA driver looks up
pub extern "C" fn InitializeInjection() -> c_int {
    guarded(initialize).unwrap_or(0)
}

fn initialize() -> c_int {
    if ATTACHED.fetch_add(1, Ordering::AcqRel) != 0 {
        return i32::from(STATUS.load(Ordering::Acquire) == Status::On as u8);
    }
    if !lockscope_capture::process::init() {
        STATUS.store(Status::NoSession as u8, Ordering::Release);
        return 0;
    }
    let Some(handle) = open_cupti() else {
        STATUS.store(Status::NoCupti as u8, Ordering::Release);
        say(b"lockscope: GPU capture off: libcupti.so not found (install the CUDA toolkit's CUPTI or set LOCKSCOPE_CUPTI=/path/to/libcupti.so)\n");
        return 0;
    };
    let Some(api) = resolve(handle) else {
        STATUS.store(Status::CuptiFailed as u8, Ordering::Release);
        say(b"lockscope: GPU capture off: libcupti lacks a function lockscope needs (CUPTI too old?)\n");
        return 0;
    };
    let api = API.get_or_init(|| api);
    // SAFETY: the functions come from libcupti with these C signatures
    // (cupti_activity.h, cupti_callbacks.h); every pointer passed is
    // valid for the call.
    let ok = unsafe {
        let mut ts = 0u64;
        (api.timestamp)(&mut ts);
        CAL_NS.store(ts, Ordering::Relaxed);
        CAL_TSC.store(tsc::now(), Ordering::Relaxed);
        let mut ok = (api.register_callbacks)(buffer_requested, buffer_completed) == 0;
        for k in [KIND_CONCURRENT_KERNEL, KIND_MEMCPY, KIND_MEMSET] {
            ok &= (api.activity_enable)(k) == 0;
        }
        let mut sub: *mut c_void = core::ptr::null_mut();
        ok &= (api.subscribe)(&mut sub, api_callback, core::ptr::null_mut()) == 0;
        if ok {
            ok &= (api.enable_domain)(1, sub, DOMAIN_RUNTIME) == 0;
            ok &= (api.enable_domain)(1, sub, DOMAIN_DRIVER) == 0;
        }
        ok
    };
    if !ok {
        STATUS.store(Status::CuptiFailed as u8, Ordering::Release);
        say(b"lockscope: GPU capture off: a CUPTI call failed (is another profiler attached?)\n");
        return 0;
    }
    // Buffers still held by CUPTI at exit would be lost: flush them from
    // an exit handler (registered after the recorder's own, so it runs
    // first).
    // SAFETY: `flush_at_exit` is a plain extern "C" fn with no arguments.
    unsafe { libc::atexit(flush_at_exit) };
    STATUS.store(Status::On as u8, Ordering::Release);
    1
}

extern "C" fn flush_at_exit() {
    flush();
}

/// Asks CUPTI to deliver every buffered activity record now (also used by
/// tests). No-op when CUPTI is not attached.
pub fn flush() {
    if let Some(api) = API.get() {
        let _ = guarded(|| {
            // SAFETY: cuptiActivityFlushAll(flag) from libcupti; 1 =
            // CUPTI_ACTIVITY_FLAG_FLUSH_FORCED (also incomplete buffers).
            unsafe { (api.flush_all)(1) }
        });
    }
}

/// Writes a message to stderr (no allocation, no stdio locks).
fn say(msg: &[u8]) {
    // SAFETY: writing a valid buffer to fd 2.
    unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
}

fn open_cupti() -> Option<*mut c_void> {
    let mut names: [Option<&CStr>; 4] = [
        None,
        Some(c"libcupti.so"),
        Some(c"libcupti.so.12"),
        Some(c"libcupti.so.11.8"),
    ];
    // An explicit path wins (CUPTI ships under the toolkit's
    // extras/CUPTI/lib64, often not on the loader path).
    let env = std::env::var_os("LOCKSCOPE_CUPTI").and_then(|v| {
        std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(v.as_os_str())).ok()
    });
    if let Some(e) = env.as_deref() {
        names[0] = Some(e);
    }
    for n in names.into_iter().flatten() {
        // SAFETY: dlopen with a NUL-terminated name.
        let h = unsafe { libc::dlopen(n.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if !h.is_null() {
            return Some(h);
        }
    }
    None
}

fn resolve(h: *mut c_void) -> Option<Api> {
    let sym = |name: &CStr| -> Option<*mut c_void> {
        // SAFETY: dlsym on a live handle with a NUL-terminated name.
        let p = unsafe { libc::dlsym(h, name.as_ptr()) };
        (!p.is_null()).then_some(p)
    };
    // SAFETY: (all transmutes) each symbol is the CUPTI function of that
    // name, whose C signature is the field's type.
    unsafe {
        Some(Api {
            register_callbacks: core::mem::transmute::<*mut c_void, RegisterFn>(sym(
                c"cuptiActivityRegisterCallbacks",
            )?),
            activity_enable: core::mem::transmute::<*mut c_void, U32Fn>(sym(
                c"cuptiActivityEnable",
            )?),
            flush_all: core::mem::transmute::<*mut c_void, U32Fn>(sym(c"cuptiActivityFlushAll")?),
            next_record: core::mem::transmute::<*mut c_void, NextFn>(sym(
                c"cuptiActivityGetNextRecord",
            )?),
            timestamp: core::mem::transmute::<*mut c_void, TimestampFn>(sym(c"cuptiGetTimestamp")?),
            subscribe: core::mem::transmute::<*mut c_void, SubscribeFn>(sym(c"cuptiSubscribe")?),
            enable_domain: core::mem::transmute::<*mut c_void, EnableDomainFn>(sym(
                c"cuptiEnableDomain",
            )?),
        })
    }
}

/// What an API call means for the analysis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallClass {
    /// Queues GPU work and returns.
    Launch,
    /// Waits for the GPU; the value is the analysis' `sync_kind`.
    Sync(u64),
    /// Queues a copy and waits for it (a blocking `cudaMemcpy`).
    BlockingCopy,
    /// Anything else: not recorded.
    Other,
}

/// Classifies a CUDA runtime or driver API function by name (CUPTI's
/// `functionName`, with or without a `_vNNNN`, `_v2`, `_ptsz`/`_ptds`
/// suffix). Names, not callback ids: ids differ between CUDA versions.
pub fn classify(name: &[u8]) -> CallClass {
    let mut n = name;
    // Strip version and per-thread-stream suffixes, repeatedly.
    loop {
        let s = core::str::from_utf8(n).unwrap_or("");
        let cut = ["_ptsz", "_ptds"]
            .iter()
            .find(|suf| s.ends_with(*suf))
            .map(|suf| suf.len())
            .or_else(|| {
                let i = s.rfind("_v")?;
                let digits = &s[i + 2..];
                (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
                    .then_some(s.len() - i)
            });
        match cut {
            Some(k) => n = &n[..n.len() - k],
            None => break,
        }
    }
    let s = core::str::from_utf8(n).unwrap_or("");
    match s {
        "cudaDeviceSynchronize" | "cudaThreadSynchronize" | "cuCtxSynchronize" => {
            CallClass::Sync(0)
        }
        "cudaStreamSynchronize" | "cuStreamSynchronize" => CallClass::Sync(1),
        "cudaEventSynchronize" | "cuEventSynchronize" => CallClass::Sync(2),
        "cudaFree" | "cuMemFree" | "cudaFreeHost" | "cuMemFreeHost" => CallClass::Sync(4),
        "cudaMemcpy"
        | "cudaMemcpy2D"
        | "cudaMemcpy3D"
        | "cudaMemcpyToSymbol"
        | "cudaMemcpyFromSymbol"
        | "cudaMemset"
        | "cuMemcpy"
        | "cuMemcpyHtoD"
        | "cuMemcpyDtoH"
        | "cuMemcpyDtoD"
        | "cuMemcpy2D"
        | "cuMemcpy3D" => CallClass::BlockingCopy,
        _ if s.starts_with("cudaLaunch")
            || s.starts_with("cuLaunch")
            || s.starts_with("cudaGraphLaunch")
            || s.starts_with("cuGraphLaunch") =>
        {
            CallClass::Launch
        }
        _ if (s.starts_with("cudaMemcpy")
            || s.starts_with("cudaMemset")
            || s.starts_with("cuMemcpy")
            || s.starts_with("cuMemset"))
            && s.ends_with("Async") =>
        {
            CallClass::Launch
        }
        _ => CallClass::Other,
    }
}

/// The stream argument of the calls we can read it from (offsets in the
/// CUPTI `*_params` structs), else 0. `func` is the host function of a
/// runtime kernel launch.
///
/// # Safety
/// `params` must point at the params struct of the call `name` names.
unsafe fn stream_and_func(name: &[u8], params: *const u8) -> (u64, u64) {
    if params.is_null() {
        return (0, 0);
    }
    let rd = |off: usize| {
        // SAFETY: callers pass offsets inside the named params struct.
        unsafe { core::ptr::read_unaligned(params.add(off).cast::<u64>()) }
    };
    let s = core::str::from_utf8(name).unwrap_or("");
    if s.starts_with("cudaLaunchKernel") && !s.starts_with("cudaLaunchKernelEx") {
        // { func, gridDim (12 bytes), blockDim (12), args, sharedMem, stream }
        (rd(48), rd(0))
    } else if s.starts_with("cuLaunchKernel") && !s.starts_with("cuLaunchKernelEx") {
        // { f, 3+3 dims and sharedMemBytes (7 x u32), hStream, ... }
        (rd(40), 0)
    } else if s.starts_with("cudaStreamSynchronize") || s.starts_with("cuStreamSynchronize") {
        (rd(0), 0)
    } else if s.starts_with("cudaMemcpyAsync") {
        // { dst, src, count, kind, stream }
        (rd(32), 0)
    } else {
        (0, 0)
    }
}

/// The CUPTI API callback: runs on the calling thread at entry and exit
/// of every CUDA runtime and driver call.
unsafe extern "C" fn api_callback(_ud: *mut c_void, domain: u32, _cbid: u32, data: *const c_void) {
    let _ = guarded(|| {
        // SAFETY: CUPTI passes a CUpti_CallbackData for the API domains.
        unsafe { on_api(domain, data.cast()) }
    });
}

/// # Safety
/// `d` points at a `CUpti_CallbackData` (or is null).
unsafe fn on_api(domain: u32, d: *const u8) {
    if d.is_null() || (domain != DOMAIN_RUNTIME && domain != DOMAIN_DRIVER) {
        return;
    }
    // CUpti_CallbackData: callbackSite u32 @0, functionName @8,
    // functionParams @16, functionReturnValue @24, symbolName @32, ...,
    // correlationId u32 @64.
    // SAFETY: the struct is at least 68 bytes and aligned for its fields.
    let (site, fname, params, symbol, corr) = unsafe {
        (
            core::ptr::read(d.cast::<u32>()),
            core::ptr::read(d.add(8).cast::<*const c_char>()),
            core::ptr::read(d.add(16).cast::<*const u8>()),
            core::ptr::read(d.add(32).cast::<*const c_char>()),
            core::ptr::read(d.add(64).cast::<u32>()),
        )
    };
    let enter = site == SITE_ENTER;
    // Only the outermost API call of a thread is recorded.
    let depth = RUNTIME_DEPTH.with(|c| c.get());
    let outer = if enter {
        RUNTIME_DEPTH.with(|c| c.set(depth + 1));
        depth == 0
    } else {
        let d1 = depth.saturating_sub(1);
        RUNTIME_DEPTH.with(|c| c.set(d1));
        d1 == 0
    };
    if !outer || fname.is_null() {
        return;
    }
    // SAFETY: CUPTI's function names are NUL-terminated static strings.
    let name = unsafe { CStr::from_ptr(fname) }.to_bytes();
    let class = classify(name);
    if class == CallClass::Other {
        return;
    }
    // SAFETY: params belongs to the call `name` names.
    let (stream, func) = unsafe { stream_and_func(name, params) };
    let Some(mut g) = thread::recorder() else {
        return;
    };
    let now = tsc::now();
    let mut frames = [0u64; USER_FRAMES];
    let n = user_frames(&mut frames);
    let path = &frames[..n];
    if class == CallClass::Launch && enter && func != 0 && !symbol.is_null() && first_sight(func) {
        // SAFETY: CUPTI's symbolName is a NUL-terminated string, valid
        // during the callback, for launch callbacks.
        let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
        emit_code_name(&mut g, now, func, name);
    }
    match (class, enter) {
        (CallClass::Launch, true) => emit_frames(
            &mut g,
            Op::GpuLaunch,
            phase::DONE,
            now,
            stream,
            u64::from(corr),
            func,
            path,
        ),
        (CallClass::Sync(k), true) => emit_frames(
            &mut g,
            Op::GpuSync,
            phase::BEGIN,
            now,
            stream,
            k,
            u64::from(corr),
            path,
        ),
        (CallClass::Sync(k), false) => emit_frames(
            &mut g,
            Op::GpuSync,
            phase::END,
            now,
            stream,
            k,
            u64::from(corr),
            path,
        ),
        (CallClass::BlockingCopy, true) => {
            emit_frames(
                &mut g,
                Op::GpuLaunch,
                phase::DONE,
                now,
                stream,
                u64::from(corr),
                0,
                path,
            );
            emit_frames(
                &mut g,
                Op::GpuSync,
                phase::BEGIN,
                now,
                stream,
                3,
                u64::from(corr),
                path,
            );
        }
        (CallClass::BlockingCopy, false) => emit_frames(
            &mut g,
            Op::GpuSync,
            phase::END,
            now,
            stream,
            3,
            u64::from(corr),
            path,
        ),
        _ => {}
    }
}

/// Kernel handles already named in this process: a name is recorded at
/// the first launch of each (open addressing over the handle; a full
/// table names again, which only repeats a record).
const NAMED_SLOTS: usize = 1024;
static NAMED: [AtomicU64; NAMED_SLOTS] = [const { AtomicU64::new(0) }; NAMED_SLOTS];

/// True the first time `func` is seen (and the table had room).
fn first_sight(func: u64) -> bool {
    let start = (func >> 4) as usize % NAMED_SLOTS;
    for k in 0..NAMED_SLOTS {
        let slot = &NAMED[(start + k) % NAMED_SLOTS];
        match slot.compare_exchange(0, func, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(v) if v == func => return false,
            Err(_) => {}
        }
    }
    true
}

/// Records the name CUPTI gives the kernel behind the launch handle
/// `func` (`OP_CODE_NAME`). Why: CUDA 13's launch stubs pass a runtime
/// handle (a heap address) as the launch's function, which no file can
/// name; seen on an H100 with CUDA 13.0, where every kernel showed as
/// `[heap]+0x...`. The name's bytes travel as the event's frames (at most
/// 512 bytes; a longer mangled name is cut).
fn emit_code_name(g: &mut thread::Guard, now: u64, func: u64, name: &[u8]) {
    let mut words = [0u64; MAX_FRAMES];
    let n = name.len().min(MAX_FRAMES * 8);
    for (i, chunk) in name[..n].chunks(8).enumerate() {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        words[i] = u64::from_le_bytes(b);
    }
    let head = Head {
        tsc: now,
        addr: func,
        op: OP_CODE_NAME,
        ..Head::default()
    };
    g.emit(head, None, &words[..n.div_ceil(8)]);
}

/// The return addresses of the call, from the innermost one outside
/// CUDA's libraries, CUPTI and lockscope (the call site) outwards, at
/// most `out.len()`; how many. Found with glibc's `backtrace`
/// (DWARF unwinding: CUDA's libraries have no frame pointers) and
/// `dladdr`; a few microseconds, against CUDA calls of tens.
///
/// Why more than the site: a program linked with nvcc's default static
/// CUDA runtime has the runtime's code inside its own executable, so the
/// first frame outside the libraries is still the runtime's (no line
/// information). The analysis picks the first frame of this path that
/// has a source line (`gpu::analyze`); measured on an H100, where every
/// launch and wait of such a program was `program+0x703fd`.
fn user_frames(out: &mut [u64; USER_FRAMES]) -> usize {
    let mut frames = [core::ptr::null_mut::<c_void>(); 32];
    // SAFETY: backtrace fills at most `len` entries of a valid buffer.
    let n = unsafe { libc::backtrace(frames.as_mut_ptr(), frames.len() as c_int) };
    let mut k = 0;
    for &f in frames.iter().take(n.max(0) as usize) {
        if k > 0 {
            // The site is found: the callers follow it whatever they are.
            if k == out.len() {
                break;
            }
            out[k] = f as u64;
            k += 1;
            continue;
        }
        // SAFETY: Dl_info is plain data (pointers and integers): all
        // zeroes is a valid value.
        let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
        // SAFETY: dladdr with a valid out-pointer.
        if unsafe { libc::dladdr(f, &mut info) } == 0 || info.dli_fname.is_null() {
            continue;
        }
        // SAFETY: dladdr's file name is a NUL-terminated string.
        let path = unsafe { CStr::from_ptr(info.dli_fname) }.to_bytes();
        let base = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
        let ours = [
            &b"libcupti"[..],
            b"libcuda",
            b"libcudart",
            b"liblockscope",
            b"libc.so",
        ]
        .iter()
        .any(|p| base.starts_with(p));
        if !ours {
            out[0] = f as u64;
            k = 1;
        }
    }
    k
}

/// Frames recorded with a CUDA call (the site and its callers).
const USER_FRAMES: usize = 8;

unsafe extern "C" fn buffer_requested(buf: *mut *mut u8, size: *mut usize, max: *mut usize) {
    let p = guarded(|| {
        // SAFETY: plain malloc; CUPTI wants 8-byte alignment (malloc gives 16).
        unsafe { libc::malloc(BUFFER_BYTES) as *mut u8 }
    })
    .unwrap_or(core::ptr::null_mut());
    if !p.is_null() {
        OUTSTANDING.fetch_add(BUFFER_BYTES, Ordering::Relaxed);
    }
    // SAFETY: CUPTI passes valid out-pointers.
    unsafe {
        *buf = p;
        *size = if p.is_null() { 0 } else { BUFFER_BYTES };
        *max = 0; // as many records as fit
    }
}

unsafe extern "C" fn buffer_completed(
    _ctx: *mut c_void,
    _stream: u32,
    buf: *mut u8,
    _size: usize,
    valid: usize,
) {
    let _ = guarded(|| {
        // SAFETY: `buf` is the buffer we handed out, `valid` bytes filled.
        unsafe { deliver(buf, valid) }
    });
    if !buf.is_null() {
        // SAFETY: allocated by `buffer_requested` with malloc.
        unsafe { libc::free(buf.cast()) };
        OUTSTANDING.fetch_sub(BUFFER_BYTES, Ordering::Relaxed);
    }
}

/// Emits every record of a completed buffer as a `GpuActivity` event on
/// the calling thread.
///
/// # Safety
/// `buf` holds `valid` bytes of CUPTI activity records.
unsafe fn deliver(buf: *mut u8, valid: usize) {
    let Some(api) = API.get() else { return };
    if buf.is_null() || valid == 0 {
        return;
    }
    // A fresh calibration pair: CUPTI ns -> TSC, rate from the attach
    // pair to this one (a baseline of the whole run so far).
    let mut now_ns = 0u64;
    // SAFETY: cuptiGetTimestamp with a valid out-pointer.
    unsafe { (api.timestamp)(&mut now_ns) };
    let now_tsc = tsc::now();
    let (c_ns, c_tsc) = (
        CAL_NS.load(Ordering::Relaxed),
        CAL_TSC.load(Ordering::Relaxed),
    );
    let ticks_per_ns = if now_ns > c_ns + 1_000_000 && now_tsc > c_tsc {
        (now_tsc - c_tsc) as f64 / (now_ns - c_ns) as f64
    } else {
        // Too short a baseline: assume the usual ~GHz-range TSC is not
        // known; measure it over a millisecond instead.
        tsc::calibrate(1) / 1e9
    };
    let to_tsc = |t: u64| -> u64 {
        if t >= now_ns {
            now_tsc.saturating_add(((t - now_ns) as f64 * ticks_per_ns) as u64)
        } else {
            now_tsc.saturating_sub(((now_ns - t) as f64 * ticks_per_ns) as u64)
        }
    };
    let Some(mut g) = thread::recorder() else {
        return;
    };
    let mut rec: *mut u8 = core::ptr::null_mut();
    // SAFETY: cuptiActivityGetNextRecord walks the buffer; `rec` stays
    // inside it and points at a record of the kind in its first u32.
    while unsafe { (api.next_record)(buf, valid, &mut rec) } == 0 && !rec.is_null() {
        // SAFETY: `rec` points at a whole activity record (CUPTI
        // guarantees a record is complete); the offsets are per kind.
        let a = unsafe { parse_record(rec) };
        let Some(a) = a else {
            continue;
        };
        if a.end < a.start || a.end - a.start > MAX_PLAUSIBLE_NS {
            MALFORMED.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let head = lockscope_ring::raw::Head {
            tsc: tsc::now(),
            addr: to_tsc(a.start),
            site: u64::from(a.stream) | (u64::from(a.device) << 32),
            op: Op::GpuActivity as u8,
            flags: a.kind,
            ..Default::default()
        };
        let arg2 = u64::from(a.corr) | (a.bytes.min(u64::from(u32::MAX)) << 32);
        if g.emit(head, Some((to_tsc(a.end), arg2)), &[]) {
            DELIVERED.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// One activity record, decoded.
struct Rec {
    kind: u8,
    start: u64,
    end: u64,
    stream: u32,
    device: u32,
    corr: u32,
    bytes: u64,
}

/// # Safety
/// `r` points at a complete CUPTI activity record.
unsafe fn parse_record(r: *const u8) -> Option<Rec> {
    // The offsets passed below lie inside the record kind's struct (the
    // smallest, CUpti_ActivityMemset, is 64 bytes; the kernel records
    // read up to byte 96 of 100+).
    // SAFETY: `r` points at a whole record and `o + 4` is inside it.
    let u32_at = |o: usize| unsafe { core::ptr::read_unaligned(r.add(o).cast::<u32>()) };
    // SAFETY: as above, `o + 8` is inside the record.
    let u64_at = |o: usize| unsafe { core::ptr::read_unaligned(r.add(o).cast::<u64>()) };
    // SAFETY: as above, `o` is inside the record.
    let u8_at = |o: usize| unsafe { core::ptr::read(r.add(o)) };
    match u32_at(0) {
        KIND_KERNEL | KIND_CONCURRENT_KERNEL => Some(Rec {
            // CUpti_ActivityKernel4..9: start @16, end @24, deviceId @40,
            // streamId @48, correlationId @92.
            kind: 0,
            start: u64_at(16),
            end: u64_at(24),
            device: u32_at(40),
            stream: u32_at(48),
            corr: u32_at(92),
            bytes: 0,
        }),
        KIND_MEMCPY => Some(Rec {
            // CUpti_ActivityMemcpy: copyKind u8 @4, bytes @8, start @16,
            // end @24, deviceId @32, streamId @40, correlationId @44.
            kind: match u8_at(4) {
                1 => 1,      // HTOD
                2 => 2,      // DTOH
                8 | 10 => 3, // DTOD, PTOP
                _ => 5,
            },
            bytes: u64_at(8),
            start: u64_at(16),
            end: u64_at(24),
            device: u32_at(32),
            stream: u32_at(40),
            corr: u32_at(44),
        }),
        KIND_MEMSET => Some(Rec {
            // CUpti_ActivityMemset: bytes @8, start @16, end @24, deviceId
            // @32, streamId @40, correlationId @44.
            kind: 4,
            bytes: u64_at(8),
            start: u64_at(16),
            end: u64_at(24),
            device: u32_at(32),
            stream: u32_at(40),
            corr: u32_at(44),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_names_with_and_without_suffixes() {
        assert_eq!(classify(b"cudaLaunchKernel_v7000"), CallClass::Launch);
        assert_eq!(classify(b"cudaLaunchKernel_ptsz_v7000"), CallClass::Launch);
        assert_eq!(classify(b"cuLaunchKernel"), CallClass::Launch);
        assert_eq!(classify(b"cudaMemcpyAsync_v3020"), CallClass::Launch);
        assert_eq!(classify(b"cuMemcpyHtoDAsync_v2"), CallClass::Launch);
        assert_eq!(classify(b"cudaDeviceSynchronize_v3020"), CallClass::Sync(0));
        assert_eq!(classify(b"cuCtxSynchronize"), CallClass::Sync(0));
        assert_eq!(classify(b"cudaStreamSynchronize_ptsz"), CallClass::Sync(1));
        assert_eq!(classify(b"cudaEventSynchronize"), CallClass::Sync(2));
        assert_eq!(classify(b"cuMemFree_v2"), CallClass::Sync(4));
        assert_eq!(classify(b"cudaMemcpy_v3020"), CallClass::BlockingCopy);
        assert_eq!(classify(b"cuMemcpyDtoH_v2"), CallClass::BlockingCopy);
        assert_eq!(classify(b"cudaGetDevice"), CallClass::Other);
        assert_eq!(classify(b"cudaMalloc_v3020"), CallClass::Other);
        assert_eq!(classify(b""), CallClass::Other);
        assert_eq!(classify(b"_v"), CallClass::Other);
    }

    #[test]
    fn kernel_record_offsets() {
        let mut r = [0u8; 160];
        r[0..4].copy_from_slice(&KIND_CONCURRENT_KERNEL.to_le_bytes());
        r[16..24].copy_from_slice(&100u64.to_le_bytes());
        r[24..32].copy_from_slice(&250u64.to_le_bytes());
        r[40..44].copy_from_slice(&1u32.to_le_bytes());
        r[48..52].copy_from_slice(&7u32.to_le_bytes());
        r[92..96].copy_from_slice(&42u32.to_le_bytes());
        // SAFETY: a whole record-sized buffer.
        let a = unsafe { parse_record(r.as_ptr()) }.unwrap();
        assert_eq!(
            (a.kind, a.start, a.end, a.device, a.stream, a.corr),
            (0, 100, 250, 1, 7, 42)
        );
        r[0..4].copy_from_slice(&99u32.to_le_bytes());
        // SAFETY: as above.
        assert!(unsafe { parse_record(r.as_ptr()) }.is_none());
    }

    #[test]
    fn without_cupti_initialize_injection_declines() {
        // No lockscope session in the test process: it declines before
        // looking for libcupti, and never fails.
        assert_eq!(InitializeInjection(), 0);
        assert!(matches!(status().0, Status::NoSession | Status::NoCupti));
    }
}
