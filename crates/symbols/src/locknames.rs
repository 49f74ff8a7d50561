//! Names of locks: the one rule every output follows (text, JSON, CSV,
//! HTML, folded stacks, pprof, diff, the recorder's summary).
//!
//! In order:
//! 1. A lock in static data: its symbol and the member path DWARF's types
//!    give (`g_pool.m_`, `_PyRuntime.ceval.gil.mutex`), else
//!    `symbol+0xOFF` ([`Symbolizer::data`]).
//! 2. A heap or stack lock first used in a member function of class `C`
//!    whose DWARF definition holds exactly one lock of the lock's type:
//!    `C::member` (`ThreadPool::m_`), see [`lock_name`] for when this is
//!    safe.
//! 3. Else its first use: `kind@function` of the first user frame of the
//!    lock's first event (`mutex@ThreadPool::submit`).
//! 4. Else its address (`0x7ffc7fe35140`): the first event was in runtime
//!    code only, or its frame has no function name (no symbols).
//!
//! Names are unique within a process: a second lock that would get a name
//! already given gets `#2` (`ThreadPool::m_#2`, two pools), in address
//! order.

use std::collections::HashMap;

use crate::{LockType, Symbolizer};
use lockscope_format::Op;
use lockscope_trace::input::Meta;
use lockscope_trace::sync::Kind;

/// What a lock's name was made from (JSON `named_by`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum NamedBy {
    /// The symbol of the static variable that holds it.
    Symbol,
    /// The class and member of the object it is in, inferred from its
    /// first use in a member function (see [`lock_name`]).
    Member,
    /// Where it was first used (`mutex@function`).
    FirstUse,
    /// Nothing better than its address.
    Address,
}

impl NamedBy {
    /// The JSON and CSV spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            NamedBy::Symbol => "symbol",
            NamedBy::Member => "member",
            NamedBy::FirstUse => "first_use",
            NamedBy::Address => "address",
        }
    }
}

/// A lock's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockName {
    /// As shown, unique within its process (`ThreadPool::m_#2`).
    pub name: String,
    /// Before the `#N` that keeps it unique: what stays the same between
    /// two runs of a program (`diff` matches locks by it).
    pub base: String,
    /// What it was made from.
    pub by: NamedBy,
}

/// A demangled function's name without its parameters and qualifiers:
/// `ThreadPool::submit(std::function<void ()>) const` is
/// `ThreadPool::submit`. A lambda is named by the function it is written
/// in (`ThreadPool::ThreadPool(int)::{lambda()#1}::operator()() const` is
/// `ThreadPool::ThreadPool`): its closure type is not where the lock is.
pub fn function_path(f: &str) -> &str {
    let f = f.split("::{lambda").next().unwrap_or(f);
    let mut angle = 0i32;
    for (i, c) in f.char_indices() {
        match c {
            '<' => angle += 1,
            '>' => angle -= 1,
            '(' if angle <= 0 && i > 0 => return &f[..i],
            _ => {}
        }
    }
    f
}

/// The class of a member function's [`function_path`] (`ns::Pool<int>`
/// for `ns::Pool<int>::submit`); `None` for a name with no scope.
fn class_of(path: &str) -> Option<&str> {
    let b = path.as_bytes();
    let mut angle = 0i32;
    let mut cut = None;
    for i in 0..b.len() {
        match b[i] {
            b'<' => angle += 1,
            b'>' => angle -= 1,
            b':' if angle == 0 && b.get(i + 1) == Some(&b':') => cut = Some(i),
            _ => {}
        }
    }
    let c = &path[..cut?];
    (!c.is_empty() && !c.ends_with(':')).then_some(c)
}

/// The base name of the lock at `addr` (see the module's rule), from its
/// kind and the return address of its first event (`first_site`, 0 when
/// unknown).
///
/// Naming a heap lock by a class member is an inference: the lock's first
/// use is in a member function of `C` and `C` holds one lock of the
/// lock's type, so the lock *is* that member when the member function
/// locked a lock of its own object. It is made only when nothing in `C`
/// can be another lock of that type: no second one (two mutex members
/// could be either), none in an array, behind a pointer or a reference
/// (`std::mutex* other_` may point anywhere), counted through base
/// classes and members of class type. It is wrong when a member function
/// locks a lock of another object of a class that is not among its
/// members (a parameter's): the JSON's `named_by: "member"` says the name
/// was inferred. Without DWARF nothing is inferred and the first use
/// names the lock.
pub fn lock_name(
    sym: &mut Symbolizer,
    process: u32,
    addr: u64,
    kind: Kind,
    first_site: u64,
) -> (String, NamedBy) {
    if let Some(n) = sym.data(process, addr) {
        return (n, NamedBy::Symbol);
    }
    use_name(sym, process, kind, first_site)
        .unwrap_or_else(|| (format!("{addr:#x}"), NamedBy::Address))
}

