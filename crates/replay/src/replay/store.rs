//! Per-thread action programs spilled to a temporary file, so that a
//! replay's memory does not grow with the trace (100 M events replay in
//! bounded memory).
//!
//! The builder reads the trace once, in time order, and appends each
//! thread's actions to that thread's buffer; a full buffer goes to the
//! file as one block. A replay reads every thread's blocks back through a
//! cursor holding one decoded block. Memory is one block buffer per
//! thread (writer or cursor) plus the block list (16 bytes per block of
//! [`BLOCK`] bytes); the file itself is unlinked as soon as it is
//! created, so nothing is left behind, whatever happens.
//!
//! Actions are varint-encoded (a tag byte, then the fields): 3.3 bytes
//! per action on average on a synthetic trace, against 32 in memory. The work of a compute action (its
//! CPU time and recorder overhead) is not in the action's record but in a
//! separate work stream, one record per `Compute` or `UnlockWork`: the
//! builder cannot know it before the trace is read to its end (it is
//! scaled by the CPU share of the thread, see `replay::cpu_shares_merged`),
//! and keeping it apart lets that second pass write only the work instead
//! of rewriting every action (the rewrite was a third of a 20 M-event
//! replay's time, on one core).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use super::Action;

/// Target block size: a block is written when its buffer holds this much.
pub(crate) const BLOCK: usize = 32 << 10;

/// An appended block: where it is in the file.
#[derive(Clone, Copy, Debug)]
struct Block {
    offset: u64,
    len: u32,
}

/// Creates an unlinked temporary file.
fn temp_file() -> io::Result<File> {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir();
    loop {
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!("lockscope-replay-{}-{n}.tmp", std::process::id()));
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(file) => {
                // Unlinked at once: the data lives as long as the
                // handle and never outlives the process.
                std::fs::remove_file(&path)?;
                return Ok(file);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!(
                        "cannot create a temporary file in {} (set TMPDIR): {e}",
                        dir.display()
                    ),
                ))
            }
        }
    }
}

/// Per-thread byte streams being written: the buffers of the blocks not
/// written yet, for a [`Stored`] that receives the full ones.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    bufs: Vec<Vec<u8>>,
    counts: Vec<u64>,
}

impl Writer {
    /// Records written to stream `t` so far.
    pub(crate) fn count(&self, t: usize) -> u64 {
        self.counts.get(t).copied().unwrap_or(0)
    }

    /// Appends one record to stream `t` of `st`, encoded by `enc` into
    /// the stream's buffer.
    pub(crate) fn push(
        &mut self,
        st: &Stored,
        t: usize,
        enc: impl FnOnce(&mut Vec<u8>),
    ) -> io::Result<()> {
        if self.bufs.len() <= t {
            self.bufs.resize_with(t + 1, Vec::new);
            self.counts.resize(t + 1, 0);
        }
        let buf = &mut self.bufs[t];
        if buf.capacity() == 0 {
            buf.reserve_exact(BLOCK + 64);
        }
        enc(buf);
        self.counts[t] += 1;
        if buf.len() >= BLOCK {
            st.append(t, buf)?;
            buf.clear();
        }
        Ok(())
    }

    /// Writes the partly filled blocks, frees the buffers and marks `st`
    /// complete.
    pub(crate) fn finish(&mut self, st: &Stored) -> io::Result<()> {
        for (t, buf) in self.bufs.iter_mut().enumerate() {
            if !buf.is_empty() {
                st.append(t, buf)?;
            }
            *buf = Vec::new();
        }
        st.close(Some(std::mem::take(&mut self.counts)), None);
        Ok(())
    }
}

/// Per-thread byte streams being written, on their own (see [`Writer`]
/// for a store read while it is written).
#[derive(Debug)]
pub(crate) struct Streams {
    /// Boxed: a store is large (its locks), a builder's sink holds two.
    st: Box<Stored>,
    w: Writer,
}

impl Streams {
    pub(crate) fn new() -> io::Result<Streams> {
        Ok(Streams {
            st: Box::new(Stored::new()?),
            w: Writer::default(),
        })
    }

    /// Records written to stream `t` so far.
    pub(crate) fn count(&self, t: usize) -> u64 {
        self.w.count(t)
    }

    /// Appends one record, encoded by `enc` into the stream's buffer.
    pub(crate) fn push(&mut self, t: usize, enc: impl FnOnce(&mut Vec<u8>)) -> io::Result<()> {
        self.w.push(&self.st, t, enc)
    }

