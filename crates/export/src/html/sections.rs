//! The page's tables beyond locks, threads and blame: every section of
//! the text report, as generic tables (`report.sections` in the page's
//! data: title, id, column heads, column formats, rows, and lines of
//! prose). The script draws them all the same way, so a section added
//! to the report needs no code on the page.
//!
//! A section is written when the text report prints it, with the same
//! figures; what the page leaves out is said on the page (`not on this
//! page`, the last section).

use lockscope_analysis::full::Sections;
use lockscope_report::Report;
use serde_json::{json, Value};

/// One table: `fmt` per column, as the script reads it: `t` text, `n`
/// number, `ns` duration, `%` a fraction shown as a percentage.
fn table(title: &str, id: &str, heads: &[&str], fmt: &[&str], rows: Vec<Value>) -> Value {
    json!({"title": title, "id": id, "heads": heads, "fmt": fmt, "rows": rows, "lines": []})
}

/// Prose only.
fn lines(title: &str, id: &str, lines: Vec<String>) -> Value {
    json!({"title": title, "id": id, "heads": [], "fmt": [], "rows": [], "lines": lines})
}

/// Appends `more` to a section's prose.
fn with_lines(mut v: Value, more: Vec<String>) -> Value {
    v["lines"] = json!(more);
    v
}

