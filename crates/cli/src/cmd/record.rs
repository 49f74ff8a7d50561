//! `lockscope record`: run a program under the preload library and write
//! a trace.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use lockscope_record::{RecordConfig, RecordError, RecordOutcome, StackMode};

/// What a thread does when its buffer is full.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum OnFull {
    /// Drop the event and count it.
    Drop,
    /// Wait for the recorder to make room.
    Wait,
}

/// Call paths to record.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Stacks {
    /// Only for acquisitions that had to wait.
    Contended,
    /// For every event (slower).
    All,
    /// Never (call sites only).
    None,
}

/// `--help` heading of attach mode's options.
const ATTACH: &str = "Attach mode (a running process, no restart)";
/// `--help` heading of the detailed-mode runtime's options.
const DETAILED: &str = "Detailed mode (programs built with `lockscope cc`)";

/// Run a program and record its lock operations into a trace file.
///
/// The program runs with its own stdin, stdout and stderr; lockscope
/// prints a short summary on stderr when it ends and exits with the
/// program's exit status (128+N when it was killed by signal N).
///
/// With -p PID (or -a), no program is started: lockscope attaches to
/// processes already running and records their blocking waits through
/// eBPF (as root), until --duration, Ctrl-C or their exit.
#[derive(clap::Args)]
pub struct Args {
    /// Trace file to write (overwritten if it exists). Default:
    /// lockscope.lstrace in the current directory, or the first free
    /// lockscope-N.lstrace (an existing file is never overwritten unless
    /// named here).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Which acquisitions get their full call path recorded.
    #[arg(long, value_enum, default_value = "contended")]
    stacks: Stacks,
    /// First buffer of each thread, KiB. Small, so that starting a thread
    /// is cheap; a thread that runs hot gets a buffer four times larger
    /// each time it runs short, up to --max-buffer-kb.
    #[arg(long, value_name = "N", default_value_t = lockscope_record::DEFAULT_RING_KB,
          value_parser = clap::value_parser!(u64).range(8..=(1 << 20)))]
    buffer_kb: u64,
    /// Largest buffer a hot thread grows to, KiB (at least --buffer-kb).
    /// Larger buffers ride out longer pauses of the recorder without
    /// making the program wait.
    #[arg(long, value_name = "N", default_value_t = lockscope_record::DEFAULT_RING_MAX_KB,
          value_parser = clap::value_parser!(u64).range(8..=(1 << 22)))]
    max_buffer_kb: u64,
    /// What a thread does when its buffer is full. `wait` (default): the
    /// thread waits for the recorder to make room, preferably before its
    /// next call while it holds no lock, so nothing is lost; the waits are
    /// counted and reported as perturbation. `drop`: the event is dropped
    /// and counted, the program is never slowed by the recorder.
    #[arg(long, value_enum, default_value = "wait")]
    on_full: OnFull,
    /// Threads of the recorder that convert and encode events, each for
    /// its share of the program's threads. Default: one per four CPUs
    /// (1 to 8). More help a program with many busy threads on a machine
    /// with idle CPUs; a single busy thread is always converted by one.
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=lockscope_record::MAX_WRITERS as u64))]
    writers: Option<u64>,
    /// Directory in which to create the session (the per-thread buffers):
    /// a tmpfs with room for them. Default: /dev/shm, else $TMPDIR, else
    /// /tmp.
    #[arg(long, value_name = "DIR")]
    session_dir: Option<PathBuf>,
    /// Print nothing unless events were lost.
    #[arg(short, long)]
    quiet: bool,
    /// A label for this recording, KEY=VALUE (repeatable): stored in the
    /// trace and carried into its reports and exports (JSON `labels`,
    /// pprof sample labels, the HTML page, Perfetto metadata), so that
    /// the traces of a fleet or of nightly runs can be grouped by it.
    /// Every trace has `host` and `command` (the program's file name);
    /// a label of the same name replaces them. Keys: letters, digits,
    /// `_`, `-`, `.`; up to 64 characters; values up to 256.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    labels: Vec<(String, String)>,
    /// Do not attach NVIDIA CUPTI to CUDA programs. By default a program
    /// that uses CUDA has its kernel launches, GPU waits and GPU
    /// executions recorded too (for `lockscope gpu`), when libcupti is
    /// installed; programs without CUDA are not affected either way.
    #[arg(long)]
    no_gpu: bool,
    /// The libcupti to load for GPU capture (CUPTI ships under the CUDA
    /// toolkit's extras/CUPTI/lib64, often not on the loader's path).
    /// Sets LOCKSCOPE_CUPTI for the program.
    #[arg(long, value_name = "FILE")]
    cupti: Option<PathBuf>,
    /// How long a thread waits at the end of an OpenMP parallel region
    /// for the others before it gives up, ms (default 10000): the limit
    /// that keeps a program whose threads wait for tasks from hanging.
    /// Sets LOCKSCOPE_OMP_WAIT_MS for the program.
    #[arg(long, value_name = "MS",
          value_parser = clap::value_parser!(u32).range(1..))]
    omp_wait_ms: Option<u32>,
    /// Record every memory access, not only those inside critical sections, for
    /// `lockscope lockset`, `deadwrites`, `barriers` and what `spin` says
    /// locks protect. Sets LOCKSCOPE_ALL_ACCESSES=1 for the program.
    #[arg(
        long,
        help_heading = DETAILED
    )]
    all_accesses: bool,
    /// Call-path depth of each access inside a critical
    /// section (default 16, at most 64; 0: the access's pc only). Sets
    /// LOCKSCOPE_ACCESS_FRAMES.
    #[arg(
        long,
        value_name = "N",
        help_heading = DETAILED
    )]
    access_frames: Option<u32>,
    /// With --all-accesses: call-path depth of each access
    /// outside critical sections (default 0, the pc only, half the
    /// volume; `deadwrites` and `barriers` name call paths with it). Sets
    /// LOCKSCOPE_OUTSIDE_FRAMES.
    #[arg(
        long,
        value_name = "N",
        help_heading = DETAILED
    )]
    outside_frames: Option<u32>,
    /// Call-path depth of atomics and heap allocations
    /// (default 32, at most 64). Sets LOCKSCOPE_EVENT_FRAMES.
    #[arg(
        long,
        value_name = "N",
        help_heading = DETAILED
    )]
    event_frames: Option<u32>,
    /// Record each access of a run of identical ones
    /// (same address, size, kind, locks held) instead of the first plus a
    /// repeat count. Bigger traces, the same analyses. Sets
    /// LOCKSCOPE_COALESCE=0.
    #[arg(
        long,
        help_heading = DETAILED
    )]
    no_coalesce: bool,
    /// Attach to this running process instead of starting a program
    /// (repeatable): its blocking lock waits, through eBPF, until
    /// --duration, Ctrl-C, or its exit. Nothing is injected; the process
    /// keeps running, unchanged, afterwards. Needs root (CAP_BPF and
    /// CAP_PERFMON). Waits and who woke them are exact; acquisitions and
    /// holds of sections that never waited are not seen ("-").
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID",
        help_heading = ATTACH
    )]
    pids: Vec<u32>,
    /// Attach to every process on the machine (use with --duration).
    #[arg(
        short = 'a',
        long = "all",
        help_heading = ATTACH
    )]
    all: bool,
    /// How long to stay attached (`10s`, `500ms`); default: until Ctrl-C
    /// or until every attached process has exited.
    #[arg(
        long,
        value_name = "DURATION",
        help_heading = ATTACH
    )]
    duration: Option<String>,
    /// Keep only waits at least this long (`10us`, `1ms`), filtered in the
    /// kernel before anything is copied: the cheapest way to attach to a
    /// busy server.
    #[arg(
        long,
        value_name = "DURATION",
        help_heading = ATTACH
    )]
    min_wait: Option<String>,
    /// Keep only this thread (repeatable).
    #[arg(
        long = "tid",
        value_name = "TID",
        help_heading = ATTACH
    )]
    tids: Vec<u32>,
    /// Keep only this lock (repeatable): its address, as a report shows
    /// it (`0x55c1a9cfd0c8`; the futex word of a pthread mutex is the
    /// mutex's address).
    #[arg(
        long = "lock",
        value_name = "ADDR",
        value_parser = parse_addr,
        help_heading = ATTACH
    )]
    locks: Vec<u64>,
    /// With -a: keep only processes with this command name (repeatable).
    #[arg(
        long = "comm",
        value_name = "NAME",
        help_heading = ATTACH
    )]
    comms: Vec<String>,
    /// The program to record and its arguments (after `--`).
    #[arg(
        required_unless_present_any = ["pids", "all"],
        conflicts_with_all = ["pids", "all"],
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM"
    )]
    command: Vec<OsString>,
}

