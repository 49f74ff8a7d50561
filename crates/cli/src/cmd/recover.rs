//! `lockscope recover [SESSION_DIR] -o TRACE`: the trace of a recording
//! whose recorder died, made of what it had written and of what its
//! session's rings still hold. Without a directory, lists the sessions
//! kept for recovery.

use std::path::{Path, PathBuf};

use anyhow::Context;
use lockscope_text::text::term;
use lockscope_text::units;

use crate::cmd::output::Output;

/// Recover the trace of a recording whose recorder died.
///
/// When `lockscope record` itself is killed (SIGKILL, the OOM killer, a
/// closed terminal that took it down), the program dies with it, and
/// two things are left: the trace it was writing, which holds all but
/// about its last two seconds, and its session directory (in /dev/shm
/// unless --session-dir said otherwise), whose buffers hold what the
/// program recorded after that. The next `lockscope record` keeps such a
/// session for a day and names it; this command joins the two into one
/// complete trace that every command reads.
///
/// Events the dead recorder had taken out of the buffers and not yet
/// written are read again from the buffers (the recorder marks in each
/// how far its trace holds it); only those the program overwrote since
/// are lost, counted in the trace and listed per thread.
///
/// Examples:
///   lockscope recover                      # list the sessions to recover
///   lockscope recover /dev/shm/lockscope-4242-193-0 -o run.lstrace
#[derive(clap::Args)]
pub struct Args {
    /// The session directory (as `lockscope record` or `lockscope
    /// recover` with no argument names it).
    pub session: Option<PathBuf>,
    /// The trace to write (required with a session directory). It may be
    /// the dead recorder's own trace: that is read first and replaced
    /// only once the recovered trace is complete.
    #[arg(short, long, value_name = "TRACE")]
    pub output: Option<PathBuf>,
    /// The trace the dead recorder was writing, when it is not where the
    /// session says (moved, renamed).
    #[arg(long, value_name = "TRACE", conflicts_with = "rings_only")]
    pub trace: Option<PathBuf>,
    /// Recover only what the buffers hold (the dead recorder's trace is
    /// lost or unreadable).
    #[arg(long)]
    pub rings_only: bool,
    /// Where sessions are created (as `record --session-dir`), for the
    /// list. Default: /dev/shm, $TMPDIR and /tmp.
    #[arg(long, value_name = "DIR")]
    pub session_dir: Option<PathBuf>,
    /// Keep the session directory after a successful recovery (by
    /// default it is removed: its buffers were consumed).
    #[arg(long)]
    pub keep: bool,
}

/// Runs the subcommand; returns the exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let Some(session) = args.session else {
        list(args.session_dir.as_deref());
        return Ok(0);
    };
    let Some(output) = args.output else {
        anyhow::bail!(
            "name the trace to write with -o TRACE (for example `lockscope recover {} -o recovered.lstrace`)",
            session.display()
        );
    };
    let info = lockscope_record::SessionInfo::read(&session);
    let partial: Option<PathBuf> = if args.rings_only {
        None
    } else if let Some(t) = args.trace {
        if !t.is_file() {
            anyhow::bail!("cannot read {}: no such file", t.display());
        }
        Some(t)
    } else {
        match info.as_ref().map(|i| i.output.clone()) {
            Some(p) if std::fs::metadata(&p).is_ok_and(|m| m.is_file() && m.len() > 0) => Some(p),
            Some(p) => {
                eprintln!(
                    "lockscope: the dead recorder's trace {} is missing or empty: recovering \
                     what the buffers hold only (name it with --trace if it was moved)",
                    term(&p.display().to_string())
                );
                None
            }
            None => {
                eprintln!(
                    "lockscope: the session does not name its trace: recovering what the \
                     buffers hold only (name the dead recorder's trace with --trace)"
                );
                None
            }
        }
    };
    let mut out = Output::create(&output, partial.as_deref())?;
    let o = lockscope_record::recover(&session, partial.as_deref(), &mut out)?;
    out.commit()?;
    // 0600 like a trace `record` writes (Output copies the permissions of
    // the trace it reads; with none, of nothing).
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&output, std::fs::Permissions::from_mode(0o600));
    }
    if !args.keep {
        std::fs::remove_dir_all(&session)
            .with_context(|| format!("recovered, but cannot remove {}", session.display()))?;
    }
    print_outcome(&o, &output);
    Ok(0)
}

fn print_outcome(o: &lockscope_record::RecoverOutcome, output: &Path) {
    let mut s = format!(
        "lockscope: recovered {} events of `{}` into {}: {} from the buffers",
        units::count(o.partial_events + o.ring_events),
        term(&o.command),
        term(&output.display().to_string()),
        units::count(o.ring_events),
    );
    if let Some(p) = &o.partial {
        s.push_str(&format!(
            ", {} from {}",
            units::count(o.partial_events),
            term(&p.display().to_string())
        ));
    }
    eprintln!(
        "{s}; {} threads; {} buffer slots taken by the dead recorder and not written were read again; {} events lost",
        o.threads,
        units::count(o.reread_slots),
        units::count(o.lost)
    );
    if !o.gaps.is_empty() {
        eprintln!(
            "lockscope: {} threads lost events the dead recorder had taken and not written, \
             overwritten by the program since (counted as lost):",
            o.gaps.len()
        );
        for g in o.gaps.iter().take(5) {
            eprintln!(
                "  process {} thread {}: up to {} events",
                g.pid,
                g.tid,
                units::count(g.slots)
            );
        }
        if o.gaps.len() > 5 {
            eprintln!("  ({} more)", o.gaps.len() - 5);
        }
    }
}

/// Lists the orphaned sessions with the command to recover each.
fn list(parent: Option<&Path>) {
    let v = lockscope_record::orphaned_sessions(parent);
    if v.is_empty() {
        eprintln!(
            "lockscope: no session of a recorder that died is kept (they are kept for a day)"
        );
        return;
    }
    for o in &v {
        println!("{}", describe(o));
    }
}

/// One line per orphaned session: where, what, when, how to recover it.
pub fn describe(o: &lockscope_record::OrphanedSession) -> String {
    let (cmd, trace) = match &o.info {
        Some(i) => (
            format!("`{}`", term(&i.command)),
            format!(", trace {}", term(&i.output.display().to_string())),
        ),
        None => ("an unknown command".to_string(), String::new()),
    };
    let age = o.age.as_secs();
    let ago = if age < 120 {
        format!("{age} s ago")
    } else if age < 7200 {
        format!("{} min ago", age / 60)
    } else {
        format!("{} h ago", age / 3600)
    };
    format!(
        "{}: {cmd}{trace}, {} buffers, {} MiB, last written {ago}; recover with `lockscope recover {} -o recovered.lstrace`",
        term(&o.dir.display().to_string()),
        o.rings,
        o.bytes.div_ceil(1 << 20),
        term(&o.dir.display().to_string()),
    )
}
