//! Hierarchical locks: cohort MCS, `HMCS<N>` and adaptive HMCS (thesis ch. 4).
//!
//! All three share one tree of MCS locks ([`Tree`]), one per domain at each
//! level of a [`Hierarchy`]; they differ in where an acquisition starts:
//! - `Hmcs`: at the leaf of the caller's CPU (thesis Listing 4.1);
//! - `Cmcs`: the same protocol over a two-level tree (NUMA node, root), which
//!   is the C-MCS-MCS cohort lock of Dice et al. as `HMCS<2>`;
//! - `Ahmcs`: at a level chosen per thread and lock by eager hysteresis, with
//!   the fast path that goes straight to the root when both the target level
//!   and the root are free (FP-EH-AHMCS, thesis §4.9.1-4.9.3 and App. A.1).
//!
//! The tree is built on first use from the default hierarchy (so a zeroed
//! lock is a valid unlocked lock: static initialisers work), or up front by
//! `with_hierarchy`.

use crate::node::{self, QNode};
use crate::sync::{AtomicPtr, Ordering};
use crate::topology::{CpuSource, Hierarchy};
use crate::wait::{wait_while_eq, Wait};
use crate::{Algorithm, RawLock, Spin};
use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr::{null, null_mut};
use std::sync::OnceLock;

// QNode status values (thesis Listing 4.1): a pass count below
// ACQUIRE_PARENT means "you hold the lock, this is the local pass count".
const WAIT: u32 = u32::MAX;
const ACQUIRE_PARENT: u32 = u32::MAX - 1;
const COHORT_START: u32 = 1;
/// "No predecessor/successor found at any level".
const NONE: u8 = u8::MAX;

/// One MCS lock of the tree (an HNode in the thesis).
#[repr(C, align(64))]
pub(crate) struct HNode {
    tail: AtomicPtr<QNode>,
    parent: *const HNode,
    threshold: u32,
    /// 0 for leaves, depth-1 for the root.
    level: u8,
    /// The node this domain enqueues at its parent's lock; shared by the
    /// domain's threads, used by whichever climbed.
    node: QNode,
}

// SAFETY: `parent` points into the same immutable, heap-pinned tree, and
// everything else in an HNode is atomic.
unsafe impl Send for HNode {}
// SAFETY: as for Send.
unsafe impl Sync for HNode {}

/// The tree of MCS locks of one hierarchical lock.
pub(crate) struct Tree {
    nodes: Box<[HNode]>,
    leaf_of_cpu: Box<[u32]>,
    depth: u8,
    cpu_source: CpuSource,
}

impl Tree {
    pub(crate) fn new(h: &Hierarchy) -> Box<Tree> {
        debug_assert!(h.validate().is_ok());
        let nlev = h.levels.len();
        let mut off = Vec::with_capacity(nlev + 1);
        let mut total = 0usize;
        for l in &h.levels {
            off.push(total);
            total += l.domains as usize;
        }
        let root = total;
        total += 1;
        // Parent index and threshold of every node, then the nodes.
        let mut parent = vec![usize::MAX; total];
        let mut threshold = vec![u32::MAX; total];
        let mut level = vec![nlev as u8; total];
        for (k, l) in h.levels.iter().enumerate() {
            for c in 0..h.cpus {
                let me = off[k] + l.domain_of_cpu[c] as usize;
                parent[me] = match h.levels.get(k + 1) {
                    Some(up) => off[k + 1] + up.domain_of_cpu[c] as usize,
                    None => root,
                };
                threshold[me] = l.threshold.clamp(1, ACQUIRE_PARENT - 1);
                level[me] = k as u8;
            }
        }
        let nodes: Box<[HNode]> = (0..total)
            .map(|i| HNode {
                tail: AtomicPtr::new(null_mut()),
                parent: null(),
                threshold: threshold[i],
                level: level[i],
                node: QNode::new(),
            })
            .collect();
        let base = nodes.as_ptr();
        let mut nodes = nodes;
        for (i, n) in nodes.iter_mut().enumerate() {
            if parent[i] != usize::MAX {
                // SAFETY: index in bounds; the boxed slice never moves.
                n.parent = unsafe { base.add(parent[i]) };
            }
        }
        let leaf_of_cpu = (0..h.cpus)
            .map(|c| match h.levels.first() {
                Some(l) => (off[0] + l.domain_of_cpu[c] as usize) as u32,
                None => root as u32,
            })
            .collect();
        Box::new(Tree {
            nodes,
            leaf_of_cpu,
            depth: (nlev + 1) as u8,
            cpu_source: h.cpu_source,
        })
    }