/// Creates the default output file, never replacing an existing one:
/// `lockscope.lstrace`, else `lockscope-2.lstrace`, `-3`...
fn default_output() -> anyhow::Result<(PathBuf, bool)> {
    for n in 1..10_000 {
        let p = if n == 1 {
            PathBuf::from("lockscope.lstrace")
        } else {
            PathBuf::from(format!("lockscope-{n}.lstrace"))
        };
        // create_new: picking the name and claiming it is one step, so
        // two recordings started together cannot pick the same file.
        match OpenOptions::new().write(true).create_new(true).open(&p) {
            Ok(_) => return Ok((p, n > 1)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => anyhow::bail!(
                "cannot create {} in the current directory: {e}",
                p.display()
            ),
        }
    }
    anyhow::bail!("lockscope.lstrace .. lockscope-9999.lstrace all exist; name the trace with -o")
}

/// The trace to write: `-o FILE`, else the first free default name
/// (said on stderr unless `quiet` when it is not `lockscope.lstrace`).
fn output_path(named: Option<PathBuf>, quiet: bool) -> anyhow::Result<PathBuf> {
    let (output, renamed) = match named {
        Some(p) => (p, false),
        None => default_output()?,
    };
    if renamed && !quiet {
        eprintln!(
            "lockscope: lockscope.lstrace exists; writing this trace to {}",
            output.display()
        );
    }
    Ok(output)
}

/// Runs the subcommand; returns the exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    if !args.pids.is_empty() || args.all {
        return attach(args);
    }
    for (set, name) in [
        (args.duration.is_some(), "--duration"),
        (args.min_wait.is_some(), "--min-wait"),
        (!args.tids.is_empty(), "--tid"),
        (!args.locks.is_empty(), "--lock"),
        (!args.comms.is_empty(), "--comm"),
    ] {
        if set {
            anyhow::bail!(
                "{name} applies to attach mode (-p PID or -a); a program started by record is recorded whole (filter its report instead: lockscope report --min-wait, --thread, --lock)"
            );
        }
    }
    let lib = crate::cmd::util::find_library("liblockscope_preload.so", "LOCKSCOPE_PRELOAD_LIB")?;
    let env = runtime_env(&args);
    let mut it = args.command.into_iter();
    let program = it.next().expect("clap requires PROGRAM");
    let prog_args: Vec<OsString> = it.collect();
    let output = output_path(args.output, args.quiet)?;
    let mut cfg = RecordConfig::new(program.clone(), prog_args, &output, lib);
    cfg.stacks = match args.stacks {
        Stacks::Contended => StackMode::Contended,
        Stacks::All => StackMode::All,
        Stacks::None => StackMode::None,
    };
    // Sessions of recorders that died, kept for `lockscope recover`:
    // named before the program's own output, so that they are seen.
    // (Those the recording's sweep removes, a day old or with no buffer,
    // are not named.)
    // Not with --quiet, which adds nothing to the program's output.
    for o in lockscope_record::orphaned_sessions(args.session_dir.as_deref())
        .into_iter()
        .filter(|o| !args.quiet && o.rings > 0 && o.age <= lockscope_record::KEEP_ORPHANED)
    {
        eprintln!(
            "lockscope: kept the session of a recorder that died: {}",
            crate::cmd::recover::describe(&o)
        );
    }
    cfg.session_parent = args.session_dir;
    cfg.ring_kb = args.buffer_kb;
    cfg.ring_max_kb = args.max_buffer_kb.max(args.buffer_kb);
    cfg.wait_when_full = matches!(args.on_full, OnFull::Wait);
    cfg.gpu = !args.no_gpu;
    cfg.labels = args.labels;
    cfg.writers = args.writers.map_or(0, |n| n as usize);
    cfg.env = env;
    match lockscope_record::record(cfg) {
        Ok(out) => {
            print_summary(&out, &program, args.quiet);
            Ok(out.exit_status)
        }
        // Like a shell: 127 when the program does not exist, 126 when it
        // cannot be executed.
        Err(e @ RecordError::Spawn { .. }) => {
            let code = match &e {
                RecordError::Spawn { source, .. }
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    127
                }
                _ => 126,
            };
            eprintln!("lockscope: error: {e}");
            Ok(code)
        }
        // The program's own exit status comes back; the trace's failure
        // has an exit status of its own (2, as any error) only when the
        // program succeeded, so that a script sees the program's failure
        // first.
        Err(e @ RecordError::TraceIncomplete { .. }) => {
            let RecordError::TraceIncomplete { exit_status, .. } = e else {
                unreachable!()
            };
            eprintln!("lockscope: error: {e}");
            Ok(if exit_status == 0 { 2 } else { exit_status })
        }
        Err(e) => Err(e.into()),
    }
}

