//! The whole `lockscope report`, built once: the lock report
//! ([`Report`]) and the sections other analyses add to it (hand-written
//! spinlocks, barrier instances, dead writes, GPU blame shifting, what
//! fixing the top locks would gain). Text, JSON and HTML print this
//! model; none of them runs an analysis of its own (docs/report.md
//! lists which section each format shows, and why a format leaves one
//! out).
//!
//! Reading the trace: one index ([`lockscope_trace::input::index`]) serves the lock
//! report's pass, the GPU pass and the replay. The sections that need the
//! whole trace in memory (spinlocks, barrier instances, dead writes) get
//! it from the caller's `open_whole`, asked only when the lock report
//! counted detailed-mode or imported events: how large a trace may be
//! loaded is the front end's decision, and a pthread-only trace is never
//! loaded at all (a 95 MB one took ~1 GB and ~2 s for nothing).

use std::path::Path;

use lockscope_format::{Op, Trace};

use lockscope_detailed::detailed::Detailed;
use lockscope_detailed::{barriers, deadwrites, spin};
use lockscope_replay::whatif;
use lockscope_report::gpu;
use lockscope_report::report::{analyze_observed, Report, ReportConfig};
use lockscope_trace::input::Meta;
use lockscope_trace::AnalysisError;

/// Traces larger than this get a note instead of the what-if figures (the
/// replay runs once per scenario, 17 times for three locks: on a large
/// trace that would be most of the report's time). Its memory grows
/// ~11.5 bytes per event (a 64 MB, 16M-event trace took 192 MiB): 32 MiB
/// of trace at 3.2 bytes per event or more (lock events take 4-5.5) keeps
/// the report under 128 MiB. A bound on the event count would hold for
/// any encoding.
pub const GAIN_MAX_BYTES: u64 = 32 << 20;

/// Locks given a "what it would gain" line.
pub const GAIN_TOP: usize = 3;

/// The whole report: the lock report's fields, then the added sections
/// (JSON: one object, the sections' keys after the report's, each left
/// out when its section is empty, so that a pthread-only trace keeps the
/// report's exact form).
#[derive(Debug, serde::Serialize)]
pub struct FullReport {
    /// Locks, sites, blame, threads, conditions, barriers, semaphores,
    /// hangs, notes and recommendations.
    #[serde(flatten)]
    pub report: Report,
    /// The sections other analyses add.
    #[serde(flatten)]
    pub sections: Sections,
}

/// The sections of the report that come from analyses beside the lock
/// report. Each is `None` when the report has nothing to say in it
/// (the text prints no heading then, the JSON has no key).
#[derive(Debug, Default, serde::Serialize)]
pub struct Sections {
    /// Hand-written spinlocks (the `lockscope spin --json` document):
    /// present when the trace has an atomic read-modify-write and was
    /// loaded; the text shows it only when a spinlock was found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spin: Option<spin::SpinReport>,
    /// Barrier instances of a detailed-mode trace: waiting per barrier
    /// and redundant instances.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub barrier_instances: Option<BarrierInstances>,
    /// Dead writes of a detailed-mode trace recorded with every access.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dead_writes: Option<DeadWrites>,
    /// CPU-GPU blame shifting (the `lockscope gpu --json` document), when
    /// a thread waited for the GPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<gpu::GpuReport>,
    /// What fixing the top locks would gain, from the replay.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gains: Option<GainsSection>,
}

/// The barrier-instance section (JSON `barrier_instances`): the summary
/// `lockscope barriers` details.
#[derive(Debug, serde::Serialize)]
pub struct BarrierInstances {
    /// Whether every access was recorded (`LOCKSCOPE_ALL_ACCESSES=1`):
    /// without it no instance's redundancy is decided.
    pub all_accesses: bool,
    /// Barrier instances (rounds), all barriers.
    pub instances: u64,
    /// Instances found redundant (0 when `all_accesses` is false).
    pub redundant: u64,
    /// Per barrier.
    pub barriers: Vec<BarrierInstancesRow>,
    /// Recommendations (`lockscope barriers`' own).
    pub advice: Vec<String>,
}

/// One barrier of [`BarrierInstances`].
#[derive(Debug, serde::Serialize)]
pub struct BarrierInstancesRow {
    /// Name (symbol or address).
    pub barrier: String,
    /// Address.
    pub address: String,
    /// Instances of this barrier.
    pub instances: u64,
    /// Waiting at this barrier, all threads and instances, ns.
    pub wait_ns: u64,
    /// Whether every instance's redundancy was decided.
    pub redundancy_decided: bool,
    /// Redundant instances (meaningful when `redundancy_decided`).
    pub redundant: u64,
}

