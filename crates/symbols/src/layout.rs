//! Names of addresses inside static variables, from DWARF types: a lock
//! at offset 0x1b8 of `_PyRuntime` is `_PyRuntime.ceval.gil.mutex`, one in
//! element 3 of an array of structs `buckets[3].lock`, element 12 of an
//! array of mutexes `lru_locks[12]`.
//!
//! The walk goes down through arrays (each index named, multi-dimensional
//! ones too) and through structs and classes while the offset left is not
//! 0 (a lock at the start of a struct is named by the struct: `m`, not
//! `m._M_mutex`); base classes add no name. It stops at unions (a
//! `pthread_mutex_t` is one) and at anything else; what is left of the
//! offset is shown as `+0x..`.

use addr2line::gimli;

type Slice<'a> = gimli::EndianSlice<'a, gimli::RunTimeEndian>;
type Unit<'a> = gimli::Unit<Slice<'a>>;
type Entry<'a> = gimli::DebuggingInformationEntry<Slice<'a>>;

/// Deepest type nesting followed (and typedef chains).
const MAX_DEPTH: usize = 32;

/// The DWARF of one module kept for data names: the few sections a type
/// walk needs (decompressed once) and every variable with a static
/// address.
pub(super) struct Layout {
    sections: gimli::DwarfSections<Vec<u8>>,
    endian: gimli::RunTimeEndian,
    /// (address, unit offset in .debug_info, entry offset in the unit),
    /// sorted by address.
    vars: Vec<(u64, usize, usize)>,
    /// Start offsets of the units in .debug_info, sorted (a reference
    /// across units, as LTO writes them, is found through them).
    units: Vec<usize>,
    /// Class definitions and lock types, indexed on the first question
    /// about a class (most reports name no heap lock by its type: the
    /// walk over every DIE is not paid up front).
    classes: std::cell::OnceCell<Classes>,
}

/// The lock types a member can have, as the recorder classes the lock
/// word itself: a member of one of them can only be a lock of that kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LockType {
    /// `pthread_mutex_t`, `std::mutex` and its recursive and timed kin.
    Mutex,
    /// `pthread_rwlock_t`, `std::shared_mutex`, `std::shared_timed_mutex`.
    RwLock,
    /// `pthread_spinlock_t`.
    Spin,
}

/// The lock type a qualified type name is (`std::mutex`,
/// `std::__1::mutex` in libc++, `pthread_mutex_t`).
fn lock_type_named(q: &str) -> Option<LockType> {
    match q {
        "pthread_mutex_t" => return Some(LockType::Mutex),
        "pthread_rwlock_t" => return Some(LockType::RwLock),
        "pthread_spinlock_t" => return Some(LockType::Spin),
        _ => {}
    }
    let (ns, last) = q.rsplit_once("::")?;
    if ns != "std" && !ns.starts_with("std::") {
        return None;
    }
    match last {
        "mutex" | "recursive_mutex" | "timed_mutex" | "recursive_timed_mutex" => {
            Some(LockType::Mutex)
        }
        "shared_mutex" | "shared_timed_mutex" => Some(LockType::RwLock),
        _ => None,
    }
}

/// Where a class's lock members are.
#[derive(Default)]
struct Classes {
    /// Qualified name (`ns::ThreadPool`) -> .debug_info offsets of its
    /// definitions (each unit that uses a class defines it again).
    defs: std::collections::HashMap<String, Vec<usize>>,
    /// .debug_info offsets of the type entries that are lock types.
    locks: std::collections::HashMap<usize, LockType>,
}

/// What one member of a class holds, for naming a lock by it.
#[derive(Debug, PartialEq, Eq)]
enum Held {
    /// A lock of this type at this member path (`m_`, `q_.m`).
    Lock(String, LockType),
    /// A lock whose address says nothing about which one it is: an array
    /// of locks, or a pointer or reference to one (it may be any lock).
    Unknown,
}

