//! One error type for the crate; every message says what was being done and why it failed.

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// `libcuda.so.1` (or a symbol in it) could not be loaded.
    Library(String),
    /// A driver call returned something other than `CUDA_SUCCESS`.
    Driver { call: String, code: i32, name: String, description: String },
    /// A manifest that cannot be used.
    Manifest(String),
    /// Sizes, arguments or files that do not fit the manifest.
    Argument(String),
    /// Reading or writing a file.
    Io(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Library(m) => write!(f, "CUDA driver library: {m}"),
            Error::Driver { call, code, name, description } => {
                write!(f, "{call} failed: {name} ({code}): {description}")
            }
            Error::Manifest(m) => write!(f, "manifest: {m}"),
            Error::Argument(m) => write!(f, "{m}"),
            Error::Io(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
