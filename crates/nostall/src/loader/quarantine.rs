//! The quarantine file: every skipped sample, one JSON object a line, for cleaning a
//! dataset after a run.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Error, Result, SampleError};

/// An append-only JSON-lines file of skipped samples, shared by a loader's epochs.
#[derive(Debug)]
pub(crate) struct Quarantine {
    path: PathBuf,
    file: Mutex<File>,
}

impl Quarantine {
    /// Opens `path` for appending (a resumed run adds to what the first part wrote).
    ///
    /// A symbolic link at `path` is refused rather than followed: a link planted where a
    /// job writes its quarantine (a shared folder, say) would have it append to a file of
    /// the planter's choosing.
    pub(crate) fn open(path: &Path) -> Result<Quarantine> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        Ok(Quarantine {
            path: path.to_path_buf(),
            file: Mutex::new(file),
        })
    }

    /// Appends one skipped sample. Each line goes out in one write, so that lines of a
    /// run that is killed stay whole.
    pub(crate) fn record(&self, epoch: u64, error: &SampleError) -> Result<()> {
        let line = format!(
            "{{\"epoch\":{epoch},\"sample_id\":{},\"location\":{},\"cause\":{},\"detail\":{}}}\n",
            error.id,
            json_string(&error.location),
            json_string(error.cause.kind()),
            json_string(&error.cause.to_string()),
        );
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        file.write_all(line.as_bytes())
            .map_err(|e| Error::io(&self.path, e))
    }
}

/// `text` as a JSON string literal.
fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if u32::from(c) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symbolic_link_in_place_of_the_file_is_refused_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "untouched\n").unwrap();
        let link = dir.path().join("quarantine.jsonl");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = Quarantine::open(&link).unwrap_err().to_string();
        assert!(err.contains("quarantine.jsonl"), "{err}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched\n");
        // A plain file there is opened and appended to.
        let plain = dir.path().join("plain.jsonl");
        std::fs::write(&plain, "kept\n").unwrap();
        assert!(Quarantine::open(&plain).is_ok());
    }

    #[test]
    fn strings_are_escaped_as_json() {
        let text = "a \"b\" \\ c\nd\u{1b}[31m\u{0}é";
        let quoted = json_string(text);
        assert_eq!(quoted, r#""a \"b\" \\ c\nd\u001b[31m\u0000é""#);
        let parsed: String = serde_json::from_str(&quoted).unwrap();
        assert_eq!(parsed, text);
    }
}
