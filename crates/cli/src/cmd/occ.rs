//! `lockscope occ` (not yet implemented).

/// Arguments of `lockscope occ`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs the subcommand; returns the exit code.
pub fn run(_args: Args) -> anyhow::Result<i32> {
    anyhow::bail!("`lockscope occ` is not implemented yet")
}
