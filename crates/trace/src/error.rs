//! Errors of the analyses.

use std::fmt;

/// Why an analysis could not produce a result.
#[derive(Debug)]
#[non_exhaustive]
pub enum AnalysisError {
    /// The trace could not be read (bad file, corruption, I/O).
    Trace(lockscope_format::FormatError),
    /// The trace file could not be opened or re-read.
    Io {
        /// The file.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A configuration value is invalid (names the option).
    Config(String),
}

impl fmt::Display for AnalysisError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AnalysisError::Trace(e) => write!(f, "{e}"),
            AnalysisError::Io { path, source } => write!(f, "{path}: {source}"),
            AnalysisError::Config(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for AnalysisError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AnalysisError::Trace(e) => Some(e),
            AnalysisError::Io { source, .. } => Some(source),
            AnalysisError::Config(_) => None,
        }
    }
}

impl From<lockscope_format::FormatError> for AnalysisError {
    fn from(e: lockscope_format::FormatError) -> Self {
        AnalysisError::Trace(e)
    }
}
