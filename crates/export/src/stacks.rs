//! The report's wait as weighted call stacks: one stack per lock and
//! waiter call path (weight: wait and contended acquisitions), and one per
//! lock and holder call path (weight: the wait charged to that holder's
//! critical sections, the report's blame).
//!
//! Weights come from the [`Report`] and nothing else, so the sum over the
//! waiter stacks of a lock is that lock's `wait_ns.total` and its
//! contended count, and the sum over all stacks is the report's total
//! wait. Wait the report cannot place on a recorded call path (only
//! contended acquisitions carry one, and a site without one) is kept, under
//! the acquisition site or a `[no call path recorded]` frame, rather than
//! dropped: a flame graph whose total differs from the report's would
//! mislead.

use std::collections::{BTreeMap, HashMap};

use lockscope_report::Report;

/// Frame used for wait that no recorded call path or site covers.
pub const NO_PATH: &str = "[no call path recorded]";
/// Frame used for wait the report's blame charged to no holder row.
pub const NOT_CHARGED: &str = "[not charged to a holder]";

/// One call stack and what it weighs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WeightedStack {
    /// The lock's name, as the report shows it
    /// ([`lockscope_symbols::locknames`]).
    pub lock: String,
    /// Frames as the report names them (`function (file:line)`),
    /// innermost first.
    pub frames: Vec<String>,
    /// Contended acquisitions (waiter stacks), or waits charged (holder
    /// stacks).
    pub count: u64,
    /// Wait, ns.
    pub wait_ns: u64,
}

/// The report's wait as stacks.
#[derive(Clone, Debug, Default)]
pub struct Stacks {
    /// By waiter call path.
    pub waiters: Vec<WeightedStack>,
    /// By holder call path (blame).
    pub holders: Vec<WeightedStack>,
    /// Sum of every lock's `wait_ns.total` in the report.
    pub total_wait_ns: u64,
    /// Sum of every lock's contended acquisitions.
    pub total_contended: u64,
}

/// Builds the stacks of a report. Stacks with neither wait nor count are
/// left out; equal stacks are merged.
pub fn from_report(r: &Report) -> Stacks {
    let mut waiters: BTreeMap<(String, Vec<String>), (u64, u64)> = BTreeMap::new();
    let mut holders: BTreeMap<(String, Vec<String>), (u64, u64)> = BTreeMap::new();
    let add = |m: &mut BTreeMap<(String, Vec<String>), (u64, u64)>,
               lock: &str,
               frames: Vec<String>,
               count: u64,
               wait: u64| {
        if count == 0 && wait == 0 {
            return;
        }
        let e = m.entry((lock.to_string(), frames)).or_default();
        e.0 += count;
        e.1 += wait;
    };
    let mut total_wait = 0u64;
    let mut total_contended = 0u64;
    // Blame rows name their lock by (address, pid).
    let mut label_of: HashMap<(&str, u32), String> = HashMap::new();
    let mut charged: HashMap<(&str, u32), u64> = HashMap::new();
    for l in &r.locks {
        let label = l.label.clone();
        label_of.insert((l.address.as_str(), l.pid), label.clone());
        let total = l.wait_ns.total;
        total_wait += total;
        total_contended += l.contended;
        let (mut wait_left, mut count_left) = (total, l.contended);
        for p in &l.call_paths {
            let w = p.wait_ns.min(wait_left);
            let c = p.contended.min(count_left);
            wait_left -= w;
            count_left -= c;
            let frames = if p.frames.is_empty() {
                vec![NO_PATH.to_string()]
            } else {
                p.frames.clone()
            };
            add(&mut waiters, &label, frames, c, w);
        }
        // No call path at all (recorded without stacks, or no contended
        // acquisition carried one): the acquisition sites.
        if l.call_paths.is_empty() {
            for s in &l.sites {
                let w = s.wait_ns.min(wait_left);
                let c = s.contended.min(count_left);
                wait_left -= w;
                count_left -= c;
                add(&mut waiters, &label, vec![s.name.clone()], c, w);
            }
        }
        add(
            &mut waiters,
            &label,
            vec![NO_PATH.to_string()],
            count_left,
            wait_left,
        );
    }
    for b in &r.blame {
        let Some(label) = label_of.get(&(b.lock.as_str(), b.pid)) else {
            continue;
        };
        let frames = if b.holder_path.is_empty() {
            vec![b.holder_site.clone()]
        } else {
            b.holder_path.clone()
        };
        *charged.entry((b.lock.as_str(), b.pid)).or_default() += b.wait_ns;
        add(&mut holders, label, frames, b.waits, b.wait_ns);
    }
    for l in &r.locks {
        let c = charged
            .get(&(l.address.as_str(), l.pid))
            .copied()
            .unwrap_or(0);
        let left = l.wait_ns.total.saturating_sub(c);
        let label = &label_of[&(l.address.as_str(), l.pid)];
        add(&mut holders, label, vec![NOT_CHARGED.to_string()], 0, left);
    }
    let collect = |m: BTreeMap<(String, Vec<String>), (u64, u64)>| {
        let mut v: Vec<WeightedStack> = m
            .into_iter()
            .map(|((lock, frames), (count, wait_ns))| WeightedStack {
                lock,
                frames,
                count,
                wait_ns,
            })
            .collect();
        v.sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then(a.lock.cmp(&b.lock)));
        v
    };
    Stacks {
        waiters: collect(waiters),
        holders: collect(holders),
        total_wait_ns: total_wait,
        total_contended,
    }
}

