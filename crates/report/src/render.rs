//! Text and CSV renderings of a [`Report`]. JSON is `serde_json` of the
//! report itself.

use std::fmt::Write as _;

use crate::report::Report;

use lockscope_text::text::{elide, elide_name, fit_lines, term};
use lockscope_text::units::{count, ns};
use lockscope_text::units::{ns_f64 as nsf, pct};

fn share(a: u64, b: u64) -> String {
    if b == 0 {
        "-".into()
    } else {
        pct(a as f64 / b as f64)
    }
}

/// A left/right aligned table.
struct Table {
    head: Vec<&'static str>,
    /// true: right-aligned (numbers).
    right: Vec<bool>,
    /// Per column: 0 = always shown; otherwise the column may be hidden
    /// to fit the width, higher ranks first.
    rank: Vec<u8>,
    /// Column names for the "hidden" note (default: the headers).
    label: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

/// Narrowest a name column is elided to before columns are hidden.
const MIN_NAME: usize = 16;

/// True for a cell that says nothing (a zero count, time or ratio).
fn is_zero(c: &str) -> bool {
    matches!(c, "0" | "0 ns" | "0.0%" | "0 ns 0.0%" | "0.00" | "-" | "")
}

impl Table {
    fn new(cols: &[(&'static str, bool)]) -> Self {
        Table {
            head: cols.iter().map(|c| c.0).collect(),
            right: cols.iter().map(|c| c.1).collect(),
            rank: vec![0; cols.len()],
            label: Vec::new(),
            rows: Vec::new(),
        }
    }
    fn extend(&mut self, cols: &[(&'static str, bool)]) {
        self.head.extend(cols.iter().map(|c| c.0));
        self.right.extend(cols.iter().map(|c| c.1));
        self.rank.resize(self.head.len(), 0);
    }
    /// Names of the columns in the "hidden" note, where the headers
    /// repeat (two `mean` columns).
    fn labels(&mut self, l: &[&'static str]) {
        debug_assert_eq!(l.len(), self.head.len());
        self.label = l.to_vec();
    }
    /// Hiding order for narrow terminals, one rank per column.
    fn ranks(&mut self, r: &[u8]) {
        debug_assert_eq!(r.len(), self.head.len());
        self.rank = r.to_vec();
    }
    fn row(&mut self, r: Vec<String>) {
        // Every cell of every table: a name (a thread's, a file's) with a
        // newline or a tab would break the table.
        self.rows
            .push(r.into_iter().map(|c| term(&c).into_owned()).collect());
    }
    /// Whether two different cells of column `i` print the same at width
    /// `w`.
    fn collides(&self, i: usize, w: usize) -> bool {
        let mut seen: std::collections::HashMap<String, &str> = Default::default();
        self.rows.iter().any(|r| {
            let full = r[i].as_str();
            let cut = elide_name(full, w);
            *seen.entry(cut).or_insert(full) != full
        })
    }
    /// Renders the table within `width` columns (None: as wide as the
    /// cells). To fit, name (left-aligned) columns are first elided down
    /// to [`MIN_NAME`], then ranked columns are hidden, all-zero ones
    /// first; a line under the table names the hidden columns.
    fn render(&self, out: &mut String, indent: &str, width: Option<usize>) {
        let n = self.head.len();
        let natural: Vec<usize> = (0..n)
            .map(|i| {
                self.rows
                    .iter()
                    .map(|r| r[i].chars().count())
                    .chain([self.head[i].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        // The narrowest each name column can be: no site name loses its
        // `(file:line)` (see elide_name).
        let floor: Vec<usize> = (0..n)
            .map(|i| {
                let least = self
                    .rows
                    .iter()
                    .map(|r| elide_name(&r[i], 0).chars().count())
                    .max()
                    .unwrap_or(0);
                MIN_NAME.max(self.head[i].chars().count()).max(least)
            })
            .collect();
        let mut w = natural.clone();
        let mut shown = vec![true; n];
        if let Some(width) = width {
            // Hiding order: ranked columns, all-zero ones first, then by
            // rank, highest first.
            let mut order: Vec<usize> = (0..n).filter(|&i| self.rank[i] > 0).collect();
            order.sort_by_key(|&i| {
                let zero = self.rows.iter().all(|r| is_zero(&r[i]));
                (std::cmp::Reverse(zero), std::cmp::Reverse(self.rank[i]))
            });
            let mut order = order.into_iter();
            loop {
                let total = |w: &[usize], shown: &[bool]| {
                    let k = shown.iter().filter(|&&s| s).count();
                    indent.len()
                        + (0..n).filter(|&i| shown[i]).map(|i| w[i]).sum::<usize>()
                        + 2 * k.saturating_sub(1)
                };
                w.clone_from(&natural);
                let mut excess = total(&w, &shown).saturating_sub(width);
                // Elide the widest name column, one character at a time.
                while excess > 0 {
                    let widest = (0..n)
                        .filter(|&i| shown[i] && !self.right[i])
                        .filter(|&i| w[i] > floor[i])
                        .max_by_key(|&i| w[i]);
                    let Some(i) = widest else { break };
                    w[i] -= 1;
                    excess -= 1;
                }
                // Two different names must never print the same: widen a
                // column until its cut names differ (at its natural width
                // they are whole), then fit again.
                for i in (0..n).filter(|&i| shown[i] && !self.right[i]) {
                    while w[i] < natural[i] && self.collides(i, w[i]) {
                        w[i] += 1;
                    }
                }
                excess = total(&w, &shown).saturating_sub(width);
                if excess == 0 {
                    break;
                }
                match order.next() {
                    Some(i) => shown[i] = false,
                    None => break,
                }
            }
        }
        let line = |cells: Vec<&str>, out: &mut String| {
            let mut s = String::from(indent);
            let last_shown = (0..n).rev().find(|&i| shown[i]).unwrap_or(0);
            let mut first = true;
            for (i, c) in cells.iter().enumerate() {
                if !shown[i] {
                    continue;
                }
                if !first {
                    s.push_str("  ");
                }
                first = false;
                let c = if self.right[i] {
                    elide(c, w[i])
                } else {
                    elide_name(c, w[i])
                };
                let pad = w[i].saturating_sub(c.chars().count());
                if self.right[i] {
                    s.push_str(&" ".repeat(pad));
                    s.push_str(&c);
                } else {
                    s.push_str(&c);
                    if i != last_shown {
                        s.push_str(&" ".repeat(pad));
                    }
                }
            }
            out.push_str(s.trim_end());
            out.push('\n');
        };
        line(self.head.clone(), out);
        for r in &self.rows {
            line(r.iter().map(String::as_str).collect(), out);
        }
        let hidden: Vec<&str> = (0..n)
            .filter(|&i| !shown[i])
            .map(|i| self.label.get(i).copied().unwrap_or(self.head[i]))
            .collect();
        if !hidden.is_empty() {
            let _ = writeln!(
                out,
                "{indent}(hidden to fit the terminal: {}; --wide shows all)",
                hidden.join(", ")
            );
        }
    }
}

/// Options of the text rendering.
#[derive(Clone, Debug)]
pub struct TextOptions {
    /// Sites shown under each lock.
    pub sites_per_lock: usize,
    /// Show the per-thread rows of each lock.
    pub lock_threads: bool,
    /// Print the RECOMMENDATIONS section.
    pub advice: bool,
    /// Call paths printed per lock and for the largest blame rows (0:
    /// none).
    pub paths: usize,
    /// Fit every line into this many columns (None: the wide layout,
    /// lines as long as their content).
    pub width: Option<usize>,
}

impl Default for TextOptions {
    fn default() -> Self {
        TextOptions {
            sites_per_lock: 3,
            lock_threads: false,
            advice: true,
            paths: 0,
            width: None,
        }
    }
}

/// Threads listed per cell of the BARRIERS table (the most waiting
/// first when there are more).
const BARRIER_THREADS: usize = 6;

/// Why a futex word's row has dashes: the recorder sees a lock that
/// bypasses pthreads (Rust std, Go, hand-made) only when a thread enters
/// the kernel for it.
pub const FUTEX_NOTE: &str = "futex: a raw futex word is seen only when a thread sleeps on it \
    (FUTEX_WAIT) or wakes one: contended = waits that slept, try-fail = waits that returned at \
    once, wait = time asleep; acquisitions, holds and hand-offs happen in user space, unseen (-)";

/// `-` for what a futex word's row cannot know (see [`FUTEX_NOTE`]).
fn dash(futex: bool, v: String) -> String {
    if futex {
        "-".to_string()
    } else {
        v
    }
}

/// Whether the report covers more than one process (after a fork the
/// parent's and the child's copies of a lock share its name and address,
/// so every lock must then be named with its pid).
fn several_processes(r: &Report) -> bool {
    let mut pids = r
        .threads
        .iter()
        .map(|t| t.pid)
        .chain(r.locks.iter().map(|l| l.pid));
    let first = pids.next();
    pids.any(|p| Some(p) != first)
}

/// A lock's name for the text tables: qualified by its pid when the trace
/// has several processes.
fn lock_label(name: &str, pid: u32, several: bool) -> String {
    if several {
        format!("{name} (pid {pid})")
    } else {
        name.to_string()
    }
}

/// Terminal tables.
pub fn text(r: &Report, o: &TextOptions) -> String {
    let several = several_processes(r);
    let mut out = String::new();
    let command: Vec<_> = r.command.iter().map(|a| term(a)).collect();
    let _ = writeln!(out, "lockscope report: {}", command.join(" "));
    if !r.verdict.text.is_empty() {
        let _ = writeln!(out, "verdict: {}", term(&r.verdict.text));
    }
    let _ = writeln!(
        out,
        "duration {}, {} threads, {} events, {} lost",
        ns(r.duration_ns),
        r.threads.len(),
        count(r.events),
        count(r.lost_events)
    );
    // The user's labels (`record --label`); host and command are said
    // above already.
    let user: Vec<String> = r
        .labels
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "host" | "command"))
        .map(|(k, v)| format!("{k}={}", lockscope_text::text::term(v)))
        .collect();
    if !user.is_empty() {
        let _ = writeln!(out, "labels: {}", user.join(", "));
    }
    if let Some(t) = &r.truncated {
        let _ = writeln!(out, "WARNING: {t}");
    }
    if let Some(t) = &r.damaged {
        let _ = writeln!(out, "WARNING: {t}");
    }
    if let Some(t) = &r.recovered {
        let _ = writeln!(out, "NOTE: {t}");
    }
    let oh = &r.overhead;
    if oh.subtracted {
        let _ = writeln!(
            out,
            "recorder overhead subtracted: {:.1} ns per acquisition, {:.1} ns per release, \
             {:.1} ns per other event (total {}, {} of thread time)",
            oh.acquire_ns,
            oh.release_ns,
            oh.event_ns,
            ns(oh.total_ns),
            pct(oh.share_of_thread_time)
        );
    } else {
        let _ = writeln!(out, "recorder overhead: not subtracted");
    }

    hangs(r, several, o, &mut out);
    out.push_str(
        "\nLOCKS (wait = attempt to acquired; wait mean/max/p99 over the attempts that waited; \
         hold = acquired to release)\n",
    );
    if r.locks.is_empty() {
        out.push_str("  (none)\n");
    }
    let mut cols = vec![("#", true), ("lock", false)];
    if several {
        cols.push(("pid", true));
    }
    cols.push(("kind", false));
    let mut t = Table::new(&cols);
    t.extend(&[
        ("acq", true),
        ("contended", true),
        ("cont%", true),
        ("owner-chg", true),
        ("try-fail", true),
        ("1st-try", true),
        ("wait total", true),
        ("mean", true),
        ("max", true),
        ("p99", true),
        ("hold total", true),
        ("mean", true),
        ("max", true),
        ("p99", true),
        ("waiters", true),
    ]);
    // Hidden first on a narrow terminal: failures and hand-off figures,
    // then the tails of the distributions; never the name, counts and
    // totals.
    let mut ranks = vec![0, 0];
    if several {
        ranks.push(0);
    }
    ranks.extend([4, 0, 0, 5, 11, 12, 10, 0, 0, 7, 2, 0, 3, 8, 9, 6]);
    t.ranks(&ranks);
    let mut labels = vec!["#", "lock"];
    if several {
        labels.push("pid");
    }
    labels.extend([
        "kind",
        "acq",
        "contended",
        "cont%",
        "owner-chg",
        "try-fail",
        "1st-try",
        "wait total",
        "wait mean",
        "wait max",
        "wait p99",
        "hold total",
        "hold mean",
        "hold max",
        "hold p99",
        "waiters",
    ]);
    t.labels(&labels);
    for (i, l) in r.locks.iter().enumerate() {
        let mut row = vec![(i + 1).to_string(), l.label.clone()];
        if several {
            row.push(l.pid.to_string());
        }
        // A futex word shows only its waits (see FUTEX_NOTE): what it
        // cannot know is "-", not a confident 0 or 100 %.
        let futex = l.kind.starts_with("futex");
        let unknown = |v: String| dash(futex, v);
        row.extend([
            l.kind_label(),
            unknown(count(l.acquisitions)),
            contended_cell(l),
            unknown(pct(l.contended_ratio)),
            unknown(count(l.owner_changes)),
            count(l.trylock_failures),
            unknown(pct(l.first_attempt_ratio)),
            ns(l.wait_ns.total),
            nsf(l.wait_ns.mean),
            ns(l.wait_ns.max),
            ns(l.wait_ns.p99),
            unknown(ns(l.hold_ns.total)),
            unknown(nsf(l.hold_ns.mean)),
            unknown(ns(l.hold_ns.max)),
            unknown(ns(l.hold_ns.p99)),
            unknown(format!("{:.2}", l.avg_waiters)),
        ]);
        t.row(row);
    }
    if !r.locks.is_empty() {
        t.render(&mut out, "  ", o.width);
    }
    if r.locks.iter().any(|l| l.kind.starts_with("futex")) {
        let _ = writeln!(out, "  {FUTEX_NOTE}");
    }
    if r.locks.iter().any(|l| l.still_waiting > 0) {
        let _ = writeln!(
            out,
            "  +N waiting: acquisitions still blocked when the trace ended (a deadlock, a \
             program killed while it waited); their wait so far is in the wait columns."
        );
    }
    for (i, l) in r.locks.iter().enumerate() {
        if o.sites_per_lock == 0 {
            break;
        }
        let _ = writeln!(
            out,
            "\n  #{} {} {} at {}{}, first used at {}{}; sites:",
            i + 1,
            l.kind_label(),
            // The address follows: not twice.
            if l.named_by == lockscope_symbols::locknames::NamedBy::Address {
                "(no symbol)"
            } else {
                l.label.as_str()
            },
            l.address,
            if several {
                format!(" in pid {}", l.pid)
            } else {
                String::new()
            },
            l.first_use,
            if l.kind.starts_with("futex") {
                format!(
                    "; {} waits slept, {} returned at once, {} wakes",
                    count(l.contended),
                    count(l.trylock_failures),
                    count(l.wakes)
                )
            } else {
                String::new()
            }
        );
        let futex = l.kind.starts_with("futex");
        let mut st = Table::new(&[
            ("site", false),
            ("acq", true),
            ("contended", true),
            ("try-fail", true),
            ("wait", true),
            ("max wait", true),
            ("hold", true),
        ]);
        for s in l.sites.iter().take(o.sites_per_lock) {
            let mut name = s.name.clone();
            if s.runtime_only {
                name.push_str(" [no user frame]");
            }
            st.row(vec![
                name,
                dash(futex, count(s.acquisitions)),
                count(s.contended),
                count(s.trylock_failures),
                ns(s.wait_ns),
                ns(s.max_wait_ns),
                dash(futex, ns(s.hold_ns)),
            ]);
        }
        st.render(&mut out, "    ", o.width);
        if l.sites.len() > o.sites_per_lock {
            let _ = writeln!(
                out,
                "    ... {} more sites",
                l.sites.len() - o.sites_per_lock
            );
        }
        if o.paths > 0 && !l.call_paths.is_empty() {
            let _ = writeln!(out, "    call paths (most wait first):");
            for p in l.call_paths.iter().take(o.paths) {
                let _ = writeln!(
                    out,
                    "      {} waited, {} acquisitions ({} contended):",
                    ns(p.wait_ns),
                    count(p.acquisitions),
                    count(p.contended)
                );
                stack(&mut out, &p.frames, "        ");
            }
            if l.call_paths.len() > o.paths {
                let _ = writeln!(out, "      ... {} more paths", l.call_paths.len() - o.paths);
            }
        }
        if o.lock_threads {
            let mut tt = Table::new(&[
                ("tid", true),
                ("thread", false),
                ("acq", true),
                ("contended", true),
                ("try-fail", true),
                ("wait", true),
                ("hold", true),
            ]);
            for th in &l.threads {
                tt.row(vec![
                    th.tid.to_string(),
                    th.name.clone(),
                    dash(futex, count(th.acquisitions)),
                    count(th.contended),
                    count(th.trylock_failures),
                    ns(th.wait_ns),
                    dash(futex, ns(th.hold_ns)),
                ]);
            }
            tt.render(&mut out, "    ", o.width);
        }
    }

    cond_locks(r, several, o, &mut out);
    out.push_str("\nBLAME (each wait charged to the critical section holding the lock then)\n");
    if r.blame_matrix.is_empty() {
        out.push_str("  (no waiting)\n");
    } else {
        let mut t = Table::new(&[
            ("wait", true),
            ("waits", true),
            ("lock", false),
            ("waiter site", false),
            ("<- holder's critical section", false),
        ]);
        for b in &r.blame_matrix {
            t.row(vec![
                ns(b.wait_ns),
                count(b.waits),
                lock_label(&b.lock_name, b.pid, several),
                b.waiter_site.clone(),
                b.holder_site.clone(),
            ]);
        }
        t.render(&mut out, "  ", o.width);
        if o.paths > 0 {
            let rows: Vec<_> = r
                .blame
                .iter()
                .filter(|b| !b.holder_path.is_empty())
                .take(o.paths)
                .collect();
            if !rows.is_empty() {
                out.push_str("\n  holders' call paths (largest blame rows):\n");
            }
            for b in rows {
                let _ = writeln!(
                    out,
                    "    {} ({} wait{}) on {}: thread {} at {} waited for thread {} in:",
                    ns(b.wait_ns),
                    count(b.waits),
                    if b.waits == 1 { "" } else { "s" },
                    lock_label(&b.lock_name, b.pid, several),
                    b.waiter_tid,
                    b.waiter_site,
                    b.holder_tid.map_or("?".to_string(), |t| t.to_string()),
                );
                stack(&mut out, &b.holder_path, "      ");
            }
        }
        out.push_str("\n  blocking sites (wait caused):\n");
        let mut t = Table::new(&[
            ("wait caused", true),
            ("waits", true),
            ("holder site", false),
            ("lock", false),
        ]);
        for b in &r.blocking_sites {
            t.row(vec![
                ns(b.wait_caused_ns),
                count(b.waits),
                b.site.clone(),
                lock_label(&b.lock_name, b.pid, several),
            ]);
        }
        t.render(&mut out, "    ", o.width);
    }

    idle_at_exit(r, several, o, &mut out);
    inversions(r, several, &mut out);
    // Blocked time is a column of the sum, not a part of "free" shown
    // beside it: a thread asleep in pthread_cond_wait or pthread_join read
    // as 100 % free. A wait with a lock held stays in hold (the thread
    // does hold it), as in JSON.
    out.push_str(
        "\nTHREADS (running + lock + unlock + hold + blocked + unknown = lifetime; blocked: in a \
         condition, barrier, semaphore, join or GPU wait, no lock held)\n",
    );
    let mut t = Table::new(&[
        ("tid", true),
        ("name", false),
        ("lifetime", true),
        ("running", true),
        ("lock", true),
        ("unlock", true),
        ("hold", true),
        ("blocked", true),
        ("unknown", true),
    ]);
    t.ranks(&[0, 0, 0, 1, 0, 5, 3, 2, 6]);
    for th in &r.threads {
        let lt = th.lifetime_ns;
        let cell = |v: u64| format!("{} {}", ns(v), share(v, lt));
        t.row(vec![
            th.tid.to_string(),
            th.name.clone(),
            ns(lt),
            cell(th.running_ns),
            cell(th.lock_ns),
            cell(th.unlock_ns),
            cell(th.hold_ns),
            cell(th.blocked_ns),
            cell(th.unknown_ns),
        ]);
    }
    t.render(&mut out, "  ", o.width);

    if !r.conds.is_empty() {
        out.push_str("\nCONDITION VARIABLES\n");
        let mut t = Table::new(&[
            ("cond", false),
            ("waits", true),
            ("timeouts", true),
            ("signals", true),
            ("broadcasts", true),
            ("wait total", true),
            ("max", true),
        ]);
        for c in &r.conds {
            t.row(vec![
                c.name.clone(),
                count(c.waits),
                count(c.timeouts),
                count(c.signals),
                count(c.broadcasts),
                ns(c.wait_ns.total),
                ns(c.wait_ns.max),
            ]);
        }
        t.render(&mut out, "  ", o.width);
    }
    if !r.barriers.is_empty() {
        out.push_str("\nBARRIERS (waiting blamed on the last thread to arrive)\n");
        let mut t = Table::new(&[
            ("barrier", false),
            ("rounds", true),
            ("waits", true),
            ("wait total", true),
            ("max", true),
            ("per thread (tid: wait)", false),
            ("last arrivers (tid: wait caused)", false),
        ]);
        // In a narrow terminal the headers alone were wider than the
        // line, and the rows that overflowed came out word-wrapped, their
        // columns collapsed. Hidden first: the longest wait, the count of
        // waits, then each thread's waiting (the last arrivers, who made
        // the others wait, stay).
        t.ranks(&[0, 0, 2, 0, 3, 1, 0]);
        for b in &r.barriers {
            // At most BARRIER_THREADS threads per cell, those with the
            // most waiting: an OpenMP program with nested regions listed
            // a hundred threads on one line. JSON keeps them all.
            let per = |v: &[crate::report::ObjThreadOut]| {
                let mut v: Vec<&crate::report::ObjThreadOut> = v.iter().collect();
                let more = v.len().saturating_sub(BARRIER_THREADS);
                if more > 0 {
                    v.sort_by_key(|x| (std::cmp::Reverse(x.wait_ns), x.tid));
                    v.truncate(BARRIER_THREADS);
                }
                let mut s = v
                    .iter()
                    .map(|x| format!("{}: {}", x.tid, ns(x.wait_ns)))
                    .collect::<Vec<_>>()
                    .join(", ");
                if more > 0 {
                    let _ = write!(s, ", +{more} more");
                }
                s
            };
            t.row(vec![
                b.name.clone(),
                count(b.rounds),
                count(b.waits),
                ns(b.wait_ns.total),
                ns(b.wait_ns.max),
                per(&b.threads),
                per(&b.blamed_on),
            ]);
        }
        t.render(&mut out, "  ", o.width);
    }
    if !r.semaphores.is_empty() {
        out.push_str("\nSEMAPHORES\n");
        let mut t = Table::new(&[
            ("semaphore", false),
            ("waits", true),
            ("blocked", true),
            ("trywait-fail", true),
            ("timeouts", true),
            ("posts", true),
            ("wait total", true),
            ("max", true),
        ]);
        for s in &r.semaphores {
            t.row(vec![
                s.name.clone(),
                count(s.waits),
                count(s.contended),
                count(s.trywait_failures),
                count(s.timeouts),
                count(s.posts),
                ns(s.wait_ns.total),
                ns(s.wait_ns.max),
            ]);
        }
        t.render(&mut out, "  ", o.width);
    }
    let a = &r.anomalies;
    let bad: Vec<String> = a
        .named()
        .iter()
        .filter(|(_, v)| *v > 0)
        .map(|(k, v)| format!("{k} {}", count(*v)))
        .collect();
    if !bad.is_empty() {
        let _ = writeln!(out, "\nanomalies: {}", bad.join(", "));
    }
    if a.overlapping_holds > 0 {
        let _ = writeln!(
            out,
            "note: {} exclusive acquisitions were stamped before the previous holder's release \
             (calls are stamped at entry; TSC skew between CPUs): hold intervals overlap by a few ns there",
            count(a.overlapping_holds)
        );
    }
    for n in &r.notes {
        let _ = writeln!(out, "note: {n}");
    }
    if o.advice {
        recommendations(r, several, &mut out);
    }
    match o.width {
        Some(w) => fit_lines(&out, w),
        None => out,
    }
}

/// The LOCKS table's contended cell: the acquisitions that waited, and
/// those still waiting when the trace ended (`0+1 waiting`: a deadlocked
/// lock whose wait stands next to it is not "0 contended").
fn contended_cell(l: &crate::report::LockOut) -> String {
    if l.still_waiting > 0 {
        format!("{}+{} waiting", count(l.contended), count(l.still_waiting))
    } else {
        count(l.contended)
    }
}

/// DEADLOCK and STILL BLOCKED sections, first after the header: a hang
/// is the first thing to see.
fn hangs(r: &Report, several: bool, o: &TextOptions, out: &mut String) {
    for d in &r.deadlocks {
        let _ = writeln!(
            out,
            "\nDEADLOCK: {} threads{} wait for each other (still blocked when the trace ended)",
            d.threads.len(),
            if several {
                format!(" of pid {}", d.pid)
            } else {
                String::new()
            }
        );
        if let (Some(why), true) = (&d.no_paths, o.paths > 0) {
            let _ = writeln!(out, "  ({why})");
        }
        for s in &d.threads {
            let _ = writeln!(
                out,
                "  thread {} ({}) waits for {} at {}, since {}",
                s.tid,
                s.thread,
                s.waits_for,
                s.wait_site,
                ns(s.since_ns)
            );
            if o.paths > 0 {
                stack(out, &s.wait_path, "      ");
            }
            match &s.holder_site {
                Some(h) => {
                    let _ = writeln!(out, "    held by thread {}, taken at {h}", s.held_by);
                    if o.paths > 0 {
                        stack(out, &s.holder_path, "      ");
                    }
                }
                None => {
                    let _ = writeln!(out, "    thread {} has not exited", s.held_by);
                }
            }
        }
    }
    if r.hangs.iter().any(|h| !h.idle_at_exit) {
        out.push_str("\nSTILL BLOCKED WHEN THE TRACE ENDED (waits that never returned)\n");
        let mut t = Table::new(&[
            ("tid", true),
            ("thread", false),
            ("waited", true),
            ("in", false),
            ("on", false),
            ("held by", false),
            ("at", false),
        ]);
        for h in r.hangs.iter().filter(|h| !h.idle_at_exit) {
            let held: Vec<String> = h.held_by.iter().map(|t| t.to_string()).collect();
            t.row(vec![
                h.tid.to_string(),
                h.thread.clone(),
                ns(h.waited_ns),
                h.waiting_in.to_string(),
                lock_label(&h.object, h.pid, several),
                held.join(","),
                h.site.clone(),
            ]);
        }
        t.render(out, "  ", o.width);
    }
    if !r.hangs.is_empty() && !r.open_holds.is_empty() {
        out.push_str("  locks still held:\n");
        let mut t = Table::new(&[
            ("tid", true),
            ("held", true),
            ("lock", false),
            ("taken at", false),
        ]);
        for h in &r.open_holds {
            t.row(vec![
                h.tid.to_string(),
                ns(h.held_ns),
                lock_label(&h.lock, h.pid, several),
                h.site.clone(),
            ]);
        }
        t.render(out, "    ", o.width);
    }
}

/// Threads waiting for work when their process exited on its own: after
/// the blame tables, since they are not a finding, only an account of
/// every wait that never returned.
fn idle_at_exit(r: &Report, several: bool, o: &TextOptions, out: &mut String) {
    if r.hangs.iter().any(|h| h.idle_at_exit) {
        out.push_str(
            "\nWAITING FOR WORK WHEN THE PROGRAM EXITED (it ended on its own: idle threads, \
             not hangs)\n",
        );
        let mut t = Table::new(&[
            ("tid", true),
            ("thread", false),
            ("waited", true),
            ("in", false),
            ("on", false),
            ("at", false),
        ]);
        for h in r.hangs.iter().filter(|h| h.idle_at_exit) {
            t.row(vec![
                h.tid.to_string(),
                h.thread.clone(),
                ns(h.waited_ns),
                h.waiting_in.to_string(),
                lock_label(&h.object, h.pid, several),
                h.site.clone(),
            ]);
        }
        t.render(out, "  ", o.width);
    }
}

/// Condition variables used as locks, with their waits charged to the
/// signal that ended them (summed over threads, by waiter and signaller
/// site).
fn cond_locks(r: &Report, several: bool, o: &TextOptions, out: &mut String) {
    if r.cond_locks.is_empty() {
        return;
    }
    out.push_str(
        "\nCONDITION VARIABLES USED AS LOCKS (threads take turns holding a flag they pass on by \
         signal, as with Python's GIL; each wait charged to the signal that ended it)\n",
    );
    for c in &r.cond_locks {
        let _ = writeln!(
            out,
            "  {}: {} waits, {} ({} of thread time); {} passed on between its waiters, held by {:.2} \
             threads at a time",
            lock_label(&c.name, c.pid, several),
            count(c.waits),
            ns(c.wait_ns),
            pct(c.share_of_thread_time),
            count(c.handoffs),
            c.holders_at_once
        );
        let mut by: std::collections::BTreeMap<(&str, &str), (u64, u64)> = Default::default();
        for b in &c.blame {
            let e = by
                .entry((b.waiter_site.as_str(), b.signaller_site.as_str()))
                .or_default();
            e.0 += b.wait_ns;
            e.1 += b.waits;
        }
        let mut rows: Vec<_> = by.into_iter().collect();
        rows.sort_by_key(|(_, v)| std::cmp::Reverse(v.0));
        let mut t = Table::new(&[
            ("wait", true),
            ("waits", true),
            ("waiter site", false),
            ("<- signalled at", false),
        ]);
        for ((ws, ss), (ns_, n)) in rows.into_iter().take(o.sites_per_lock.max(3)) {
            t.row(vec![ns(ns_), count(n), ws.to_string(), ss.to_string()]);
        }
        t.render(out, "    ", o.width);
    }
}

/// POTENTIAL DEADLOCKS: lock pairs taken in both orders.
fn inversions(r: &Report, several: bool, out: &mut String) {
    if r.potential_deadlocks.is_empty() {
        return;
    }
    out.push_str(
        "\nPOTENTIAL DEADLOCKS (two locks taken in both orders; threads doing both at once \
         deadlock)\n",
    );
    for i in &r.potential_deadlocks {
        let (a, b) = (
            lock_label(&i.lock_a, i.pid, several),
            lock_label(&i.lock_b, i.pid, several),
        );
        let _ = writeln!(out, "  {a} and {b}:");
        let _ = writeln!(
            out,
            "    thread {} took {b} at {} while holding {a} (taken at {})",
            i.a_then_b.tid, i.a_then_b.acquired_at, i.a_then_b.held_at
        );
        let _ = writeln!(
            out,
            "    thread {} took {a} at {} while holding {b} (taken at {})",
            i.b_then_a.tid, i.b_then_a.acquired_at, i.b_then_a.held_at
        );
    }
}

/// A call path as an indented stack, innermost frame first (the frames
/// are user frames unless `--frames all`, see [`lockscope_symbols`]).
fn stack(out: &mut String, frames: &[String], indent: &str) {
    for (i, f) in frames.iter().enumerate() {
        let arrow = if i == 0 { "" } else { "<- " };
        let _ = writeln!(out, "{indent}{arrow}{f}");
    }
}

/// The RECOMMENDATIONS section (see [`crate::advice`]).
fn recommendations(r: &Report, several: bool, out: &mut String) {
    out.push_str("\nRECOMMENDATIONS (largest addressable wait first)\n");
    if r.recommendations.is_empty() {
        out.push_str("  (none: no lock or barrier met a rule's thresholds)\n");
    }
    for (i, a) in r.recommendations.iter().enumerate() {
        // The heading in words (`spin, then park: qlock`), the advice on
        // a line of its own: the rule id (`spin_then_park`) is for
        // programs and stays in JSON's `kind`.
        let _ = writeln!(
            out,
            "  {}. {}: {}",
            i + 1,
            a.title,
            lock_label(&a.lock, a.pid, several),
        );
        let _ = writeln!(out, "     {}", a.advice);
        let _ = writeln!(out, "     evidence: {}", a.evidence_text);
        if let Some(c) = &a.command {
            let _ = writeln!(out, "     try: {c}");
        }
    }
}

/// Tables available as CSV.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CsvTable {
    /// One row per lock.
    Locks,
    /// One row per (lock, site).
    Sites,
    /// One row per thread.
    Threads,
    /// One row per blame entry.
    Blame,
}

impl CsvTable {
    /// Parses a table name.
    pub fn parse(s: &str) -> Option<CsvTable> {
        Some(match s {
            "locks" => CsvTable::Locks,
            "sites" => CsvTable::Sites,
            "threads" => CsvTable::Threads,
            "blame" => CsvTable::Blame,
            _ => return None,
        })
    }
}

/// One table as CSV (RFC 4180), header row first, raw ns values.
pub fn csv(r: &Report, table: CsvTable) -> String {
    // The csv crate quotes what RFC 4180 requires (a comma, a quote, CR or
    // LF in a field; the hand-written quoting this replaces missed CR).
    // Writing into memory cannot fail.
    let mut w = csv::WriterBuilder::new()
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(Vec::new());
    let mut row = |cells: Vec<String>| {
        let _ = w.write_record(&cells);
    };
    let s = |v: &dyn ToString| v.to_string();
    match table {
        CsvTable::Locks => {
            row("address,pid,kind,name,first_use,acquisitions,contended,contended_ratio,trylock_failures,timeouts,owner_changes,first_attempt_ratio,avg_waiters,wait_total_ns,wait_mean_ns,wait_max_ns,wait_p99_ns,hold_total_ns,hold_mean_ns,hold_max_ns,hold_p99_ns,label,named_by"
                .split(',').map(String::from).collect());
            for l in &r.locks {
                // What a futex word does not show is an empty cell (as
                // JSON's null), not a 0 that reads as measured.
                let seen = |v: String| if l.futex_only() { String::new() } else { v };
                row(vec![
                    l.address.clone(),
                    s(&l.pid),
                    l.kind.into(),
                    l.name.clone().unwrap_or_default(),
                    l.first_use.clone(),
                    seen(s(&l.acquisitions)),
                    s(&l.contended),
                    seen(format!("{:.6}", l.contended_ratio)),
                    s(&l.trylock_failures),
                    s(&l.timeouts),
                    seen(s(&l.owner_changes)),
                    seen(format!("{:.6}", l.first_attempt_ratio)),
                    seen(format!("{:.6}", l.avg_waiters)),
                    s(&l.wait_ns.total),
                    format!("{:.1}", l.wait_ns.mean),
                    s(&l.wait_ns.max),
                    s(&l.wait_ns.p99),
                    seen(s(&l.hold_ns.total)),
                    seen(format!("{:.1}", l.hold_ns.mean)),
                    seen(s(&l.hold_ns.max)),
                    seen(s(&l.hold_ns.p99)),
                    // Last, so that the columns before keep their places.
                    l.label.clone(),
                    l.named_by.as_str().into(),
                ]);
            }
        }
        CsvTable::Sites => {
            row("lock,lock_name,function,file,line,location,acquisitions,contended,trylock_failures,wait_ns,max_wait_ns,hold_ns"
                .split(',').map(String::from).collect());
            for l in &r.locks {
                // As in the locks table: unseen is empty, not 0.
                let seen = |v: String| if l.futex_only() { String::new() } else { v };
                for x in &l.sites {
                    row(vec![
                        l.address.clone(),
                        l.label.clone(),
                        x.function.clone().unwrap_or_default(),
                        x.file.clone().unwrap_or_default(),
                        x.line.map(|v| v.to_string()).unwrap_or_default(),
                        x.location.clone(),
                        seen(s(&x.acquisitions)),
                        s(&x.contended),
                        s(&x.trylock_failures),
                        s(&x.wait_ns),
                        s(&x.max_wait_ns),
                        seen(s(&x.hold_ns)),
                    ]);
                }
            }
        }
        CsvTable::Threads => {
            row("tid,pid,name,lifetime_ns,free_ns,lock_ns,unlock_ns,hold_ns,unknown_ns,cond_wait_ns,barrier_wait_ns,sem_wait_ns,join_wait_ns,overhead_ns,events,lost_events,running_ns,blocked_ns"
                .split(',').map(String::from).collect());
            for t in &r.threads {
                row(vec![
                    s(&t.tid),
                    s(&t.pid),
                    t.name.clone(),
                    s(&t.lifetime_ns),
                    s(&t.free_ns),
                    s(&t.lock_ns),
                    s(&t.unlock_ns),
                    s(&t.hold_ns),
                    s(&t.unknown_ns),
                    s(&t.cond_wait_ns),
                    s(&t.barrier_wait_ns),
                    s(&t.sem_wait_ns),
                    s(&t.join_wait_ns),
                    s(&t.overhead_ns),
                    s(&t.events),
                    s(&t.lost_events),
                    // Last, so that the columns before keep their places.
                    s(&t.running_ns),
                    s(&t.blocked_ns),
                ]);
            }
        }
        CsvTable::Blame => {
            row("lock,lock_name,waiter_tid,waiter_site,holder_tid,holder_site,holder_path,wait_ns,waits"
                .split(',').map(String::from).collect());
            for b in &r.blame {
                row(vec![
                    b.lock.clone(),
                    b.lock_name.clone(),
                    s(&b.waiter_tid),
                    b.waiter_site.clone(),
                    b.holder_tid.map(|v| v.to_string()).unwrap_or_default(),
                    b.holder_site.clone(),
                    b.holder_path.join(" <- "),
                    s(&b.wait_ns),
                    s(&b.waits),
                ]);
            }
        }
    }
    let bytes = w.into_inner().unwrap_or_default();
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name table of `rows` fitted to `width` columns, one cell per
    /// line.
    fn fitted(rows: &[&str], width: usize) -> Vec<String> {
        let mut t = Table::new(&[("wait", true), ("site", false)]);
        for r in rows {
            t.row(vec!["1.000 ms".into(), r.to_string()]);
        }
        let mut out = String::new();
        t.render(&mut out, "  ", Some(width));
        out.lines()
            .skip(1)
            .map(|l| {
                l.trim_start()
                    .trim_start_matches("1.000 ms")
                    .trim()
                    .to_string()
            })
            .collect()
    }

    // See issue 29: two sites of one function printed as the same
    // `queue_pop (prod...prodcons.c:41)`.

    #[test]
    fn sites_that_differ_only_in_their_caller_line_stay_apart_when_cut() {
        let a = "queue_pop (prodcons.c:41) in producer_thread_main_loop (prodcons.c:88)";
        let b = "queue_pop (prodcons.c:41) in producer_thread_main_loop (prodcons.c:93)";
        let got = fitted(&[a, b], 70);
        assert_ne!(got[0], got[1], "{got:?}");
        for (g, line) in got.iter().zip(["88", "93"]) {
            // The width less the indent and the wait column.
            assert!(g.chars().count() <= 70 - 2 - 8 - 2, "{g}");
            assert!(g.chars().count() < a.len(), "{g}");
            assert!(g.starts_with("queue_pop (prodcons.c:41) in "), "{g}");
            assert!(g.ends_with(&format!("(prodcons.c:{line})")), "{g}");
        }
    }

    #[test]
    fn sites_that_differ_only_in_a_long_function_name_never_print_the_same() {
        let a = "handle_alpha_request_from_the_network_queue_and_reply (server.c:120)";
        let b = "handle_gamma_request_from_the_network_queue_and_reply (server.c:120)";
        let c = "app::server::alpha::Handler<T>::handle_request (server.rs:7)";
        let d = "app::server::gamma::Handler<T>::handle_request (server.rs:7)";
        let got = fitted(&[a, b, c, d], 52);
        for i in 0..got.len() {
            for j in i + 1..got.len() {
                assert_ne!(got[i], got[j], "{got:?}");
            }
        }
        assert!(got[0].ends_with(" (server.c:120)"), "{got:?}");
        assert!(got[1].ends_with(" (server.c:120)"), "{got:?}");
        assert!(got[2].ends_with("handle_request (server.rs:7)"), "{got:?}");
        assert!(got[3].ends_with("handle_request (server.rs:7)"), "{got:?}");
    }
}
