//! `lockscope`: the command-line front end.
//!
//! This crate is thin glue. Each subcommand lives in its own module under
//! `cmd/`, owns its clap argument struct, turns it into the plain config
//! struct of the library that does the work, and returns the process exit
//! code. Nothing here knows how a trace is written or analysed.

mod cmd;

use clap::{Parser, Subcommand};

/// lockscope: find the locks that make a multithreaded program slow.
///
/// Typical session:
///
///   lockscope record -- ./my_program args     # writes lockscope.lstrace
///   lockscope report lockscope.lstrace        # who waited, where, for whom
///   lockscope run --lock mcs -- ./my_program  # try another lock algorithm
#[derive(Parser)]
#[command(
    name = "lockscope",
    version,
    about,
    long_about,
    max_term_width = 100,
    verbatim_doc_comment
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Read a damaged trace past its damage (a flipped byte, a bad disk
    /// block) instead of stopping with an error: each damaged record is
    /// stepped over to the next whole one, the command goes on with the
    /// rest, and a warning says how many bytes were skipped and where.
    /// For the commands that read a trace.
    #[arg(long, global = true)]
    skip_corrupt: bool,
}

#[derive(Subcommand)]
enum Command {
    Record(cmd::record::Args),
    Recover(cmd::recover::Args),
    Report(cmd::report::Args),
    Dump(cmd::dump::Args),
    Run(cmd::run::Args),
    Locks(cmd::locks::Args),
    Cc(cmd::cc::Args),
    #[command(name = "c++")]
    Cxx(cmd::cc::Args),
    Ulcp(cmd::ulcp::Args),
    Lockset(cmd::lockset::Args),
    Occ(cmd::occ::Args),
    Spin(cmd::spin::Args),
    Import(cmd::import::Args),
    Export(cmd::export::Args),
    Gpu(cmd::gpu::Args),
    Replay(cmd::replay::Args),
    Whatif(cmd::whatif::Args),
    CriticalPath(cmd::critical_path::Args),
    Html(cmd::html::Args),
    Diff(cmd::diff::Args),
    Deadwrites(cmd::deadwrites::Args),
    Barriers(cmd::barriers::Args),
}

fn main() {
    let cli = Cli::parse();
    cmd::util::set_skip_corrupt(cli.skip_corrupt);
    let result = match cli.command {
        Command::Record(a) => cmd::record::run(a),
        Command::Recover(a) => cmd::recover::run(a),
        Command::Report(a) => cmd::report::run(a),
        Command::Dump(a) => cmd::dump::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Locks(a) => cmd::locks::run(a),
        Command::Cc(a) => cmd::cc::run(a),
        Command::Cxx(a) => cmd::cc::run_cxx(a),
        Command::Ulcp(a) => cmd::ulcp::run(a),
        Command::Lockset(a) => cmd::lockset::run(a),
        Command::Occ(a) => cmd::occ::run(a),
        Command::Spin(a) => cmd::spin::run(a),
        Command::Import(a) => cmd::import::run(a),
        Command::Export(a) => cmd::export::run(a),
        Command::Gpu(a) => cmd::gpu::run(a),
        Command::Replay(a) => cmd::replay::run(a),
        Command::Whatif(a) => cmd::whatif::run(a),
        Command::CriticalPath(a) => cmd::critical_path::run(a),
        Command::Html(a) => cmd::html::run(a),
        Command::Diff(a) => cmd::diff::run(a),
        Command::Deadwrites(a) => cmd::deadwrites::run(a),
        Command::Barriers(a) => cmd::barriers::run(a),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            // A closed pipe (`lockscope report | head`) is not an error worth
            // a message: exit quietly like other Unix filters do.
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                std::process::exit(141);
            }
            let line = cmd::util::error_line(&e);
            eprintln!("lockscope: error: {line}{}", cmd::util::corrupt_hint(&line));
            std::process::exit(2);
        }
    }
}
