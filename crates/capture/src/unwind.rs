//! Call paths from the loaded objects' CFI (`.eh_frame`), so that code
//! built without frame pointers (`g++ -O2`, most distribution packages)
//! gets the same call paths as code built with them.
//!
//! # Where and when
//! In the recorder, on the events whose call path is recorded (the
//! contended ones by default): the unwind reads the live stack, which only
//! exists now. The alternative, copying a bounded slice of the stack into
//! the ring and unwinding offline, would cost a few KiB of ring per
//! contended event (a frame of an `-O2` program can be large: a 64-frame
//! path may span tens of KiB) and still miss frames above the slice; the
//! in-process unwind costs about a hundred ns more per path than the
//! frame-pointer walk once its rules are cached (docs/recorder.md,
//! "Call paths without frame pointers"), which a contended event (a wait
//! of microseconds) absorbs.
//!
//! # CFI always, not frame pointers first
//! A frame-pointer walk is cheaper per frame, but nothing tells whether a
//! frame has a frame pointer: in code built without them `rbp` is a general
//! register, and the walk follows whatever it holds (9,036 of 9,040 folded
//! stacks of a C++ pool started with a frame that is not a return
//! address). So the CFI walk is used for every frame; the frame-pointer
//! walk remains only where this one cannot start (no CFI for the recorder's
//! own frames, or no free unwind cache: [`Guard::call_path`] falls back).
//!
//! [`Guard::call_path`]: crate::thread::Guard::call_path
//!
//! # Where the walk starts
//! In [`cfi_path`]'s own frame (rip, rsp, rbp read with `asm!`), through
//! the recorder's frames, to the hook whose return address is the call
//! site; from there on the caller's `rbp` is the one the trampoline saw at
//! the hook's entry. Starting in the caller's frame directly would need
//! its stack pointer: the recorder's libraries are built without frame
//! pointers (Rust's default), so the hook's frame does not give it, and
//! passing `rsp` from the trampolines would add an argument to every hook
//! and an instruction to the uncontended path. The recorder's own frames
//! cost a cached rule each (about ten of them).
//!
//! # The unwinder
//! `framehop` (samply's unwinder) with its `.eh_frame_hdr` binary search
//! and a per-address rule cache. A hand-written `.eh_frame` evaluator
//! would be less code to load but one more DWARF interpreter to get right.
//!
//! # Modules: registered from memory, lazily, never removed
//! Each loaded object found by `dl_iterate_phdr` gives its executable
//! `PT_LOAD` (the text range every emitted frame is checked against: a
//! frame outside every registered text range ends the path) and its
//! `PT_GNU_EH_FRAME` (`.eh_frame_hdr`, which points to `.eh_frame`).
//! - The objects loaded when recording starts are registered then, at a
//!   safe point (the library constructor), with their sections read in
//!   place: the loader never unloads the objects of the initial link map.
//! - An object loaded later (`dlopen`) is registered on the first event
//!   whose path reaches an address in no known module. That cold path
//!   allocates (the module table, a copy of the object's `.eh_frame_hdr`
//!   and `.eh_frame`), inside a hook: accepted, because it happens once
//!   per such object. Any address in no registered object (that one, or
//!   code without an object: JIT) first asks the loader whether objects
//!   were added since (`dl_iterate_phdr`, which takes the loader's lock):
//!   only a program whose own `dl_iterate_phdr` callback waits for a lock
//!   that the recording thread holds could deadlock with that.
//!   The copy keeps a later `dlclose` from leaving the
//!   unwinder reading unmapped memory (a crash); an unloaded object's
//!   module stays registered (no return address points into it any more).
//! - The module table is an immutable snapshot published through an
//!   atomic pointer: readers take no lock (a lock inside the unwinder
//!   could deadlock against a signal handler or a forked child). A new
//!   module makes a new snapshot; the old one is leaked, never freed (a
//!   reader may still use it; there is one per registration, a few per
//!   program). Registrations are serialised by a try-lock with a bounded
//!   wait: a path that cannot register stops at that address.
//!
//! # Caches
//! framehop's cache (rule cache and DWARF evaluation context, allocated
//! once, no allocation while unwinding with `MustNotAllocateDuringUnwind`)
//! needs exclusive use. A pool of [`POOL`] caches, taken and put back with
//! one atomic swap each: one is created at start and one more at each
//! thread start (a safe point, not a hook that malloc may call with its own
//! lock held) up to the pool size. An unwind that finds no free cache
//! yields a few times, then falls back.
//!
//! # Never crash, never emit garbage
//! Stack reads are 8-byte loads inside `[sp, stack top)` of the calling
//! thread (the live stack above the unwinding function's own frame);
//! section reads are inside the object's loaded segments. A return address
//! that falls in no executable segment ends the path. A panic inside the
//! unwinder is caught by [`cfi_path`]'s caller and turns CFI unwinding off.