/// The dead-write section (JSON `dead_writes`): the summary
/// `lockscope deadwrites` details.
#[derive(Debug, serde::Serialize)]
pub struct DeadWrites {
    /// Write accesses recorded.
    pub writes: u64,
    /// Bytes they wrote.
    pub bytes_written: u64,
    /// Write instances dead on at least one byte.
    pub dead_writes: u64,
    /// Bytes overwritten before any read.
    pub dead_bytes: u64,
    /// `dead_bytes / bytes_written`.
    pub dead_fraction: f64,
    /// Dead bytes killed by another thread.
    pub cross_thread_dead_bytes: u64,
    /// Recommendations (`lockscope deadwrites`' own).
    pub advice: Vec<String>,
}

/// The "what it would gain" section (JSON `gains`): the figures, or why
/// there are none.
#[derive(Debug, serde::Serialize)]
pub struct GainsSection {
    /// Why the replay was not run (the trace is too large), if so; the
    /// figures are left out then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// The figures.
    #[serde(flatten)]
    pub figures: Option<whatif::Gains>,
}

/// True when the trace holds detailed-mode events: memory accesses,
/// atomics, allocations or release values (ops 40-62), which only the
/// runtime linked by `lockscope cc` records.
pub fn is_detailed(t: &Trace) -> bool {
    let first = Op::Read as u8;
    let last = Op::ReleaseValue as u8;
    t.events
        .values()
        .any(|v| v.iter().any(|e| (first..=last).contains(&e.op)))
}

/// Builds the whole report of the trace at `path`: indexes it (progress
/// phase 0), analyses it (phase 1), then adds the [`Sections`].
/// `open_whole` loads the whole trace (of the number of events it is
/// given) for the in-memory sections, or says no (`None`: they are left
/// out).
pub fn build(
    path: &Path,
    cfg: &ReportConfig,
    progress: &mut dyn FnMut(u64, u64, u8),
    open_whole: &mut dyn FnMut(u64) -> Option<Trace>,
) -> Result<FullReport, AnalysisError> {
    let meta =
        lockscope_trace::input::index_with(path, cfg.skip_corrupt, &mut |d, t| progress(d, t, 0))?;
    let report = analyze_observed(path, &meta, cfg, progress, |_| {})?;
    let sections = sections(path, &meta, &report, cfg.symbolize, open_whole);
    Ok(FullReport { report, sections })
}

/// The sections added to `report`, the lock report of the trace at
/// `path` indexed as `meta` (for a caller that ran the lock report's pass
/// itself, as the HTML page does to draw its timeline from the same
/// read).
pub fn sections(
    path: &Path,
    meta: &Meta,
    report: &Report,
    symbolize: bool,
    open_whole: &mut dyn FnMut(u64) -> Option<Trace>,
) -> Sections {
    let mut s = Sections::default();
    // Only a trace with detailed-mode or imported events can have
    // spinlocks, barrier instances or dead writes.
    if report.detail_events > 0 {
        if let Some(t) = open_whole(report.events) {
            detailed_sections(&t, symbolize, &mut s);
        }
    }
    // Programs without CUDA pay nothing (the report already knows each
    // thread's GPU wait); a CUDA program's trace is read once more,
    // streaming, in bounded memory.
    if report.threads.iter().any(|t| t.gpu_wait_ns > 0) {
        s.gpu = gpu::analyze_indexed(path, meta, symbolize)
            .ok()
            .filter(|g| g.has_gpu);
    }
    s.gains = gains(path, meta, symbolize);
    s
}

/// Spinlocks, barrier instances and dead writes of the whole trace `t`.
fn detailed_sections(t: &Trace, symbolize: bool, s: &mut Sections) {
    let candidates = spin::has_candidates(t);
    let detailed = is_detailed(t);
    if !candidates && !detailed {
        return;
    }
    // One detailed view for the three sections: building it is most of
    // their cost (5 s and 2.4 GB for PARSEC fluidanimate's 168 MB
    // trace), and a C++ program's trace with atomics (reference counts)
    // built it twice.
    let mut d = Detailed::from_trace(t, symbolize);
    if candidates {
        s.spin = Some(spin::analyze_with(t, &mut d));
    }
    if !detailed {
        return;
    }
    let b = barriers::analyze(t, &mut d);
    if b.instances > 0 {
        s.barrier_instances = Some(BarrierInstances {
            all_accesses: b.all_accesses,
            instances: b.instances,
            redundant: b.redundant,
            barriers: b
                .barriers
                .iter()
                .map(|x| BarrierInstancesRow {
                    barrier: x.barrier.clone(),
                    address: x.address.clone(),
                    instances: x.instances,
                    wait_ns: x.wait_ns,
                    redundancy_decided: x.redundancy_decided,
                    redundant: x.redundant,
                })
                .collect(),
            advice: barriers::advice(&b),
        });
    }
    // Dead writes need every access: without them the section is left
    // out rather than shown with false positives.
    let w = deadwrites::analyze(t, &mut d);
    if w.all_accesses && w.dead_bytes > 0 {
        s.dead_writes = Some(DeadWrites {
            writes: w.writes,
            bytes_written: w.bytes_written,
            dead_writes: w.dead_writes,
            dead_bytes: w.dead_bytes,
            dead_fraction: w.dead_fraction,
            cross_thread_dead_bytes: w.cross_thread_dead_bytes,
            advice: deadwrites::advice(&w),
        });
    }
}

