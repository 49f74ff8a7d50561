//! `lockscope export --format FORMAT [TRACE]`: a lockscope trace written
//! in another tool's format. A new format is a new `Format` variant and a
//! match arm.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;

use crate::cmd::{import::parse_hz, util};

/// Output formats `export` writes.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Format {
    /// The hardware-trace text form that `lockscope import --format
    /// hwtrace` reads (atomics, memory accesses, a core per thread).
    Hwtrace,
    /// Collapsed stacks weighted by wait ns (flamegraph.pl, inferno):
    /// waiter call paths, or holder call paths with `--blame`.
    Folded,
    /// Gzipped profile.proto like Go's contention profile (`go tool
    /// pprof`): contentions/count, delay/nanoseconds, blame/nanoseconds.
    Pprof,
    /// Chrome trace-event JSON (Perfetto UI, chrome://tracing): a track
    /// per thread, wait/hold slices, hand-off flows, waiter counters.
    Perfetto,
    /// The same as Perfetto's native protobuf trace (TrackEvent): several
    /// times smaller and faster than the JSON, for long recordings.
    PerfettoProto,
    /// speedscope's file format: an evented profile per thread whose
    /// frames are its states (wait/hold LOCK at FUNCTION, blocked).
    Speedscope,
    /// Parquet tables of one or many traces (runs, labels, locks, sites,
    /// threads; one row group per trace) in the directory given with -o,
    /// for DuckDB, Spark and other query engines (docs/fleet.md).
    Parquet,
}

/// Write a trace in another format.
///
/// `--format hwtrace` writes the memory accesses and atomics of a
/// detailed-mode trace as a decoded hardware trace, so that importing it
/// back can be checked against the original (`lockscope spin` gives the
/// same result on both).
#[derive(clap::Args)]
pub struct Args {
    /// The trace (default: the newest `*.lstrace` in the current
    /// directory). `--format parquet` takes any number of traces and
    /// directories (their `*.lstrace` files).
    pub traces: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum)]
    pub format: Format,
    /// Write here instead of standard output (`--format parquet`: the
    /// directory for its tables, required).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Clock frequency of the time column (default 1 GHz: cycles = ns).
    #[arg(long, value_name = "HZ", value_parser = parse_hz)]
    pub clock_hz: Option<u64>,
    /// `--format folded`: the holders' call paths weighted by the wait
    /// charged to them (the report's blame) instead of the waiters'.
    #[arg(long)]
    pub blame: bool,
    /// `--format parquet`: also the per-event tables: every lock wait
    /// with the holder that let it in (`waits`), every critical section
    /// (`holds`) and the call paths they name (`call_paths`).
    #[arg(long)]
    pub events: bool,
}

/// Size of a Perfetto JSON export past which the protobuf is suggested.
const PERFETTO_JSON_HINT_BYTES: u64 = 100_000_000;

