//! Decoded hardware traces to and from lockscope traces.
//!
//! Embedded targets are profiled without instrumentation from a decoded
//! hardware trace (Infineon MCDS, Nexus, CoreSight): every instruction
//! pointer and memory access, with the core that issued it and the value
//! moved (Table II of the OS-independent spinlock profiler). This crate
//! reads such a trace as text and builds an ordinary lockscope trace from
//! it, so that `lockscope spin`, `lockset` and the rest work on it; and
//! writes a lockscope trace back in the same text form (`lockscope export
//! --format hwtrace`), so that the two paths can be checked against each
//! other.
//!
//! # The text format (see docs/hwtrace.md)
//! ```text
//! # comment
//! #! clock_hz=200000000        directives, before the header (optional)
//! #! cpus=2
//! time,opoint,origin,address,operation,value      header (any order; TSV too)
//! 19,CPU0,CPU0,0x80000A48,IP,-
//! 21,CPU1,CPU0,0x70000030,R32,0x0
//! 37,CPU1,CPU0,0x70000030,A32,0x1
//! 40,CPU0,CPU0,14,THREAD,eth service
//! ```
//! - `time`: completion time in clock cycles (`clock_hz`, default 1 GHz);
//! - `opoint`: where the message was observed (optional column, unused);
//! - `origin`: the core that issued the operation;
//! - `address`: instruction or data address (decimal or `0x` hex); the
//!   thread id in a `THREAD` row;
//! - `operation`: `IP`, `R8`..`R64`, `W8`..`W64`, `A8`..`A64` (atomic
//!   read-modify-write), `THREAD` (from this time on, `origin` runs the
//!   thread `address`; 0 = idle; `value` = its name);
//! - `value`: the value read or written, `-` if unknown (always for `IP`),
//!   or `OLD>NEW` on `W`/`A` rows when the value found is known too.
//!
//! An optional `index` column is ignored. Without any `THREAD` row each
//! core is one thread. An access takes the last `IP` of its core as its
//! site.
//!
//! # Entry points
//! - [`parse()`]: bytes -> [`Parsed`] rows (every bad line is an error naming
//!   file, line and column; the parser is fuzzed: `fuzz/`).
//! - [`import()`]: rows -> [`lockscope_format::Trace`]; [`write_trace`]
//!   writes it.
//! - [`export()`]: a trace -> the text form.
//!
//! # How rows become events
//! `R`/`W` rows become `Read`/`Write` events with the size in `flags`, the
//! value in `arg` and `arg2` = 1 when the value is known (the header says
//! so with `access_values=1`); `W` with `OLD>NEW` becomes `AtomicStore`;
//! `A` rows become `AtomicRmw` (value written only) or `AtomicExchange`
//! (`OLD>NEW`); `THREAD` rows become `CpuIn`/`CpuOut` events of the
//! threads concerned. Time 0 of the trace is cycle 0.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod error;
pub mod export;
pub mod import;
pub mod parse;

pub use error::HwtraceError;
pub use export::{export, ExportOptions, ExportSummary};
pub use import::{import, write_trace, ImportOptions};
pub use parse::{parse, Directives, Operation, Parsed, Row, Value};

/// Header key (value `1`): plain `Read`/`Write` events carry their value
/// in `arg`, valid where `arg2` is 1. Read by `lockscope spin`.
pub const ACCESS_VALUES_KEY: &str = "access_values";
/// Header key: the imported trace's core names, one per line, in core
/// index order (the `arg` of `CpuIn`/`CpuOut`).
pub const CORES_KEY: &str = "hwtrace_cores";
/// Clock assumed when neither an option nor a directive gives one: one
/// cycle per nanosecond.
pub const DEFAULT_CLOCK_HZ: u64 = 1_000_000_000;

/// The whole import path on arbitrary bytes, for the fuzz target
/// (`fuzz/targets/hwtrace_parser.rs`) and the test that replays its
/// corpus: parsing and importing may fail but must not panic, and what
/// imports must export, parse and import again to the same events.
#[doc(hidden)]
pub fn exercise(data: &[u8]) {
    let Ok(p) = parse("input", data) else { return };
    let Ok(t) = import(&[p], &ImportOptions::default()) else {
        return;
    };
    if t.events.values().all(Vec::is_empty) {
        // Only IP rows: nothing to write back.
        return;
    }
    let mut text = Vec::new();
    let opts = ExportOptions {
        clock_hz: t
            .header
            .get("clock_hz")
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_CLOCK_HZ),
    };
    export(&t, &opts, &mut text).expect("export to memory");
    let p2 = parse("export", &text).expect("exported text parses");
    let t2 = import(&[p2], &ImportOptions::default()).expect("exported text imports");
    // Scheduling may differ (an unscheduled import exports one THREAD row
    // per core); every access must come back as it was, at the same time
    // when the clock is at most 1 GHz (one cycle per ns or coarser).
    let exact_time = opts.clock_hz <= DEFAULT_CLOCK_HZ;
    let strip = |t: &lockscope_format::Trace| -> Vec<(u64, u8, u8, u64, u64, u64, u64)> {
        let mut v: Vec<_> = t
            .events
            .values()
            .flatten()
            .filter(|e| {
                !matches!(
                    e.op(),
                    Some(lockscope_format::Op::CpuIn | lockscope_format::Op::CpuOut)
                )
            })
            .map(|e| {
                let time = if exact_time { e.time } else { 0 };
                (time, e.op, e.flags, e.addr, e.site, e.arg, e.arg2)
            })
            .collect();
        v.sort_unstable();
        v
    };
    assert_eq!(
        strip(&t),
        strip(&t2),
        "export and import changed the accesses"
    );
}
