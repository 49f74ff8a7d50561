//! Symbolization of code and data addresses after the program is gone.
//!
//! Addresses are resolved against the memory maps recorded in the trace
//! ([`lockscope_format::MapEntry`]): address -> mapped file + file offset ->
//! ELF virtual address (through the program headers) -> symbol (`.symtab`,
//! else `.dynsym`, read with `object`) and source line with inlined frames
//! (DWARF, read with `addr2line`).
//!
//! Nothing here may fail a report: a file that is gone, unreadable, not
//! ELF, or whose GNU build-id differs from the one recorded (it was rebuilt
//! since) degrades to `module+0xoffset`, and the reason is kept so the
//! report can say why names are missing.
//!
//! # Entry points
//! - [`Symbolizer`] ([`Symbolizer::for_meta`] from a trace's maps):
//!   code addresses to [`Location`]s with their inlined [`Frame`]s, the
//!   user's own frame of a call path ([`Symbolizer::user_site`]), data
//!   addresses to the variable or member that holds them.
//! - [`locknames`]: the one rule that names a lock in every output (a
//!   variable, a class member from DWARF, else the first use).
//!
//! # Design constraints
//! Reads only the files the trace's maps name (and separate debug files:
//! build-id, `.gnu_debuglink`, and through `lockscope-debuginfod`, the only
//! crate that touches the network). Knows nothing of reports or printing:
//! it returns names, the printers fit them. Caches per file, so a report
//! opens each module once.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::path::Path;

use lockscope_format::MapEntry;

mod layout;
pub mod locknames;
pub(crate) use layout::LockType;
use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

/// One frame of a resolved code address (innermost inlined frame first).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frame {
    /// Function name, demangled, if known.
    pub function: Option<String>,
    /// Source file, if DWARF line info is present.
    pub file: Option<String>,
    /// Source line.
    pub line: Option<u32>,
}

/// What an address resolved to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Location {
    /// Base name of the mapped file, or `"?"` when no map covers it.
    pub module: String,
    /// Offset of the address from the start of the module's file.
    pub offset: u64,
    /// Frames: `frames[0]` is the innermost (possibly inlined) function,
    /// the last one is the function that physically contains the address.
    /// Empty when nothing is known beyond module+offset.
    pub frames: Vec<Frame>,
}

/// The module of a [`Location`] named by the trace itself (a GPU
/// kernel's `CodeName`), not by a file.
pub const GPU_KERNEL_MODULE: &str = "[gpu kernel]";

impl Location {
    /// Innermost function name, if known.
    pub fn function(&self) -> Option<&str> {
        self.frames.iter().find_map(|f| f.function.as_deref())
    }
    /// Innermost frame that has a file and line.
    pub fn file_line(&self) -> Option<(&str, u32)> {
        self.frames
            .iter()
            .find_map(|f| Some((f.file.as_deref()?, f.line?)))
    }
    /// `module+0xoffset`, the fallback name.
    pub fn module_offset(&self) -> String {
        format!("{}+{:#x}", self.module, self.offset)
    }
    /// A one-line description: `function (file:line)`, or the fallback.
    /// When the call was inlined, the function it was inlined into is
    /// added (`with (lib.rs:41) in worker (main.rs:97)`, the immediate
    /// caller): a small wrapper
    /// like a lock guard is otherwise the same "site" for every caller.
    pub fn short(&self) -> String {
        let mut s = match (self.function(), self.file_line()) {
            (Some(f), Some((file, line))) => format!("{f} ({}:{line})", base_name(file)),
            // A name the trace gave (a GPU kernel): no module to show.
            (Some(f), None) if self.module == GPU_KERNEL_MODULE => format!("{f} (GPU kernel)"),
            (Some(f), None) => format!("{f} ({})", self.module_offset()),
            _ => return self.module_offset(),
        };
        // The caller the innermost function was inlined into (not the
        // outermost frame: that is often a thread-start wrapper).
        if self.frames.len() > 1 {
            if let Some(outer) = self.frames.get(1) {
                let f = outer.function.as_deref().unwrap_or("?");
                match (&outer.file, outer.line) {
                    (Some(file), Some(line)) => {
                        s.push_str(&format!(" in {f} ({}:{line})", base_name(file)))
                    }
                    _ => s.push_str(&format!(" in {f}")),
                }
            }
        }
        s
    }