/// Runs the subcommand; returns the exit code.
pub fn run(mut args: Args) -> anyhow::Result<i32> {
    if matches!(args.format, Format::Parquet) {
        return parquet(&args);
    }
    if args.traces.len() > 1 {
        anyhow::bail!(
            "--format {} takes one trace ({} given); `--format parquet` takes many",
            format_name(args.format),
            args.traces.len()
        );
    }
    let trace = match args.traces.pop() {
        Some(t) => t,
        None => {
            let t = super::html::newest_trace()?;
            eprintln!("lockscope: reading {} (the newest trace here)", t.display());
            t
        }
    };
    // A file output is put in place only when the export succeeded (an
    // existing file is untouched otherwise: see `output`).
    let mut file = match &args.output {
        Some(p) => Some(super::output::Output::create(p, Some(&trace))?),
        None => None,
    };
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let out: &mut dyn Write = match &mut file {
        Some(f) => f,
        None => &mut stdout,
    };
    match args.format {
        Format::Hwtrace => {
            let t = util::open_trace(&trace)?;
            let mut opts = lockscope_hwtrace::ExportOptions::default();
            if let Some(hz) = args.clock_hz {
                opts.clock_hz = hz;
            }
            let s = lockscope_hwtrace::export(&t, &opts, out)?;
            if s.skipped > 0 || s.truncated > 0 {
                eprintln!(
                    "lockscope: {} rows; {} events have no hardware-trace form (lock calls, \
                     allocations) and were left out; {} long accesses were cut at 512 bytes",
                    s.rows, s.skipped, s.truncated
                );
            }
        }
        Format::Folded | Format::Pprof => super::export_formats::stacks(
            &trace,
            matches!(args.format, Format::Pprof),
            args.blame,
            out,
        )?,
        Format::Perfetto => super::export_formats::perfetto(&trace, false, out)?,
        Format::PerfettoProto => super::export_formats::perfetto(&trace, true, out)?,
        Format::Speedscope => super::export_formats::speedscope(&trace, out)?,
        Format::Parquet => unreachable!("handled above"),
    }
    match file {
        Some(f) => f.commit()?,
        None => stdout.flush()?,
    }
    // Perfetto's JSON is about 25 times its trace; past this size the UI
    // slows down and the binary protobuf is the better choice.
    if let (Format::Perfetto, Some(p)) = (&args.format, &args.output) {
        let bytes = std::fs::metadata(p).map_or(0, |m| m.len());
        if bytes > PERFETTO_JSON_HINT_BYTES {
            eprintln!(
                "lockscope: {} is {:.0} MB of JSON: `--format perfetto-proto` writes the same \
                 timeline about 3 times smaller (25.6 MB against 8.8 MB for a 1.1 MB trace)",
                p.display(),
                bytes as f64 / 1e6
            );
        }
    }
    Ok(0)
}

/// The name of a format as `--format` spells it.
fn format_name(f: Format) -> String {
    use clap::ValueEnum;
    f.to_possible_value()
        .map_or_else(String::new, |v| v.get_name().to_string())
}

/// `--format parquet TRACE... -o DIR`: every trace's report into the
/// tables, one row group per trace, in the order given (a directory's
/// traces sorted by name).
fn parquet(args: &Args) -> anyhow::Result<i32> {
    let Some(dir) = &args.output else {
        anyhow::bail!("--format parquet writes a directory of tables: name it with -o DIR");
    };
    if dir.is_file() {
        anyhow::bail!(
            "-o {}: a file; --format parquet writes a directory",
            dir.display()
        );
    }
    let mut traces = crate::cmd::util::expand_traces(&args.traces)?;
    if traces.is_empty() {
        traces.push(super::html::newest_trace()?);
    }
    let mut out = lockscope_export::parquet::ParquetExport::create(dir, args.events)
        .with_context(|| format!("cannot write to {}", dir.display()))?;
    for t in &traces {
        let r = super::export_formats::report(t)?;
        let h = lockscope_format::TraceReader::new(std::io::BufReader::new(
            std::fs::File::open(t).with_context(|| format!("cannot read {}", t.display()))?,
        ))
        .with_context(|| format!("cannot read {}", t.display()))?
        .header()
        .clone();
        let run = lockscope_export::parquet::RunInfo::new(
            lockscope_export::parquet::run_id(t)
                .with_context(|| format!("cannot read {}", t.display()))?,
            t.display().to_string(),
            h.unix_ns_at_start,
            h.recorder_version,
        );
        out.add(&run, &r)?;
        if args.events {
            let meta = crate::cmd::util::index_trace(t)?;
            out.add_events(&run, t, &meta, true)?;
        }
    }
    let files = out.finish()?;
    eprintln!(
        "lockscope: {} trace{} into {} tables in {} ({})",
        traces.len(),
        if traces.len() == 1 { "" } else { "s" },
        files.len(),
        dir.display(),
        files
            .iter()
            .filter_map(|f| f.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(0)
}