/// The settings of the injected runtimes chosen by flags, as the
/// environment variables they read (the preload library and detailed
/// mode's runtime start before `main`, with nothing but the environment to
/// read). A flag not given leaves the variable as the user's environment
/// has it, so that `LOCKSCOPE_ALL_ACCESSES=1 lockscope record` works as
/// before.
fn runtime_env(args: &Args) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    let mut set = |k: &str, v: OsString| env.push((k.into(), v));
    if args.all_accesses {
        set("LOCKSCOPE_ALL_ACCESSES", "1".into());
    }
    if args.no_coalesce {
        set("LOCKSCOPE_COALESCE", "0".into());
    }
    if let Some(n) = args.access_frames {
        set("LOCKSCOPE_ACCESS_FRAMES", n.to_string().into());
    }
    if let Some(n) = args.outside_frames {
        set("LOCKSCOPE_OUTSIDE_FRAMES", n.to_string().into());
    }
    if let Some(n) = args.event_frames {
        set("LOCKSCOPE_EVENT_FRAMES", n.to_string().into());
    }
    if let Some(ms) = args.omp_wait_ms {
        set("LOCKSCOPE_OMP_WAIT_MS", ms.to_string().into());
    }
    if let Some(p) = &args.cupti {
        set("LOCKSCOPE_CUPTI", p.clone().into_os_string());
    }
    env
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn secs(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.2} s", ns as f64 / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else {
        format!("{:.1} us", ns as f64 / 1e3)
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.0} MB", bytes as f64 / 1e6)
}

