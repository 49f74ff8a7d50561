//! Names of locks, sites and call paths, as the report names them (user
//! frames, `function (file:line)`), cached per address.

use std::collections::HashMap;

use lockscope_symbols::locknames::LockNames;
use lockscope_symbols::{Location, Symbolizer};
use lockscope_trace::input::Meta;
use lockscope_trace::sync::ObjId;

/// Resolves and caches names.
pub struct Names<'m> {
    sym: Symbolizer,
    meta: &'m Meta,
    locks: LockNames,
    code: HashMap<(u32, u64), Location>,
    data: HashMap<ObjId, String>,
}

impl<'m> Names<'m> {
    /// A resolver for the trace of `meta` (`symbolize`: read the ELF and
    /// DWARF of the recorded modules).
    pub fn new(meta: &'m Meta, symbolize: bool) -> Self {
        let mut sym = Symbolizer::for_meta(meta, symbolize);
        let locks = LockNames::new(meta, &mut sym);
        Names {
            sym,
            meta,
            locks,
            code: HashMap::new(),
            data: HashMap::new(),
        }
    }

    fn loc(&mut self, process: u32, pc: u64) -> &Location {
        let sym = &mut self.sym;
        self.code
            .entry((process, pc))
            .or_insert_with(|| sym.code(process, pc))
    }

    /// A lock or object, named as the report names it
    /// ([`lockscope_symbols::locknames`]).
    pub fn object(&mut self, obj: ObjId) -> String {
        if let Some(s) = self.data.get(&obj) {
            return s.clone();
        }
        let s = self.locks.label(&mut self.sym, obj.process, obj.addr);
        self.data.insert(obj, s.clone());
        s
    }

    /// A call site: its user frame, else the first user frame of the call
    /// path `stack`, else the raw frame.
    pub fn site(&mut self, process: u32, pc: u64, stack: u32) -> String {
        if pc == 0 && stack == 0 {
            return "?".into();
        }
        if pc != 0 {
            if let Some(v) = self.loc(process, pc).user_view() {
                return v.short();
            }
        }
        if let Some(first) = self.path(process, stack).into_iter().next() {
            return first;
        }
        self.loc(process, pc).short()
    }

    /// A call path, innermost first, user frames only (all frames when
    /// none is user code); empty when `stack` is 0 or unknown.
    pub fn path(&mut self, process: u32, stack: u32) -> Vec<String> {
        let Some(st) = self.meta.stacks.get(&stack) else {
            return Vec::new();
        };
        let p = if st.process != 0 { st.process } else { process };
        let frames = st.frames.clone();
        let locs: Vec<Location> = frames.iter().map(|&pc| self.loc(p, pc).clone()).collect();
        let user: Vec<String> = locs
            .iter()
            .filter_map(Location::user_view)
            .map(|l| l.short())
            .collect();
        if user.is_empty() {
            locs.iter().map(Location::short).collect()
        } else {
            user
        }
    }
}
