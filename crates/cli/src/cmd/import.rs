//! `lockscope import --format hwtrace FILE -o TRACE`: a decoded hardware
//! trace becomes an ordinary lockscope trace.

use std::path::PathBuf;

use anyhow::Context;
use lockscope_hwtrace::{import, parse, write_trace, ImportOptions};

/// Input formats `import` reads.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Format {
    /// Decoded hardware trace, CSV or TSV: time (cycles), opoint, origin
    /// core, address, operation (IP, R8..R64, W8..W64, A8..A64, THREAD),
    /// value. See docs/hwtrace.md.
    Hwtrace,
}

/// Turn a foreign trace into a lockscope trace.
///
/// `--format hwtrace` reads a decoded hardware trace (Infineon MCDS, Nexus,
/// CoreSight, after decoding to text): one row per instruction pointer or
/// memory access with the core that issued it and the value moved, plus a
/// core-to-thread schedule (THREAD rows, in the same file or in
/// --schedule). The result works with `spin`, `lockset`, `dump` and the
/// rest. Every bad line is reported with its file, line and column.
#[derive(clap::Args)]
pub struct Args {
    /// The input file.
    pub file: PathBuf,
    /// Its format.
    #[arg(long, value_enum)]
    pub format: Format,
    /// A second file with the core-to-thread schedule (THREAD rows, same
    /// header line).
    #[arg(long, value_name = "FILE")]
    pub schedule: Option<PathBuf>,
    /// Clock frequency of the time column: Hz, or with a k/M/G suffix
    /// (`200M`, `1.5GHz`). Default: the file's `#! clock_hz=` line, else
    /// 1 GHz (one cycle per ns).
    #[arg(long, value_name = "HZ", value_parser = parse_hz)]
    pub clock_hz: Option<u64>,
    /// CPUs of the traced system (default: `#! cpus=`, else the cores seen).
    #[arg(long, value_name = "N")]
    pub cpus: Option<u32>,
    /// The lockscope trace to write.
    #[arg(short, long, value_name = "TRACE")]
    pub output: PathBuf,
}

/// Parses a frequency: `200000000`, `200M`, `200MHz`, `1.5G`.
pub fn parse_hz(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t
        .strip_suffix("Hz")
        .or_else(|| t.strip_suffix("hz"))
        .unwrap_or(t);
    let (num, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1e3),
        Some('M') => (&t[..t.len() - 1], 1e6),
        Some('G' | 'g') => (&t[..t.len() - 1], 1e9),
        _ => (t, 1.0),
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a frequency (e.g. 200000000, 200M, 1.5GHz)"))?;
    let hz = (v * mult).round();
    if !(1.0..=1e15).contains(&hz) {
        return Err(format!(
            "{s:?}: the frequency must be between 1 Hz and 1 PHz"
        ));
    }
    Ok(hz as u64)
}

fn read(path: &std::path::Path) -> anyhow::Result<lockscope_hwtrace::Parsed> {
    let data = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    parse(&path.display().to_string(), &data).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Runs the subcommand; returns the exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let Format::Hwtrace = args.format;
    let mut files = vec![read(&args.file)?];
    if let Some(s) = &args.schedule {
        files.push(read(s)?);
    }
    let opts = ImportOptions {
        clock_hz: args.clock_hz,
        cpus: args.cpus,
    };
    let t = import(&files, &opts).map_err(|e| anyhow::anyhow!("{e}"))?;
    // With the permissions of the file it is made from, as every output.
    let mut f = super::output::Output::create(&args.output, Some(&args.file))?;
    write_trace(&t, &mut f)
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", args.output.display()))?;
    f.commit()?;
    let events: usize = t.events.values().map(Vec::len).sum();
    eprintln!(
        "lockscope: imported {} rows as {events} events of {} threads into {}",
        files.iter().map(|f| f.rows.len()).sum::<usize>(),
        t.events.len(),
        args.output.display()
    );
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::parse_hz;

    #[test]
    fn frequencies() {
        assert_eq!(parse_hz("200000000"), Ok(200_000_000));
        assert_eq!(parse_hz("200M"), Ok(200_000_000));
        assert_eq!(parse_hz("1.5GHz"), Ok(1_500_000_000));
        assert_eq!(parse_hz("300 kHz"), Ok(300_000));
        assert!(parse_hz("fast").is_err());
        assert!(parse_hz("0").is_err());
    }
}
