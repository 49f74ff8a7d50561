//! Offline unwinding of a copied user stack with the binaries' CFI.
//!
//! The kernel copies the registers and the top of the user stack of each
//! wait it reports (`bpf/futex.bpf.c`); here the copy is walked with
//! framehop over the `.eh_frame` of the modules mapped in the process
//! (read from their files), so that code built without frame pointers,
//! glibc included, still gives whole call paths. An address outside every
//! executable mapping ends the walk: no frame that maps to no code is ever
//! emitted.

use std::collections::HashSet;
use std::ops::Range;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder};
use object::{Object, ObjectSection, ObjectSegment};

use lockscope_record::MapLine;

/// Frames kept per call path (the in-process recorder keeps as many).
pub const MAX_FRAMES: usize = 64;

/// The modules of one process, ready to unwind its stacks.
pub struct ProcessUnwinder {
    unwinder: UnwinderX86_64<Vec<u8>>,
    cache: CacheX86_64,
    /// Executable mappings (any file or none): a return address outside
    /// all of them ends a walk.
    code: Vec<Range<u64>>,
    /// Files already added, by path and mapped start.
    added: HashSet<(String, u64)>,
}

impl ProcessUnwinder {
    /// An unwinder with no module yet.
    pub fn new() -> ProcessUnwinder {
        ProcessUnwinder {
            unwinder: UnwinderX86_64::new(),
            cache: CacheX86_64::new(),
            code: Vec::new(),
            added: HashSet::new(),
        }
    }

    /// Adds the executable file mappings of `maps` not added before
    /// (called at attach, and again when an address falls outside every
    /// known mapping: a library loaded since). A file that cannot be read
    /// or has no `.eh_frame` gives no module: its frames end the walk.
    pub fn add_maps(&mut self, pid: u32, maps: &[MapLine]) {
        for m in maps
            .iter()
            .filter(|m| m.perms.starts_with("r-x") || m.perms.starts_with("--x"))
        {
            if !self
                .code
                .iter()
                .any(|r| r.start == m.start && r.end == m.end)
            {
                self.code.push(m.start..m.end);
            }
            if !m.path.starts_with('/') || !self.added.insert((m.path.clone(), m.start)) {
                continue;
            }
            // Through the process's root, so that a program in a container
            // or a deleted-and-replaced file is read as the process sees it.
            let via_root = format!("/proc/{pid}/root{}", m.path);
            let data = std::fs::read(&via_root).or_else(|_| std::fs::read(&m.path));
            if let Ok(data) = data {
                if let Some(module) = module_of(&m.path, &data, m) {
                    self.unwinder.add_module(module);
                }
            }
        }
    }

    /// True when `pc` lies in an executable mapping.
    pub fn is_code(&self, pc: u64) -> bool {
        self.code.iter().any(|r| r.contains(&pc))
    }

    /// The call path of a stopped thread: `ip` first, then each return
    /// address, unwound over `stack` (the bytes copied from `sp` up).
    pub fn walk(&mut self, ip: u64, sp: u64, bp: u64, stack: &[u8]) -> Vec<u64> {
        let mut out = vec![ip];
        if !self.is_code(ip) {
            return out;
        }
        let end = sp.saturating_add(stack.len() as u64);
        let mut read = |a: u64| -> Result<u64, ()> {
            if a < sp || a.checked_add(8).is_none_or(|e| e > end) {
                return Err(());
            }
            let i = (a - sp) as usize;
            let b: [u8; 8] = stack[i..i + 8].try_into().map_err(|_| ())?;
            Ok(u64::from_le_bytes(b))
        };
        let mut regs = UnwindRegsX86_64::new(ip, sp, bp);
        let mut addr = FrameAddress::from_instruction_pointer(ip);
        while out.len() < MAX_FRAMES {
            let ra = match self
                .unwinder
                .unwind_frame(addr, &mut regs, &mut self.cache, &mut read)
            {
                Ok(Some(ra)) => ra,
                _ => break,
            };
            if !self.is_code(ra.wrapping_sub(1)) {
                break;
            }
            out.push(ra);
            match FrameAddress::from_return_address(ra) {
                Some(a) => addr = a,
                None => break,
            }
        }
        out
    }
}

impl Default for ProcessUnwinder {
    fn default() -> Self {
        ProcessUnwinder::new()
    }
}

/// The framehop module of one mapped ELF file: its `.eh_frame` (and the
/// header's search table) at the addresses the mapping gives them.
fn module_of(path: &str, data: &[u8], m: &MapLine) -> Option<Module<Vec<u8>>> {
    let file = object::File::parse(data).ok()?;
    // The load bias: the segment that holds the mapped file offset is at
    // `m.start` in the process.
    let seg = file.segments().find(|s| {
        let (off, size) = s.file_range();
        off <= m.offset && m.offset < off + size.max(1)
    })?;
    let (seg_off, _) = seg.file_range();
    let bias = m
        .start
        .wrapping_sub(seg.address())
        .wrapping_sub(m.offset - seg_off);
    let section = |name: &str| {
        file.section_by_name(name).and_then(|s| {
            let d = s.data().ok()?;
            Some((s.address()..s.address() + s.size(), d.to_vec()))
        })
    };
    let eh = section(".eh_frame")?;
    let hdr = section(".eh_frame_hdr");
    let text = file
        .section_by_name(".text")
        .map(|s| s.address()..s.address() + s.size());
    let info = ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: text,
        eh_frame_svma: Some(eh.0),
        eh_frame: Some(eh.1),
        eh_frame_hdr_svma: hdr.as_ref().map(|h| h.0.clone()),
        eh_frame_hdr: hdr.map(|h| h.1),
        ..Default::default()
    };
    let (lo, hi) = (m.start, m.end);
    Some(Module::new(path.to_string(), lo..hi, bias, info))
}
