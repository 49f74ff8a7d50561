//! Dense indices: threads, call sites, objects (locks, conditions...),
//! and the per-(lock, thread) and per-(lock, site) statistics rows,
//! each created on first sight.

use super::*;

impl Model {
    /// Index of a thread, creating a placeholder for an undeclared one.
    pub(super) fn thread_idx(&mut self, id: u32, t: u64) -> u32 {
        if let Some(&i) = self.thread_lookup.get(id as usize) {
            if i != u32::MAX {
                return i;
            }
        }
        if let Some(&i) = self.thread_index.get(&id) {
            return i;
        }
        // Counted as an anomaly by the interpreter.
        self.add_thread(id, 0, 0, format!("thread#{id}"), t);
        self.threads.len() as u32 - 1
    }

    pub(super) fn site(&mut self, process: u32, pc: u64) -> u32 {
        let n = self.sites.len() as u32;
        *self.site_index.entry((process, pc)).or_insert_with(|| {
            self.sites.push((process, pc));
            n
        })
    }

    pub(super) fn obj(&mut self, process: u32, kind: Kind, addr: u64, site: u32, t: u64) -> u32 {
        let n = self.objs.len() as u32;
        let key = (process, kind.class(), addr);
        if let Some(&i) = self.obj_index.get(&key) {
            return i;
        }
        self.obj_index.insert(key, n);
        self.objs.push(Obj::new(process, addr, kind, site, t));
        n
    }

    /// (object, site, site statistics, thread statistics) of an event.
    pub(super) fn resolve(
        &mut self,
        ti: usize,
        process: u32,
        kind: Kind,
        addr: u64,
        pc: u64,
        t: u64,
    ) -> Resolved {
        let class = kind.class();
        let set = ((addr ^ pc.rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 57) as usize
            & (CACHE - 1)
            & !1;
        let cache = &self.threads[ti].cache;
        for slot in [set, set | 1] {
            let c = cache[slot];
            if c.valid && c.addr == addr && c.pc == pc && c.class == class {
                return c;
            }
        }
        // Replace an empty way, else the second way (the first keeps the
        // older entry: a cheap approximation of LRU for 2 ways).
        let slot = if !cache[set].valid { set } else { set | 1 };
        let site = self.site(process, pc);
        let obj = self.obj(process, kind, addr, site, t);
        let n = self.site_stats.len() as u32;
        let ss = *self.by_site.entry((obj, site)).or_insert(n);
        if ss == n {
            self.site_stats.push(SiteStats::default());
        }
        let lt = self.lt(obj, ti as u32);
        let r = Resolved {
            addr,
            pc,
            class,
            valid: true,
            obj,
            site,
            ss,
            lt,
        };
        self.threads[ti].cache[slot] = r;
        r
    }

    /// Index of the (object, thread) statistics.
    pub(super) fn lt(&mut self, obj: u32, ti: u32) -> u32 {
        let n = self.lock_threads.len() as u32;
        let lt = *self.objs[obj as usize].per_thread.entry(ti).or_insert(n);
        if lt == n {
            self.lock_threads.push(LockThread::default());
        }
        lt
    }

    /// Index of the (object, site) statistics.
    pub(super) fn ss(&mut self, obj: u32, site: u32) -> u32 {
        let n = self.site_stats.len() as u32;
        let ss = *self.by_site.entry((obj, site)).or_insert(n);
        if ss == n {
            self.site_stats.push(SiteStats::default());
        }
        ss
    }

    /// Index of an object that must exist (named by a step).
    pub(super) fn known_obj(&mut self, process: u32, kind: Kind, addr: u64, t: u64) -> u32 {
        match self.obj_index.get(&(process, kind.class(), addr)) {
            Some(&i) => i,
            None => {
                let site = self.site(process, 0);
                self.obj(process, kind, addr, site, t)
            }
        }
    }
}
