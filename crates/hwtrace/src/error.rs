//! Errors of the hardware-trace import.

use std::fmt;

/// Why a hardware trace could not be imported.
#[derive(Debug)]
#[non_exhaustive]
pub enum HwtraceError {
    /// A line of the input is malformed: names the file, the 1-based line
    /// and the 1-based column where the problem starts.
    Parse {
        /// The file (as given).
        file: String,
        /// Line, from 1.
        line: usize,
        /// Column (byte), from 1.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// The input holds no access, or contradicts itself as a whole.
    Invalid(String),
    /// Writing or reading a lockscope trace failed.
    Trace(lockscope_format::FormatError),
    /// Reading or writing a file failed.
    Io {
        /// The file.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl fmt::Display for HwtraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HwtraceError::Parse {
                file,
                line,
                column,
                message,
            } => write!(f, "{file}:{line}:{column}: {message}"),
            HwtraceError::Invalid(m) => write!(f, "{m}"),
            HwtraceError::Trace(e) => write!(f, "{e}"),
            HwtraceError::Io { path, source } => write!(f, "{path}: {source}"),
        }
    }
}

impl std::error::Error for HwtraceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HwtraceError::Trace(e) => Some(e),
            HwtraceError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<lockscope_format::FormatError> for HwtraceError {
    fn from(e: lockscope_format::FormatError) -> Self {
        HwtraceError::Trace(e)
    }
}