    #[inline]
    fn root(&self) -> &HNode {
        &self.nodes[self.nodes.len() - 1]
    }

    #[inline]
    fn leaf(&self) -> &HNode {
        let cpu = match self.cpu_source {
            CpuSource::Current => crate::sync::current_cpu(),
            CpuSource::ThreadOrder => crate::sync::thread_seq(),
        };
        &self.nodes[self.leaf_of_cpu[cpu % self.leaf_of_cpu.len()] as usize]
    }
}

/// # Safety
/// `n` is a node of a live tree.
#[inline]
unsafe fn ancestor(mut n: *const HNode, level: u8) -> *const HNode {
    // SAFETY: nodes of a tree are live as long as the lock (the tree is freed only by
    // `reset`/drop of an unused lock) and their `parent` links stay inside
    // the tree (the caller's contract).
    unsafe {
        while (*n).level < level && !(*n).parent.is_null() {
            n = (*n).parent;
        }
        n
    }
}

/// HMCS acquire at `l` with node `i`; returns the lowest level where a
/// predecessor was found (NONE if the lock was free all the way up).
///
/// # Safety
/// `l` is a node of a live tree and `i` a node the caller may enqueue at
/// `l` (its own, or the domain node of a level it holds).
unsafe fn acquire<W: Wait>(l: *const HNode, i: *const QNode) -> u8 {
    // SAFETY: nodes of a tree are live as long as the lock (the tree is freed only by
    // `reset`/drop of an unused lock) and their `parent` links stay inside
    // the tree (the caller's contract).
    // `i` is a live node (never freed) that the caller may enqueue: its own
    // node, or `l.node` of a domain whose lock it holds.
    unsafe {
        let l = &*l;
        let i = &*i;
        i.next.store(null_mut(), Ordering::Relaxed);
        i.status.store(WAIT, Ordering::Relaxed);
        let pred = l
            .tail
            .swap(i as *const QNode as *mut QNode, Ordering::AcqRel);
        if !pred.is_null() {
            (*pred)
                .next
                .store(i as *const QNode as *mut QNode, Ordering::Release);
            let s = wait_while_eq::<W>(&i.status, &i.sleeping, WAIT);
            if s < ACQUIRE_PARENT {
                // Passed to us inside the domain: we hold every lock above.
                return l.level;
            }
            // The domain's quota is spent: our domain competes again above.
            i.status.store(COHORT_START, Ordering::Relaxed);
            acquire::<W>(l.parent, &l.node);
            return l.level;
        }
        i.status.store(COHORT_START, Ordering::Relaxed);
        if l.parent.is_null() {
            return NONE;
        }
        acquire::<W>(l.parent, &l.node)
    }
}

