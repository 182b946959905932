//! Errors, split by who can act on them.
//!
//! A [`SampleError`] belongs to one sample: it names the sample and says what is wrong
//! with it, and under the `skip` policy it is counted by [`Cause`] instead of stopping the
//! loader. An [`Error`] is about the loader as a whole (bad configuration, an unreadable
//! dataset root, an index that cannot be written) and always stops it.

use crate::sample::{Modality, UnknownName};
use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why one sample could not be delivered.
///
/// The variants are coarse on purpose: they are the keys of the skip counters that a
/// user reads in a summary, so each one should suggest a different fix.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Cause {
    /// The file was indexed but no longer exists.
    Missing,
    /// The file exists but this process may not read it.
    PermissionDenied,
    /// Any other I/O failure while reading the bytes.
    Io(String),
    /// The file holds zero bytes.
    Empty,
    /// The file is larger than the loader's per-sample byte limit.
    TooLarge {
        /// Size of the file in bytes.
        bytes: u64,
        /// The configured limit in bytes.
        limit: u64,
        /// The field of `fields=` whose member it is (its `max_bytes` the limit); `None`
        /// for the sample's bytes (the per-sample limit).
        field: Option<String>,
    },
    /// The bytes are not in a format the modality decodes (checked by content, not name).
    UnknownFormat(Modality),
    /// The image declares more pixels than the decompression-bomb guard allows.
    TooManyPixels {
        /// Declared width.
        width: u64,
        /// Declared height.
        height: u64,
        /// The configured limit on width × height.
        limit: u64,
    },
    /// The audio lasts longer than the configured limit (declared or decoded).
    TooLong {
        /// Its duration in seconds (at least; decoding stops at the limit).
        seconds: u64,
        /// The configured limit in seconds.
        limit: u64,
    },
    /// The decoder rejected the data: truncated, corrupt or unsupported.
    Corrupt(String),
    /// Reading or preparing the sample panicked: a bug in nostall or in a custom
    /// [`Source`](crate::storage::Source), contained to this sample.
    Internal(String),
    /// A field a loader asks for (`fields=`) is not in the sample's record: the field's
    /// name and the members it is read from.
    MissingField {
        /// The field's name.
        field: String,
        /// The members (extensions) it is read from, as the loader was given them.
        members: String,
    },
    /// A text field (or a caption to tokenize) is not UTF-8, or longer than the field
    /// holds.
    BadText {
        /// The field's name.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A JSON field is not a JSON document (nested less than 128 deep), or lacks a chosen
    /// key. (One longer than the field holds is [`Cause::TooLarge`], found before parsing.)
    BadJson {
        /// The field's name.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A vector field is not a `.npy` array or JSON array of numbers of its length.
    BadVector {
        /// The field's name.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A target field (a detection sample's boxes) cannot be read, holds more boxes than
    /// the field does, or was made for an image of another size; or the annotation file
    /// found a fault in one of the image's annotations.
    BadTargets {
        /// The field's name (the member's, `coco`, where the source found the fault).
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The user's code that makes the sample (a `Dataset`'s `__getitem__`) raised, hung
    /// past its bound, or lost every worker that ran it.
    UserCode {
        /// The code, in words (`ImageFolder.__getitem__`).
        code: String,
        /// What happened: the exception with its traceback, or the bound.
        message: String,
    },
    /// A video's codec that this build's FFmpeg does not decode (named).
    UnsupportedCodec(String),
    /// A video larger than its limits allow (its frame size or its frame count: which,
    /// and the limit), found before anything of that size is allocated.
    VideoTooLarge(String),
    /// A cause another process reported (a remote preparer's): its kind (one of
    /// [`Cause::KINDS`]) and its words.
    Reported {
        /// Its [`Cause::kind`] there.
        kind: &'static str,
        /// What it said.
        message: String,
    },
}

impl Cause {
    /// Every [`Cause::kind`], in the order of the variants (a kind two variants share, once).
    pub const KINDS: [&'static str; 17] = [
        "missing",
        "permission-denied",
        "io",
        "empty",
        "too-large",
        "unknown-format",
        "too-many-pixels",
        "too-long",
        "corrupt",
        "internal",
        "missing-field",
        "bad-text",
        "bad-json",
        "bad-vector",
        "bad-targets",
        "user-code",
        "unsupported-codec",
    ];

    /// The [`Cause::kind`] spelled `name`, if there is one (for counts read back from a
    /// saved state).
    pub fn kind_named(name: &str) -> Option<&'static str> {
        Cause::KINDS.into_iter().find(|&kind| kind == name)
    }

    /// A short stable name for counters and reports, e.g. `"corrupt"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Cause::Missing => "missing",
            Cause::PermissionDenied => "permission-denied",
            Cause::Io(_) => "io",
            Cause::Empty => "empty",
            Cause::TooLarge { .. } => "too-large",
            Cause::UnknownFormat(_) => "unknown-format",
            Cause::TooManyPixels { .. } => "too-many-pixels",
            Cause::TooLong { .. } => "too-long",
            Cause::Corrupt(_) => "corrupt",
            Cause::Internal(_) => "internal",
            Cause::MissingField { .. } => "missing-field",
            Cause::BadText { .. } => "bad-text",
            Cause::BadJson { .. } => "bad-json",
            Cause::BadVector { .. } => "bad-vector",
            Cause::BadTargets { .. } => "bad-targets",
            Cause::UserCode { .. } => "user-code",
            Cause::UnsupportedCodec(_) => "unsupported-codec",
            Cause::VideoTooLarge(_) => "too-large",
            Cause::Reported { kind, .. } => kind,
        }
    }

    /// Classifies an I/O error met while reading a sample.
    pub fn from_io(err: &io::Error) -> Cause {
        match err.kind() {
            io::ErrorKind::NotFound => Cause::Missing,
            io::ErrorKind::PermissionDenied => Cause::PermissionDenied,
            _ => Cause::Io(err.to_string()),
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Missing => write!(
                f,
                "missing: it was listed when the dataset was indexed but is gone now (re-open \
                 or re-index the dataset after changing it)"
            ),
            Cause::PermissionDenied => write!(f, "permission denied"),
            Cause::Io(msg) => write!(f, "read failed: {msg}"),
            Cause::Empty => write!(f, "file is empty"),
            Cause::TooLarge {
                bytes,
                limit,
                field: None,
            } => {
                write!(f, "file is {bytes} bytes, over the per-sample limit of {limit} bytes")
            }
            Cause::TooLarge {
                bytes,
                limit,
                field: Some(field),
            } => write!(
                f,
                "field {field:?} is {bytes} bytes, over its limit of {limit} bytes (its \
                 max_bytes)"
            ),
            Cause::UnknownFormat(modality) => {
                write!(f, "not {} (checked by content)", modality.formats())
            }
            Cause::TooManyPixels { width, height, limit } => write!(
                f,
                "image declares {width}x{height} pixels, over the limit of {limit} (decompression bomb guard)"
            ),
            Cause::TooLong { seconds, limit } => write!(
                f,
                "audio lasts {seconds} s or more, over the limit of {limit} s (raise \
                 max_seconds to load it)"
            ),
            Cause::Corrupt(msg) => write!(f, "cannot decode: {msg}"),
            Cause::Internal(msg) => write!(
                f,
                "nostall failed on it ({msg}); this is a bug in nostall or in a custom source: \
                 please report it"
            ),
            Cause::MissingField { field, members } => write!(
                f,
                "its record has no {members} member for field {field:?} (on_error=\"skip\" \
                 skips such samples)"
            ),
            Cause::BadText { field, reason } => write!(f, "field {field:?}: {reason}"),
            Cause::BadJson { field, reason } => {
                write!(f, "field {field:?} is not usable JSON: {reason}")
            }
            Cause::BadVector { field, reason } | Cause::BadTargets { field, reason } => {
                write!(f, "field {field:?}: {reason}")
            }
            Cause::UserCode { code, message } => write!(f, "{code} failed on it: {message}"),
            Cause::UnsupportedCodec(codec) => write!(
                f,
                "its video codec ({codec}) is not one this build's FFmpeg decodes"
            ),
            Cause::VideoTooLarge(what) => write!(f, "{what} (refused before decoding)"),
            Cause::Reported { message, .. } => f.write_str(message),
        }
    }
}