use core::ops::{Deref, Range};
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{
    ExplicitModuleSectionInfo, FrameAddress, Module, MustNotAllocateDuringUnwind, Unwinder,
};

/// Section bytes of a registered object.
enum Bytes {
    /// In place, in an object of the initial link map (never unloaded).
    Mapped(*const u8, usize),
    /// Copied (an object loaded later, which `dlclose` may unmap).
    Owned(Box<[u8]>),
}

impl Default for Bytes {
    fn default() -> Self {
        Bytes::Owned(Box::default())
    }
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            // SAFETY: `Mapped` is only built (in `scan_cb`) for a range
            // inside a loaded segment of an object that stays loaded.
            Bytes::Mapped(p, n) => unsafe { core::slice::from_raw_parts(*p, *n) },
            Bytes::Owned(b) => b,
        }
    }
}

type Cache = CacheX86_64<MustNotAllocateDuringUnwind>;

/// One published module table.
struct Snapshot {
    unwinder: UnwinderX86_64<Bytes, MustNotAllocateDuringUnwind>,
    /// Executable segments of every registered object, sorted by start.
    text: Vec<Range<u64>>,
    /// `dlpi_adds` when this table was built: an unknown address needs a
    /// new scan only if objects were loaded since.
    adds: u64,
}

impl Snapshot {
    fn covers(&self, a: u64) -> bool {
        self.segment(a).is_some()
    }

    /// The executable segment holding `a`.
    fn segment(&self, a: u64) -> Option<&Range<u64>> {
        let i = self.text.partition_point(|r| r.start <= a);
        let r = self.text.get(i.checked_sub(1)?)?;
        (a < r.end).then_some(r)
    }
}

/// The executable segments a walk has checked its addresses against:
/// the last one hit is tried first. A path's frames mostly come in runs
/// from one object (the recorder's own, then the program's), and the
/// binary search's mispredicted branches were most of a cached walk's
/// time (perf: 60 % of ~700 ns for a 20-frame walk).
struct Checker {
    snap: &'static Snapshot,
    last: Range<u64>,
}

impl Checker {
    /// True if `a` lies in a registered executable segment, registering
    /// the objects loaded since the last scan when it does not (cold).
    fn check(&mut self, a: u64) -> bool {
        if self.last.contains(&a) {
            return true;
        }
        if let Some(r) = self.snap.segment(a) {
            self.last = r.clone();
            return true;
        }
        match refresh(a) {
            Some(s) => {
                self.snap = s;
                self.last = s.segment(a).cloned().unwrap_or(0..0);
                true
            }
            None => false,
        }
    }
}

static SNAP: AtomicPtr<Snapshot> = AtomicPtr::new(core::ptr::null_mut());
/// Held while a thread builds a new snapshot.
static WRITER: AtomicBool = AtomicBool::new(false);
/// Set after a panic inside the unwinder: no more CFI unwinding.
static BROKEN: AtomicBool = AtomicBool::new(false);

