//! The recording loop: the drain on the calling thread, the writer on its
//! own thread, the program's lifetime in between.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lockscope_format::{FormatError, Header};
use lockscope_ring::tsc;

use crate::child;
use crate::convert::{output_loop, worker_loop, Tables, WriterResult};
use crate::drain::{Clock, Drainer};
use crate::sessiondir::SessionDir;
use crate::{RecordConfig, RecordError, RecordOutcome};

/// Most bytes of raw slots queued between drain and writer: 1 GiB, or an
/// eighth of the machine's memory if that is less.
///
/// Why a large queue: the writer costs several times more per event
/// than the drain's bulk copy, and a program locking in a tight loop
/// produces events faster than the writer converts them. With a small
/// queue (it was 32 messages) the drain blocked behind the writer, the
/// rings overflowed and 11-36% of a 10M-pair run was lost; with this one
/// the drain keeps emptying the rings, the queue absorbs the burst (20M
/// events are 640 MB of slots) and the writer catches up after the
/// program ends. The alternative, a writer fast enough to keep up in real
/// time, is not possible when the program's threads take every core.
/// Beyond the limit the drain leaves the rings alone: they overflow and
/// the program counts what it drops (reported as lost, never silent).
fn queue_budget() -> usize {
    // SAFETY: sysconf has no preconditions.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let ram = if pages > 0 && page > 0 {
        (pages as u64).saturating_mul(page as u64)
    } else {
        8 << 30
    };
    (ram / 8).min(1 << 30) as usize
}
/// How often the session directory is listed for new files while events
/// are flowing (listing costs ~0.1 ms with hundreds of threads).
const LIST_EVERY: Duration = Duration::from_millis(5);
/// Sleep of the drain between passes where nothing wakes it: in
/// [`drain_dir`] (its producers may not know the wake page), while the
/// queue to the writer is at its limit (the workers, not the program,
/// make room), and where the wake page could not be made. A 4 MiB ring
/// holds ~2 ms of the fastest producer (60M events/s), so a drain that
/// polls must look at least that often.
const IDLE_SLEEP: Duration = Duration::from_micros(500);
/// Longest sleep of `lockscope record`'s drain when nothing wakes it
/// (the program wakes it when a ring reaches a quarter, a thread ends or
/// waits for room; SIGCHLD and forwarded signals wake it too).
///
/// Why 100 ms and not shorter: each timeout is a pass over the rings,
/// a listing of the session directory and a clock refinement sent to
/// the converters (~0.25 ms of the recorder's CPU, measured: an idle
/// recording costs ~2.5 ms per second, 0.25 % of a vCPU, where the
/// 0.5 ms poll cost 3-6 %). Why not longer: this is the latency of what nothing wakes it
/// for, and none of it loses events: a new thread's or process's first
/// events below the mark (listed at the next pass), a descendant killed
/// while its parent lives (no SIGCHLD to us; its rings are drained at
/// the latest at the end), a ring's events below the mark while its
/// thread computes (held in the ring, which has room). A stop requested
/// through a signal is seen at once (the handler wakes the drain).
const IDLE_TIMEOUT: Duration = Duration::from_millis(100);
/// The drain goes again at once, without sleeping, only when a ring was
/// at least this full. Why not always drain continuously: a consumer
/// that chases the producer's write index reads the cache lines the
/// producer is writing and the line of `write` itself on every pass, and
/// each of those transfers stalls the program (~100 ns); measured, the
/// uncontended lock+unlock pair cost several times more. Letting events
/// accumulate keeps the consumer far behind the producer.
const BUSY_FILL: f64 = 0.25;
/// A pass that copied at least this many slots, or saw a thread start or
/// end, is followed by a poll ([`IDLE_SLEEP`]) rather than a sleep until
/// woken: see `run`.
const LIVELY_SLOTS: u64 = 64;

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buffer and its length.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return String::new();
    }
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn cache_line() -> u32 {
    std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index0/coherency_line_size")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(64)
}

/// Messages the output thread may have waiting (see `Pipeline::start`).
const OUT_QUEUE: usize = 256;

/// Baseline of the first tick-rate estimate, ns.
const FIRST_ESTIMATE_NS: u64 = 1_000_000;

/// Most converter workers accepted.
pub const MAX_WRITERS: usize = 16;