/// HMCS release from `l` of node `i`; returns the lowest level where a
/// successor was found (NONE if none anywhere) and that successor.
///
/// # Safety
/// `l` is a node of a live tree that the caller holds through `i`.
unsafe fn release<W: Wait>(l: *const HNode, i: *const QNode) -> (u8, *mut QNode) {
    // SAFETY: nodes of a tree are live as long as the lock (the tree is freed only by
    // `reset`/drop of an unused lock) and their `parent` links stay inside
    // the tree (the caller's contract).
    // `i` is the node through which the caller holds `l` (the caller's
    // contract); successors found in `next` are live nodes (never freed).
    unsafe {
        let l = &*l;
        let i = &*i;
        if l.parent.is_null() {
            // Root: plain MCS hand-over; the value is a valid "held" count.
            return if crate::flat::mcs_release::<W>(
                &l.tail,
                i as *const QNode as *mut QNode,
                COHORT_START,
            ) {
                (l.level, i.next.load(Ordering::Relaxed))
            } else {
                (NONE, null_mut())
            };
        }
        let count = i.status.load(Ordering::Relaxed);
        if count < l.threshold {
            let succ = i.next.load(Ordering::Acquire);
            if !succ.is_null() {
                crate::wait::wake::<W>(&(*succ).status, &(*succ).sleeping, count + 1);
                return (l.level, succ);
            }
        }
        // Quota spent or nobody local: release the parent first (a successor
        // told to acquire the parent will reuse `l.node`), then tell our
        // successor, if one arrived, to compete above.
        let up = release::<W>(l.parent, &l.node);
        if crate::flat::mcs_release::<W>(&l.tail, i as *const QNode as *mut QNode, ACQUIRE_PARENT) {
            (l.level, i.next.load(Ordering::Relaxed))
        } else {
            up
        }
    }
}

/// Which hierarchical lock a [`TreeLock`] is.
pub trait Kind: Send + Sync + 'static {
    /// The algorithm.
    const ALGORITHM: Algorithm;
    /// Whether the start level adapts (AHMCS).
    const ADAPTIVE: bool;
    /// Hierarchy used by locks created with `new()` / zeroed.
    fn default_hierarchy() -> &'static Hierarchy;
}

/// Marker: `HMCS<N>`.
pub struct HmcsKind;
/// Marker: two-level cohort MCS.
pub struct CmcsKind;
/// Marker: adaptive HMCS with fast path.
pub struct AhmcsKind;

static HMCS_DEFAULT: OnceLock<Hierarchy> = OnceLock::new();
static CMCS_DEFAULT: OnceLock<Hierarchy> = OnceLock::new();

fn machine_or_flat(r: Result<Hierarchy, crate::Error>) -> Hierarchy {
    // No sysfs (a container without /sys): a flat tree is still a correct lock.
    r.unwrap_or_else(|_| {
        Hierarchy::flat(std::thread::available_parallelism().map_or(1, |n| n.get()))
    })
}

/// Sets the hierarchy of HMCS and AHMCS locks created with `new()` (or
/// zeroed) from now on. Fails, returning it, if one was already in use.
pub fn set_default_hierarchy(h: Hierarchy) -> Result<(), Hierarchy> {
    HMCS_DEFAULT.set(h)
}

/// The hierarchy HMCS and AHMCS locks use by default.
pub fn default_hierarchy() -> &'static Hierarchy {
    HMCS_DEFAULT.get_or_init(|| machine_or_flat(Hierarchy::from_machine()))
}

/// The hierarchy cohort locks use by default.
pub fn default_cohort_hierarchy() -> &'static Hierarchy {
    CMCS_DEFAULT.get_or_init(|| machine_or_flat(Hierarchy::cohort_from_machine()))
}

impl Kind for HmcsKind {
    const ALGORITHM: Algorithm = Algorithm::Hmcs;
    const ADAPTIVE: bool = false;
    fn default_hierarchy() -> &'static Hierarchy {
        default_hierarchy()
    }
}
impl Kind for CmcsKind {
    const ALGORITHM: Algorithm = Algorithm::Cmcs;
    const ADAPTIVE: bool = false;
    fn default_hierarchy() -> &'static Hierarchy {
        default_cohort_hierarchy()
    }
}
impl Kind for AhmcsKind {
    const ALGORITHM: Algorithm = Algorithm::Ahmcs;
    const ADAPTIVE: bool = true;
    fn default_hierarchy() -> &'static Hierarchy {
        default_hierarchy()
    }
}

