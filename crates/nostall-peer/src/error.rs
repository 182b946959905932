//! Errors of the peer layer: configuration, and networking that stops a node from joining.
//!
//! A peer failing *during* an epoch is not an error: its samples come from storage (see
//! [`crate::PartitionedSource`]).

use std::fmt;

/// What stops a node from starting or joining its job. New kinds may come: match with a
/// wildcard arm.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A setting is missing or inconsistent; the message says which and what to do.
    Config(String),
    /// A socket could not be opened or a peer could not be reached.
    Network {
        /// What was being done, naming the address.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A peer refused us or answered with an error (reason included).
    Refused(String),
    /// The loader core rejected something (the placement, the catalog).
    Core(nostall::Error),
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(msg) | Error::Refused(msg) => f.write_str(msg),
            Error::Network { context, source } => write!(f, "{context}: {source}"),
            Error::Core(err) => err.fmt(f),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Network { source, .. } => Some(source),
            Error::Core(err) => Some(err),
            Error::Config(_) | Error::Refused(_) => None,
        }
    }
}

impl From<nostall::Error> for Error {
    fn from(err: nostall::Error) -> Error {
        Error::Core(err)
    }
}

/// Wraps an I/O error with what was being done.
pub(crate) fn network(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Network { context, source }
}