/// How many converter workers to start when not told: one per four CPUs,
/// at most 8.
///
/// Why not one per CPU: the program's own threads are what the CPUs are
/// for, and a worker converts ~40M events/s; on the 2-vCPU development
/// machine one worker (and the drain, and the output thread) already
/// share the CPUs with the program. On 16 cores four workers give the
/// ~150M events/s that 8-16 threads locking in a tight loop offer.
pub fn default_writers() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cpus / 4).clamp(1, 8)
}

/// The pieces shared by [`run`] and [`crate::drain_dir`].
struct Pipeline {
    drainer: Drainer,
    writer: JoinHandle<Result<WriterResult, FormatError>>,
    workers: Vec<JoinHandle<Result<(), FormatError>>>,
}

impl Pipeline {
    fn start(
        dir: &Path,
        output: &Path,
        command: Vec<String>,
        extra: Vec<(String, String)>,
        writers: usize,
        start: Option<tsc::ClockPair>,
        sleeping_wake_ns: u64,
    ) -> Result<Pipeline, RecordError> {
        let writers = writers.clamp(1, MAX_WRITERS);
        let file = File::create(output).map_err(|e| RecordError::Output {
            path: output.to_path_buf(),
            source: FormatError::Io(e),
        })?;
        // 0600: a trace holds command lines, paths and thread names. Set
        // on the open file (it may have been created before, e.g. by the
        // CLI claiming a free name), and only on a regular file: never
        // chmod /dev/null or a FIFO given as the output.
        if file.metadata().is_ok_and(|m| m.is_file()) {
            use std::os::unix::fs::PermissionsExt;
            let _ = file.set_permissions(std::fs::Permissions::from_mode(0o600));
        }
        // A first estimate of the tick rate over at least 1 ms (`start`,
        // when the caller took its pair earlier, already covers some of
        // it), refined 10 ms into the recording and every 50 ms after
        // (see Clock). It was a 10 ms sleep before the program started:
        // most of the start-up of a recording, and a fifth of the wall
        // time of a 50 ms program. The rougher first estimate is off by
        // the jitter of a clock pair (tens of ns) over 1 ms, a few 1e-5,
        // and only until the first refinement; every thread's ticks go
        // through the same conversion, so order is not affected.
        let start_pair = start.unwrap_or_else(tsc::pair);
        let (hz, now) = loop {
            let now = tsc::pair();
            if now.mono_ns.saturating_sub(start_pair.mono_ns) >= FIRST_ESTIMATE_NS {
                break (tsc::hz_between(start_pair, now), now);
            }
            std::thread::sleep(Duration::from_micros(200));
        };
        let clock = Clock::new(start_pair, hz);
        let unix_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            .saturating_sub(now.mono_ns.saturating_sub(start_pair.mono_ns));
        let mut extra = extra;
        // No "capture" key: whether a program records in timing or
        // detailed mode is known only from its events (a `lockscope cc`
        // build records accesses), not when this header is written, and a
        // header saying "timing" on every detailed trace misled readers.
        extra.push(("kernel".into(), kernel_release()));
        let header = Header {
            tsc_hz: clock.hz(),
            tsc_at_start: start_pair.tsc,
            monotonic_ns_at_start: start_pair.mono_ns,
            unix_ns_at_start: unix_ns,
            command,
            host: host_name(),
            recorder_version: env!("CARGO_PKG_VERSION").to_string(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
            cache_line: cache_line(),
            extra,
            sleeping_wake_ns,
        };
        // Unbounded channels, bounded by bytes: `queued` counts the raw
        // slots in flight (the drain adds, the workers subtract).
        // Bounded in messages (a chunk is at most 64K events, ~256 KB
        // encoded): if the file is written more slowly than the workers
        // encode (a slow disk), they wait here, the raw queue behind them
        // fills to its budget and the program waits for room, counted.
        // Unbounded, encoded chunks would pile up in memory instead.
        let (out_tx, out_rx) = sync_channel(OUT_QUEUE);
        let (pool_tx, pool_rx) = channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let tables = Arc::new(Mutex::new(Tables::new()));
        let durable = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let durable_out = durable.clone();
        let writer = std::thread::Builder::new()
            .name("lockscope-writer".into())
            .spawn(move || {
                output_loop(
                    out_rx,
                    BufWriter::with_capacity(1 << 20, file),
                    header,
                    writers,
                    durable_out,
                )
            })
            .map_err(|e| RecordError::Internal(format!("cannot start the writer thread: {e}")))?;
        let mut txs = Vec::with_capacity(writers);
        let mut workers = Vec::with_capacity(writers);
        for i in 0..writers {
            let (tx, rx) = channel();
            let (pool, queued, out, tables) = (
                pool_tx.clone(),
                queued.clone(),
                out_tx.clone(),
                tables.clone(),
            );
            let h = std::thread::Builder::new()
                .name(format!("lockscope-conv{i}"))
                .spawn(move || worker_loop(rx, pool, queued, out, tables, writers))
                .map_err(|e| {
                    RecordError::Internal(format!("cannot start a converter thread: {e}"))
                })?;
            txs.push(tx);
            workers.push(h);
        }
        Ok(Pipeline {
            drainer: Drainer::new(dir, clock, txs, out_tx, pool_rx, queued, queue_budget())
                .with_durable(durable),
            writer,
            workers,
        })
    }

    /// One drain pass; lists the directory when due. Returns the slots
    /// copied, and true when the next pass should follow at once (a ring
    /// was filling up).
    fn pass(&mut self, last_list: &mut Instant) -> (u64, bool) {
        if last_list.elapsed() >= LIST_EVERY {
            self.drainer.discover(false);
            *last_list = Instant::now();
        }
        self.drainer.refine_clock(false);
        let (n, fullest) = self.drainer.drain_all();
        self.drainer.mark();
        (n, fullest >= BUSY_FILL)
    }

    fn finish(
        self,
        output: &Path,
        reaped: &HashMap<u32, (libc::c_int, u64)>,
        exit_status: i32,
    ) -> Result<RecordOutcome, RecordError> {
        let mut drainer = self.drainer;
        let writers = self.workers.len() as u32;
        let duration_ns = drainer.clock.now_ns();
        let totals = drainer.finish(reaped);

        let hz = drainer.clock.hz();
        drainer.send_finish(duration_ns, exit_status);
        drop(drainer);
        // A worker's own error explains the output's ("a worker stopped"):
        // it is reported first, unless it only says that the writer is
        // gone, in which case the writer's error (a full disk) is the
        // cause.
        let mut first_err = None;
        for w in self.workers {
            match w.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) if crate::convert::is_gone(&e) => {}
                Ok(Err(e)) => {
                    first_err.get_or_insert(RecordError::Output {
                        path: output.to_path_buf(),
                        source: e,
                    });
                }
                Err(_) => {
                    first_err
                        .get_or_insert(RecordError::Internal("a converter thread panicked".into()));
                }
            }
        }
        let res = self
            .writer
            .join()
            .map_err(|_| RecordError::Internal("the writer thread panicked".into()))?;
        // A system error of the writer (a full disk) is the cause of
        // whatever the workers then said (a channel closed under them).
        let writer_failed =
            matches!(&res, Err(lockscope_format::FormatError::Io(e)) if e.raw_os_error().is_some());
        let res = match (res, first_err) {
            (Ok(r), _) => r,
            (Err(_), Some(e)) if !writer_failed => return Err(e),
            // The program ran to its end; only the trace is short: the
            // program's exit status goes with the error (the caller
            // returns it), and what was written stays readable.
            (Err(source), _) => {
                return Err(RecordError::TraceIncomplete {
                    path: output.to_path_buf(),
                    bytes: std::fs::metadata(output).map_or(0, |m| m.len()),
                    exit_status,
                    source,
                })
            }
        };
        // The header went out with the first estimate; now that the whole
        // run is known, store the refined frequency (the events themselves
        // were converted with the running estimate).
        let _ = patch_header_hz(output, hz);
        // After the writer's last byte: the whole recording's cost.
        let (recorder_cpu_ns, recorder_peak_rss_bytes) = crate::own_usage();
        Ok(RecordOutcome {
            output: output.to_path_buf(),
            exit_status,
            signal: None,
            duration_ns,
            processes: totals.processes,
            threads: totals.threads,
            events: res.events,
            lost: res.lost,
            losses: res.losses,
            bytes: std::fs::metadata(output).map_or(0, |m| m.len()),
            top_locks: res.top_locks,
            forwarded_signals: Vec::new(),
            disabled_processes: totals.disabled,
            queue_peak_bytes: totals.queue_peak_bytes,
            queue_full_skips: totals.queue_full_skips,
            writers,
            parallel_copies: totals.parallel_copies,
            batch_buffers: totals.batch_buffers,
            full_waits: totals.full_waits,
            full_wait_ns: totals.full_wait_ns,
            space_exhausted: totals.space_exhausted,
            threads_without_buffer: totals.threads_without_ring,
            buffers_grown: totals.rings_grown,
            buffers_reused: totals.rings_reused,
            buffers_not_pooled: totals.rings_not_pooled,
            pool_not_ready: totals.pool_not_ready,
            session_parent: PathBuf::new(),
            recorder_cpu_ns,
            recorder_peak_rss_bytes,
        })
    }
}