impl Layout {
    /// Reads the variables of `file`'s DWARF; `None` when it has none.
    pub(super) fn load(file: &object::File<'_>) -> Option<Layout> {
        use object::{Object, ObjectSection};
        let endian = if file.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        // What names and types need, and what reading a unit header
        // does (its line program header and range lists), not location
        // lists or frames.
        let keep = [
            gimli::SectionId::DebugInfo,
            gimli::SectionId::DebugAbbrev,
            gimli::SectionId::DebugStr,
            gimli::SectionId::DebugStrOffsets,
            gimli::SectionId::DebugLine,
            gimli::SectionId::DebugLineStr,
            gimli::SectionId::DebugAddr,
            gimli::SectionId::DebugRanges,
            gimli::SectionId::DebugRngLists,
        ];
        let sections = gimli::DwarfSections::load(|id| {
            Ok::<_, gimli::Error>(if keep.contains(&id) {
                file.section_by_name(id.name())
                    .and_then(|s| s.uncompressed_data().ok())
                    .map(|c| c.into_owned())
                    .unwrap_or_default()
            } else {
                Vec::new()
            })
        })
        .ok()?;
        let mut layout = Layout {
            sections,
            endian,
            vars: Vec::new(),
            units: Vec::new(),
            classes: std::cell::OnceCell::new(),
        };
        let mut vars = Vec::new();
        let mut unit_starts = Vec::new();
        {
            let dwarf = layout.dwarf();
            let mut units = dwarf.units();
            while let Ok(Some(header)) = units.next() {
                let unit_off = header.offset().0;
                unit_starts.push(unit_off);
                let Ok(unit) = dwarf.unit(header) else {
                    continue;
                };
                let mut entries = unit.entries();
                while let Ok(Some(e)) = entries.next_dfs() {
                    if e.tag() != gimli::DW_TAG_variable {
                        continue;
                    }
                    if let Some(addr) = var_address(&unit, e) {
                        vars.push((addr, unit_off, e.offset().0));
                    }
                }
            }
        }
        // A program without static variables still has classes.
        if vars.is_empty() && unit_starts.is_empty() {
            return None;
        }
        vars.sort_unstable();
        vars.dedup_by_key(|v| v.0);
        layout.vars = vars;
        unit_starts.sort_unstable();
        layout.units = unit_starts;
        Some(layout)
    }