/// A lock built on a tree of MCS locks. Use the aliases [`Hmcs`],
/// [`Cmcs`], [`Ahmcs`].
pub struct TreeLock<K: Kind, W = Spin> {
    tree: AtomicPtr<Tree>,
    holder: AtomicPtr<QNode>,
    _p: PhantomData<fn() -> (K, W)>,
}

/// `HMCS<N>` over the machine's hierarchy (or one given by hand).
pub type Hmcs<W = Spin> = TreeLock<HmcsKind, W>;
/// Two-level cohort MCS lock (NUMA node, machine).
pub type Cmcs<W = Spin> = TreeLock<CmcsKind, W>;
/// Adaptive HMCS with fast path and eager hysteresis.
pub type Ahmcs<W = Spin> = TreeLock<AhmcsKind, W>;

impl<K: Kind, W: Wait> TreeLock<K, W> {
    /// A new unlocked lock; its tree is built from the default hierarchy
    /// when first locked.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        TreeLock {
            tree: AtomicPtr::new(null_mut()),
            holder: AtomicPtr::new(null_mut()),
            _p: PhantomData,
        }
    }
    /// A new unlocked lock; its tree is built from the default hierarchy
    /// when first locked.
    #[cfg(loom)]
    pub fn new() -> Self {
        TreeLock {
            tree: AtomicPtr::new(null_mut()),
            holder: AtomicPtr::new(null_mut()),
            _p: PhantomData,
        }
    }

    /// A new unlocked lock over the given hierarchy.
    pub fn with_hierarchy(h: &Hierarchy) -> Self {
        let l = Self::new();
        l.tree.store(Box::into_raw(Tree::new(h)), Ordering::Release);
        l
    }

    /// Depth of this lock's tree (builds it if needed).
    pub fn depth(&self) -> usize {
        self.tree().depth as usize
    }

    #[inline]
    fn tree(&self) -> &Tree {
        let t = self.tree.load(Ordering::Acquire);
        if !t.is_null() {
            // SAFETY: published trees live as long as the lock.
            return unsafe { &*t };
        }
        self.build_tree()
    }

    #[cold]
    fn build_tree(&self) -> &Tree {
        let new = Box::into_raw(Tree::new(K::default_hierarchy()));
        match self
            .tree
            .compare_exchange(null_mut(), new, Ordering::AcqRel, Ordering::Acquire)
        {
            // SAFETY: just published, lives as long as the lock.
            Ok(_) => unsafe { &*new },
            Err(other) => {
                // Another thread built it first.
                // SAFETY: `new` was never shared; `other` is published.
                unsafe {
                    drop(Box::from_raw(new));
                    &*other
                }
            }
        }
    }
}

impl<K: Kind, W: Wait> Default for TreeLock<K, W> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Kind, W> Drop for TreeLock<K, W> {
    fn drop(&mut self) {
        let t = self.tree.load(Ordering::Relaxed);
        if !t.is_null() {
            // SAFETY: we own the lock exclusively.
            unsafe { drop(Box::from_raw(t)) };
        }
    }
}

// ------------------------------------------------------------ hysteresis

/// Per-thread, per-lock hysteresis state of AHMCS (the thesis keeps it in a
/// per-thread lock object; a `lock_api` lock has none, so each thread keeps
/// a small direct-mapped cache keyed by lock address; a collision only
/// resets the adaptation of the evicted lock).
#[derive(Clone, Copy)]
struct Adapt {
    lock: usize,
    /// Target level (0 = leaf).
    target: u8,
    /// Level where this round started; NONE for the fast path.
    start: u8,
    /// Lowest level where this round's acquisition found a predecessor.
    pred_level: u8,
    /// Successor we passed to last time at the target level.
    last_succ: usize,
}