fn signal_name(sig: i32) -> String {
    // SAFETY: strsignal returns a static or thread-local string.
    let p = unsafe { libc_strsignal(sig) };
    if p.is_null() {
        return format!("signal {sig}");
    }
    // SAFETY: non-null C string.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}

extern "C" {
    #[link_name = "strsignal"]
    fn libc_strsignal(sig: i32) -> *const std::os::raw::c_char;
}

fn print_summary(o: &RecordOutcome, program: &OsString, quiet: bool) {
    let lost_line = || {
        let parts: Vec<String> = o
            .losses
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(r, n)| format!("{}: {}", r.describe(), thousands(*n)))
            .collect();
        let full = o
            .losses
            .iter()
            .any(|(r, n)| *r == lockscope_format::LossReason::BufferFull && *n > 0);
        format!(
            "lockscope: WARNING: {} events were LOST ({}); the trace is incomplete.{}",
            thousands(o.lost),
            parts.join(", "),
            if full {
                " `--on-full wait` (the default) or a larger --max-buffer-kb avoids \
                 overflowing buffers."
            } else {
                ""
            }
        )
    };
    if o.space_exhausted > 0 {
        // Name the file system and the remedy: a *larger* buffer makes
        // this worse.
        eprintln!(
            "lockscope: WARNING: {} is full: {} thread buffer{} could not be created or grown \
             ({} thread{} recorded nothing). Give it more room (e.g. `docker run --shm-size=1g`, \
             `mount -o remount,size=1G /dev/shm`), or record with --session-dir on another \
             tmpfs, or use smaller buffers (--buffer-kb, --max-buffer-kb).",
            o.session_parent.display(),
            thousands(o.space_exhausted),
            if o.space_exhausted == 1 { "" } else { "s" },
            thousands(o.threads_without_buffer),
            if o.threads_without_buffer == 1 {
                ""
            } else {
                "s"
            },
        );
    }
    if o.processes == 0 {
        // Nothing came back from the program: the preload library never
        // ran in it (statically linked, setuid, or it cleared LD_PRELOAD).
        eprintln!(
            "lockscope: WARNING: nothing was recorded: the preload library did not run in the \
             program (statically linked or setuid programs cannot be recorded this way)"
        );
    }
    if quiet {
        if o.lost > 0 {
            eprintln!("{}", lost_line());
        }
        return;
    }
    let prog = Path::new(program)
        .file_name()
        .map_or_else(|| program.to_string_lossy(), |f| f.to_string_lossy());
    // A name with a newline or an escape sequence is shown escaped.
    let prog = lockscope_text::text::term(&prog).into_owned();
    let bpe = if o.events > 0 {
        o.bytes as f64 / o.events as f64
    } else {
        0.0
    };
    eprintln!(
        "lockscope: recorded {prog} for {}: {} process{}, {} thread{}, {} events ({bpe:.1} bytes/event)",
        secs(o.duration_ns),
        o.processes,
        if o.processes == 1 { "" } else { "es" },
        o.threads,
        if o.threads == 1 { "" } else { "s" },
        thousands(o.events),
    );
    eprintln!(
        "lockscope: trace: {} ({:.1} MB)",
        o.output.display(),
        o.bytes as f64 / 1e6
    );
    // The recorder's own cost, so that nobody has to guess it: on a
    // machine whose CPUs the program keeps busy, its CPU time is taken
    // from the program's threads.
    // Per event only where there are enough events for the figure to be
    // the cost of recording them rather than of starting up.
    if o.recorder_cpu_ns > 0 {
        let per_event = if o.events >= 1000 {
            format!(
                " ({:.1} ns per event)",
                o.recorder_cpu_ns as f64 / o.events as f64
            )
        } else {
            String::new()
        };
        eprintln!(
            "lockscope: the recorder used {} of CPU{per_event} and {} of memory at its peak",
            secs(o.recorder_cpu_ns),
            mib(o.recorder_peak_rss_bytes)
        );
    }
    // Ranked by time waited (what costs the program), not by how many
    // acquisitions waited.
    // A lock a thread was still waiting for when the program ended (a
    // deadlock interrupted with Ctrl-C) made it wait too.
    let mut top: Vec<_> = o
        .top_locks
        .iter()
        .filter(|l| l.contended + l.still_waiting > 0)
        .collect();
    top.sort_by(|a, b| {
        (b.wait_ns, b.contended, a.pid, a.addr).cmp(&(a.wait_ns, a.contended, b.pid, b.addr))
    });
    top.truncate(3);
    if top.is_empty() {
        eprintln!("lockscope: no contended lock acquisition was seen");
    } else {
        let (names, swapped) = lock_names(&o.output, &top);
        eprintln!("lockscope: locks that made threads wait longest:");
        for (i, l) in top.iter().enumerate() {
            let mut what = if l.kind == "FutexWait" || l.kind == "FutexWake" {
                format!("{} waits", thousands(l.contended))
            } else {
                format!(
                    "{} of {} acquisitions contended",
                    thousands(l.contended),
                    thousands(l.acquisitions)
                )
            };
            if l.still_waiting > 0 {
                what.push_str(&format!(
                    ", {} still waiting when the program ended",
                    thousands(l.still_waiting)
                ));
            }
            let name = names
                .get(&(l.pid, l.addr))
                .cloned()
                .unwrap_or_else(|| format!("{:#x}", l.addr));
            // A mutex replaced by `lockscope run --lock ALG` is named with
            // its algorithm, as in the report.
            let kind = match swapped.get(&l.pid) {
                Some(alg) if l.kind.starts_with("Mutex") => format!("mutex ({alg})"),
                _ => kind_name(l.kind).to_string(),
            };
            eprintln!(
                "  {}. {name} ({kind}, pid {}): {} waiting, {what}",
                i + 1,
                l.pid,
                secs(l.wait_ns)
            );
        }
    }
    if o.full_waits > 0 {
        eprintln!(
            "lockscope: the program's threads waited {} time{} for the recorder to make room \
             ({} in total): timings around those waits are perturbed (--on-full drop never waits)",
            thousands(o.full_waits),
            if o.full_waits == 1 { "" } else { "s" },
            secs(o.full_wait_ns)
        );
        if o.queue_full_skips > 0 {
            // The converters, not the drain, were behind: the queue
            // between them was full while the program waited.
            let more = (o.writers as usize * 2).min(lockscope_record::MAX_WRITERS);
            eprintln!(
                "lockscope: the recorder's {} converter thread{} fell a full queue ({}) behind{}",
                o.writers,
                if o.writers == 1 { "" } else { "s" },
                mib(o.queue_peak_bytes),
                if more > o.writers as usize {
                    format!("; with idle CPUs, --writers {more} converts faster")
                } else {
                    String::new()
                }
            );
        }
    }
    if o.buffers_reused > 0 {
        // Programs that start many short threads: how well recycling
        // worked (a thread that found no drained buffer created one).
        eprintln!(
            "lockscope: {} thread{} reused the buffer of a finished thread ({} found none \
             emptied yet, {} finished thread buffer{} unmapped)",
            thousands(o.buffers_reused),
            if o.buffers_reused == 1 { "" } else { "s" },
            thousands(o.pool_not_ready),
            thousands(o.buffers_not_pooled),
            if o.buffers_not_pooled == 1 { "" } else { "s" },
        );
    }
    for s in &o.forwarded_signals {
        eprintln!("lockscope: forwarded {} to the program", signal_name(*s));
    }
    for p in &o.disabled_processes {
        eprintln!("lockscope: WARNING: the recorder disabled itself in process {p} after an internal error");
    }
    if o.lost > 0 {
        eprintln!("{}", lost_line());
    }
    if let Some(sig) = o.signal {
        eprintln!(
            "lockscope: the program was killed by signal {sig} ({}); events it had not yet \
             published are missing",
            signal_name(sig)
        );
    }
}

