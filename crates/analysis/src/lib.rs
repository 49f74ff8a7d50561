//! Analyses of lockscope traces.
//!
//! Independent of capture: everything here reads a trace through
//! `lockscope-format` and produces plain result structs (serde-serializable)
//! that the CLI renders as text, JSON or CSV. One module per analysis.
#![deny(missing_docs)]
