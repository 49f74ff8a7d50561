//! `lockscope lockset` (not yet implemented).

/// Arguments of `lockscope lockset`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs the subcommand; returns the exit code.
pub fn run(_args: Args) -> anyhow::Result<i32> {
    anyhow::bail!("`lockscope lockset` is not implemented yet")
}
