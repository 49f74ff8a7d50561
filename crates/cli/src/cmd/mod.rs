//! One module per subcommand; each exposes `Args` (clap) and `run`.

pub mod locks;
pub mod record;
pub mod report;
pub mod run;
pub mod util;