    /// Writes the partly filled blocks and frees the buffers.
    pub(crate) fn finish(mut self) -> io::Result<Stored> {
        self.w.finish(&self.st)?;
        Ok(*self.st)
    }
}

/// What a [`Stored`]'s writer has published so far.
#[derive(Debug, Default)]
struct Published {
    /// Per stream, its blocks in order.
    blocks: Vec<Vec<Block>>,
    /// Records per stream (once complete).
    counts: Vec<u64>,
    /// End of the file.
    end: u64,
    /// Nothing more will come: a cursor at the end of its stream is
    /// at its end, not waiting for the writer.
    done: bool,
}

/// Per-thread byte streams in an unlinked temporary file, written by one
/// [`Writer`] and read by cursors, possibly while it is written (the
/// replay's simulations start on the work of the compute actions while
/// the pass computing it still runs). A cursor that reaches the
/// last published block of its stream before the store is complete waits
/// for the next one; the writer never waits for the cursors, so this
/// cannot deadlock, and whatever ends the writer (an error, a panic)
/// completes the store ([`CloseOnDrop`]).
#[derive(Debug)]
pub(crate) struct Stored {
    file: File,
    published: Mutex<Published>,
    /// Signalled when a block is published or the store completed.
    more: Condvar,
    /// The first error of the writer or of any cursor (a cursor that
    /// fails ends its stream early; the replay reports the error instead
    /// of a result). Behind a mutex: simulations of one program run in
    /// parallel.
    error: Mutex<Option<io::Error>>,
}

impl Stored {
    /// An empty store, open for writing.
    pub(crate) fn new() -> io::Result<Stored> {
        Ok(Stored {
            file: temp_file()?,
            published: Mutex::new(Published::default()),
            more: Condvar::new(),
            error: Mutex::new(None),
        })
    }

    /// The published state. A poisoned lock is taken as it is: the state
    /// is only changed after the block it describes is written, so it is
    /// consistent even if its writer panicked.
    fn published(&self) -> MutexGuard<'_, Published> {
        self.published.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes `data` at the end of the file as the next block of stream
    /// `t`, and publishes it.
    fn append(&self, t: usize, data: &[u8]) -> io::Result<()> {
        let mut p = self.published();
        let offset = p.end;
        self.file.write_all_at(data, offset)?;
        p.end += data.len() as u64;
        if p.blocks.len() <= t {
            p.blocks.resize_with(t + 1, Vec::new);
        }
        p.blocks[t].push(Block {
            offset,
            len: data.len() as u32,
        });
        drop(p);
        self.more.notify_all();
        Ok(())
    }

    /// Marks the store complete, with the record counts of its streams
    /// (if known) and the error that ended its writer (if any). Only the
    /// first call counts.
    pub(crate) fn close(&self, counts: Option<Vec<u64>>, error: Option<io::Error>) {
        if let Some(e) = error {
            self.set_error(e);
        }
        let mut p = self.published();
        if !p.done {
            p.done = true;
            if let Some(c) = counts {
                p.counts = c;
            }
        }
        drop(p);
        self.more.notify_all();
    }

    fn set_error(&self, e: io::Error) {
        if let Ok(mut slot) = self.error.lock() {
            slot.get_or_insert(e);
        }
    }

    /// Records in stream `t` (0 until the store is complete).
    pub(crate) fn count(&self, t: usize) -> u64 {
        self.published().counts.get(t).copied().unwrap_or(0)
    }

    /// Bytes in the file.
    pub(crate) fn bytes(&self) -> u64 {
        self.published().end
    }

    /// Block `i` of stream `t`, waiting for it while the store is being
    /// written; `None` past the end.
    fn block(&self, t: usize, i: usize) -> Option<Block> {
        let mut p = self.published();
        loop {
            if let Some(&b) = p.blocks.get(t).and_then(|v| v.get(i)) {
                return Some(b);
            }
            if p.done {
                return None;
            }
            p = self.more.wait(p).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// A cursor over stream `t`.
    pub(crate) fn reader(&self, t: usize) -> Reader<'_> {
        Reader {
            st: self,
            t,
            next_block: 0,
            buf: Vec::new(),
            pos: 0,
        }
    }

    /// Takes the first error, if any.
    pub(crate) fn take_error(&self) -> Option<io::Error> {
        self.error.lock().map_or(None, |mut e| e.take())
    }
}

/// Completes a [`Stored`] when dropped, however its writer ends (a
/// cursor waiting for a block that will never come would wait forever).
pub(crate) struct CloseOnDrop<'a>(pub(crate) &'a Stored);

