//! The integration tests of the `lockscope` command: one test binary,
//! one module per area of behaviour. All of them:
//! `cargo test -p lockscope --test cli`; one module:
//! `cargo test -p lockscope --test cli record_recover::`; one test: its
//! full name (`record_recover::a_sigkilled_...`) or any part of it.
//!
//! One binary rather than one per file: each binary statically links the
//! analysis, record, export and format crates again, so 67 binaries took
//! 2 min 54 s to relink after a change that touched them all (130 s of
//! CPU, 620 MB of executables) where this one takes 1 min 2 s (40 s of
//! CPU, 27 MB), on the shared 2-CPU development machine. The price is one
//! process for all modules: a test must leave process-global state alone.
//! Environment variables and the working directory go to the child
//! `Command` (`.env`, `.current_dir`), never to this process; a test
//! reaps only its own children (`wait4` on their pid); files go in a
//! fresh scratch directory per test. A child's peak RSS is measured by
//! the helper `tests/programs/peak_rss.c`, which forks it: a child
//! spawned from here starts with this process's peak, which any test can
//! raise (`report_memory`).
//!
//! The helper modules are declared here once; a test module brings one
//! in with `use crate::record_util;`.

/// Held by the tests whose fixtures need the CPUs to themselves to show
/// what they check (threads that must run at once to contend, a timed
/// window), and by those that keep both CPUs busy for seconds (attach
/// mode's fixtures): in one process such tests would otherwise run side
/// by side, two at a time on a 2-CPU machine (seen: `hot_short.c` with 13
/// contended of 800,000 acquisitions while an attach fixture ran). Other
/// tests stay parallel.
static CPUS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Takes [`CPUS`] for the rest of the calling test (a test that failed
/// while holding it does not poison the others).
pub(crate) fn cpus() -> std::sync::MutexGuard<'static, ()> {
    CPUS.lock().unwrap_or_else(|e| e.into_inner())
}

// Helpers shared by the test modules.
mod detailed_support;
mod export_util;
mod record_util;
mod report_memory_support;
mod run_support;

// The test modules, alphabetical.
mod closed_pipe;
mod critical_path;
mod cut_short_traces;
mod detailed_barriers;
mod detailed_cc;
mod detailed_cond_timeout;
mod detailed_deadwrites;
mod detailed_lockset;
mod detailed_lockset_hb;
mod detailed_occ;
mod detailed_repeats;
mod detailed_ulcp;
mod dump;
mod export_diff;
mod export_html;
mod export_parquet;
mod export_perfetto;
mod export_speedscope;
mod export_stacks;
mod export_viewers;
mod gpu_capture;
mod output_files;
mod record_attach;
mod record_call_paths;
mod record_cleanup;
mod record_cli;
mod record_clock;
mod record_deadlock;
mod record_deferred;
mod record_growth;
mod record_hotpath;
mod record_idle;
mod record_join;
mod record_lossless;
mod record_memcached;
mod record_mutated_traces;
mod record_omp;
mod record_on_full;
mod record_order;
mod record_process;
mod record_recover;
mod record_runtime_flags;
mod record_signals;
mod record_sync;
mod record_thread_name;
mod record_writers;
mod replay;
mod report_advice;
mod report_csv;
mod report_debuginfod;
mod report_fixtures;
mod report_formats;
mod report_futex_roles;
mod report_golden;
mod report_lock_names;
mod report_memory;
mod report_rules;
mod report_semaphore_locks;
mod report_user_code;
mod run_fixtures;
mod run_locks_bench;
mod run_pbzip2;
mod run_record;
mod spin_fixtures;
mod spin_hwtrace;
mod whatif;
mod whatif_fixes;
mod whatif_ulcp;