    /// Identity of the source position: every frame's function, file and
    /// line (two return addresses on the same line of the same inlining
    /// chain are one site), or module+offset when nothing is known.
    pub fn key(&self) -> String {
        if self.file_line().is_none() {
            return self.module_offset();
        }
        self.frames
            .iter()
            .map(|f| {
                format!(
                    "{}@{}:{}",
                    f.function.as_deref().unwrap_or(""),
                    f.file.as_deref().unwrap_or(""),
                    f.line.unwrap_or(0)
                )
            })
            .collect::<Vec<_>>()
            .join("<")
    }
}

/// Modules whose code is never the user's: the C library and dynamic
/// loader, the C++ runtimes, libgcc's unwinder and lockscope's own
/// injected libraries. Matched on the file's base name.
pub const RUNTIME_MODULES: &[&str] = &[
    "libc.so",
    "libc-",
    "libpthread",
    "ld-linux",
    "ld-musl",
    "libstdc++",
    "libc++",
    "libgcc_s",
    "liblockscope",
    "[vdso]",
];

/// Function name prefixes of runtime code compiled into the user's own
/// binary: Rust's std, core and alloc (also as `<std::... as Trait>`
/// impls), libstdc++/libc++ (`std::`, `std::__1::`, `__gnu_cxx::`,
/// gthreads), glibc internals and lockscope's hooks.
pub const RUNTIME_FUNCTIONS: &[&str] = &[
    "std::",
    "core::",
    "alloc::",
    "<std::",
    "<core::",
    "<alloc::",
    "__gnu_cxx::",
    "__cxxabiv1::",
    "__gthread",
    "__pthread",
    "__lll_",
    "__futex",
    "pthread_",
    "syscall",
    "lockscope_",
];

/// Source paths of runtime code inlined into the user's binary: system
/// and compiler headers (libstdc++'s `<mutex>` lives under
/// `/usr/include/c++/`, gthreads under `/usr/include/<triple>/c++/`) and
/// the Rust standard library (`/rustc/<hash>/library/...` in a release
/// toolchain, `library/std/src/...` in a local one).
pub const RUNTIME_PATHS: &[&str] = &[
    "/usr/include/",
    "/usr/lib/gcc/",
    "/include/c++/",
    "/rustc/",
    "library/std/src/",
    "library/core/src/",
    "library/alloc/src/",
];

/// True for a module that holds no user code ([`RUNTIME_MODULES`]).
pub fn is_runtime_module(module: &str) -> bool {
    RUNTIME_MODULES.iter().any(|m| module.starts_with(m))
}

/// True for a frame of runtime code: its function matches
/// [`RUNTIME_FUNCTIONS`] or its source file [`RUNTIME_PATHS`]. A frame
/// with neither name nor file is not runtime (nothing says so).
pub fn is_runtime_frame(f: &Frame) -> bool {
    f.function
        .as_deref()
        .is_some_and(|n| RUNTIME_FUNCTIONS.iter().any(|p| n.starts_with(p)))
        || f.file
            .as_deref()
            .is_some_and(|p| RUNTIME_PATHS.iter().any(|r| p.contains(r)))
}

impl Location {
    /// The location seen from the user's code: the innermost (possibly
    /// inlined) frame that is not runtime code and its callers, with the
    /// runtime frames inside it dropped. `None` when the address is
    /// entirely runtime code (in a runtime module, or every frame of its
    /// inlining chain is). An address with no frames at all (no symbols)
    /// in a user module is kept as it is.
    ///
    /// This is the rule every site, blame row and recommendation follows
    /// unless `--frames all` is given (docs/report.md).
    pub fn user_view(&self) -> Option<Location> {
        if is_runtime_module(&self.module) {
            return None;
        }
        if self.frames.is_empty() {
            return Some(self.clone());
        }
        let k = self.frames.iter().position(|f| !is_runtime_frame(f))?;
        // Runtime frames the user frame is inlined into (Rust's thread
        // start `__rust_begin_short_backtrace`) are dropped too: the
        // ` in caller` of a user site names user code or nothing.
        Some(Location {
            module: self.module.clone(),
            offset: self.offset,
            frames: self.frames[k..]
                .iter()
                .filter(|f| !is_runtime_frame(f))
                .cloned()
                .collect(),
        })
    }
}