/// User-facing name of the kind of lock an op names.
fn kind_name(op: &str) -> &'static str {
    match op {
        o if o.starts_with("Mutex") => "mutex",
        o if o.starts_with("Rw") => "rwlock",
        o if o.starts_with("Spin") => "spinlock",
        o if o.starts_with("Futex") => "futex word",
        o if o.starts_with("Cond") => "condition variable",
        o if o.starts_with("Sem") => "semaphore",
        o if o.starts_with("Barrier") => "barrier",
        _ => "lock",
    }
}

/// Names of the summary's locks (`queue_lock`, `locks[3]`,
/// `ThreadPool::m_`), as the report gives them, read
/// from the trace just written; none for a trace over 256 MB (the
/// summary must not take longer than the recording) or when a binary
/// cannot be read: the address is printed instead.
/// Names of the locks from the trace's symbols, and by pid the lock
/// algorithm that replaced the mutexes of its newest image (`lockscope run
/// --lock`).
fn lock_names(
    trace: &Path,
    locks: &[&lockscope_record::LockSummary],
) -> (
    std::collections::HashMap<(u32, u64), String>,
    std::collections::HashMap<u32, String>,
) {
    let mut out = std::collections::HashMap::new();
    let mut swapped = std::collections::HashMap::new();
    if std::fs::metadata(trace).map_or(true, |m| m.len() > 256 << 20) {
        return (out, swapped);
    }
    let Ok(meta) = lockscope_trace::input::index(trace, &mut |_, _| {}) else {
        return (out, swapped);
    };
    let mut sym = lockscope_symbols::Symbolizer::for_meta(&meta, true);
    // The report's names: a heap lock gets its class member or first use.
    let names = lockscope_symbols::locknames::LockNames::new(&meta, &mut sym);
    for l in locks {
        // The newest image of that pid (after exec, the one that ran last).
        let process = meta
            .processes
            .values()
            .filter(|p| p.pid == l.pid)
            .map(|p| p.id)
            .max();
        if let Some(p) = process {
            out.insert((l.pid, l.addr), names.label(&mut sym, p, l.addr));
        }
        if let Some(p) = process.and_then(|p| meta.processes.get(&p)) {
            if !p.swapped_lock.is_empty() {
                swapped.insert(l.pid, p.swapped_lock.clone());
            }
        }
    }
    (out, swapped)
}

