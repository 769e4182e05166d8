//! The error type of every loader in this crate.

use std::path::{Path, PathBuf};

/// Something went wrong while reading or writing data. Every variant names the file
/// (for a member of an `.npz` archive: `archive.npz:member.npy`).
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The operating system refused an operation on the file.
    #[error("{path}: {source}", path = path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is not what its format says it should be (bad magic, bad header, ...).
    #[error("{path}: {reason}", path = path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong, in words.
        reason: String,
    },
    /// The file ends before the data its header announces.
    #[error("{path}: truncated file: expected {expected} bytes of {what}, found {found}", path = path.display())]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Which part was cut short ("header", "data").
        what: &'static str,
        /// Bytes expected.
        expected: u64,
        /// Bytes present.
        found: u64,
    },
    /// The element type is one this crate does not read (object, complex, strings, records...).
    #[error("{path}: unsupported dtype {dtype:?}: {hint}", path = path.display())]
    UnsupportedDtype {
        /// The file.
        path: PathBuf,
        /// The dtype as written in the file.
        dtype: String,
        /// Which dtypes are supported.
        hint: &'static str,
    },
    /// Images and labels disagree in number.
    #[error("{path}: {labels} labels but {samples} samples", path = path.display())]
    CountMismatch {
        /// The labels file.
        path: PathBuf,
        /// Number of labels.
        labels: usize,
        /// Number of samples.
        samples: usize,
    },
    /// A shape that the caller or the format does not allow.
    #[error("{path}: shape {got:?} does not fit: {reason}", path = path.display())]
    Shape {
        /// The file.
        path: PathBuf,
        /// The shape found.
        got: Vec<usize>,
        /// Why it does not fit.
        reason: String,
    },
    /// A folder or archive with nothing usable in it.
    #[error("{path}: empty: {reason}", path = path.display())]
    Empty {
        /// The folder or archive.
        path: PathBuf,
        /// What was looked for.
        reason: String,
    },
    /// A data set looked for in the usual places was not found.
    #[error("{what} not found; looked in: {}", tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    NotFound {
        /// What was looked for.
        what: String,
        /// Every place that was tried, in order.
        tried: Vec<PathBuf>,
    },
    /// A bad argument from the caller (batch size 0, index out of range, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A file, archive member or image claiming more than the resource limits allow
    /// ([`quantkit_core::limits::Limits`]; the message names it and what it claims).
    #[error(transparent)]
    Limit(#[from] quantkit_core::limits::LimitError),
}

/// Result with [`DataError`].
pub type Result<T> = std::result::Result<T, DataError>;

impl DataError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        DataError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn format(path: &Path, reason: impl Into<String>) -> Self {
        DataError::Format {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }
}