fn base_name(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// Largest file read for symbols (debug builds of big programs reach a
/// few hundred MiB).
const MAX_MODULE_BYTES: u64 = 2 << 30;

struct Module {
    /// (vaddr, size, name) of defined symbols, sorted by address.
    symbols: Vec<(u64, u64, String)>,
    /// Types of static variables, from DWARF, for names inside them.
    layout: Option<layout::Layout>,
    /// (file offset, size in file, size in memory, vaddr) of loadable
    /// segments. The size in memory covers `.bss`, which the kernel maps
    /// anonymously right after the file-backed part.
    segments: Vec<(u64, u64, u64, u64)>,
    dwarf: Option<addr2line::Loader>,
}

impl Module {
    /// Reads a module's symbols, segments and DWARF; the note says why
    /// names will be missing (a stripped file without debug file).
    fn load(path: &str, want_build_id: &[u8]) -> Result<(Module, Option<String>), String> {
        // Mapped files are not all binaries (data files, shared memory):
        // check the ELF magic and the size before reading a file whole.
        let mut f = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
        let mut magic = [0u8; 4];
        if std::io::Read::read_exact(&mut f, &mut magic).is_err() || magic != *b"\x7fELF" {
            return Err(format!("{path}: not an ELF file"));
        }
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if len > MAX_MODULE_BYTES {
            return Err(format!(
                "{path}: {len} bytes, larger than the {MAX_MODULE_BYTES} read for symbols"
            ));
        }
        let data = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
        let file = object::File::parse(&*data).map_err(|e| format!("{path}: not ELF ({e})"))?;
        if !want_build_id.is_empty() {
            match file.build_id() {
                Ok(Some(id)) if id == want_build_id => {}
                Ok(Some(_)) => {
                    return Err(format!(
                        "{path}: build-id differs from the recorded one (file was rebuilt)"
                    ))
                }
                _ => return Err(format!("{path}: no build-id, recorded file had one")),
            }
        }
        let mut symbols: Vec<(u64, u64, String)> = Vec::new();
        let add = |symbols: &mut Vec<(u64, u64, String)>, syms: object::SymbolIterator<'_, '_>| {
            for s in syms {
                if s.is_undefined() || s.address() == 0 {
                    continue;
                }
                if !matches!(
                    s.kind(),
                    SymbolKind::Text | SymbolKind::Data | SymbolKind::Tls
                ) {
                    continue;
                }
                if let Ok(name) = s.name() {
                    if !name.is_empty() {
                        // Mangled as stored: demangled when looked up
                        // (`symbol`). Demangling node's ~100,000 C++
                        // symbols up front took 0.2 s of every report and
                        // of the summary at the end of `record`, to name
                        // a handful of addresses.
                        symbols.push((s.address(), s.size(), name.to_string()));
                    }
                }
            }
        };
        add(&mut symbols, file.symbols());
        // A stripped binary: its separate debug file (build-id directory
        // or .gnu_debuglink) has the full symbol table and the DWARF.
        let has_dwarf = file.section_by_name(".debug_info").is_some();
        let debug = if symbols.is_empty() || !has_dwarf {
            find_debug_file(path, &file)
        } else {
            DebugFile::default()
        };
        let debug_data = match &debug.path {
            Some(p) => std::fs::read(p).ok(),
            None => None,
        };
        let debug_obj = debug_data
            .as_deref()
            .and_then(|d| object::File::parse(d).ok());
        if symbols.is_empty() {
            if let Some(d) = &debug_obj {
                add(&mut symbols, d.symbols());
            }
        }
        if symbols.is_empty() {
            // Last resort: the exported names (functions and data that
            // the dynamic linker sees).
            add(&mut symbols, file.dynamic_symbols());
        }
        symbols.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        symbols.dedup_by_key(|s| s.0);
        let segments = file
            .segments()
            .map(|s| {
                let (off, fsize) = s.file_range();
                (off, fsize, s.size().max(fsize), s.address())
            })
            .collect();
        // DWARF is optional: a stripped binary still gives symbols.
        let dwarf_path = match (&debug.path, has_dwarf) {
            (Some(p), false) => p.to_string_lossy().into_owned(),
            _ => path.to_string(),
        };
        let dwarf = addr2line::Loader::new(&dwarf_path).ok();
        let layout = match (&debug_obj, has_dwarf) {
            (Some(d), false) => layout::Layout::load(d),
            (_, true) => layout::Layout::load(&file),
            _ => None,
        };
        // Say why names are missing, and what would bring them.
        // Not for the C and C++ runtimes: their frames are skipped unless
        // `--frames all`, and a note per runtime library is noise.
        let quiet = is_runtime_module(base_name(path));
        // A Rust program built by cargo's release profile has its symbols
        // but no DWARF: not stripped, and no distribution debug package
        // exists for it; the fix is in its Cargo.toml. Told by rustc's
        // `.comment` entry (every rustc-linked ELF has one), or, where
        // that section was removed, a symbol only Rust's std defines.
        let rust = !has_dwarf && is_rust_binary(&file, &symbols);
        let mut note = (!quiet && !has_dwarf && debug.path.is_none() && !debug.looked.is_empty())
            .then(|| {
                if rust {
                    format!(
                        "{path}: a Rust build without debug info (cargo's release profile \
                         has none): add `debug = \"line-tables-only\"` to `[profile.release]` \
                         in Cargo.toml (or build with `-C debuginfo=line-tables-only`) for \
                         file and line of each site"
                    )
                } else {
                    format!(
                        "{path}: no debug info (stripped) and no separate debug file found \
                 (looked for {}); install its debug package (-dbgsym / -dbg) for \
                 function names and lines",
                        debug.looked.join(", ")
                    )
                }
            });
        if !debug.fetch_errors.is_empty() {
            let why = format!("debuginfod failed: {}", debug.fetch_errors.join("; "));
            note = Some(match note {
                Some(n) => format!("{n} ({why})"),
                None => format!("{path}: {why}"),
            });
        }
        let module = Module {
            layout,
            symbols,
            segments,
            dwarf,
        };
        Ok((module, note))
    }

    fn vaddr_of(&self, file_off: u64) -> Option<u64> {
        // Inside a segment's file bytes first; only then in the `.bss`
        // tail of the last segment starting before it. (A RELRO segment's
        // memory size can reach over the file bytes of the next segment:
        // matching by memory size first would pick the wrong one.)
        let inside = self
            .segments
            .iter()
            .find(|&&(off, fsz, _, _)| file_off >= off && file_off - off < fsz);
        let seg = inside.or_else(|| {
            self.segments
                .iter()
                .filter(|&&(off, _, msz, _)| file_off >= off && file_off - off < msz)
                .max_by_key(|s| s.0)
        })?;
        Some(seg.3 + (file_off - seg.0))
    }

    /// Symbol containing `va`, demangled; a symbol of size 0 matches only
    /// its own address.
    fn symbol(&self, va: u64) -> Option<(String, u64)> {
        let i = self.symbols.partition_point(|s| s.0 <= va);
        let (start, size, name) = self.symbols.get(i.checked_sub(1)?)?;
        let inside = va - start < (*size).max(1);
        inside.then(|| (demangle(name), va - start))
    }
}

/// Was this ELF file linked by rustc?
fn is_rust_binary(file: &object::File<'_>, symbols: &[(u64, u64, String)]) -> bool {
    use object::ObjectSection;
    let comment = file
        .section_by_name(".comment")
        .and_then(|s| s.data().ok())
        .is_some_and(|d| d.windows(13).any(|w| w == b"rustc version"));
    comment
        || symbols
            .iter()
            .any(|s| s.2.contains("rust_begin_unwind") || s.2.starts_with("__rust_"))
}

/// Where a stripped module's debug file was found, and where it was
/// looked for (for the report's note when it was not).
#[derive(Default)]
struct DebugFile {
    path: Option<std::path::PathBuf>,
    looked: Vec<String>,
    /// Why debuginfod servers failed (not "not found").
    fetch_errors: Vec<String>,
}

/// Roots of separate debug files: `$LOCKSCOPE_DEBUG_DIRS` (colon
/// separated) before the system's `/usr/lib/debug`, where Debian's
/// `-dbgsym` and Fedora's `-debuginfo` packages install them.
fn debug_roots() -> Vec<std::path::PathBuf> {
    let mut v: Vec<std::path::PathBuf> = std::env::var_os("LOCKSCOPE_DEBUG_DIRS")
        .map(|s| std::env::split_paths(&s).collect())
        .unwrap_or_default();
    v.push("/usr/lib/debug".into());
    v
}

/// Finds the separate debug file of `path` as gdb does: by GNU build-id
/// (`ROOT/.build-id/ab/cdef....debug`, the debug file must carry the same
/// build-id), then by `.gnu_debuglink` (its name next to the file, in
/// `.debug/` beside it, or under `ROOT/<the file's directory>/`; the CRC
/// of the debug file must match the link's).
fn find_debug_file(path: &str, file: &object::File<'_>) -> DebugFile {
    let mut out = DebugFile::default();
    let roots = debug_roots();
    if let Ok(Some(id)) = file.build_id() {
        if id.len() >= 2 {
            let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
            for root in &roots {
                let p = root
                    .join(".build-id")
                    .join(&hex[..2])
                    .join(format!("{}.debug", &hex[2..]));
                out.looked.push(p.display().to_string());
                let same_id = std::fs::read(&p).ok().is_some_and(|d| {
                    object::File::parse(&*d)
                        .ok()
                        .and_then(|f| f.build_id().ok().flatten().map(|b| b == id))
                        .unwrap_or(false)
                });
                if same_id {
                    out.path = Some(p);
                    return out;
                }
            }
        }
    }
    if let Some(p) = debuglink(path, file, &roots, &mut out.looked) {
        out.path = Some(p);
        return out;
    }
    // Last, a debuginfod server (DEBUGINFOD_URLS), by build-id.
    if let (Some(cfg), Ok(Some(id))) = (lockscope_debuginfod::Config::from_env(), file.build_id()) {
        out.looked.push(format!("debuginfod at {}", cfg.describe()));
        let got = lockscope_debuginfod::debuginfo(&cfg, id);
        out.fetch_errors = got.errors.iter().map(|e| e.to_string()).collect();
        out.path = got.path;
    }
    out
}

/// The `.gnu_debuglink` candidates of `path` (see [`find_debug_file`]).
fn debuglink(
    path: &str,
    file: &object::File<'_>,
    roots: &[std::path::PathBuf],
    looked: &mut Vec<String>,
) -> Option<std::path::PathBuf> {
    if let Ok(Some((name, crc))) = file.gnu_debuglink() {
        let name = String::from_utf8_lossy(name).into_owned();
        let dir = Path::new(path).parent().unwrap_or(Path::new("/"));
        let mut cands = vec![dir.join(&name), dir.join(".debug").join(&name)];
        for root in roots {
            cands.push(root.join(dir.strip_prefix("/").unwrap_or(dir)).join(&name));
        }
        for p in cands {
            looked.push(p.display().to_string());
            // The link names a file, not a build: a CRC mismatch is a
            // debug file of another build of the same program.
            if p.as_path() != Path::new(path)
                && std::fs::read(&p).is_ok_and(|d| crc32fast::hash(&d) == crc)
            {
                return Some(p);
            }
        }
    }
    None
}

fn demangle(name: &str) -> String {
    // Only mangled names: a C symbol like `m` would otherwise be read as
    // an Itanium type code ("unsigned long").
    if name.starts_with("_Z") || name.starts_with("_R") {
        addr2line::demangle_auto(name.into(), None).into_owned()
    } else {
        name.to_string()
    }
}

/// Resolves addresses of the processes of one trace. Modules are loaded
/// once each and kept; results are not cached (callers symbolize only the
/// few hundred addresses that appear in a report).
pub struct Symbolizer {
    maps: HashMap<u32, Vec<MapEntry>>,
    strings: HashMap<u32, String>,
    /// Names the trace gives exact code addresses (`CodeName` records:
    /// GPU kernel handles), by (process, address).
    code_names: HashMap<(u32, u64), String>,
    modules: HashMap<(String, Vec<u8>), Option<Module>>,
    /// Why modules could not be used, for the report's notes.
    problems: Vec<String>,
    enabled: bool,
}

impl Symbolizer {
    /// A symbolizer over the maps and strings of a trace. With
    /// `enabled = false` every address stays module+offset (fast, and
    /// stable across machines: used by snapshot tests).
    pub fn new(
        maps: HashMap<u32, Vec<MapEntry>>,
        strings: HashMap<u32, String>,
        enabled: bool,
    ) -> Self {
        let mut maps = maps;
        for v in maps.values_mut() {
            v.sort_by_key(|m| m.start);
        }
        Symbolizer {
            maps,
            strings,
            code_names: HashMap::new(),
            modules: HashMap::new(),
            problems: Vec::new(),
            enabled,
        }
    }

    /// A symbolizer over everything a trace holds for naming: its maps,
    /// strings and the names it gives code addresses directly.
    pub fn for_meta(meta: &lockscope_trace::input::Meta, enabled: bool) -> Self {
        let mut s = Symbolizer::new(meta.maps.clone(), meta.strings.clone(), enabled);
        s.code_names = meta.code_names.clone();
        s
    }

    /// Messages about modules that could not be read.
    pub fn problems(&self) -> &[String] {
        &self.problems
    }

    fn map_of(&self, process: u32, addr: u64) -> Option<&MapEntry> {
        let v = self.maps.get(&process)?;
        let i = v.partition_point(|m| m.start <= addr);
        let k = i.checked_sub(1)?;
        let m = v.get(k)?;
        if addr >= m.end {
            return None;
        }
        // Static data in `.bss` lives in an anonymous map that directly
        // follows the module's last file-backed map: resolve it through
        // that map (its file offset extends into the segment's memory size).
        if m.path == 0 && k > 0 && v[k - 1].end == m.start && v[k - 1].path != 0 {
            return Some(&v[k - 1]);
        }
        Some(m)
    }

    fn module(&mut self, path: &str, build_id: &[u8]) -> Option<&Module> {
        let key = (path.to_string(), build_id.to_vec());
        if !self.modules.contains_key(&key) {
            let m = if self.enabled && Path::new(path).is_absolute() {
                match Module::load(path, build_id) {
                    Ok((m, note)) => {
                        self.problems.extend(note);
                        Some(m)
                    }
                    Err(e) => {
                        self.problems.push(e);
                        None
                    }
                }
            } else {
                None
            };
            self.modules.insert(key.clone(), m);
        }
        self.modules.get(&key)?.as_ref()
    }

    /// Common part: (module base name, file offset, module, vaddr).
    fn locate(&mut self, process: u32, addr: u64) -> (String, u64, Option<(&Module, u64)>) {
        let Some(m) = self.map_of(process, addr) else {
            return ("?".into(), addr, None);
        };
        let file_off = addr - m.start + m.offset;
        let path = self.strings.get(&m.path).cloned().unwrap_or_default();
        let build_id = m.build_id.clone();
        let name = if path.is_empty() {
            "[anon]".to_string()
        } else {
            base_name(&path).to_string()
        };
        if path.is_empty() || path.starts_with('[') {
            return (name, file_off, None);
        }
        let module = self.module(&path, &build_id);
        let resolved = module.and_then(|md| md.vaddr_of(file_off).map(|va| (md, va)));
        (name, file_off, resolved)
    }

    /// Resolves a return address (the call site): the line looked up is the
    /// one of `pc - 1`, the call instruction itself.
    pub fn code(&mut self, process: u32, pc: u64) -> Location {
        // A name the trace gives this exact address wins over the maps: a
        // kernel handle lies in the heap, where no file names anything.
        // (Callers name a function's entry `f` as the return address
        // `f + 1`.) Demangled even when symbolization is off: the name
        // comes from the trace, not from reading files.
        if let Some(name) = self.code_names.get(&(process, pc.saturating_sub(1))) {
            let function = cpp_demangle::Symbol::new(name.as_bytes())
                .ok()
                .and_then(|sym| sym.demangle().ok())
                .unwrap_or_else(|| name.clone());
            return Location {
                module: GPU_KERNEL_MODULE.into(),
                // The address keeps two kernels apart in `key`.
                offset: pc.saturating_sub(1),
                frames: vec![Frame {
                    function: Some(function),
                    file: None,
                    line: None,
                }],
            };
        }
        let (module, offset, resolved) = self.locate(process, pc.saturating_sub(1));
        let mut loc = Location {
            module,
            offset: offset + 1,
            frames: Vec::new(),
        };
        let Some((md, va)) = resolved else {
            return loc;
        };
        if let Some(d) = &md.dwarf {
            if let Ok(mut it) = d.find_frames(va) {
                while let Ok(Some(f)) = it.next() {
                    let function = f
                        .function
                        .as_ref()
                        .and_then(|n| n.demangle().ok().map(|s| s.into_owned()));
                    let (file, line) = match &f.location {
                        Some(l) => (l.file.map(str::to_string), l.line),
                        None => (None, None),
                    };
                    loc.frames.push(Frame {
                        function,
                        file,
                        line,
                    });
                }
            }
        }
        if loc.frames.iter().all(|f| f.function.is_none()) {
            if let Some((name, _)) = md.symbol(va) {
                match loc.frames.first_mut() {
                    Some(f) => f.function = Some(name),
                    None => loc.frames.push(Frame {
                        function: Some(name),
                        file: None,
                        line: None,
                    }),
                }
            }
        }
        loc
    }

    /// A section's call site as the user's code has it, the frame choice
    /// of `report`: the return address's user view (a lock call inlined
    /// from `<mutex>` names the function it was inlined into), else the
    /// first user frame of the section's recorded call paths `stacks`
    /// (an out-of-line `std::mutex::lock()` or Rust std's futex mutex)
    /// when they agree on one, else the raw location: one return address
    /// shared by several callers is not any one of them (`report`'s rule
    /// for a site whose paths disagree).
    pub fn user_site(
        &mut self,
        traces: &HashMap<u32, lockscope_format::StackTrace>,
        process: u32,
        pc: u64,
        stacks: &[u32],
    ) -> String {
        let raw = self.code(process, pc);
        if let Some(v) = raw.user_view() {
            return v.short();
        }
        let mut callers: Vec<String> = Vec::new();
        for st in stacks.iter().filter_map(|id| traces.get(id)) {
            let p = if st.process != 0 { st.process } else { process };
            let user = st
                .frames
                .iter()
                .find_map(|&f| self.code(p, f).user_view())
                .map(|v| v.short());
            if let Some(u) = user {
                if !callers.contains(&u) {
                    callers.push(u);
                }
            }
        }
        match callers.len() {
            1 => callers.pop().unwrap_or_default(),
            _ => raw.short(),
        }
    }

    /// Name of a data address (a static lock): the symbol containing it,
    /// with the path inside it that DWARF's types give (`lru_locks[12]`,
    /// `buckets[3].lock`, `_PyRuntime.ceval.gil.mutex`; see
    /// `symbols/layout.rs`), else with `+offset` when it is inside a
    /// larger object; `module+0xoffset` in a module's data that no symbol
    /// covers (a stripped binary's `.bss`).
    /// `None` for heap, stack and anonymous memory, or when the file
    /// cannot be read.
    pub fn data(&mut self, process: u32, addr: u64) -> Option<String> {
        self.data_named(process, addr, true)
    }

    /// As [`Self::data`] but naming only array elements inside a static,
    /// not struct members (`slots[1]+0x8`): the form detailed mode splits
    /// into an object and an offset.
    pub fn data_indexed(&mut self, process: u32, addr: u64) -> Option<String> {
        self.data_named(process, addr, false)
    }

    /// The one member of class `class` (qualified, as a demangled name
    /// gives it) that is a lock of type `want`, looked up in the DWARF of
    /// the module holding code address `pc` (where the class's member
    /// functions are); see [`layout::Layout::only_lock_member`].
    pub(crate) fn only_lock_member(
        &mut self,
        process: u32,
        pc: u64,
        class: &str,
        want: LockType,
    ) -> Option<String> {
        let (_, _, resolved) = self.locate(process, pc.saturating_sub(1));
        let (md, _) = resolved?;
        md.layout.as_ref()?.only_lock_member(class, want)
    }

    fn data_named(&mut self, process: u32, addr: u64, members: bool) -> Option<String> {
        let (module, file_off, resolved) = self.locate(process, addr);
        let (md, va) = resolved?;
        let Some((name, off)) = md.symbol(va) else {
            return Some(format!("{module}+{file_off:#x}"));
        };
        if let Some((path, rest)) = md
            .layout
            .as_ref()
            .and_then(|l| l.inside(va - off, off, members))
        {
            return Some(if rest == 0 {
                format!("{name}{path}")
            } else {
                format!("{name}{path}+{rest:#x}")
            });
        }
        Some(if off == 0 {
            name
        } else {
            format!("{name}+{off:#x}")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(f: &str, file: &str, line: u32) -> Frame {
        Frame {
            function: Some(f.into()),
            file: Some(file.into()),
            line: Some(line),
        }
    }

    /// The user frame of an inlined std::mutex::lock()
    /// (libstdc++ 12, -O2) and of Rust std's Mutex::lock; none inside
    /// libc or a chain that is all runtime.
    #[test]
    fn user_view_skips_runtime_frames() {
        let cxx = Location {
            module: "app".into(),
            offset: 0x1234,
            frames: vec![
                frame(
                    "__gthread_mutex_lock",
                    "/usr/include/x86_64-linux-gnu/c++/12/bits/gthr-default.h",
                    749,
                ),
                frame(
                    "std::mutex::lock()",
                    "/usr/include/c++/12/bits/std_mutex.h",
                    100,
                ),
                frame(
                    "std::lock_guard<std::mutex>::lock_guard(std::mutex&)",
                    "/usr/include/c++/12/bits/std_mutex.h",
                    229,
                ),
                frame("by_guard(int)", "/src/app.cpp", 27),
                frame("worker()", "/src/app.cpp", 60),
            ],
        };
        let v = cxx.user_view().unwrap();
        assert_eq!(
            v.short(),
            "by_guard(int) (app.cpp:27) in worker() (app.cpp:60)"
        );
        assert_eq!(v.frames.len(), 2);
        let rust = Location {
            module: "app".into(),
            offset: 0x99,
            frames: vec![
                frame(
                    "std::sys::sync::mutex::futex::Mutex::lock",
                    "/rustc/abc/library/std/src/sys/sync/mutex/futex.rs",
                    28,
                ),
                frame("app::worker", "src/main.rs", 12),
            ],
        };
        assert_eq!(
            rust.user_view().unwrap().short(),
            "app::worker (main.rs:12)"
        );
        let mut thread_start = rust.clone();
        thread_start.frames.push(frame(
            "std::sys::backtrace::__rust_begin_short_backtrace",
            "/rustc/abc/library/std/src/sys/backtrace.rs",
            166,
        ));
        assert_eq!(
            thread_start.user_view().unwrap().short(),
            "app::worker (main.rs:12)"
        );
        let all_std = Location {
            frames: vec![cxx.frames[0].clone(), cxx.frames[1].clone()],
            ..cxx.clone()
        };
        assert_eq!(all_std.user_view(), None);
        let libc = Location {
            module: "libc.so.6".into(),
            offset: 1,
            frames: vec![frame("start_thread", "pthread_create.c", 442)],
        };
        assert_eq!(libc.user_view(), None);
        let bare = Location {
            module: "app".into(),
            offset: 7,
            frames: vec![],
        };
        assert_eq!(bare.user_view().unwrap().short(), "app+0x7");
    }

    #[test]
    fn unknown_address_degrades_to_module_offset() {
        let mut s = Symbolizer::new(HashMap::new(), HashMap::new(), true);
        let l = s.code(1, 0x1234);
        assert_eq!(l.module, "?");
        assert_eq!(l.short(), "?+0x1234");
        assert_eq!(s.data(1, 0x1234), None);
    }

    #[test]
    fn missing_file_degrades_and_is_reported() {
        let mut maps = HashMap::new();
        maps.insert(
            1,
            vec![MapEntry {
                process: 1,
                start: 0x1000,
                end: 0x2000,
                offset: 0x3000,
                path: 7,
                build_id: vec![],
                perms: "r-xp".into(),
            }],
        );
        let mut strings = HashMap::new();
        strings.insert(7, "/nonexistent/libgone.so".to_string());
        let mut s = Symbolizer::new(maps, strings, true);
        let l = s.code(1, 0x1010);
        assert_eq!(l.short(), "libgone.so+0x3010");
        assert_eq!(s.problems().len(), 1);
    }

    #[test]
    fn resolves_own_test_binary() {
        // The running test binary is a real ELF file with symbols: map it
        // as the kernel would (offset 0 at its lowest segment) and resolve
        // a static.
        static MARKER_LOCK: std::sync::Mutex<u32> = std::sync::Mutex::new(0);
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let maps_txt = std::fs::read_to_string("/proc/self/maps").unwrap();
        let mut maps = Vec::new();
        for line in maps_txt.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            // The executable's own maps, and anonymous ones (its .bss).
            let path = match f.get(5) {
                None => 0,
                Some(p) if *p == exe.to_str().unwrap() => 1,
                Some(_) => continue,
            };
            let (a, b) = f[0].split_once('-').unwrap();
            maps.push(MapEntry {
                process: 1,
                start: u64::from_str_radix(a, 16).unwrap(),
                end: u64::from_str_radix(b, 16).unwrap(),
                offset: u64::from_str_radix(f[2], 16).unwrap(),
                path,
                build_id: vec![],
                perms: f[1].into(),
            });
        }
        let mut strings = HashMap::new();
        strings.insert(1, exe.to_string_lossy().into_owned());
        let mut m = HashMap::new();
        m.insert(1, maps);
        let mut s = Symbolizer::new(m, strings, true);
        let addr = &MARKER_LOCK as *const _ as u64;
        let name = s.data(1, addr);
        let name = name.unwrap_or_else(|| {
            panic!(
                "{addr:#x}: {:?} {:#x?}",
                s.problems(),
                s.maps[&1]
                    .iter()
                    .map(|m| (m.start, m.end, m.offset, m.path))
                    .collect::<Vec<_>>()
            )
        });
        assert!(name.contains("MARKER_LOCK"), "{name}");
        let here = resolves_own_test_binary as *const () as usize as u64;
        let loc = s.code(1, here + 1);
        // In an optimized build the first instruction may belong to a
        // function inlined into this one (std::fs::read_link): the test
        // function must then be among the outer inlined frames.
        assert!(
            loc.frames.iter().any(|f| f
                .function
                .as_deref()
                .unwrap_or("")
                .contains("resolves_own_test_binary")),
            "{loc:?}"
        );
    }
}