/// `--label KEY=VALUE`: checked here so that a trace never holds a label
/// a query engine or a profiler's label syntax would choke on.
/// A lock address as reports print it: `0x` and hex digits (or decimal).
fn parse_addr(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("{s:?} is not a lock address (like 0x55c1a9cfd0c8)"))
}

fn parse_label(s: &str) -> Result<(String, String), String> {
    let Some((k, v)) = s.split_once('=') else {
        return Err(format!("{s:?} is not KEY=VALUE"));
    };
    if k.is_empty() || k.len() > 64 {
        return Err(format!("label key {k:?}: 1 to 64 characters"));
    }
    if let Some(c) = k
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        return Err(format!(
            "label key {k:?}: {c:?} is not allowed (letters, digits, '_', '-', '.')"
        ));
    }
    if v.len() > 256 {
        return Err(format!(
            "label {k}: the value is {} bytes, over 256",
            v.len()
        ));
    }
    if v.chars().any(char::is_control) {
        return Err(format!("label {k}: the value holds a control character"));
    }
    Ok((k.to_string(), v.to_string()))
}

/// Set by the SIGINT/SIGTERM handler of attach mode: the recording ends,
/// the trace is written, the process goes on.
static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn stop_attach(_: libc::c_int) {
    STOP.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// `record -p PID` / `record -a`: attach mode (lockscope-attach).
fn attach(args: Args) -> anyhow::Result<i32> {
    if args.all && args.duration.is_none() {
        anyhow::bail!(
            "-a records every process on the machine: give --duration (for example --duration 10s)"
        );
    }
    if !args.comms.is_empty() && !args.all {
        anyhow::bail!(
            "--comm selects among every process (-a); with -p the processes are named already"
        );
    }
    let duration = args
        .duration
        .as_deref()
        .map(|s| crate::cmd::util::parse_duration("--duration", s))
        .transpose()?
        .map(std::time::Duration::from_nanos);
    let min_wait_ns = args
        .min_wait
        .as_deref()
        .map(|s| crate::cmd::util::parse_duration("--min-wait", s))
        .transpose()?
        .unwrap_or(0);
    let output = output_path(args.output, args.quiet)?;
    let cfg = lockscope_attach::AttachConfig {
        pids: args.pids,
        all: args.all,
        duration,
        min_wait_ns,
        tids: args.tids,
        comms: args.comms,
        locks: args.locks,
        output: output.clone(),
        labels: args.labels,
    };
    // SAFETY: `stop_attach` only stores to an atomic (async-signal-safe);
    // replacing the default disposition of SIGINT and SIGTERM is what
    // lets Ctrl-C end the recording with a written trace instead of
    // killing the recorder.
    unsafe {
        libc::signal(libc::SIGINT, stop_attach as *const () as libc::sighandler_t);
        libc::signal(
            libc::SIGTERM,
            stop_attach as *const () as libc::sighandler_t,
        );
    }
    if !args.quiet {
        let what = if cfg.all {
            "every process".to_string()
        } else {
            cfg.pids
                .iter()
                .map(|p| format!("pid {p}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let until = match duration {
            Some(d) => format!("for {:.1} s (or Ctrl-C)", d.as_secs_f64()),
            None => "until Ctrl-C or its exit".to_string(),
        };
        eprintln!("lockscope: attached to {what} {until}");
    }
    let s = lockscope_attach::record(&cfg, &STOP).map_err(|e| anyhow::anyhow!("record: {e}"))?;
    if !args.quiet || s.lost > 0 {
        let ended = match s.ended {
            lockscope_attach::Ended::Duration => "time was up",
            lockscope_attach::Ended::Stopped => "stopped",
            lockscope_attach::Ended::Exited => "the process exited",
            _ => "ended",
        };
        let count = lockscope_text::units::count;
        eprintln!(
            "lockscope: detached ({ended}) after {:.3} s: {} waits that slept, {} that returned at once, {} still blocked; {} wakes that woke a thread; {} threads in {} processes{}; trace written to {}",
            s.duration_ns as f64 / 1e9,
            count(s.slept),
            count(s.waits - s.slept - s.open_waits),
            count(s.open_waits),
            count(s.wakes),
            s.threads,
            s.processes,
            if s.lost > 0 {
                format!(", {} events LOST", count(s.lost))
            } else {
                String::new()
            },
            output.display()
        );
        if s.filtered > 0 {
            eprintln!(
                "lockscope: {} waits and wakes of other threads, processes or locks left out (--tid, --comm, --lock)",
                count(s.filtered)
            );
        }
    }
    Ok(0)
}

#[cfg(test)]
mod label_tests {
    use super::parse_label;

    #[test]
    fn labels_are_key_value_with_a_plain_key() {
        assert_eq!(
            parse_label("service=db=1").unwrap(),
            ("service".to_string(), "db=1".to_string())
        );
        assert_eq!(parse_label("run.id=").unwrap().1, "");
        for bad in ["novalue", "=x", "a b=c", "k=\u{7}", "ü=1"] {
            assert!(parse_label(bad).is_err(), "{bad}");
        }
        assert!(parse_label(&format!("{}=1", "k".repeat(65))).is_err());
        assert!(parse_label(&format!("k={}", "v".repeat(257))).is_err());
    }
}
