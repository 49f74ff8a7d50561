//! `lockscope report` (not yet implemented).

/// Arguments of `lockscope report`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs the subcommand; returns the exit code.
pub fn run(_args: Args) -> anyhow::Result<i32> {
    anyhow::bail!("`lockscope report` is not implemented yet")
}