/// Rewrites the 8-byte `tsc_hz` at the start of the header payload and
/// the header record's CRC.
fn patch_header_hz(path: &Path, hz: f64) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    let mut head = [0u8; 17];
    f.read_exact(&mut head)?;
    let len = u32::from_le_bytes([head[13], head[14], head[15], head[16]]) as usize;
    if head[12] != 0 || !(8..=1 << 20).contains(&len) {
        return Ok(());
    }
    let mut payload = vec![0u8; len];
    f.read_exact(&mut payload)?;
    payload[..8].copy_from_slice(&hz.to_bits().to_le_bytes());
    let mut h = crc32fast::Hasher::new();
    h.update(&[0]);
    h.update(&payload);
    f.seek(SeekFrom::Start(17))?;
    f.write_all(&payload[..8])?;
    f.seek(SeekFrom::Start(17 + len as u64))?;
    f.write_all(&h.finalize().to_le_bytes())?;
    Ok(())
}

pub(crate) fn run(cfg: RecordConfig) -> Result<RecordOutcome, RecordError> {
    if !cfg.preload_lib.is_file() {
        return Err(RecordError::NoPreload {
            path: cfg.preload_lib.clone(),
        });
    }
    let mut command = vec![cfg.program.to_string_lossy().into_owned()];
    command.extend(cfg.args.iter().map(|a| a.to_string_lossy().into_owned()));
    let mut extra = vec![
        ("stacks".to_string(), cfg.stacks.as_str().to_string()),
        ("ring_kb".to_string(), cfg.ring_kb.to_string()),
        ("ring_max_kb".to_string(), cfg.ring_max_kb.to_string()),
        (
            "on_full".to_string(),
            if cfg.wait_when_full { "wait" } else { "drop" }.to_string(),
        ),
        (
            "preload".to_string(),
            cfg.preload_lib.to_string_lossy().into_owned(),
        ),
    ];
    // The machine's shape, for advice that depends on it (HMCS only pays
    // across NUMA nodes or sockets). Absent when sysfs says nothing.
    if let Some(n) = numa_nodes() {
        extra.push(("numa_nodes".to_string(), n.to_string()));
    }
    if let Some(n) = sockets() {
        extra.push(("sockets".to_string(), n.to_string()));
    }
    // The clock is chosen by measuring it (a VM may trap or slow
    // `rdtsc`); LOCKSCOPE_CLOCK=tsc|monotonic in the recorder's own
    // environment forces it. Set here, before the calibration pair of
    // Pipeline::start, and passed to the program (child::spawn).
    let (clock, costs) = tsc::choose();
    let clock = match std::env::var(tsc::ENV_CLOCK).as_deref() {
        Ok("tsc") => "tsc",
        Ok("monotonic") => "monotonic",
        _ => clock,
    };
    tsc::use_monotonic(clock == "monotonic");
    // The start of the first tick-rate estimate (after the clock is
    // chosen: a pair is of the chosen clock): the set-up below is part of
    // its baseline.
    let start_pair = tsc::pair();
    // Created after the clock is chosen: its info names the clock and the
    // start pair, so that `recover` converts the rings' ticks as this
    // recorder would have, even when its trace is lost.
    let info = crate::sessiondir::SessionInfo {
        output: absolute(&cfg.output),
        command: command.join(" "),
        recorder_pid: std::process::id(),
        started_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        clock: clock.to_string(),
        start: Some(start_pair),
    };
    let session = SessionDir::create(cfg.session_parent.as_deref(), &info)?;
    // The machine's wake-up latency of a sleeping waiter, for what-ifs
    // that make waiters sleep (see `wake`). Measured here, before the
    // program starts and after the start of the first tick-rate estimate:
    // its 1-20 ms count towards the estimate's 1 ms baseline instead of
    // adding to the start-up. Not in the program's cost probe, beside the
    // hook costs: it would delay every process's start, exec'd and forked
    // ones included, for a figure of the machine, not of the process.
    // 0 when it could not be measured: the analysis treats the trace as
    // one written before the field existed.
    let sleeping_wake_ns = crate::wake::sleeping_wake_ns().unwrap_or(0);
    extra.push(("clock".to_string(), clock.to_string()));
    extra.extend(
        cfg.labels
            .iter()
            .map(|(k, v)| (format!("{}{k}", crate::LABEL_PREFIX), v.clone())),
    );
    extra.push(("clock_tsc_ns".to_string(), format!("{:.1}", costs.tsc_ns)));
    extra.push((
        "clock_monotonic_ns".to_string(),
        format!("{:.1}", costs.monotonic_ns),
    ));
    let mut pipe = Pipeline::start(
        session.path(),
        &cfg.output,
        command,
        extra,
        if cfg.writers == 0 {
            default_writers()
        } else {
            cfg.writers
        },
        Some(start_pair),
        sleeping_wake_ns,
    )?;
    // Created before the program starts, so that each of its processes
    // maps it at start-up. Without it (cannot happen on a writable
    // tmpfs), the drain polls as `drain_dir` does.
    let wake = crate::sessiondir::WakePage::create(session.path()).ok();
    let signals = child::SignalGuard::install(
        wake.as_ref()
            .map_or(std::ptr::null(), |w| w.get() as *const _),
    );
    child::set_subreaper(true);
    let root = match child::spawn(&cfg, session.path()) {
        Ok(pid) => pid,
        Err(e) => {
            child::set_subreaper(false);
            drop(pipe.drainer);
            let _ = pipe.writer.join();
            let _ = std::fs::remove_file(&cfg.output);
            return Err(e);
        }
    };
    let mut reaped: HashMap<u32, (libc::c_int, u64)> = HashMap::new();
    let mut raw = HashMap::new();
    let mut forwarded = Vec::new();
    let mut last_list = Instant::now() - LIST_EVERY;
    // The last sleep was skipped because the drain's last look found work.
    let mut looked_busy = false;
    loop {
        let skips = pipe.drainer.full_skips();
        let lives = pipe.drainer.lives();
        let (copied, busy) = pipe.pass(&mut last_list);
        if let Some(sig) = signals.take() {
            forwarded.push(sig);
            forward(root, &reaped, sig, &pipe);
        }
        let any_child = child::reap(&mut raw);
        for (pid, st) in raw.drain() {
            reaped.insert(pid, (st, pipe.drainer.clock.now_ns()));
        }
        if reaped.contains_key(&root) && !any_child {
            break;
        }
        if busy {
            looked_busy = false;
            continue;
        }
        // Poll instead of sleeping until woken: while the program is
        // active (this pass copied events or saw a thread start or end),
        // while the queue is at its limit (the workers make room, and
        // they wake nobody), where there is no wake page, and after a
        // last look that found work this pass could not take (never
        // expected; a poll rather than a loop that spins).
        //
        // Why poll while the program is active: a drain that sleeps until
        // woken after every pass was woken at every thread's end by 1000
        // short threads started one after another, a futex wake in the
        // program and a pass each, where a poll takes several ends in one
        // pass and costs the program nothing (a drain that polls has not
        // announced a sleep: no producer makes a system call). Measured,
        // interleaved, 8 runs: the whole command's CPU 182 ms against 157
        // ms for the polling drain. The drain sleeps after the first pass
        // that finds the program quiet.
        let lively = copied >= LIVELY_SLOTS || pipe.drainer.lives() != lives;
        let held_back =
            lively || pipe.drainer.full_skips() != skips || (looked_busy && copied == 0);
        let Some(w) = wake.as_ref().filter(|_| !held_back) else {
            looked_busy = false;
            std::thread::sleep(IDLE_SLEEP);
            continue;
        };
        let timeout = pipe
            .drainer
            .next_due()
            .map_or(IDLE_TIMEOUT, |d| d.min(IDLE_TIMEOUT));
        looked_busy = false;
        lockscope_ring::ring::drain_sleep(w.get(), timeout, || {
            looked_busy = child::take_noted() || pipe.drainer.has_work();
            looked_busy
        });
    }
    drop(signals);
    drop(wake);
    child::set_subreaper(false);
    let (status, signal) = child::shell_status(reaped[&root].0);
    let mut out = pipe.finish(&cfg.output, &reaped, status)?;
    out.signal = signal;
    out.forwarded_signals = forwarded;
    out.session_parent = session
        .path()
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    drop(session);
    Ok(out)
}