/// Size of the cache pool (the most unwinds that run at once without
/// waiting). 16 caches of ~33 KiB each at most (24.8 KiB of DWARF
/// context, 509 rule entries of 16 bytes).
const POOL: usize = 16;
static CACHES: [AtomicPtr<Cache>; POOL] = [const { AtomicPtr::new(core::ptr::null_mut()) }; POOL];
static CREATED: AtomicUsize = AtomicUsize::new(0);

/// Frames of the recorder itself (from [`cfi_path`] up to the hook whose
/// return address is the call site) that the unwind may pass before it
/// gives up looking for the site.
const MAX_OWN_FRAMES: usize = 32;

/// Registers the objects loaded now and creates the first cache. Call at
/// a safe point (the recorder's start), where allocating is fine.
pub(crate) fn prepare() {
    if SNAP.load(Ordering::Acquire).is_null() {
        rescan(true, None);
    }
    add_cache();
}

/// Adds one cache to the pool unless it is full. Call at a safe point
/// (thread start).
pub(crate) fn add_cache() {
    // Read first: past the pool's size (every thread start after the
    // 16th) no write to the shared counter.
    if CREATED.load(Ordering::Relaxed) >= POOL || CREATED.fetch_add(1, Ordering::Relaxed) >= POOL {
        CREATED.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    let p = Box::into_raw(Box::new(Cache::new_in()));
    put_cache(p);
}

fn put_cache(p: *mut Cache) {
    for s in &CACHES {
        if s.compare_exchange(
            core::ptr::null_mut(),
            p,
            Ordering::AcqRel,
            Ordering::Relaxed,
        )
        .is_ok()
        {
            return;
        }
    }
    // Unreachable while CREATED <= POOL (there is a free slot for every
    // cache); leaking it is the safe answer otherwise.
}

fn take_cache() -> Option<*mut Cache> {
    for _ in 0..8 {
        for s in &CACHES {
            let p = s.swap(core::ptr::null_mut(), Ordering::AcqRel);
            if !p.is_null() {
                return Some(p);
            }
        }
        // More unwinds at once than caches: the others finish in
        // microseconds.
        // SAFETY: no preconditions.
        unsafe { libc::sched_yield() };
    }
    None
}

/// The fork child is single-threaded: a registration in progress in
/// another thread of the parent will never finish there.
pub(crate) fn after_fork_child() {
    WRITER.store(false, Ordering::Release);
}

/// Marks CFI unwinding unusable (after a panic inside it).
pub(crate) fn break_off() {
    BROKEN.store(true, Ordering::Relaxed);
}

/// Unwinds the calling thread with CFI and writes to `out` the return
/// addresses of the frames above the hooked call's site (the return
/// address of the hook: `site`), innermost first. `fp` is the caller's
/// `rbp` at the hook's entry (it was not yet touched by the hook), `hi`
/// the top of this thread's stack. Returns `None` when the unwind cannot
/// be done here (no CFI for the recorder's own frames, no cache, the site
/// not found): the caller falls back to the frame-pointer walk.
#[inline(never)]
pub(crate) fn cfi_path(site: u64, fp: u64, hi: u64, out: &mut [u64]) -> Option<usize> {
    if BROKEN.load(Ordering::Relaxed) || hi == 0 || out.is_empty() {
        return None;
    }
    let mut chk = Checker {
        snap: snapshot()?,
        last: 0..0,
    };
    let (ip, sp, bp): (u64, u64, u64);
    // SAFETY: reads three registers; no memory access. The values are
    // those of this function's own frame at this instruction, which stays
    // live (and so does everything above it on the stack) until we return.
    unsafe {
        core::arch::asm!(
            "lea {ip}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            ip = out(reg) ip,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags),
        );
    }
    let cache = take_cache()?;
    // SAFETY: `cache` was taken out of the pool by the swap: only this
    // call uses it until `put_cache`.
    let c = unsafe { &mut *cache };
    let mut read = |a: u64| -> Result<u64, ()> {
        if a < sp || a & 7 != 0 || a.checked_add(8).is_none_or(|e| e > hi) {
            return Err(());
        }
        // SAFETY: [sp, hi) is the live stack of this thread above this
        // function's frame (hi: its top from pthread_getattr_np), mapped
        // and readable; `a` is 8-aligned inside it.
        Ok(unsafe { *(a as *const u64) })
    };
    let mut regs = UnwindRegsX86_64::new(ip, sp, bp);
    let mut addr = FrameAddress::from_instruction_pointer(ip);
    let mut found = false;
    let mut own = 0;
    let mut n = 0;
    // The first address (our own, here) is checked like the others; each
    // later one is checked once, when it is unwound, before it is emitted
    // and before its frame is unwound in turn.
    if !chk.check(ip) {
        put_cache(cache);
        return None;
    }
    let result = loop {
        let ra = match chk
            .snap
            .unwinder
            .unwind_frame(addr, &mut regs, c, &mut read)
        {
            Ok(Some(ra)) => ra,
            _ => break if found { Some(n) } else { None },
        };
        // The lookup address of a return address is the call before it.
        if !chk.check(ra.wrapping_sub(1)) {
            break if found { Some(n) } else { None };
        }
        if found {
            out[n] = ra;
            n += 1;
            if n == out.len() {
                break Some(n);
            }
        } else if ra == site {
            found = true;
            // The hook's entry saw the caller's rbp: authoritative, even
            // if a frame of ours had no rule restoring it.
            regs.set_bp(fp);
        } else {
            own += 1;
            if own > MAX_OWN_FRAMES {
                break None;
            }
        }
        match FrameAddress::from_return_address(ra) {
            Some(a) => addr = a,
            None => break if found { Some(n) } else { None },
        }
    };
    put_cache(cache);
    result
}

fn snapshot() -> Option<&'static Snapshot> {
    let p = SNAP.load(Ordering::Acquire);
    // SAFETY: snapshots are leaked once published, never freed or changed.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Cold path: `a` lies in no registered object. Registers the objects
/// loaded since the last scan and returns the new table if one of them
/// covers `a`.
#[cold]
#[inline(never)]
fn refresh(a: u64) -> Option<&'static Snapshot> {
    let s = rescan(false, Some(a))?;
    s.covers(a).then_some(s)
}

