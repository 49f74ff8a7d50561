use std::fmt;

/// Why a trace could not be read or written.
#[derive(Debug)]
#[non_exhaustive]
pub enum FormatError {
    /// The file does not start with the lockscope magic bytes.
    NotATrace {
        /// What the first bytes were, for the message.
        found: Vec<u8>,
    },
    /// The file was written by a newer lockscope with an incompatible
    /// major format version.
    NewerVersion {
        /// Major.minor version found in the file.
        found: (u16, u16),
        /// Highest major version this build reads.
        supported: u16,
    },
    /// The file ends in the middle of something.
    Truncated {
        /// Byte offset where more data was expected.
        offset: u64,
        /// What was being read.
        what: &'static str,
    },
    /// A structure is inconsistent (bad checksum, impossible length, bad
    /// reference).
    Corrupt {
        /// Byte offset of the offending record or field.
        offset: u64,
        /// What is wrong.
        what: String,
    },
    /// An I/O error from the underlying reader or writer.
    Io(std::io::Error),
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormatError::NotATrace { found } => write!(
                f,
                "not a lockscope trace: the file starts with {:02x?}, expected {:02x?}",
                found,
                crate::MAGIC
            ),
            FormatError::NewerVersion { found, supported } => write!(
                f,
                "this trace uses format version {}.{}, written by a newer lockscope; \
                 this build reads format version {supported}.x only: upgrade lockscope",
                found.0, found.1
            ),
            FormatError::Truncated { offset, what } => write!(
                f,
                "trace is truncated at byte offset {offset}: the file ends while reading {what}"
            ),
            FormatError::Corrupt { offset, what } => {
                write!(f, "trace is corrupt at byte offset {offset}: {what}")
            }
            FormatError::Io(e) => write!(f, "I/O error: {e}"),
        }
    }
}

impl std::error::Error for FormatError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FormatError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for FormatError {
    fn from(e: std::io::Error) -> Self {
        FormatError::Io(e)
    }
}