/// The sections, in the text report's order.
pub(super) fn sections(r: &Report, s: &Sections) -> Vec<Value> {
    let mut out = Vec::new();
    let oh = &r.overhead;
    out.push(lines(
        "Recorder overhead",
        "overhead",
        vec![if oh.subtracted {
            format!(
                "subtracted: {:.1} ns per acquisition, {:.1} ns per release, {:.1} ns per \
                 other event (total {} ns, {:.1}% of thread time)",
                oh.acquire_ns,
                oh.release_ns,
                oh.event_ns,
                oh.total_ns,
                100.0 * oh.share_of_thread_time
            )
        } else {
            "not subtracted".to_string()
        }],
    ));
    for d in &r.deadlocks {
        let rows = d
            .threads
            .iter()
            .map(|t| {
                json!([
                    t.thread,
                    t.tid,
                    t.waits_for,
                    t.wait_site,
                    t.held_by,
                    t.since_ns
                ])
            })
            .collect();
        out.push(table(
            &format!("Deadlock: {} threads wait for each other", d.threads.len()),
            "deadlock",
            &["thread", "tid", "waits for", "at", "held by", "since"],
            &["t", "n", "t", "t", "n", "ns"],
            rows,
        ));
    }
    let blocked: Vec<Value> = r
        .hangs
        .iter()
        .filter(|h| !h.idle_at_exit)
        .map(|h| json!([h.thread, h.tid, h.waiting_in, h.object, h.waited_ns, h.site]))
        .collect();
    if !blocked.is_empty() {
        out.push(table(
            "Still blocked when the trace ended",
            "hangs",
            &["thread", "tid", "waiting in", "object", "waited", "site"],
            &["t", "n", "t", "t", "ns", "t"],
            blocked,
        ));
    }
    let idle: Vec<Value> = r
        .hangs
        .iter()
        .filter(|h| h.idle_at_exit)
        .map(|h| json!([h.thread, h.tid, h.waiting_in, h.object, h.waited_ns, h.site]))
        .collect();
    if !idle.is_empty() {
        out.push(table(
            "Waiting for work when the program exited",
            "idle-at-exit",
            &["thread", "tid", "waiting in", "object", "waited", "site"],
            &["t", "n", "t", "t", "ns", "t"],
            idle,
        ));
    }
    if !r.open_holds.is_empty() {
        out.push(table(
            "Locks still held when the trace ended",
            "open-holds",
            &["tid", "lock", "held", "site"],
            &["n", "t", "ns", "t"],
            r.open_holds
                .iter()
                .map(|h| json!([h.tid, h.lock, h.held_ns, h.site]))
                .collect(),
        ));
    }
    if !r.cond_locks.is_empty() {
        out.push(table(
            "Condition variables used as locks",
            "cond-locks",
            &[
                "condition",
                "pid",
                "waits",
                "wait",
                "hand-offs",
                "holdings",
                "holders at once",
            ],
            &["t", "n", "n", "ns", "n", "n", "n"],
            r.cond_locks
                .iter()
                .map(|c| {
                    json!([
                        c.name,
                        c.pid,
                        c.waits,
                        c.wait_ns,
                        c.handoffs,
                        c.holdings,
                        c.holders_at_once
                    ])
                })
                .collect(),
        ));
    }
    if !r.blocking_sites.is_empty() {
        out.push(table(
            "Blocking sites (wait caused)",
            "blocking-sites",
            &["holder site", "lock", "wait caused", "waits"],
            &["t", "t", "ns", "n"],
            r.blocking_sites
                .iter()
                .map(|b| json!([b.site, b.lock_name, b.wait_caused_ns, b.waits]))
                .collect(),
        ));
    }
    if !r.conds.is_empty() {
        out.push(table(
            "Condition variables",
            "conds",
            &[
                "condition",
                "pid",
                "waits",
                "timeouts",
                "signals",
                "broadcasts",
                "wait",
                "max",
            ],
            &["t", "n", "n", "n", "n", "n", "ns", "ns"],
            r.conds
                .iter()
                .map(|c| {
                    json!([
                        c.name,
                        c.pid,
                        c.waits,
                        c.timeouts,
                        c.signals,
                        c.broadcasts,
                        c.wait_ns.total,
                        c.wait_ns.max
                    ])
                })
                .collect(),
        ));
    }
    if !r.barriers.is_empty() {
        out.push(table(
            "Barriers (waiting blamed on the last thread to arrive)",
            "barriers",
            &["barrier", "pid", "rounds", "waits", "wait", "max"],
            &["t", "n", "n", "n", "ns", "ns"],
            r.barriers
                .iter()
                .map(|b| {
                    json!([
                        b.name,
                        b.pid,
                        b.rounds,
                        b.waits,
                        b.wait_ns.total,
                        b.wait_ns.max
                    ])
                })
                .collect(),
        ));
    }
    if !r.semaphores.is_empty() {
        out.push(table(
            "Semaphores",
            "semaphores",
            &[
                "semaphore",
                "waits",
                "contended",
                "trywait failures",
                "timeouts",
                "posts",
                "wait",
                "max",
            ],
            &["t", "n", "n", "n", "n", "n", "ns", "ns"],
            r.semaphores
                .iter()
                .map(|x| {
                    json!([
                        x.name,
                        x.waits,
                        x.contended,
                        x.trywait_failures,
                        x.timeouts,
                        x.posts,
                        x.wait_ns.total,
                        x.wait_ns.max
                    ])
                })
                .collect(),
        ));
    }
    let bad: Vec<String> = r
        .anomalies
        .named()
        .iter()
        .filter(|(_, v)| *v > 0)
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    if !bad.is_empty() {
        out.push(lines("Anomalies", "anomalies", bad));
    }
    if !r.potential_deadlocks.is_empty() {
        out.push(table(
            "Potential deadlocks (two locks taken in both orders)",
            "potential-deadlocks",
            &[
                "pid",
                "lock A",
                "lock B",
                "A then B: tid",
                "at",
                "B then A: tid",
                "at",
            ],
            &["n", "t", "t", "n", "t", "n", "t"],
            r.potential_deadlocks
                .iter()
                .map(|i| {
                    json!([
                        i.pid,
                        i.lock_a,
                        i.lock_b,
                        i.a_then_b.tid,
                        i.a_then_b.acquired_at,
                        i.b_then_a.tid,
                        i.b_then_a.acquired_at
                    ])
                })
                .collect(),
        ));
    }
    if let Some(sp) = s.spin.as_ref().filter(|x| !x.spinlocks.is_empty()) {
        out.push(table(
            "Hand-written spinlocks (found from atomics)",
            "spinlocks",
            &[
                "lock", "kind", "acquired", "failed", "1st try", "wait", "hold", "warnings",
            ],
            &["t", "t", "n", "n", "%", "ns", "ns", "t"],
            sp.spinlocks
                .iter()
                .map(|l| {
                    let w: Vec<&str> = l.warnings.iter().map(|w| w.kind).collect();
                    json!([
                        l.symbol,
                        l.kind,
                        l.acquisitions,
                        l.failed_attempts,
                        l.first_try_ratio,
                        l.wait_ns,
                        l.hold_ns,
                        w.join(", ")
                    ])
                })
                .collect(),
        ));
    }
    if let Some(b) = &s.barrier_instances {
        let head = if b.all_accesses {
            format!("{} instances, {} redundant", b.instances, b.redundant)
        } else {
            format!(
                "{} instances, redundancy undecided (needs `lockscope record --all-accesses`)",
                b.instances
            )
        };
        let t = table(
            "Barrier instances",
            "barrier-instances",
            &["barrier", "instances", "waiting", "redundant"],
            &["t", "n", "ns", "n"],
            b.barriers
                .iter()
                .map(|x| {
                    // No count when undecided: 0 would read as "needed".
                    json!([
                        x.barrier,
                        x.instances,
                        x.wait_ns,
                        x.redundancy_decided.then_some(x.redundant)
                    ])
                })
                .collect(),
        );
        out.push(with_lines(
            t,
            std::iter::once(head)
                .chain(b.advice.iter().cloned())
                .collect(),
        ));
    }
    if let Some(w) = &s.dead_writes {
        let t = table(
            "Dead writes (overwritten before any read)",
            "dead-writes",
            &[
                "dead bytes",
                "bytes written",
                "dead",
                "dead writes",
                "writes",
                "killed by another thread (bytes)",
            ],
            &["n", "n", "%", "n", "n", "n"],
            vec![json!([
                w.dead_bytes,
                w.bytes_written,
                w.dead_fraction,
                w.dead_writes,
                w.writes,
                w.cross_thread_dead_bytes
            ])],
        );
        out.push(with_lines(t, w.advice.clone()));
    }
    if let Some(g) = &s.gpu {
        let t = table(
            "GPU: who makes the GPU wait",
            "gpu",
            &["thread", "path", "why", "GPU idle caused", "gaps"],
            &["n", "t", "t", "ns", "n"],
            g.gpu_idle_causes
                .iter()
                .map(|c| json!([c.thread, c.path, c.why, c.gpu_idle_caused_ns, c.gaps]))
                .collect(),
        );
        out.push(with_lines(
            t,
            vec![
                g.verdict.clone(),
                format!(
                    "window {} ns: GPU idle {} ns ({:.1}%), kernels {} ns, copies {} ns, CPU \
                     waiting for the GPU {} ns",
                    g.window_ns,
                    g.gpu_idle_ns,
                    100.0 * g.gpu_idle_fraction,
                    g.kernel_ns,
                    g.copy_ns,
                    g.cpu_wait_ns
                ),
            ],
        ));
        out.push(table(
            "GPU: what the CPU waits for",
            "gpu-work",
            &[
                "kind",
                "name",
                "launched at",
                "thread",
                "count",
                "GPU time",
                "CPU idle caused",
            ],
            &["t", "t", "t", "n", "n", "ns", "ns"],
            g.work
                .iter()
                .map(|w| {
                    json!([
                        w.kind,
                        w.name,
                        w.launched_at,
                        w.thread,
                        w.count,
                        w.gpu_ns,
                        w.cpu_idle_caused_ns
                    ])
                })
                .collect(),
        ));
    }
    if let Some(g) = &s.gains {
        let mut prose = Vec::new();
        let mut rows = Vec::new();
        if let Some(why) = &g.skipped {
            prose.push(format!(
                "skipped ({why}); run lockscope whatif on the trace"
            ));
        }
        if let Some(f) = &g.figures {
            rows = f
                .locks
                .iter()
                .map(|x| {
                    json!([
                        x.lock,
                        x.wait_ns,
                        x.without_speedup,
                        x.without_range[0],
                        x.without_range[1],
                        x.halved_speedup,
                        x.halved_range[0],
                        x.halved_range[1]
                    ])
                })
                .collect();
            if f.left_out > 0 {
                prose.push(format!(
                    "{} of the {} locks threads waited for most left out: neither removing \
                     them nor halving their critical sections gains more than the range of the \
                     prediction",
                    f.left_out, f.considered
                ));
            }
            if let Some(u) = &f.uncertain {
                prose.push(format!("uncertain: {u}"));
            }
        }
        let t = table(
            "What it would gain (predicted by replaying the trace)",
            "gains",
            &[
                "lock",
                "recorded wait",
                "without it",
                "low",
                "high",
                "sections halved",
                "low",
                "high",
            ],
            &["t", "ns", "n", "n", "n", "n", "n", "n"],
            rows,
        );
        out.push(with_lines(t, prose));
    }
    out.push(lines(
        "Not on this page",
        "not-here",
        vec![
            "each lock's sites, call paths and per-thread rows, each condition variable's, \
              barrier's and semaphore's per-thread rows, and the GPU's per-call-path CPU \
              waits: in the JSON (lockscope report --json) and the text (--per-thread, \
              --paths; lockscope gpu)"
                .to_string(),
        ],
    ));
    out
}