/// The what-if figures of the trace at `path`, or why there are none.
fn gains(path: &Path, meta: &Meta, symbolize: bool) -> Option<GainsSection> {
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if size > GAIN_MAX_BYTES {
        return Some(GainsSection {
            skipped: Some(format!("trace over {} MiB", GAIN_MAX_BYTES >> 20)),
            figures: None,
        });
    }
    // A trace the replay cannot build has no figures (the report itself
    // stands; `lockscope whatif` says why).
    let p = lockscope_replay::replay::build(path, meta).ok()?;
    let figures = whatif::gains(&p, meta, GAIN_TOP, symbolize)?;
    Some(GainsSection {
        skipped: None,
        figures: Some(figures),
    })
}

/// The text of the added sections, printed after the lock report's.
/// `trace` is the path the user gave (named in the `details:` commands).
pub fn sections_text(s: &Sections, trace: &Path) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    if let Some(r) = s.spin.as_ref().filter(|r| !r.spinlocks.is_empty()) {
        let _ = writeln!(
            out,
            "\nHand-written spinlocks (found from atomics; details: lockscope spin {})",
            trace.display()
        );
        let _ = writeln!(
            out,
            "  {:<24} {:<5} {:>9} {:>8} {:>7} {:>9} {:>9}  warnings",
            "lock", "kind", "acquired", "failed", "1st-try", "wait", "hold"
        );
        for l in &r.spinlocks {
            let w: Vec<&str> = l.warnings.iter().map(|w| w.kind).collect();
            let _ = writeln!(
                out,
                "  {:<24} {:<5} {:>9} {:>8} {:>7.2} {:>9} {:>9}  {}",
                l.symbol,
                l.kind,
                l.acquisitions,
                l.failed_attempts,
                l.first_try_ratio,
                short_ns(l.wait_ns),
                short_ns(l.hold_ns),
                if w.is_empty() {
                    "-".to_string()
                } else {
                    w.join(", ")
                }
            );
        }
    }
    if let Some(b) = &s.barrier_instances {
        let _ = writeln!(
            out,
            "\nBarriers: {} instance(s){} (details: lockscope barriers {})",
            b.instances,
            if b.all_accesses {
                format!(", {} redundant", b.redundant)
            } else {
                ", redundancy undecided (needs `lockscope record --all-accesses`)".to_string()
            },
            trace.display()
        );
        for x in &b.barriers {
            // No count when undecided: "0 redundant" would read as "needed".
            let redundant = if x.redundancy_decided {
                format!(" {:>6} redundant", x.redundant)
            } else if b.all_accesses {
                " redundancy undecided".to_string()
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "  {:<24} {:>6} instance(s) {:>10.3} ms waiting{redundant}",
                x.barrier,
                x.instances,
                x.wait_ns as f64 / 1e6,
            );
        }
        for a in &b.advice {
            let _ = writeln!(out, "  - {a}");
        }
    }
    if let Some(w) = &s.dead_writes {
        let _ = writeln!(
            out,
            "\nDead writes: {} of {} bytes written ({:.1}%) overwritten before any read \
             (details: lockscope deadwrites {})",
            w.dead_bytes,
            w.bytes_written,
            w.dead_fraction * 100.0,
            trace.display()
        );
        for a in &w.advice {
            let _ = writeln!(out, "  - {a}");
        }
    }
    if let Some(g) = &s.gpu {
        let _ = writeln!(
            out,
            "\nGPU (CPU-GPU blame shifting; details: lockscope gpu {})",
            trace.display()
        );
        let mut buf = Vec::new();
        if gpu::render_text(g, &mut buf).is_ok() {
            out += &String::from_utf8_lossy(&buf);
        }
    }
    out
}

/// The text of the "what it would gain" section. The commands it names
/// take the trace's file name only: they are meant to be run where the
/// user ran this one, and the output stays the same wherever the trace is.
pub fn gains_text(s: &Sections, trace: &Path) -> String {
    let Some(g) = &s.gains else {
        return String::new();
    };
    let shown = trace
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| trace.display().to_string());
    if let Some(why) = &g.skipped {
        return format!("\nWhat it would gain: skipped ({why}); run `lockscope whatif {shown}`\n");
    }
    let Some(f) = &g.figures else {
        return String::new();
    };
    let mut s = String::from("\nWhat it would gain (predicted by replaying the trace)\n");
    for l in whatif::gain_lines(f, &shown) {
        s.push_str(&l);
        s.push('\n');
    }
    s
}

use lockscope_text::units::short_ns;