    fn dwarf(&self) -> gimli::Dwarf<Slice<'_>> {
        self.sections
            .borrow(|s| gimli::EndianSlice::new(s, self.endian))
    }

    /// For the variable that starts at `var` and an offset `off` inside
    /// it: the member and index path (`.ceval.gil.mutex`, `[3].lock`) and
    /// the offset left after it. `None` when DWARF says nothing (no such
    /// variable, or its type is not an aggregate).
    /// With `members = false` only array indices are named (`slots[1]+0x8`
    /// instead of `slots[1].next`).
    pub(super) fn inside(&self, var: u64, off: u64, members: bool) -> Option<(String, u64)> {
        let i = self.vars.partition_point(|v| v.0 < var);
        let &(addr, unit_off, die) = self.vars.get(i)?;
        if addr != var {
            return None;
        }
        let dwarf = self.dwarf();
        let (unit, ty) = self.var_type(&dwarf, unit_off + die)?;
        let (path, rest) = walk(&dwarf, &unit, ty, off, members)?;
        (!path.is_empty()).then_some((path, rest))
    }

    /// The one member of class `class` (qualified as demangled:
    /// `ns::ThreadPool`) that is a lock of type `want`, as a member path
    /// (`m_`, `queue_.m`). `None` unless there is exactly one lock of that
    /// type in the class (its members, its bases and their members, to a
    /// bounded depth) and no array of locks or pointer to a lock of any
    /// type in it: then any lock of that type inside an object of the
    /// class is that member.
    pub(super) fn only_lock_member(&self, class: &str, want: LockType) -> Option<String> {
        let classes = self.classes.get_or_init(|| self.index_classes());
        let dwarf = self.dwarf();
        // The first definition that has members: a unit may hold only the
        // class's declaration-like shell.
        for &at in classes.defs.get(class)? {
            let mut found = Vec::new();
            if !self.lock_members(&dwarf, classes, at, "", 0, &mut found) {
                continue;
            }
            if found.is_empty() {
                continue;
            }
            if found.contains(&Held::Unknown) {
                return None;
            }
            let mut of_kind = found.into_iter().filter_map(|h| match h {
                Held::Lock(p, t) if t == want => Some(p),
                _ => None,
            });
            let one = of_kind.next()?;
            return of_kind.next().is_none().then_some(one);
        }
        None
    }

    /// Collects the locks inside the class defined at .debug_info offset
    /// `at` into `out` (paths under `prefix`); false when the entry cannot
    /// be read.
    fn lock_members(
        &self,
        dwarf: &gimli::Dwarf<Slice<'_>>,
        classes: &Classes,
        at: usize,
        prefix: &str,
        depth: usize,
        out: &mut Vec<Held>,
    ) -> bool {
        if depth > 8 {
            return true;
        }
        let Some((unit, off)) = self.unit_of(dwarf, at) else {
            return false;
        };
        let base = at - off.0;
        let Ok(mut tree) = unit.entries_tree(Some(off)) else {
            return false;
        };
        let Ok(root) = tree.root() else {
            return false;
        };
        let mut kids = root.children();
        while let Ok(Some(k)) = kids.next() {
            let k = k.entry();
            let inherit = k.tag() == gimli::DW_TAG_inheritance;
            if k.tag() != gimli::DW_TAG_member && !inherit {
                continue;
            }
            // A static member (DWARF 4 writes it as a declared member) is
            // not inside the object: a static lock has a symbol anyway.
            if k.attr_value(gimli::DW_AT_declaration).is_some()
                || k.attr_value(gimli::DW_AT_external).is_some()
            {
                continue;
            }
            let Some(ty) = ref_of(k, gimli::DW_AT_type, base) else {
                // A type this walk cannot follow (a type unit's signature,
                // `-fdebug-types-section`) may be a lock: no inference.
                out.push(Held::Unknown);
                continue;
            };
            let path = if inherit {
                prefix.to_string()
            } else {
                let Some(n) = name_of(dwarf, &unit, k) else {
                    continue;
                };
                if prefix.is_empty() {
                    n
                } else {
                    format!("{prefix}.{n}")
                }
            };
            self.held_in(dwarf, classes, ty, path, depth + 1, out);
        }
        true
    }

    /// What a member of the type at .debug_info offset `ty` holds.
    fn held_in(
        &self,
        dwarf: &gimli::Dwarf<Slice<'_>>,
        classes: &Classes,
        mut ty: usize,
        path: String,
        depth: usize,
        out: &mut Vec<Held>,
    ) {
        for _ in 0..MAX_DEPTH {
            if let Some(&t) = classes.locks.get(&ty) {
                out.push(Held::Lock(path, t));
                return;
            }
            let Some((unit, off)) = self.unit_of(dwarf, ty) else {
                return;
            };
            let Ok(e) = unit.entry(off) else {
                return;
            };
            let base = ty - off.0;
            match e.tag() {
                gimli::DW_TAG_typedef
                | gimli::DW_TAG_const_type
                | gimli::DW_TAG_volatile_type
                | gimli::DW_TAG_atomic_type => match ref_of(&e, gimli::DW_AT_type, base) {
                    Some(t) => ty = t,
                    None => return,
                },
                gimli::DW_TAG_array_type
                | gimli::DW_TAG_pointer_type
                | gimli::DW_TAG_reference_type
                | gimli::DW_TAG_rvalue_reference_type => {
                    // Any lock reached through it is one of many (an
                    // array) or anywhere (a pointer): it makes every
                    // inference about this class unsafe.
                    if let Some(t) = ref_of(&e, gimli::DW_AT_type, base) {
                        if self.is_or_holds_lock(dwarf, classes, t) {
                            out.push(Held::Unknown);
                        }
                    }
                    return;
                }
                gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type => {
                    self.lock_members(dwarf, classes, ty, &path, depth, out);
                    return;
                }
                _ => return,
            }
        }
    }

    /// True when the type at `ty` is a lock or holds one by value.
    fn is_or_holds_lock(
        &self,
        dwarf: &gimli::Dwarf<Slice<'_>>,
        classes: &Classes,
        ty: usize,
    ) -> bool {
        let mut inner = Vec::new();
        // Depth 6 of 8: the element's own members are looked at, not
        // what their pointers lead to.
        self.held_in(dwarf, classes, ty, String::new(), 6, &mut inner);
        !inner.is_empty()
    }

    /// Walks every DIE once: class and struct definitions by qualified
    /// name, and the entries of lock types.
    fn index_classes(&self) -> Classes {
        let mut c = Classes::default();
        let dwarf = self.dwarf();
        let mut units = dwarf.units();
        while let Ok(Some(header)) = units.next() {
            let unit_off = header.offset().0;
            let Ok(unit) = dwarf.unit(header) else {
                continue;
            };
            // (depth, name) of the namespaces and classes around the
            // current entry.
            let mut scopes: Vec<(isize, String)> = Vec::new();
            let mut entries = unit.entries();
            while let Ok(Some(e)) = entries.next_dfs() {
                let d = e.depth();
                while scopes.last().is_some_and(|s| s.0 >= d) {
                    scopes.pop();
                }
                let tag = e.tag();
                let is_class = matches!(
                    tag,
                    gimli::DW_TAG_structure_type
                        | gimli::DW_TAG_class_type
                        | gimli::DW_TAG_union_type
                );
                if tag != gimli::DW_TAG_namespace && !is_class && tag != gimli::DW_TAG_typedef {
                    continue;
                }
                let name = match name_of(&dwarf, &unit, e) {
                    Some(n) => n,
                    None if tag == gimli::DW_TAG_namespace => "(anonymous namespace)".into(),
                    None => continue,
                };
                let mut q = String::new();
                for (_, s) in &scopes {
                    q.push_str(s);
                    q.push_str("::");
                }
                q.push_str(&name);
                let at = unit_off + e.offset().0;
                if let Some(t) = lock_type_named(&q) {
                    c.locks.insert(at, t);
                } else if is_class
                    && tag != gimli::DW_TAG_union_type
                    && e.attr_value(gimli::DW_AT_declaration).is_none()
                {
                    c.defs.entry(q.clone()).or_default().push(at);
                }
                if tag != gimli::DW_TAG_typedef && e.has_children() {
                    scopes.push((d, name));
                }
            }
        }
        c
    }

    /// The unit holding .debug_info offset `at`, and `at` within it.
    fn unit_of<'a>(
        &self,
        dwarf: &gimli::Dwarf<Slice<'a>>,
        at: usize,
    ) -> Option<(Unit<'a>, gimli::UnitOffset)> {
        let i = self.units.partition_point(|&u| u <= at).checked_sub(1)?;
        let start = self.units[i];
        let header = dwarf
            .debug_info
            .header_from_offset(gimli::DebugInfoOffset(start))
            .ok()?;
        let unit = dwarf.unit(header).ok()?;
        Some((unit, gimli::UnitOffset(at - start)))
    }

    /// The type of the variable at .debug_info offset `at`, with the unit
    /// it is in. A C++ static member's definition has no type of its own
    /// and points to its declaration (`DW_AT_specification`); with LTO the
    /// variable is an `DW_AT_abstract_origin` reference into the unit
    /// that declared it.
    fn var_type<'a>(
        &self,
        dwarf: &gimli::Dwarf<Slice<'a>>,
        mut at: usize,
    ) -> Option<(Unit<'a>, gimli::UnitOffset)> {
        for _ in 0..4 {
            let (unit, off) = self.unit_of(dwarf, at)?;
            let e = unit.entry(off).ok()?;
            if let Some(t) = type_of(&e) {
                return Some((unit, t));
            }
            let base = at - off.0;
            at = [gimli::DW_AT_specification, gimli::DW_AT_abstract_origin]
                .into_iter()
                .find_map(|a| match e.attr_value(a)? {
                    gimli::AttributeValue::UnitRef(o) => Some(base + o.0),
                    gimli::AttributeValue::DebugInfoRef(o) => Some(o.0),
                    _ => None,
                })?;
        }
        None
    }
}

