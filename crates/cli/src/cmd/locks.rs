//! `lockscope locks`: the lock-algorithm library (list the algorithms,
//! run the microbenchmarks).

use anyhow::Context;
use lockscope_locks::bench::{self, Config, CriticalSection, RunResult, Subject};
use lockscope_locks::{Algorithm, WaitPolicy};
use std::io::Write;
use std::time::Duration;

/// Lock algorithms to try: list them, or benchmark them on this machine.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Sub,
}

#[derive(clap::Subcommand)]
enum Sub {
    List(ListArgs),
    Bench(BenchArgs),
}

/// List the lock algorithms and the lock hierarchy read from this machine.
#[derive(clap::Args)]
struct ListArgs {}

/// Microbenchmarks of thesis ch. 4: throughput and fairness of every lock.
///
/// Each run starts THREADS threads that acquire and release one lock in a
/// loop for the given duration, with an empty critical section (the cost of
/// the hand-over alone) or one that increments 4 shared cache lines (the
/// hand-over also moves the protected data). Reported: million acquisitions
/// per second, Jain's fairness index of the per-thread counts (1 = every
/// thread got the same share, 1/THREADS = one thread got everything), and
/// the smallest and largest share relative to a fair share (1.00 = fair,
/// 0.00 = a thread starved). `pthread` is glibc's mutex, the baseline.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  lockscope locks bench                                # everything, ~30 s on 2 cores
  lockscope locks bench --algorithms mcs,hmcs,pthread --threads 1,2,4,8,16
  lockscope locks bench --cs empty --wait spin --json > bench.json

Thread counts beyond the number of cores show what spinning waiters do on an
oversubscribed machine. Hierarchical locks (cmcs, hmcs, ahmcs) only gain on
machines with several sockets or NUMA nodes.")]
struct BenchArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Comma-separated thread counts.
    #[arg(
        long,
        value_name = "LIST",
        default_value = "1,2,4,8",
        value_delimiter = ','
    )]
    threads: Vec<usize>,
    /// Duration of each run in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 150)]
    duration_ms: u64,
    /// Comma-separated algorithms (pthread = glibc's mutex); default: all.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    algorithms: Vec<String>,
    /// Comma-separated waiting policies; default: both.
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_enum)]
    wait: Vec<WaitArg>,
    /// Critical section.
    #[arg(long, value_name = "KIND", default_value = "both", value_enum)]
    cs: CsArg,
}

/// `--wait`: a waiting policy of lockscope-locks (which has no clap
/// dependency: it is linked into programs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum WaitArg {
    /// Busy-wait.
    Spin,
    /// Spin briefly, then sleep on a futex.
    SpinThenPark,
}

impl From<WaitArg> for WaitPolicy {
    fn from(w: WaitArg) -> WaitPolicy {
        match w {
            WaitArg::Spin => WaitPolicy::Spin,
            WaitArg::SpinThenPark => WaitPolicy::SpinThenPark,
        }
    }
}

/// `--cs`: which critical sections to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum CsArg {
    /// Nothing inside: the lock hand-over alone.
    Empty,
    /// A few shared cache lines updated inside.
    Nonempty,
    /// Both.
    Both,
}

/// Runs the subcommand; returns the exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    match args.command {
        Sub::List(_) => list(),
        Sub::Bench(b) => run_bench(b),
    }
}

fn list() -> anyhow::Result<i32> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{:<8} summary", "name")?;
    writeln!(
        out,
        "{:<8} glibc's mutex (the original; `lockscope run --lock pthread`)",
        "pthread"
    )?;
    for a in Algorithm::ALL {
        writeln!(out, "{:<8} {}", a.name(), a.summary())?;
    }
    writeln!(out, "\nwaiting policies: spin, spin-then-park")?;
    writeln!(
        out,
        "hmcs/ahmcs hierarchy on this machine: {}",
        lockscope_locks::default_hierarchy().describe()
    )?;
    writeln!(
        out,
        "cmcs hierarchy on this machine: {}",
        lockscope_locks::default_cohort_hierarchy().describe()
    )?;
    Ok(0)
}

fn subjects(algorithms: &[String], waits: &[WaitArg]) -> anyhow::Result<Vec<Subject>> {
    let waits: Vec<WaitPolicy> = if waits.is_empty() {
        WaitPolicy::ALL.to_vec()
    } else {
        waits.iter().map(|&w| w.into()).collect()
    };
    if algorithms.is_empty() {
        return Ok(Config::all_subjects()
            .into_iter()
            .filter(|s| match s {
                Subject::Pthread => true,
                Subject::Lock(_, w) => waits.contains(w),
            })
            .collect());
    }
    let mut v = Vec::new();
    for a in algorithms {
        if a.trim().eq_ignore_ascii_case("pthread") {
            v.push(Subject::Pthread);
            continue;
        }
        let alg: Algorithm = a.parse().map_err(|_| {
            anyhow::anyhow!(
                "unknown lock algorithm {a:?}; valid names: pthread, {}",
                Algorithm::names()
            )
        })?;
        for &w in &waits {
            v.push(Subject::Lock(alg, w));
        }
    }
    Ok(v)
}