/// One sample that could not be delivered, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleError {
    /// The sample's id in the catalog.
    pub id: u64,
    /// Where the sample's bytes live, as a user would recognise it (a path).
    pub location: String,
    /// What went wrong.
    pub cause: Cause,
}

impl fmt::Display for SampleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sample {} ({}): {}", self.id, self.location, self.cause)
    }
}

impl std::error::Error for SampleError {}

/// An error that stops the loader. New kinds may come: match with a wildcard arm.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A sample failed under the `error` policy.
    Sample(SampleError),
    /// The configuration cannot work; the message says what to change.
    Config(String),
    /// The dataset or its index could not be read or written.
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A storage service (object store, remote peer) failed or refused a request that
    /// is not about one sample: listing a bucket, reaching the server.
    Storage {
        /// What was asked for, as a user would write it (e.g. `s3://bucket/prefix`).
        location: String,
        /// What went wrong and, where known, what to do about it.
        message: String,
    },
    /// A loader thread failed outside any one sample (a bug in nostall): the epoch
    /// stopped instead of waiting forever for it.
    Internal(String),
    /// A saved index is damaged or from an incompatible version.
    BadIndex {
        /// The index file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Error {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Sample(e) => write!(
                f,
                "{e} (use the `skip` error policy to skip and count such samples)"
            ),
            Error::Config(msg) => write!(f, "invalid configuration: {msg}"),
            Error::Io { path, source } => write!(f, "{}: {source}", path.display()),
            Error::Storage { location, message } => write!(f, "{location}: {message}"),
            Error::Internal(msg) => write!(
                f,
                "the loader stopped: {msg} (a bug in nostall: please report it)"
            ),
            Error::BadIndex { path, reason } => write!(
                f,
                "index {} is unusable ({reason}); delete it and nostall will re-scan",
                path.display()
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Sample(e) => Some(e),
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<UnknownName> for Error {
    fn from(e: UnknownName) -> Error {
        Error::Config(e.to_string())
    }
}

impl From<SampleError> for Error {
    fn from(e: SampleError) -> Error {
        Error::Sample(e)
    }
}

/// The result type of nostall's loader-level operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed_and_read_back() {
        let causes = [
            Cause::Missing,
            Cause::PermissionDenied,
            Cause::Io(String::new()),
            Cause::Empty,
            Cause::TooLarge {
                bytes: 2,
                limit: 1,
                field: None,
            },
            Cause::UnknownFormat(Modality::Image),
            Cause::TooManyPixels {
                width: 2,
                height: 2,
                limit: 1,
            },
            Cause::TooLong {
                seconds: 2,
                limit: 1,
            },
            Cause::Corrupt(String::new()),
            Cause::Internal(String::new()),
            Cause::MissingField {
                field: String::new(),
                members: String::new(),
            },
            Cause::BadText {
                field: String::new(),
                reason: String::new(),
            },
            Cause::BadJson {
                field: String::new(),
                reason: String::new(),
            },
            Cause::BadVector {
                field: String::new(),
                reason: String::new(),
            },
            Cause::BadTargets {
                field: String::new(),
                reason: String::new(),
            },
            Cause::UserCode {
                code: String::new(),
                message: String::new(),
            },
            Cause::UnsupportedCodec(String::new()),
        ];
        let kinds: Vec<&str> = causes.iter().map(Cause::kind).collect();
        assert_eq!(kinds, Cause::KINDS);
        // A video over its limits counts where any sample over its size does.
        assert_eq!(Cause::VideoTooLarge(String::new()).kind(), "too-large");
        for kind in kinds {
            assert_eq!(Cause::kind_named(kind), Some(kind));
        }
        assert_eq!(Cause::kind_named("bogus"), None);
    }
}