/// Builds and publishes a snapshot with every loaded object not yet
/// registered (`in_place`: read their sections where they are mapped).
/// With `want`, skips the scan when the current snapshot already covers
/// it (another thread registered it meanwhile) or nothing was loaded.
fn rescan(in_place: bool, want: Option<u64>) -> Option<&'static Snapshot> {
    let mut got = false;
    for _ in 0..64 {
        if WRITER
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            got = true;
            break;
        }
        // SAFETY: no preconditions.
        unsafe { libc::sched_yield() };
    }
    if !got {
        return snapshot();
    }
    let cur = snapshot();
    if let (Some(s), Some(a)) = (cur, want) {
        if s.covers(a) {
            WRITER.store(false, Ordering::Release);
            return cur;
        }
        if loaded_objects_added() == Some(s.adds) {
            WRITER.store(false, Ordering::Release);
            return cur;
        }
    }
    let mut ctx = ScanCtx {
        old: cur,
        in_place,
        new: Vec::new(),
        adds: 0,
    };
    // SAFETY: the callback matches dl_iterate_phdr's contract and only
    // touches `ctx` through the pointer given here, during the call.
    unsafe { libc::dl_iterate_phdr(Some(scan_cb), (&mut ctx as *mut ScanCtx).cast()) };
    let out = if ctx.new.is_empty() && cur.is_some() {
        cur
    } else {
        let (mut unwinder, mut text) = match cur {
            Some(s) => (s.unwinder.clone(), s.text.clone()),
            None => (UnwinderX86_64::new(), Vec::new()),
        };
        for (m, t) in ctx.new {
            unwinder.add_module(m);
            text.extend(t);
        }
        text.sort_by_key(|r| r.start);
        let s = Box::into_raw(Box::new(Snapshot {
            unwinder,
            text,
            adds: ctx.adds,
        }));
        SNAP.store(s, Ordering::Release);
        // SAFETY: just published; never freed.
        Some(unsafe { &*s })
    };
    WRITER.store(false, Ordering::Release);
    out
}