/// Forwards a signal to the program, or, once it is gone, to its
/// descendants that are still running (reparented to us).
fn forward(root: u32, reaped: &HashMap<u32, (libc::c_int, u64)>, sig: i32, pipe: &Pipeline) {
    if !reaped.contains_key(&root) {
        child::send(root, sig);
        return;
    }
    let me = std::process::id();
    for pid in pipe.drainer.pids() {
        // Only our own children: a pid of the session that exited long
        // ago may have been reused by an unrelated process.
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(me) {
            child::send(pid, sig);
        }
    }
}

/// Drains the session directory `dir` (filled by programs started by
/// someone else) into the trace `output` until `stop` is set, then drains
/// once more and finishes the trace. For benchmarks and tests of the
/// drain; `lockscope record` uses [`crate::record`].
pub fn drain_dir(
    dir: &Path,
    output: &Path,
    stop: &AtomicBool,
) -> Result<RecordOutcome, RecordError> {
    drain_dir_with(dir, output, stop, default_writers())
}

/// [`drain_dir`] with `writers` converter workers and copy threads
/// (as [`crate::RecordConfig::writers`]).
pub fn drain_dir_with(
    dir: &Path,
    output: &Path,
    stop: &AtomicBool,
    writers: usize,
) -> Result<RecordOutcome, RecordError> {
    let mut pipe = Pipeline::start(
        dir,
        output,
        vec!["(drain_dir)".into()],
        Vec::new(),
        writers,
        None,
        // A session someone else filled: no program start to measure
        // before; 0 says not measured.
        0,
    )?;
    let mut last_list = Instant::now() - LIST_EVERY;
    while !stop.load(Ordering::Acquire) {
        if !pipe.pass(&mut last_list).1 {
            std::thread::sleep(IDLE_SLEEP);
        }
    }
    pipe.finish(output, &HashMap::new(), 0)
}