fn run_bench(b: BenchArgs) -> anyhow::Result<i32> {
    if b.threads.is_empty() || b.threads.iter().any(|&t| t == 0 || t > 1024) {
        anyhow::bail!("--threads needs thread counts between 1 and 1024, e.g. --threads 1,2,4,8");
    }
    if b.duration_ms == 0 || b.duration_ms > 600_000 {
        anyhow::bail!("--duration-ms must be between 1 and 600000");
    }
    let critical_sections = match b.cs {
        CsArg::Empty => vec![CriticalSection::Empty],
        CsArg::Nonempty => vec![CriticalSection::NonEmpty],
        CsArg::Both => vec![CriticalSection::Empty, CriticalSection::NonEmpty],
    };
    let config = Config {
        subjects: subjects(&b.algorithms, &b.wait)?,
        threads: b.threads.clone(),
        critical_sections,
        duration: Duration::from_millis(b.duration_ms),
    };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let results = if b.json {
        bench::run(&config, |_| {})
    } else {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "# {cpus} CPUs; hmcs: {}; {} ms per run",
            lockscope_locks::default_hierarchy().describe(),
            b.duration_ms
        )?;
        writeln!(
            out,
            "{:<9} {:<8} {:<15} {:>7} {:>10} {:>6} {:>9} {:>9}",
            "cs", "lock", "wait", "threads", "Mops/s", "jain", "min/fair", "max/fair"
        )?;
        let mut err = None;
        let r = bench::run(&config, |r| {
            if err.is_none() {
                if let Err(e) = writeln!(out, "{}", row(r)).and_then(|_| out.flush()) {
                    err = Some(e);
                }
            }
        });
        if let Some(e) = err {
            return Err(e).context("writing the table");
        }
        r
    };
    if b.json {
        let h = lockscope_locks::default_hierarchy();
        let doc = serde_json::json!({
            "schema": "lockscope-locks-bench/1",
            "cpus": cpus,
            "hierarchy": h.describe(),
            "cohort_hierarchy": lockscope_locks::default_cohort_hierarchy().describe(),
            "duration_ms": b.duration_ms,
            "shared_lines_in_nonempty_cs": bench::SHARED_LINES,
            "results": results.iter().map(result_json).collect::<Vec<_>>(),
        });
        let mut out = std::io::stdout().lock();
        // As an io::Error: a closed pipe exits quietly (see `print_result`).
        serde_json::to_writer_pretty(&mut out, &doc).map_err(std::io::Error::from)?;
        writeln!(out)?;
    }
    let bad: Vec<&RunResult> = results.iter().filter(|r| !r.consistent).collect();
    if !bad.is_empty() {
        for r in bad {
            eprintln!(
                "lockscope: error: {} ({}) with {} threads lost updates: mutual exclusion violated",
                r.algorithm, r.wait, r.threads
            );
        }
        return Ok(1);
    }
    Ok(0)
}

fn row(r: &RunResult) -> String {
    format!(
        "{:<9} {:<8} {:<15} {:>7} {:>10.2} {:>6.3} {:>9.2} {:>9.2}",
        r.critical_section.name(),
        r.algorithm,
        r.wait,
        r.threads,
        r.mops,
        r.jain,
        r.min_share_ratio,
        r.max_share_ratio
    )
}

/// One run as JSON (the `results` entries of `lockscope-locks-bench/1`;
/// built here so that the locks library, which is injected into programs,
/// needs no serde).
fn result_json(r: &RunResult) -> serde_json::Value {
    serde_json::json!({
        "algorithm": r.algorithm,
        "wait": r.wait,
        "critical_section": r.critical_section.name(),
        "threads": r.threads,
        "seconds": r.seconds,
        "acquisitions": r.acquisitions,
        "mops": r.mops,
        "per_thread": r.per_thread,
        "shares": r.shares,
        "min_share_ratio": r.min_share_ratio,
        "max_share_ratio": r.max_share_ratio,
        "jain": r.jain,
        "consistent": r.consistent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn wait_names_on_the_command_line_are_the_policies_names() {
        for w in WaitArg::value_variants() {
            let name = w.to_possible_value().unwrap().get_name().to_string();
            assert_eq!(name, WaitPolicy::from(*w).name());
        }
        assert_eq!(WaitArg::value_variants().len(), WaitPolicy::ALL.len());
    }
}
