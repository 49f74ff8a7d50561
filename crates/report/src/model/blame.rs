//! Blame: who is charged for a waiter's time (the holders of the lock
//! while it waited, split evenly among shared holders, or "no holder"),
//! and the hand-over of ownership at each acquisition.

use super::*;

impl Obj {
    /// Charges the time since the last change to holders and waiters.
    pub(super) fn settle(&mut self, t: u64) {
        if t <= self.last_settle {
            return;
        }
        let dt = t - self.last_settle;
        self.last_settle = t;
        if !self.holders.is_empty() {
            self.held_ns += dt;
            self.waiter_ns += u128::from(dt) * self.waiters.len() as u128;
        }
        if self.waiters.is_empty() {
            return;
        }
        let n = self.holders.len() as u64;
        for w in &mut self.waiters {
            if n == 0 {
                add_charge(&mut w.charges, Culprit::NONE, dt);
                continue;
            }
            let share = dt / n;
            for (k, h) in self.holders.iter().enumerate() {
                let extra = if k == 0 { dt - share * n } else { 0 };
                add_charge(&mut w.charges, h.culprit, share + extra);
            }
        }
    }

    pub(super) fn take_waiter(&mut self, thread: u32) -> Option<Waiter> {
        let i = self.waiters.iter().position(|w| w.thread == thread)?;
        Some(self.waiters.swap_remove(i))
    }
}

pub(super) fn add_charge(v: &mut Vec<(Culprit, u64)>, c: Culprit, dt: u64) {
    if dt == 0 {
        return;
    }
    match v.iter_mut().find(|(k, _)| *k == c) {
        Some(e) => e.1 += dt,
        None => v.push((c, dt)),
    }
}

impl Model {
    /// Records that thread `ti` now holds object `oi` (the section's
    /// statistics are found again from the section at its release).
    pub(super) fn take_ownership(
        &mut self,
        oi: u32,
        ti: usize,
        site: u32,
        stack: u32,
        shared: bool,
    ) {
        let o = &mut self.objs[oi as usize];
        if o.last_owner != u32::MAX && o.last_owner != ti as u32 {
            o.owner_changes += 1;
        }
        o.last_owner = ti as u32;
        o.holders.push(Holder {
            thread: ti as u32,
            culprit: Culprit {
                thread: ti as u32,
                site,
                stack,
            },
            shared,
        });
    }

    pub(super) fn commit_blame(
        &mut self,
        oi: u32,
        waiter: u32,
        (waiter_site, waiter_stack): (u32, u32),
        wait_ns: u64,
        charges: &[(Culprit, u64)],
    ) {
        // Charges are in raw ns; scale them to the corrected wait so blame
        // sums to the reported wait time.
        let raw: u64 = charges.iter().map(|c| c.1).sum();
        if raw == 0 {
            if wait_ns > 0 {
                let b = self
                    .blame
                    .entry((oi, waiter, waiter_site, waiter_stack, Culprit::NONE))
                    .or_default();
                b.0 += wait_ns;
                b.1 += 1;
            }
            return;
        }
        let mut left = wait_ns;
        for (k, &(c, ns)) in charges.iter().enumerate() {
            let part = if k + 1 == charges.len() {
                left
            } else {
                ((u128::from(ns) * u128::from(wait_ns)) / u128::from(raw)) as u64
            };
            left -= part.min(left);
            let b = self
                .blame
                .entry((oi, waiter, waiter_site, waiter_stack, c))
                .or_default();
            b.0 += part;
            b.1 += 1;
        }
    }
}
