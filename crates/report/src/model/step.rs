//! The state machine: one synchronization step of [`lockscope_trace::sync`] at a
//! time, applied to the locks' holders and waiters and to the statistics.

use super::*;

impl Model {
    /// Feeds one step (from [`lockscope_trace::sync::SyncInterp`], in time order).
    pub fn step(&mut self, s: &Step<'_>) {
        let ti = self.thread_idx(s.thread, s.time) as usize;
        let process = self.threads[ti].process;
        let e = s.event;
        {
            let th = &mut self.threads[ti];
            if !th.started {
                th.started = true;
                if s.time < th.start {
                    // The thread record's start is later than its first
                    // event: trust the event.
                    th.start = s.time;
                }
            }
            if !s.kind.is_synthetic() {
                th.events += 1;
            }
            let seg = s.segment;
            th.overhead_ns += seg.cost_ns;
            let cat = match seg.kind {
                SegKind::Unknown => Cat::Unknown,
                SegKind::Unlocking => Cat::Unlock,
                SegKind::Blocked(BlockedOn::Lock) => Cat::Lock,
                _ if seg.holding => Cat::Hold,
                _ => Cat::Free,
            };
            th.cats[cat as usize] += seg.corrected_ns;
            let blocked = match seg.kind {
                SegKind::Blocked(BlockedOn::Cond) => Some(0),
                SegKind::Blocked(BlockedOn::Barrier) => Some(1),
                SegKind::Blocked(BlockedOn::Sem) => Some(2),
                SegKind::Blocked(BlockedOn::Join) => Some(3),
                SegKind::Blocked(BlockedOn::Gpu) => Some(4),
                _ => None,
            };
            if let Some(b) = blocked {
                th.blocked[b] += seg.corrected_ns;
                if cat == Cat::Free {
                    th.blocked_free += seg.corrected_ns;
                }
            }
        }
        let op = e.op();
        match s.kind {
            StepKind::Abandoned {
                queued: Some((id, kind)),
            } => {
                let oi = self.known_obj(id.process, kind, id.addr, s.time);
                let o = &mut self.objs[oi as usize];
                o.settle(s.time);
                o.take_waiter(ti as u32);
            }
            StepKind::AcquireBegin { .. } => {
                let kind = lockscope_trace::sync::lock_kind(op);
                let r = self.resolve(ti, process, kind, e.addr, e.site, e.time);
                let o = &mut self.objs[r.obj as usize];
                o.settle(e.time);
                o.waiters.push(Waiter {
                    thread: ti as u32,
                    since: e.time,
                    charges: Vec::new(),
                });
            }
            StepKind::Acquired {
                section,
                waited,
                matched,
                wait_ns,
                first_attempt,
            } => self.on_acquired(
                ti,
                process,
                s,
                section.shared(),
                waited,
                matched,
                wait_ns,
                first_attempt,
            ),
            StepKind::AcquireFailed {
                matched,
                wait_ns,
                errno,
                is_try,
                ..
            } => self.on_acquire_failed(ti, process, s, matched, wait_ns, errno, is_try),
            StepKind::Released(section) => {
                // Resolved as at an unlock call, so that a lock first seen
                // here is named after this call site.
                let kind = lockscope_trace::sync::lock_kind(op);
                self.resolve(ti, process, kind, e.addr, e.site, e.time);
                self.release_hold(ti, process, &section, e.time, s.clock);
            }
            StepKind::UnmatchedRelease { .. } => {
                let kind = lockscope_trace::sync::lock_kind(op);
                let oi = self.resolve(ti, process, kind, e.addr, e.site, e.time).obj;
                self.objs[oi as usize].settle(e.time);
            }
            StepKind::ReleaseEnd { lock, unlock_ns } => {
                let kind = lockscope_trace::sync::lock_kind(op);
                let oi = self.known_obj(lock.process, kind, lock.addr, s.time);
                let o = &mut self.objs[oi as usize];
                o.slow_unlocks += 1;
                o.unlock_ns += unlock_ns;
            }
            StepKind::HoldDropped(section) => {
                // Its release was lost: drop the hold uncounted.
                let oi = self.known_obj(process, Kind::Mutex, section.lock.addr, s.time);
                let o = &mut self.objs[oi as usize];
                if let Some(i) = o
                    .holders
                    .iter()
                    .position(|h| h.thread == ti as u32 && !h.shared)
                {
                    o.holders.remove(i);
                }
            }
            StepKind::HeldAtExit(section) => {
                self.release_hold(ti, process, &section, s.time, s.clock);
            }
            StepKind::CondWaitBegin { released, .. } => {
                let site = self.site(process, e.site);
                self.obj(process, Kind::Cond, e.addr, site, e.time);
                self.obj(process, Kind::Mutex, e.arg, site, e.time);
                if let Some(section) = released {
                    self.release_hold(ti, process, &section, e.time, s.clock);
                }
            }
            StepKind::CondWaitEnd {
                wait_ns,
                timed_out,
                section,
                ..
            } => {
                let site = self.site(process, e.site);
                let ci = self.obj(process, Kind::Cond, e.addr, site, e.time);
                let o = &mut self.objs[ci as usize];
                o.acquisitions += 1;
                o.wait.record(wait_ns);
                if timed_out {
                    o.timeouts += 1;
                }
                let w = self.obj_waits.entry((ci, ti as u32)).or_default();
                w.0 += 1;
                w.1 += wait_ns;
                // A new critical section of the wait's mutex starts here,
                // attributed to the wait's site.
                let wsite = self.site(process, section.site);
                let mutex = self.known_obj(process, Kind::Mutex, section.lock.addr, e.time);
                self.objs[mutex as usize].settle(e.time);
                self.ss(mutex, wsite);
                self.lt(mutex, ti as u32);
                self.take_ownership(mutex, ti, wsite, e.stack, false);
            }
            StepKind::Unmatched {
                obj: Some((id, kind)),
            } => {
                let site = self.site(process, e.site);
                self.obj(process, kind, id.addr, site, e.time);
            }
            StepKind::CondSignal { .. } | StepKind::SemPost { .. } | StepKind::FutexWake { .. } => {
                if let Some(op) = op {
                    self.on_signal(ti, process, op, e);
                }
            }
            StepKind::BarrierArrive { .. } | StepKind::SemWaitBegin { .. } => {
                let kind = op.and_then(Kind::of).unwrap_or(Kind::Barrier);
                let site = self.site(process, e.site);
                self.obj(process, kind, e.addr, site, e.time);
            }
            StepKind::BarrierDepart {
                round,
                last_arriver,
                wait_ns,
                ..
            } => {
                let site = self.site(process, e.site);
                let bi = self.obj(process, Kind::Barrier, e.addr, site, e.time);
                let last = if last_arriver == u32::MAX {
                    u32::MAX
                } else {
                    self.thread_index
                        .get(&last_arriver)
                        .copied()
                        .unwrap_or(u32::MAX)
                };
                let o = &mut self.objs[bi as usize];
                o.acquisitions += 1;
                o.wait.record(wait_ns);
                o.rounds = o.rounds.max(round + 1);
                let w = self.obj_waits.entry((bi, ti as u32)).or_default();
                w.0 += 1;
                w.1 += wait_ns;
                if wait_ns > 0 {
                    *self.barrier_blame.entry((bi, last)).or_default() += wait_ns;
                }
            }
            StepKind::SemWaitEnd {
                waited,
                wait_ns,
                failed,
                is_try,
                ..
            } => {
                let site = self.site(process, e.site);
                let si = self.obj(process, Kind::Semaphore, e.addr, site, e.time);
                let o = &mut self.objs[si as usize];
                o.wait.record(wait_ns);
                match failed {
                    Some(_) if is_try => o.trylock_failures += 1,
                    Some(ETIMEDOUT) => o.timeouts += 1,
                    Some(_) => o.errors += 1,
                    None => {
                        o.acquisitions += 1;
                        if waited {
                            o.contended += 1;
                        }
                    }
                }
                let w = self.obj_waits.entry((si, ti as u32)).or_default();
                w.0 += 1;
                w.1 += wait_ns;
            }
            StepKind::FutexWaitBegin { .. } => {
                let site = self.site(process, e.site);
                let fi = self.obj(process, Kind::Futex, e.addr, site, e.time);
                let o = &mut self.objs[fi as usize];
                o.settle(e.time);
                o.waiters.push(Waiter {
                    thread: ti as u32,
                    since: e.time,
                    charges: Vec::new(),
                });
            }
            StepKind::FutexWaitEnd {
                wait_ns, failed, ..
            } => self.on_futex_wait_end(ti, process, e, wait_ns, failed),
            StepKind::ThreadExit => {
                let th = &mut self.threads[ti];
                th.end = th.end.max(e.time);
            }
            StepKind::Lost { count } => {
                let th = &mut self.threads[ti];
                th.lost_annotated += count;
                th.lost = th.lost_recorded.max(th.lost_annotated);
            }
            StepKind::End => self.threads[ti].end = s.time,
            StepKind::StillWaiting {
                on: BlockedOn::Lock,
                obj: Some((id, kind)),
                wait_ns,
                site,
                stack,
                ..
            } => self.on_still_waiting(ti, process, s.time, id.addr, kind, site, stack, wait_ns),
            _ => {}
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_acquired(
        &mut self,
        ti: usize,
        process: u32,
        s: &Step<'_>,
        shared: bool,
        waited: bool,
        matched: bool,
        wait_ns: u64,
        first_attempt: bool,
    ) {
        let e = s.event;
        let kind = lockscope_trace::sync::lock_kind(e.op());
        let r = self.resolve(ti, process, kind, e.addr, e.site, e.time);
        let (oi, site) = (r.obj, r.site);
        self.objs[oi as usize].settle(e.time);
        let charges = if matched {
            self.objs[oi as usize]
                .take_waiter(ti as u32)
                .map(|w| w.charges)
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        if waited {
            self.commit_blame(oi, ti as u32, (site, e.stack), wait_ns, &charges);
        }
        let o = &mut self.objs[oi as usize];
        o.wait.record(wait_ns);
        let ss = &mut self.site_stats[r.ss as usize];
        ss.add_wait(wait_ns);
        // Uncontended acquisitions carry no call path: keep the path table
        // for real paths (the rest is the lock total minus them).
        let mut no_path = SiteStats::default();
        let ps = if e.stack != 0 {
            self.by_path.entry((oi, e.stack)).or_default()
        } else {
            &mut no_path
        };
        ps.add_wait(wait_ns);
        let lt = &mut self.lock_threads[r.lt as usize];
        lt.add_wait(wait_ns);
        o.acquisitions += 1;
        o.shared_acquisitions += u64::from(shared);
        lt.acquisitions += 1;
        ss.acquisitions += 1;
        ps.acquisitions += 1;
        if waited {
            o.contended += 1;
            lt.contended += 1;
            ss.contended += 1;
            ps.contended += 1;
        }
        if first_attempt {
            o.first_attempt += 1;
        }
        self.take_ownership(oi, ti, site, e.stack, shared);
    }

    #[allow(clippy::too_many_arguments)]
    fn on_acquire_failed(
        &mut self,
        ti: usize,
        process: u32,
        s: &Step<'_>,
        matched: bool,
        wait_ns: u64,
        errno: u64,
        is_try: bool,
    ) {
        let e = s.event;
        let kind = lockscope_trace::sync::lock_kind(e.op());
        let r = self.resolve(ti, process, kind, e.addr, e.site, e.time);
        let (oi, site) = (r.obj, r.site);
        self.objs[oi as usize].settle(e.time);
        if matched {
            let charges = self.objs[oi as usize]
                .take_waiter(ti as u32)
                .map(|w| w.charges)
                .unwrap_or_default();
            self.commit_blame(oi, ti as u32, (site, e.stack), wait_ns, &charges);
        }
        let o = &mut self.objs[oi as usize];
        o.wait.record(wait_ns);
        let ss = &mut self.site_stats[r.ss as usize];
        ss.add_wait(wait_ns);
        let mut no_path = SiteStats::default();
        let ps = if e.stack != 0 {
            self.by_path.entry((oi, e.stack)).or_default()
        } else {
            &mut no_path
        };
        ps.add_wait(wait_ns);
        let lt = &mut self.lock_threads[r.lt as usize];
        lt.add_wait(wait_ns);
        let timeout = errno == ETIMEDOUT && !is_try;
        let (tf, to, er) = if is_try {
            (1, 0, 0)
        } else if timeout {
            (0, 1, 0)
        } else {
            (0, 0, 1)
        };
        o.trylock_failures += tf;
        o.timeouts += to;
        o.errors += er;
        lt.trylock_failures += tf;
        lt.timeouts += to;
        ss.trylock_failures += tf;
        ss.timeouts += to;
        ps.trylock_failures += tf;
        ps.timeouts += to;
    }

    /// An acquisition or futex wait still blocked at its thread's end
    /// (raw time `t`): its wait so far counts in the lock's wait and
    /// blame, as a call that failed after waiting does, so that a
    /// deadlocked lock does not show 0 wait (the thread's own breakdown
    /// already counts it as lock wait). Not an acquisition, nor a
    /// contended one: it never got the lock.
    #[allow(clippy::too_many_arguments)]
    fn on_still_waiting(
        &mut self,
        ti: usize,
        process: u32,
        t: u64,
        addr: u64,
        kind: Kind,
        pc: u64,
        stack: u32,
        wait_ns: u64,
    ) {
        let r = self.resolve(ti, process, kind, addr, pc, t);
        let (oi, site) = (r.obj, r.site);
        let o = &mut self.objs[oi as usize];
        o.settle(t);
        let mut charges = o
            .take_waiter(ti as u32)
            .map(|w| w.charges)
            .unwrap_or_default();
        if kind == Kind::Futex {
            // A futex word has no visible holder, and no wake ended this
            // wait: nobody to charge.
            charges = vec![(Culprit::NONE, wait_ns.max(1))];
        }
        self.commit_blame(oi, ti as u32, (site, stack), wait_ns, &charges);
        let o = &mut self.objs[oi as usize];
        o.wait.record(wait_ns);
        o.still_waiting += 1;
        let ss = &mut self.site_stats[r.ss as usize];
        ss.add_wait(wait_ns);
        ss.still_waiting += 1;
        if stack != 0 {
            let ps = self.by_path.entry((oi, stack)).or_default();
            ps.add_wait(wait_ns);
            ps.still_waiting += 1;
        }
        let lt = &mut self.lock_threads[r.lt as usize];
        lt.add_wait(wait_ns);
    }

    /// Closes thread `ti`'s section `sec` at raw time `t`, corrected
    /// clock `now`.
    fn release_hold(&mut self, ti: usize, process: u32, sec: &Section, t: u64, now: u64) {
        let r = self.resolve(ti, process, Kind::Mutex, sec.lock.addr, sec.site, t);
        let oi = r.obj;
        let hold = now.saturating_sub(sec.begin_clock);
        let o = &mut self.objs[oi as usize];
        o.settle(t);
        if let Some(j) = o.holders.iter().rposition(|x| x.thread == ti as u32) {
            lockscope_trace::sync::take_at(&mut o.holders, j);
        }
        o.hold.record(hold);
        self.lock_threads[r.lt as usize].hold_ns += hold;
        self.site_stats[r.ss as usize].hold_ns += hold;
        if sec.stack != 0 {
            self.by_path.entry((oi, sec.stack)).or_default().hold_ns += hold;
        }
    }

    fn on_signal(&mut self, ti: usize, process: u32, op: Op, e: &lockscope_format::Event) {
        let site = self.site(process, e.site);
        let kind = Kind::of(op).unwrap_or(Kind::Cond);
        let oi = self.obj(process, kind, e.addr, site, e.time);
        let o = &mut self.objs[oi as usize];
        if op == Op::CondBroadcast {
            o.broadcasts += 1;
        } else {
            o.signals += 1;
        }
        // Only a wake that woke a thread can have ended a sleep: one that
        // found no sleeper (the waiter not asleep yet, or gone) would
        // take the blame from the release that did, and it carries no
        // call path (the recorder walks one only for wakes that woke).
        if op == Op::FutexWake && e.phase() == lockscope_format::phase::DONE && e.arg > 0 {
            o.last_wake = Some((
                Culprit {
                    thread: ti as u32,
                    site,
                    stack: e.stack,
                },
                e.time,
            ));
        }
    }

    fn on_futex_wait_end(
        &mut self,
        ti: usize,
        process: u32,
        e: &lockscope_format::Event,
        wait: u64,
        failed: Option<u64>,
    ) {
        let site = self.site(process, e.site);
        let fi = self.obj(process, Kind::Futex, e.addr, site, e.time);
        let raw_begin;
        {
            let o = &mut self.objs[fi as usize];
            o.settle(e.time);
            raw_begin = o.take_waiter(ti as u32).map_or(e.time, |w| w.since);
        }
        // Futex words have no visible holder: the wait is charged to the
        // thread whose wake ended it (its last wake after the wait began).
        let o = &self.objs[fi as usize];
        let culprit = match o.last_wake {
            Some((c, t)) if t >= raw_begin && c.thread != ti as u32 => c,
            _ => Culprit::NONE,
        };
        self.commit_blame(
            fi,
            ti as u32,
            (site, e.stack),
            wait,
            &[(culprit, wait.max(1))],
        );
        let lti = self.lt(fi, ti as u32);
        let ssi = self.ss(fi, site);
        let o = &mut self.objs[fi as usize];
        o.wait.record(wait);
        let lt = &mut self.lock_threads[lti as usize];
        lt.add_wait(wait);
        let timed_out = failed == Some(ETIMEDOUT);
        if timed_out {
            o.timeouts += 1;
            lt.timeouts += 1;
        } else if failed.is_some() {
            // EAGAIN (the word changed before the thread could sleep) or
            // EINTR: a wait that did not get the lock, like a failed
            // trylock.
            o.trylock_failures += 1;
            lt.trylock_failures += 1;
        } else {
            o.acquisitions += 1;
            o.contended += 1;
            lt.acquisitions += 1;
            lt.contended += 1;
            if o.last_owner != u32::MAX && o.last_owner != ti as u32 {
                o.owner_changes += 1;
            }
            o.last_owner = ti as u32;
        }
        let ss = &mut self.site_stats[ssi as usize];
        if failed.is_none() {
            ss.acquisitions += 1;
            ss.contended += 1;
        } else if !timed_out {
            ss.trylock_failures += 1;
        }
        ss.add_wait(wait);
        // Failed waits (EAGAIN: the word changed before the thread could
        // sleep) keep their call path too: it is what names their site
        // when the return address is the runtime's futex wrapper. Without
        // it they were a row of their own, `futex_wait [no user frame]`,
        // beside the same user line's waits that slept.
        if e.stack != 0 {
            let ps = self.by_path.entry((fi, e.stack)).or_default();
            if failed.is_none() {
                ps.acquisitions += 1;
                ps.contended += 1;
            } else if timed_out {
                ps.timeouts += 1;
            } else {
                ps.trylock_failures += 1;
            }
            ps.add_wait(wait);
        }
    }
}