struct ScanCtx {
    old: Option<&'static Snapshot>,
    in_place: bool,
    new: Vec<(Module<Bytes>, Vec<Range<u64>>)>,
    adds: u64,
}

/// `dlpi_adds` (objects ever loaded), read from the first object.
fn loaded_objects_added() -> Option<u64> {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info and our `data`.
        unsafe { *(data as *mut u64) = (*info).dlpi_adds };
        1
    }
    let mut adds = u64::MAX;
    // SAFETY: `first` matches the contract; `data` is our local, used
    // only during the call.
    unsafe { libc::dl_iterate_phdr(Some(first), (&mut adds as *mut u64).cast()) };
    (adds != u64::MAX).then_some(adds)
}

unsafe extern "C" fn scan_cb(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // A panic must not unwind into the loader (it would abort).
    let r = std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| {
        // SAFETY: dl_iterate_phdr passes a valid info for the duration of
        // the call, and `data` is the ScanCtx that rescan gave it.
        unsafe { scan_one(&*info, &mut *(data as *mut ScanCtx)) }
    }));
    let _ = r;
    0
}

/// Registers one loaded object unless it is known or has no CFI.
///
/// # Safety
/// `info` describes a loaded object (dl_iterate_phdr's callback, with the
/// loader's lock held: it cannot be unloaded meanwhile).
unsafe fn scan_one(info: &libc::dl_phdr_info, ctx: &mut ScanCtx) {
    ctx.adds = info.dlpi_adds;
    if info.dlpi_phdr.is_null() {
        return;
    }
    // SAFETY: the loader's program headers of this object.
    let ph = unsafe { core::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    let bias = info.dlpi_addr;
    let mut text = Vec::new();
    let mut hdr: Option<Range<u64>> = None;
    for p in ph {
        if p.p_type == libc::PT_LOAD && p.p_flags & libc::PF_X != 0 && p.p_memsz > 0 {
            let s = bias.wrapping_add(p.p_vaddr);
            text.push(s..s.wrapping_add(p.p_memsz));
        } else if p.p_type == libc::PT_GNU_EH_FRAME && p.p_memsz >= 8 {
            hdr = Some(p.p_vaddr..p.p_vaddr + p.p_memsz);
        }
    }
    let (Some(first), Some(hdr)) = (text.first().cloned(), hdr) else {
        return;
    };
    if ctx.old.is_some_and(|s| s.covers(first.start))
        || ctx
            .new
            .iter()
            .any(|(_, t)| t.iter().any(|r| r.start == first.start))
    {
        return;
    }
    // The loaded, readable segment that holds an svma, as an svma range.
    let seg_of = |svma: u64| -> Option<Range<u64>> {
        ph.iter()
            .filter(|p| p.p_type == libc::PT_LOAD)
            .map(|p| p.p_vaddr..p.p_vaddr + p.p_filesz.min(p.p_memsz))
            .find(|r| r.contains(&svma))
    };
    let hdr_seg = match seg_of(hdr.start) {
        Some(s) => s,
        None => return,
    };
    let hdr = hdr.start..hdr.end.min(hdr_seg.end);
    // SAFETY: `hdr` lies inside a loaded segment of this object.
    let h = unsafe {
        core::slice::from_raw_parts(
            bias.wrapping_add(hdr.start) as *const u8,
            (hdr.end - hdr.start) as usize,
        )
    };
    let Some(eh) = eh_frame_address(h, hdr.start) else {
        return;
    };
    let Some(eh_seg) = seg_of(eh) else {
        return;
    };
    // .eh_frame runs to its zero terminator, at most to its segment's end;
    // gimli reads entries from their offsets, so the segment's end bounds it.
    let eh = eh..eh_seg.end;
    let bytes = |r: &Range<u64>| -> Bytes {
        let p = bias.wrapping_add(r.start) as *const u8;
        let n = (r.end - r.start) as usize;
        if ctx.in_place {
            Bytes::Mapped(p, n)
        } else {
            // SAFETY: inside a loaded segment (see above).
            Bytes::Owned(unsafe { core::slice::from_raw_parts(p, n) }.into())
        }
    };
    let text_svma = first.start.wrapping_sub(bias)..first.end.wrapping_sub(bias);
    let info_sections = ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: Some(text_svma),
        eh_frame_svma: Some(eh.clone()),
        eh_frame: Some(bytes(&eh)),
        eh_frame_hdr_svma: Some(hdr.clone()),
        eh_frame_hdr: Some(bytes(&hdr)),
        ..Default::default()
    };
    let lo = text.iter().map(|r| r.start).min().unwrap_or(first.start);
    let hi = text.iter().map(|r| r.end).max().unwrap_or(first.end);
    let m = Module::new(String::new(), lo..hi, bias, info_sections);
    ctx.new.push((m, text));
}