/// Steps 2 and 3 of the rule: the name a lock of `kind` first used at
/// return address `first_site` gets (the same for every lock first used
/// there, before the `#N`); `None` when that use is in runtime code only.
fn use_name(
    sym: &mut Symbolizer,
    process: u32,
    kind: Kind,
    first_site: u64,
) -> Option<(String, NamedBy)> {
    if first_site == 0 {
        return None;
    }
    let user = sym.code(process, first_site).user_view()?;
    // No function name (no symbols, or symbolization off): the address
    // says as much as `mutex@app+0x1234` would, and stays what it was.
    let f = user.function()?;
    let path = function_path(f);
    let want = match kind {
        Kind::Mutex => Some(LockType::Mutex),
        Kind::Rwlock => Some(LockType::RwLock),
        Kind::Spin => Some(LockType::Spin),
        // Futex words, condition variables, barriers and semaphores are
        // not C++ members of a lock type.
        _ => None,
    };
    if let (Some(want), Some(class)) = (want, class_of(path)) {
        if let Some(m) = sym.only_lock_member(process, first_site, class, want) {
            return Some((format!("{class}::{m}"), NamedBy::Member));
        }
    }
    Some((format!("{}@{path}", kind.name()), NamedBy::FirstUse))
}

/// The names of every lock a trace knows (its `LockInfo` records), made
/// unique; by (process trace id, address).
#[derive(Default)]
pub struct LockNames {
    names: HashMap<(u32, u64), LockName>,
}

impl LockNames {
    /// Names every object of `meta.locks` with [`lock_name`].
    pub fn new(meta: &Meta, sym: &mut Symbolizer) -> Self {
        let mut infos: Vec<_> = meta
            .locks
            .iter()
            .filter_map(|l| Some((Kind::of(Op::from_u8(l.first_op)?)?, l)))
            .collect();
        // Locks before the other objects at the same address (a futex word
        // that is a mutex's first field keeps the mutex's name), then by
        // address: of two same names the lower address keeps it bare.
        // Not by first use: a trace's `LockInfo` is written by whichever
        // of the recorder's converters met the lock first, so its time
        // does not order two locks' first uses.
        infos.sort_by_key(|(k, l)| (k.class(), l.process, l.addr));
        let mut out = LockNames::default();
        let mut taken: HashMap<(u32, String), u32> = HashMap::new();
        let mut uses: HashMap<(u32, Kind, u64), Option<(String, NamedBy)>> = HashMap::new();
        for (kind, l) in infos {
            if out.names.contains_key(&(l.process, l.addr)) {
                continue;
            }
            // Many locks share a first use (a pool per request): its name
            // is looked up once.
            let (base, by) = match sym.data(l.process, l.addr) {
                Some(n) => (n, NamedBy::Symbol),
                None => uses
                    .entry((l.process, kind, l.first_site))
                    .or_insert_with(|| use_name(sym, l.process, kind, l.first_site))
                    .clone()
                    .unwrap_or_else(|| (format!("{:#x}", l.addr), NamedBy::Address)),
            };
            let n = taken.entry((l.process, base.clone())).or_insert(0);
            *n += 1;
            // An address is unique already; a symbol is (one address has
            // one), but a member name or a first use may be shared.
            let name = if *n == 1 || by == NamedBy::Address {
                base.clone()
            } else {
                format!("{base}#{n}")
            };
            out.names
                .insert((l.process, l.addr), LockName { name, base, by });
        }
        out
    }

    /// The name of the object at `addr` in process `process`.
    pub fn get(&self, process: u32, addr: u64) -> Option<&LockName> {
        self.names.get(&(process, addr))
    }

    /// The name shown for the object at `addr`: its [`LockName`], else
    /// (an object the trace has no `LockInfo` for) its symbol, else its
    /// address.
    pub fn label(&self, sym: &mut Symbolizer, process: u32, addr: u64) -> String {
        match self.get(process, addr) {
            Some(n) => n.name.clone(),
            None => sym
                .data(process, addr)
                .unwrap_or_else(|| format!("{addr:#x}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_function_is_named_without_its_parameters() {
        assert_eq!(
            function_path("ThreadPool::submit(std::function<void ()>) const"),
            "ThreadPool::submit"
        );
        assert_eq!(
            function_path("ThreadPool::ThreadPool(int)::{lambda()#1}::operator()() const"),
            "ThreadPool::ThreadPool"
        );
        assert_eq!(function_path("app::worker"), "app::worker");
        assert_eq!(
            function_path("ns::Pool<std::pair<int, int> >::run(int)"),
            "ns::Pool<std::pair<int, int> >::run"
        );
        assert_eq!(class_of("ns::Pool<a::b>::run"), Some("ns::Pool<a::b>"));
        assert_eq!(class_of("ThreadPool::submit"), Some("ThreadPool"));
        assert_eq!(class_of("worker"), None);
    }
}