/// docs/architecture.md against the code: its table of causes names every [`Cause`] by
/// the name users see ([`Cause::kind`]), and nothing else.
#[cfg(test)]
mod architecture_doc {
    use super::*;

    /// The page, as the crate is built with it.
    const ARCHITECTURE: &str = include_str!("../../../docs/architecture.md");

    /// The section of `page` under the heading `heading`, up to the next of its level.
    fn section<'a>(page: &'a str, heading: &str) -> &'a str {
        let start = page
            .find(&format!("\n{heading}\n"))
            .unwrap_or_else(|| panic!("docs/architecture.md has no {heading:?}"));
        let rest = &page[start + heading.len() + 2..];
        &rest[..rest.find("\n## ").unwrap_or(rest.len())]
    }

    /// The first cell of each row of the section's tables that starts with a code span.
    fn listed_causes(errors: &str) -> Vec<&str> {
        errors
            .lines()
            .filter_map(|line| line.strip_prefix("| `"))
            .filter_map(|row| row.split('`').next())
            .collect()
    }

    #[test]
    fn architecture_lists_every_cause_by_its_name() {
        // `Cause::KINDS` is every variant's kind (the test above).
        let kinds = Cause::KINDS;
        let listed = listed_causes(section(ARCHITECTURE, "## Errors"));
        // The names of `these` that `those` lacks.
        let lacking = |these: &[&'static str], those: &[&str]| -> Vec<&'static str> {
            these
                .iter()
                .copied()
                .filter(|n| !those.contains(n))
                .collect()
        };
        let missing = lacking(&kinds, &listed);
        assert!(
            missing.is_empty(),
            "docs/architecture.md, \"Errors\": no row for the causes {missing:?}; add a line \
             for each to its table of causes"
        );
        let unknown = lacking(&listed, &kinds);
        assert!(
            unknown.is_empty(),
            "docs/architecture.md, \"Errors\": {unknown:?} name no cause (Cause::kind)"
        );
    }
}