/// A variable's static address (`DW_AT_location` = one `DW_OP_addr`).
fn var_address(unit: &Unit<'_>, e: &Entry<'_>) -> Option<u64> {
    let gimli::AttributeValue::Exprloc(expr) = e.attr_value(gimli::DW_AT_location)? else {
        return None;
    };
    let mut ops = expr.operations(unit.encoding());
    match ops.next().ok()?? {
        gimli::Operation::Address { address } => match ops.next() {
            Ok(None) => Some(address),
            _ => None,
        },
        _ => None,
    }
}

/// The .debug_info offset an attribute refers to (in the same unit, at
/// `base`, or across units).
fn ref_of(e: &Entry<'_>, attr: gimli::DwAt, base: usize) -> Option<usize> {
    match e.attr_value(attr)? {
        gimli::AttributeValue::UnitRef(o) => Some(base + o.0),
        gimli::AttributeValue::DebugInfoRef(o) => Some(o.0),
        _ => None,
    }
}

fn type_of(e: &Entry<'_>) -> Option<gimli::UnitOffset> {
    match e.attr_value(gimli::DW_AT_type)? {
        gimli::AttributeValue::UnitRef(o) => Some(o),
        _ => None,
    }
}

/// Byte size of a type, through typedefs and qualifiers.
fn size_of(unit: &Unit<'_>, mut off: gimli::UnitOffset) -> Option<u64> {
    for _ in 0..MAX_DEPTH {
        let t = unit.entry(off).ok()?;
        if let Some(v) = t.attr_value(gimli::DW_AT_byte_size) {
            return v.udata_value();
        }
        if t.tag() == gimli::DW_TAG_array_type {
            let elem = size_of(unit, type_of(&t)?)?;
            return Some(dims(unit, off)?.iter().product::<u64>() * elem);
        }
        off = type_of(&t)?;
    }
    None
}