/// Drains an orphaned session once (its recorder and program are gone)
/// into `output`, with times on the clock of the trace the dead recorder
/// was writing (`start`: its header's tick and monotonic pair), so that
/// the two can be joined ([`crate::recover`]).
pub(crate) fn drain_orphan(
    dir: &Path,
    output: &Path,
    start: Option<tsc::ClockPair>,
    command: Vec<String>,
) -> Result<RecordOutcome, RecordError> {
    let mut pipe = Pipeline::start(dir, output, command, Vec::new(), 1, start, 0)?;
    let mut last_list = Instant::now() - LIST_EVERY;
    // Passes until the rings are empty; `finish` lists and drains once
    // more and ends every thread and process.
    while pipe.pass(&mut last_list).0 > 0 {}
    pipe.finish(output, &HashMap::new(), -1)
}

/// `p` made absolute against the current directory (for a session's
/// info, read later from another directory); as given if that fails.
fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// NUMA nodes of this machine (`/sys/devices/system/node/nodeN`).
fn numa_nodes() -> Option<u32> {
    let n = std::fs::read_dir("/sys/devices/system/node")
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.strip_prefix("node")
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        })
        .count();
    (n > 0).then_some(n as u32)
}

/// Physical packages (sockets) of this machine: distinct
/// `physical_package_id` values over the CPUs.
fn sockets() -> Option<u32> {
    let mut ids = std::collections::BTreeSet::new();
    for e in std::fs::read_dir("/sys/devices/system/cpu").ok()?.flatten() {
        let path = e.path().join("topology/physical_package_id");
        if let Ok(v) = std::fs::read_to_string(path) {
            if let Ok(id) = v.trim().parse::<i64>() {
                ids.insert(id);
            }
        }
    }
    (!ids.is_empty()).then_some(ids.len() as u32)
}

#[cfg(test)]
mod machine_tests {
    #[test]
    fn this_machine_has_at_least_one_node_and_socket() {
        // Every Linux machine with sysfs has node0 (or no NUMA directory at
        // all, on kernels without NUMA) and at least one package.
        if std::path::Path::new("/sys/devices/system/node/node0").exists() {
            assert!(super::numa_nodes().unwrap() >= 1);
        }
        assert!(super::sockets().unwrap() >= 1);
    }
}
