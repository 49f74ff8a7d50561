//! One module per subcommand; each exposes `Args` (clap) and `run`.

pub mod barriers;
pub mod cc;
pub mod critical_path;
pub mod deadwrites;
pub mod diff;
pub mod dump;
pub mod export;
pub mod export_formats;
pub mod gpu;
pub mod html;
pub mod import;
pub mod locks;
pub mod lockset;
pub mod occ;
pub mod output;
pub mod record;
pub mod recover;
pub mod replay;
pub mod report;
pub mod run;
pub mod spin;
pub mod ulcp;
pub mod util;
pub mod whatif;