/// The dimensions of an array type (`DW_AT_count`, or upper bound + 1, of
/// each subrange child); `None` when one is unknown (a flexible array).
fn dims(unit: &Unit<'_>, off: gimli::UnitOffset) -> Option<Vec<u64>> {
    let mut tree = unit.entries_tree(Some(off)).ok()?;
    let root = tree.root().ok()?;
    let mut kids = root.children();
    let mut out = Vec::new();
    while let Ok(Some(k)) = kids.next() {
        let k = k.entry();
        if k.tag() != gimli::DW_TAG_subrange_type {
            continue;
        }
        let n = if let Some(c) = k.attr_value(gimli::DW_AT_count) {
            c.udata_value()?
        } else {
            k.attr_value(gimli::DW_AT_upper_bound)?.udata_value()? + 1
        };
        out.push(n);
    }
    (!out.is_empty()).then_some(out)
}

fn name_of(dwarf: &gimli::Dwarf<Slice<'_>>, unit: &Unit<'_>, e: &Entry<'_>) -> Option<String> {
    let v = e.attr_value(gimli::DW_AT_name)?;
    let s = dwarf.attr_string(unit, v).ok()?;
    Some(s.to_string_lossy().into_owned())
}

/// The path from a value of type `ty` to offset `off` inside it (see the
/// module's rule), and the offset left.
fn walk(
    dwarf: &gimli::Dwarf<Slice<'_>>,
    unit: &Unit<'_>,
    mut ty: gimli::UnitOffset,
    mut off: u64,
    members: bool,
) -> Option<(String, u64)> {
    let mut path = String::new();
    for _ in 0..MAX_DEPTH {
        let t = unit.entry(ty).ok()?;
        match t.tag() {
            gimli::DW_TAG_typedef
            | gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_atomic_type
            | gimli::DW_TAG_restrict_type => ty = type_of(&t)?,
            gimli::DW_TAG_array_type => {
                let elem_ty = type_of(&t)?;
                let elem = size_of(unit, elem_ty)?;
                let Some(d) = dims(unit, ty) else {
                    break;
                };
                if elem == 0 {
                    break;
                }
                // Row-major: the stride of dimension k is the element
                // size times the later dimensions.
                for k in 0..d.len() {
                    let stride = elem * d[k + 1..].iter().product::<u64>();
                    let i = off / stride;
                    if i >= d[k] {
                        // Past the end (a trailing array of unknown use).
                        return Some((path, off));
                    }
                    path.push_str(&format!("[{i}]"));
                    off %= stride;
                }
                ty = elem_ty;
            }
            gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type if off > 0 && members => {
                let mut tree = unit.entries_tree(Some(ty)).ok()?;
                let root = tree.root().ok()?;
                let mut kids = root.children();
                let mut found = None;
                while let Ok(Some(k)) = kids.next() {
                    let k = k.entry();
                    let base = k.tag() == gimli::DW_TAG_inheritance;
                    if k.tag() != gimli::DW_TAG_member && !base {
                        continue;
                    }
                    // Bit-fields and computed locations are not followed.
                    if k.attr_value(gimli::DW_AT_bit_size).is_some() {
                        continue;
                    }
                    let loc = match k.attr_value(gimli::DW_AT_data_member_location) {
                        Some(v) => match v.udata_value() {
                            Some(l) => l,
                            None => continue,
                        },
                        // A union-like member without a location is at 0.
                        None => 0,
                    };
                    let Some(mty) = type_of(k) else {
                        continue;
                    };
                    let size = size_of(unit, mty).unwrap_or(0);
                    if off >= loc && off - loc < size {
                        let name = if base { None } else { name_of(dwarf, unit, k) };
                        found = Some((name, loc, mty));
                        break;
                    }
                }
                let Some((name, loc, mty)) = found else {
                    break;
                };
                if let Some(n) = name {
                    path.push('.');
                    path.push_str(&n);
                }
                off -= loc;
                ty = mty;
            }
            _ => break,
        }
    }
    Some((path, off))
}