/// The svma of `.eh_frame`, from the `.eh_frame_hdr` at svma `at`
/// (version 1; the pointer encodings compilers emit: absolute or
/// pc-relative, 4 or 8 bytes).
fn eh_frame_address(h: &[u8], at: u64) -> Option<u64> {
    if h.len() < 4 || h[0] != 1 {
        return None;
    }
    let enc = h[1];
    let field = at + 4;
    let v = match enc & 0x0f {
        0x03 => u64::from(u32::from_le_bytes(h.get(4..8)?.try_into().ok()?)),
        0x0b => i64::from(i32::from_le_bytes(h.get(4..8)?.try_into().ok()?)) as u64,
        0x00 | 0x04 | 0x0c => u64::from_le_bytes(h.get(4..12)?.try_into().ok()?),
        _ => return None,
    };
    match enc & 0x70 {
        0x00 => Some(v),
        0x10 => Some(field.wrapping_add(v)),
        0x30 => Some(at.wrapping_add(v)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eh_frame_pointer_encodings_are_decoded() {
        // pcrel | sdata4, -0x100 from the field at at+4.
        let h = [1, 0x1b, 0x03, 0x3b, 0x00, 0xff, 0xff, 0xff];
        assert_eq!(eh_frame_address(&h, 0x1000), Some(0x1004 - 0x100));
        // absolute udata4.
        let h = [1, 0x03, 0x03, 0x3b, 0x78, 0x56, 0x34, 0x12];
        assert_eq!(eh_frame_address(&h, 0x1000), Some(0x1234_5678));
        // Wrong version, unknown encoding, too short.
        assert_eq!(eh_frame_address(&[2, 0x1b, 0, 0, 0, 0, 0, 0], 0), None);
        assert_eq!(eh_frame_address(&[1, 0x1f, 0, 0, 0, 0, 0, 0], 0), None);
        assert_eq!(eh_frame_address(&[1, 0x1b, 0, 0, 0], 0), None);
    }

    #[test]
    fn the_objects_loaded_now_cover_this_code_and_no_stack_address() {
        prepare();
        let s = snapshot().expect("a snapshot");
        let here = the_objects_loaded_now_cover_this_code_and_no_stack_address as *const () as u64;
        assert!(s.covers(here));
        let local = 0u64;
        assert!(!s.covers(core::ptr::addr_of!(local) as u64));
    }
}
