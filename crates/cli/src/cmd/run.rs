//! `lockscope run` (not yet implemented).

/// Arguments of `lockscope run`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs the subcommand; returns the exit code.
pub fn run(_args: Args) -> anyhow::Result<i32> {
    anyhow::bail!("`lockscope run` is not implemented yet")
}