const ADAPT_SLOTS: usize = 8;
const ADAPT_EMPTY: Adapt = Adapt {
    lock: 0,
    target: 0,
    start: 0,
    pred_level: NONE,
    last_succ: 0,
};

#[cfg(not(loom))]
std::thread_local! {
    static ADAPT: [Cell<Adapt>; ADAPT_SLOTS] =
        const { [const { Cell::new(ADAPT_EMPTY) }; ADAPT_SLOTS] };
}
#[cfg(loom)]
loom::thread_local! {
    static ADAPT: [Cell<Adapt>; ADAPT_SLOTS] = [(); ADAPT_SLOTS].map(|_| Cell::new(ADAPT_EMPTY));
}

/// Runs `f` on this thread's hysteresis state for `lock`: one thread-local
/// access and one small copy each way per call.
#[inline]
fn with_adapt<R>(lock: usize, f: impl FnOnce(&mut Adapt) -> R) -> R {
    ADAPT.with(|slots| {
        let cell = &slots[(lock >> 4) % ADAPT_SLOTS];
        let mut a = cell.get();
        if a.lock != lock {
            // Initially every thread starts at its leaf (thesis §4.9.2).
            a = Adapt {
                lock,
                ..ADAPT_EMPTY
            };
        }
        let r = f(&mut a);
        cell.set(a);
        r
    })
}

// ------------------------------------------------------------ RawLock

// SAFETY: whoever holds the root MCS lock holds the tree lock, and the
// root is taken only by the HMCS protocol (thesis ch. 4), which gives it to
// one domain at a time and passes it inside a domain only to a thread
// queued there; all zero is "no tree yet, unlocked" (built on first use).
unsafe impl<K: Kind, W: Wait> RawLock for TreeLock<K, W> {
    const ALGORITHM: Algorithm = K::ALGORITHM;

    #[inline]
    fn lock(&self) {
        let t = self.tree();
        let n = node::get();
        let leaf: *const HNode = t.leaf();
        // SAFETY: tree nodes live as long as the lock; `n` is ours.
        unsafe {
            let start = if K::ADAPTIVE {
                with_adapt(self as *const Self as usize, |a| {
                    let start = Self::adaptive_start(t, leaf, a);
                    a.pred_level = acquire::<W>(start, n);
                    if a.start != NONE {
                        a.start = (*start).level;
                    }
                    start
                })
            } else {
                acquire::<W>(leaf, n);
                leaf
            };
            (*n).start.store(start as *mut u8, Ordering::Relaxed);
        }
        self.holder.store(n, Ordering::Relaxed);
    }

    #[inline]
    fn is_locked(&self) -> bool {
        // Free iff the root MCS lock is (as `try_lock` decides); a lock
        // never locked has no tree yet, and asking must not build one.
        let t = self.tree.load(Ordering::Acquire);
        // SAFETY: published trees live as long as the lock.
        !t.is_null() && !unsafe { &*t }.root().tail.load(Ordering::Relaxed).is_null()
    }

    #[inline]
    fn try_lock(&self) -> bool {
        // The lock is free iff the root MCS lock is: enqueue directly at the
        // root if its queue is empty (as the fast path does).
        let t = self.tree();
        let root = t.root();
        if !root.tail.load(Ordering::Relaxed).is_null() {
            return false;
        }
        let n = node::get();
        // SAFETY: `n` is ours; published only on success.
        unsafe {
            (*n).next.store(null_mut(), Ordering::Relaxed);
            (*n).status.store(COHORT_START, Ordering::Relaxed);
            if root
                .tail
                .compare_exchange(null_mut(), n, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                node::put(n);
                return false;
            }
            (*n).start
                .store(root as *const HNode as *mut u8, Ordering::Relaxed);
        }
        if K::ADAPTIVE {
            with_adapt(self as *const Self as usize, |a| a.start = NONE);
        }
        self.holder.store(n, Ordering::Relaxed);
        true
    }

