//! `lockscope run`: run a program with its pthread mutexes replaced by
//! another lock algorithm (preloading `liblockscope_swap.so`).

use lockscope_locks::{Algorithm, Hierarchy, WaitPolicy};
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

/// Run a program with every pthread mutex replaced by another lock algorithm.
///
/// Every `pthread_mutex_t` of the program (statically initialised ones
/// included) uses ALGORITHM instead of glibc's mutex; trylock and timedlock
/// work, and condition variables keep working. Mutexes with recursive,
/// error-checking, robust, process-shared or priority attributes keep
/// glibc's implementation. The program's output and exit status are passed
/// through unchanged.
///
/// Algorithms: tas, ttas, ticket, mcs, clh, cmcs (cohort), hmcs (hierarchy
/// read from the machine), ahmcs (adaptive HMCS), or pthread (the original,
/// for comparison).
#[derive(clap::Args)]
#[command(after_help = "Examples:
  lockscope run --lock mcs -- ./my_program arg1 arg2
  lockscope run --lock hmcs --hierarchy 2x4 --verbose -- ./my_program
  lockscope run --lock ttas --wait spin -- pbzip2 -k -f big.tar
  lockscope record -- lockscope run --lock mcs -- ./my_program   # record it

Compare a run with `--lock pthread` (the original mutexes) to see the effect
of the lock. NUMA-aware locks (cmcs, hmcs, ahmcs) only pay off on machines
with several sockets or NUMA nodes; see `lockscope locks list`.")]
pub struct Args {
    /// Lock algorithm: tas, ttas, ticket, mcs, clh, cmcs, hmcs, ahmcs, or
    /// pthread (run the original mutexes).
    #[arg(long, value_name = "ALGORITHM", value_parser = parse_lock)]
    lock: LockChoice,

    /// How a thread waits for a held lock: `spin` (busy-wait; wastes CPU and
    /// collapses when threads outnumber cores) or `spin-then-park` (spin
    /// briefly, then sleep on a futex).
    #[arg(long, value_name = "POLICY", default_value = "spin-then-park", value_parser = parse_wait)]
    wait: WaitPolicy,

    /// HMCS/AHMCS hierarchy given by hand instead of read from the machine:
    /// fan-outs from the root down, optionally with passing thresholds from
    /// the leaves up, e.g. `2x4` or `2x2x2:16,8,4`. Threads are assigned to
    /// leaves in the order they first lock.
    #[arg(long, value_name = "SPEC", value_parser = parse_hierarchy)]
    hierarchy: Option<String>,

    /// At exit, print to stderr how many mutexes were replaced and how many
    /// acquisitions were made.
    #[arg(long, short)]
    verbose: bool,

    /// The program to run and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "PROGRAM")]
    command: Vec<OsString>,
}

#[derive(Clone, Copy, Debug)]
enum LockChoice {
    Pthread,
    Algorithm(Algorithm),
}

fn parse_lock(s: &str) -> Result<LockChoice, String> {
    if s.trim().eq_ignore_ascii_case("pthread") {
        return Ok(LockChoice::Pthread);
    }
    s.parse::<Algorithm>()
        .map(LockChoice::Algorithm)
        .map_err(|_| {
            format!(
                "unknown lock algorithm {s:?}; valid names: pthread, {}",
                Algorithm::names()
            )
        })
}

fn parse_wait(s: &str) -> Result<WaitPolicy, String> {
    s.parse().map_err(|e: lockscope_locks::Error| e.to_string())
}

fn parse_hierarchy(s: &str) -> Result<String, String> {
    Hierarchy::parse(s)
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

/// Runs the subcommand; returns the program's exit code (128+N if it was
/// killed by signal N).
pub fn run(args: Args) -> anyhow::Result<i32> {
    let (program, rest) = args.command.split_first().ok_or_else(|| {
        anyhow::anyhow!(
            "no program given; usage: lockscope run --lock ALGORITHM -- PROGRAM [ARGS...]"
        )
    })?;
    let mut cmd = Command::new(program);
    cmd.args(rest);
    for var in [
        "LOCKSCOPE_LOCK",
        "LOCKSCOPE_WAIT",
        "LOCKSCOPE_VERBOSE",
        "LOCKSCOPE_HIERARCHY",
    ] {
        cmd.env_remove(var);
    }
    // `--lock pthread` runs the original; the library is only loaded (in
    // pass-through mode) when --verbose asks for its counts.
    let preload = matches!(args.lock, LockChoice::Algorithm(_)) || args.verbose;
    if preload {
        let lib = crate::cmd::util::find_library("liblockscope_swap.so", "LOCKSCOPE_SWAP_LIB")?;
        // Appended, not prepended: a preload already in place (that of
        // `lockscope record`) then sees every call first and records it,
        // and its forwarded call reaches our lock.
        let mut pre = OsString::new();
        if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
            pre.push(old);
            pre.push(":");
        }
        pre.push(lib.as_os_str());
        cmd.env("LD_PRELOAD", pre);
        let name = match args.lock {
            LockChoice::Pthread => "pthread",
            LockChoice::Algorithm(a) => a.name(),
        };
        cmd.env("LOCKSCOPE_LOCK", name);
        cmd.env("LOCKSCOPE_WAIT", args.wait.name());
        if let Some(h) = &args.hierarchy {
            cmd.env("LOCKSCOPE_HIERARCHY", h);
        }
        if args.verbose {
            cmd.env("LOCKSCOPE_VERBOSE", "1");
            let how = match args.lock {
                LockChoice::Pthread => "the original glibc mutexes".to_string(),
                LockChoice::Algorithm(a) => format!("lock {a} (wait {})", args.wait),
            };
            eprintln!(
                "lockscope run: {} with {how}, preloading {}",
                program.to_string_lossy(),
                lib.display()
            );
        }
    }
    let status = match cmd.status() {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "lockscope: error: cannot run {}: {e}",
                program.to_string_lossy()
            );
            // The shell's conventions: 127 not found, 126 not executable.
            return Ok(if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            });
        }
    };
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    })
}
