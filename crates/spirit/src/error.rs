//! The engine's error type. Every variant says what went wrong in words a user can act on; none of them
//! is ever raised by a panic.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("I/O error on {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("corrupt data in {path} at offset {offset}: {what}")]
    Corrupt { path: PathBuf, offset: u64, what: String },
    #[error("{0}")]
    Format(String),
    #[error("bad document: {0}")]
    BadDocument(String),
    #[error("document of {size} bytes is larger than a segment can hold ({limit} bytes); raise the DRAM budget or split the document")]
    DocumentTooLarge { size: usize, limit: usize },
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    QuerySyntax(#[from] crate::query::ParseError),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    AlreadyExists(String),
    #[error("{0}")]
    ResourceExhausted(String),
    /// A conditional write found another version of its document live (or none): nothing was written.
    #[error("{0}")]
    VersionConflict(String),
    #[error("the index is closed")]
    Closed,
    #[error("data directory {0} is in use by another process")]
    Locked(PathBuf),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io { path: path.into(), source }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, offset: u64, what: impl Into<String>) -> Error {
        Error::Corrupt { path: path.into(), offset, what: what.into() }
    }
}