    #[inline]
    unsafe fn unlock(&self) {
        let n = self.holder.load(Ordering::Relaxed);
        // SAFETY: the lock is held (the caller's contract), so `holder` is
        // the holder's live node and `start` the tree node where its
        // acquisition started; once released, no queue references `n`.
        let (succ_level, succ) = unsafe {
            let start = (*n).start.load(Ordering::Relaxed) as *const HNode;
            let r = release::<W>(start, n);
            node::put(n);
            r
        };
        if K::ADAPTIVE {
            self.adapt_after_release(succ_level, succ);
        }
    }
}

impl<K: Kind, W: Wait> TreeLock<K, W> {
    /// Eager hysteresis + fast path: where this acquisition starts.
    /// # Safety
    /// `leaf` is a leaf of `t`.
    #[inline]
    unsafe fn adaptive_start(t: &Tree, leaf: *const HNode, a: &mut Adapt) -> *const HNode {
        // SAFETY: `leaf` is a leaf of `t` (the caller's contract), so it and its
        // ancestors are live nodes of `t`.
        unsafe {
            let root = t.root() as *const HNode;
            let target = ancestor(leaf, a.target);
            let ttail = (*target).tail.load(Ordering::Relaxed);
            if ttail.is_null() && (*root).tail.load(Ordering::Relaxed).is_null() {
                // Fast path (§4.9.1): nobody at the target level nor at the root.
                a.start = NONE;
                return root;
            }
            a.start = 0;
            let lvl = (*target).level;
            if lvl > (*leaf).level && !ttail.is_null() && ttail as usize != a.last_succ {
                // Target level busy: eagerly start one level closer to the leaf,
                // unless the queue's tail is the successor we served last time
                // (too little contention for the detour, §4.9.2.1).
                ancestor(leaf, lvl - 1)
            } else {
                target
            }
        }
    }

    /// Algorithm 4's release-side update of the target level.
    fn adapt_after_release(&self, succ_level: u8, succ: *mut QNode) {
        // SAFETY: the tree lives as long as the lock.
        let depth = match unsafe { self.tree.load(Ordering::Relaxed).as_ref() } {
            Some(t) => t.depth,
            None => return,
        };
        with_adapt(self as *const Self as usize, |a| {
            if a.start == NONE {
                // Fast-path rounds carry no information about lower levels.
                return;
            }
            let t = a.target;
            a.last_succ = if succ_level == a.start && a.start == t {
                succ as usize
            } else {
                0
            };
            if t > 0 && (a.pred_level < t || succ_level < t) {
                a.target = t - 1;
            } else if t + 1 < depth && a.pred_level > t && succ_level > t {
                a.target = t + 1;
            }
        });
    }
}

impl<K: Kind, W: Wait> TreeLock<K, W> {
    /// Test hook: address of the queue tail of leaf domain `i` (0 if free).
    #[doc(hidden)]
    pub fn debug_leaf_tail(&self, i: usize) -> usize {
        self.tree().nodes[i].tail.load(Ordering::SeqCst) as usize
    }
    /// Test hook: address of the root queue's tail (0 if free).
    #[doc(hidden)]
    pub fn debug_root_tail(&self) -> usize {
        self.tree().root().tail.load(Ordering::SeqCst) as usize
    }
    /// Test hook (call while holding): how many times in a row the lock
    /// has been passed inside the holder's domain at the level where the
    /// holder queued (1 = it climbed or took the lock itself).
    #[doc(hidden)]
    pub fn debug_holder_pass_count(&self) -> u32 {
        let n = self.holder.load(Ordering::SeqCst);
        // SAFETY: the holder's node is live while the lock is held.
        unsafe { (*n).status.load(Ordering::SeqCst) }
    }
    /// Test hook: address of the holder's node.
    #[doc(hidden)]
    pub fn debug_holder_node(&self) -> usize {
        self.holder.load(Ordering::SeqCst) as usize
    }
}