/// One source position of a frame name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FrameLine {
    /// Function name (or `module+0xoffset` when unknown).
    pub function: String,
    /// Source file (base name as the report prints it), if known.
    pub file: Option<String>,
    /// Line, 0 if unknown.
    pub line: u32,
}

/// Splits a frame name of the report (`f (file.c:12)`, `f (mod+0x10)`,
/// `mod+0x10`, or `f (a.h:3) in g (b.c:9)` for an inlined call) into
/// source positions, innermost first (the last is the function it was
/// inlined into).
pub fn parse_frame(s: &str) -> Vec<FrameLine> {
    // The caller part follows the innermost part's closing parenthesis.
    if let Some(k) = s.find(") in ") {
        let (inner, caller) = (&s[..=k], &s[k + 5..]);
        return vec![parse_one(inner), parse_one(caller)];
    }
    vec![parse_one(s)]
}

fn parse_one(s: &str) -> FrameLine {
    let s = s.trim();
    if s.ends_with(')') {
        // The last parenthesised group: C++ names carry their own
        // parameter lists before it.
        if let Some(i) = s.rfind(" (") {
            let inner = &s[i + 2..s.len() - 1];
            let function = s[..i].to_string();
            if let Some((file, line)) = inner.rsplit_once(':') {
                if let Ok(line) = line.parse::<u32>() {
                    return FrameLine {
                        function,
                        file: Some(file.to_string()),
                        line,
                    };
                }
            }
            if inner.contains("+0x") {
                return FrameLine {
                    function,
                    file: None,
                    line: 0,
                };
            }
        }
    }
    FrameLine {
        function: s.to_string(),
        file: None,
        line: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_parse() {
        assert_eq!(
            parse_frame("wait_for_it (sleep_hold.c:38)"),
            vec![FrameLine {
                function: "wait_for_it".into(),
                file: Some("sleep_hold.c".into()),
                line: 38
            }]
        );
        let v = parse_frame("ns::f(int) (a.h:3) in g (b.cc:9)");
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].function, "ns::f(int)");
        assert_eq!(v[0].line, 3);
        assert_eq!(v[1].function, "g");
        assert_eq!(v[1].file.as_deref(), Some("b.cc"));
        assert_eq!(parse_frame("prog+0x1a0")[0].function, "prog+0x1a0");
        assert_eq!(parse_frame("f (prog+0x1a0)")[0].function, "f");
        assert_eq!(parse_frame("f (prog+0x1a0)")[0].file, None);
    }
}