impl Drop for CloseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.close(None, None);
    }
}

/// Reads one stream back, one block at a time.
pub(crate) struct Reader<'a> {
    st: &'a Stored,
    t: usize,
    next_block: usize,
    buf: Vec<u8>,
    pos: usize,
}

impl Reader<'_> {
    /// The bytes of the next record onwards, or `None` at the end (or on
    /// a read error, kept in the store).
    pub(crate) fn data(&mut self) -> Option<(&[u8], &mut usize)> {
        while self.pos >= self.buf.len() {
            let b = self.st.block(self.t, self.next_block)?;
            self.next_block += 1;
            self.pos = 0;
            self.buf.clear();
            self.buf.resize(b.len as usize, 0);
            if let Err(e) = self.st.file.read_exact_at(&mut self.buf, b.offset) {
                self.buf.clear();
                self.st.set_error(e);
                return None;
            }
        }
        Some((&self.buf, &mut self.pos))
    }
}

pub(crate) fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Decodes a varint this module wrote (its own file: a short or bad one
/// can only come from a failed read, which is reported separately).
pub(crate) fn get(buf: &[u8], pos: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    while let Some(&b) = buf.get(*pos) {
        *pos += 1;
        if shift < 64 {
            v |= u64::from(b & 0x7f) << shift;
        }
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    v
}

const T_COMPUTE: u8 = 0;
const T_UNLOCK_WORK: u8 = 1;
const T_SLEEP: u8 = 2;
const T_ACQUIRE: u8 = 3;
const T_ACQUIRE_SHARED: u8 = 4;
const T_RELEASE: u8 = 5;
const T_SIGNAL: u8 = 6;
const T_WAIT_FOR: u8 = 7;
const T_SPAWN: u8 = 8;
const T_COMPUTE_ACCESS: u8 = 9;

/// Appends the encoding of `a`, without the work of a `Compute` or an
/// `UnlockWork` (their `ns` and `oh`: see [`put_work`]).
pub(crate) fn encode(a: &Action, out: &mut Vec<u8>) {
    match *a {
        Action::Compute { cs, access, .. } => {
            out.push(if access { T_COMPUTE_ACCESS } else { T_COMPUTE });
            // u32::MAX (outside any section) is the common case: 0.
            put(out, u64::from(cs.wrapping_add(1)));
        }
        Action::UnlockWork { lock, .. } => {
            out.push(T_UNLOCK_WORK);
            put(out, u64::from(lock));
        }
        Action::Sleep(ns) => {
            out.push(T_SLEEP);
            put(out, ns);
        }
        Action::Acquire {
            lock,
            seq,
            shared,
            cs,
            handoff,
        } => {
            out.push(if shared { T_ACQUIRE_SHARED } else { T_ACQUIRE });
            put(out, u64::from(lock));
            put(out, seq);
            put(out, u64::from(cs));
            put(out, handoff);
        }
        Action::Release { lock } => {
            out.push(T_RELEASE);
            put(out, u64::from(lock));
        }
        Action::Signal(id) => {
            out.push(T_SIGNAL);
            put(out, u64::from(id));
        }
        Action::WaitFor { id, latency } => {
            out.push(T_WAIT_FOR);
            put(out, u64::from(id));
            put(out, latency);
        }
        Action::Spawn { child, offset } => {
            out.push(T_SPAWN);
            put(out, u64::from(child));
            put(out, offset);
        }
    }
}

/// Appends the work record of a `Compute` (`ns`, `oh`) or an `UnlockWork`
/// (`ns`); nothing for the other actions.
pub(crate) fn put_work(a: &Action, out: &mut Vec<u8>) {
    match *a {
        Action::Compute { ns, oh, .. } => {
            put(out, ns);
            put(out, u64::from(oh));
        }
        Action::UnlockWork { ns, .. } => put(out, ns),
        _ => {}
    }
}

/// Whether `a` has a record in the work stream.
#[cfg(test)]
fn has_work(a: &Action) -> bool {
    matches!(a, Action::Compute { .. } | Action::UnlockWork { .. })
}

/// A signal id as the builder counted it (from `SIGNAL_BIT`) after the
/// `base` thread ends (see `replay::remap_signal`).
fn remap(id: u32, base: u32) -> u32 {
    if id & super::SIGNAL_BIT != 0 {
        (id & !super::SIGNAL_BIT) + base
    } else {
        id
    }
}

/// Decodes one action at `pos` (advancing it), with its work from `work`
/// (a `Compute` or an `UnlockWork`) and its signal id remapped after the
/// `base` thread ends; `None` if its work is missing (a read error, kept
/// in the store). Each action is built once from its fields: filling in
/// the work and the id of an action decoded without them made the
/// simulations reload it from memory before the writes had landed (a
/// store-forwarding stall on every action, a sixth of their time).
/// Inlined into its caller for the same reason: returned from a call,
/// the action is written to memory field by field and read back whole.
#[inline(always)]
pub(crate) fn decode(
    buf: &[u8],
    pos: &mut usize,
    work: &mut Reader<'_>,
    base: u32,
) -> Option<Action> {
    let tag = buf.get(*pos).copied().unwrap_or(T_SLEEP);
    *pos += 1;
    let mut g = || get(buf, pos);
    Some(match tag {
        T_COMPUTE | T_COMPUTE_ACCESS => {
            let cs = (g() as u32).wrapping_sub(1);
            let (wb, wp) = work.data()?;
            let ns = get(wb, wp);
            let oh = get(wb, wp) as u32;
            Action::Compute {
                ns,
                cs,
                oh,
                access: tag == T_COMPUTE_ACCESS,
                // Folded into the work by the CPU-share pass.
                pre: 0,
            }
        }
        T_UNLOCK_WORK => {
            let lock = g() as u32;
            let (wb, wp) = work.data()?;
            Action::UnlockWork {
                lock,
                ns: get(wb, wp),
            }
        }
        T_ACQUIRE | T_ACQUIRE_SHARED => {
            let lock = g() as u32;
            let seq = g();
            let cs = g() as u32;
            let handoff = g();
            Action::Acquire {
                lock,
                seq,
                shared: tag == T_ACQUIRE_SHARED,
                cs,
                handoff,
            }
        }
        T_RELEASE => Action::Release { lock: g() as u32 },
        T_SIGNAL => Action::Signal(remap(g() as u32, base)),
        T_WAIT_FOR => {
            let id = remap(g() as u32, base);
            Action::WaitFor { id, latency: g() }
        }
        T_SPAWN => {
            let child = g() as u32;
            Action::Spawn { child, offset: g() }
        }
        _ => Action::Sleep(g()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_round_trip_through_the_spill_across_blocks() {
        let all = [
            Action::Compute {
                ns: 12345,
                cs: u32::MAX,
                oh: 7,
                access: false,
                pre: 0,
            },
            Action::Compute {
                ns: 0,
                cs: 3,
                oh: u32::MAX,
                access: true,
                pre: 0,
            },
            Action::UnlockWork { lock: 2, ns: 99 },
            Action::Sleep(u64::MAX),
            Action::Acquire {
                lock: 1,
                seq: 1 << 40,
                shared: true,
                cs: 0,
                handoff: 5,
            },
            Action::Acquire {
                lock: 0,
                seq: 0,
                shared: false,
                cs: 9,
                handoff: 0,
            },
            Action::Release { lock: 7 },
            Action::Signal(1 << 31 | 5),
            Action::WaitFor {
                id: 3,
                latency: 1000,
            },
            Action::Spawn {
                child: 4,
                offset: 77,
            },
        ];
        let mut s = Streams::new().unwrap();
        let mut w = Streams::new().unwrap();
        // Enough to fill several blocks of two streams.
        let n = 3 * BLOCK;
        for i in 0..n {
            let a = &all[i % all.len()];
            s.push(i % 2, |b| encode(a, b)).unwrap();
            if has_work(a) {
                w.push(i % 2, |b| put_work(a, b)).unwrap();
            }
        }
        let st = s.finish().unwrap();
        let wt = w.finish().unwrap();
        assert_eq!(st.count(0) + st.count(1), n as u64);
        for t in 0..2 {
            let mut r = st.reader(t);
            let mut rw = wt.reader(t);
            let mut i = t;
            while let Some((buf, pos)) = r.data() {
                let a = decode(buf, pos, &mut rw, 3).unwrap();
                let mut want = all[i % all.len()];
                super::super::remap_signal(&mut want, 3);
                assert_eq!(a, want, "record {i}");
                i += 2;
            }
            assert_eq!(i - t, n);
            assert!(rw.data().is_none());
        }
        assert!(st.take_error().is_none());
        assert!(wt.take_error().is_none());
    }
}
