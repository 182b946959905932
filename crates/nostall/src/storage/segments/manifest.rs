//! Manifests: the lists of segments that speech and audio corpora keep beside their
//! recordings, one row per sample.
//!
//! - **JSON lines** (`.jsonl`, or `.json` holding one object per line, as NeMo writes
//!   them): `audio_filepath` (or `path`, `audio`, `video`), `offset` (or `start`,
//!   seconds, default 0), `duration` or `end` (seconds; absent: to the recording's end),
//!   `label` (a class name, or a class number), `text` (or `transcript`, `caption`: what
//!   is said or shown, for a loader given a text field); other keys are ignored.
//! - **CSV** (`.csv`): a header row naming the same columns (`path`, `start`, `duration`,
//!   `end`, `label`, `text`, or NeMo's names), then one row per segment; fields may be
//!   quoted as RFC 4180 quotes them.
//!
//! Paths are relative to the manifest's directory (or prefix), or absolute (local
//! manifests only). Every problem names the manifest and its line.
//!
//! Times lie between 0 and a day, the longest recording segments are cut from; a line
//! is at most [`MAX_LINE`] bytes long. Both bound what a damaged manifest can ask of the
//! index (a line of megabytes is not a row, and `1e300` s is no time in a recording).

use crate::error::{Error, Result};
use crate::prep::audio::MAX_RECORDING_SECONDS;

/// The longest line (a CSV row, quoted newlines and all): room for a path, the times, a
/// label and the transcript of an hour of speech.
const MAX_LINE: usize = 1 << 20;

/// One row: a segment of a recording.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    /// The recording, as the manifest gives it.
    pub(crate) path: String,
    /// Seconds from the recording's start.
    pub(crate) start: f64,
    /// Seconds; `None`: to the recording's end.
    pub(crate) duration: Option<f64>,
    pub(crate) label: Option<Label>,
    /// What is said in it (its transcript), if the manifest gives it.
    pub(crate) text: Option<String>,
}

/// A row's class.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Label {
    /// A class number, as given.
    Number(u32),
    /// A class name; names are numbered in sorted order.
    Name(String),
}

const PATH_KEYS: [&str; 4] = ["audio_filepath", "path", "audio", "video"];
const START_KEYS: [&str; 2] = ["offset", "start"];
const DURATION_KEYS: [&str; 1] = ["duration"];
const END_KEYS: [&str; 1] = ["end"];
const LABEL_KEYS: [&str; 1] = ["label"];
const TEXT_KEYS: [&str; 3] = ["text", "transcript", "caption"];

/// Whether a file's name is a manifest's: `.jsonl`, `.json` or `.csv`.
pub(crate) fn is_manifest(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    [".jsonl", ".json", ".csv"]
        .iter()
        .any(|ext| name.ends_with(ext))
}

/// The rows of manifest `name` (its file name decides the format), whose bytes are `text`.
///
/// # Errors
///
/// [`Error::Config`] naming the manifest and the line: not UTF-8, a line over
/// [`MAX_LINE`] bytes, a row without a path, a time that is not a number of seconds from
/// 0 to a day, a label neither a name nor a class number, or no rows at all.
pub(crate) fn parse(name: &str, text: &[u8]) -> Result<Vec<Row>> {
    let text = std::str::from_utf8(text)
        .map_err(|e| Error::Config(format!("{name}: the manifest is not UTF-8 text ({e})")))?;
    let rows = if name.to_ascii_lowercase().ends_with(".csv") {
        csv(name, text)?
    } else {
        json_lines(name, text)?
    };
    if rows.is_empty() {
        return Err(Error::Config(format!(
            "{name}: the manifest lists no segments"
        )));
    }
    Ok(rows)
}

/// What a row's fields hold, by the column they came from, before they are checked.
struct Fields<'a> {
    path: Option<&'a str>,
    start: Option<Value<'a>>,
    duration: Option<Value<'a>>,
    end: Option<Value<'a>>,
    label: Option<Value<'a>>,
    text: Option<&'a str>,
}

/// A field: a number, or text (CSV fields are text that may read as numbers).
#[derive(Debug, Clone, Copy)]
enum Value<'a> {
    // Only JSON has numbers.
    #[cfg_attr(not(feature = "manifest"), allow(dead_code))]
    Number(f64),
    Text(&'a str),
}

impl Fields<'_> {
    fn row(self, name: &str, line: usize) -> Result<Row> {
        let bad = |what: String| Error::Config(format!("{name}, line {line}: {what}"));
        let path = self
            .path
            .filter(|p| !p.is_empty())
            .ok_or_else(|| bad(format!("no path (give {})", PATH_KEYS.join(", or "))))?;
        let seconds = |value: Option<Value<'_>>, what: &str| -> Result<Option<f64>> {
            let seconds = match value {
                None | Some(Value::Text("")) => return Ok(None),
                Some(Value::Number(n)) => n,
                Some(Value::Text(text)) => text
                    .trim()
                    .parse()
                    .map_err(|_| bad(format!("{what} {text:?} is not a number of seconds")))?,
            };
            // Huge numbers shown as `1e300`, not as three hundred digits.
            let shown = if seconds.abs() < 1e15 {
                seconds.to_string()
            } else {
                format!("{seconds:e}")
            };
            if !(seconds.is_finite() && seconds >= 0.0) {
                return Err(bad(format!("{what} {shown} is not a time at or after 0 s")));
            }
            if seconds > f64::from(MAX_RECORDING_SECONDS) {
                return Err(bad(format!(
                    "{what} {shown} s is past a day ({MAX_RECORDING_SECONDS} s), the \
                     longest recording segments are cut from (are the times in seconds?)"
                )));
            }
            Ok(Some(seconds))
        };
        let start = seconds(self.start, "the start")?.unwrap_or(0.0);
        let duration = match (seconds(self.duration, "the duration")?, self.end) {
            (duration, None | Some(Value::Text(""))) => duration,
            (None, end) => {
                let end = seconds(end, "the end")?.expect("given");
                if end <= start {
                    return Err(bad(format!(
                        "the end {end} s is not after the start {start} s"
                    )));
                }
                Some(end - start)
            }
            (Some(_), Some(_)) => {
                return Err(bad("it gives both a duration and an end; give one".into()))
            }
        };
        if duration == Some(0.0) {
            return Err(bad("the duration is 0 s".into()));
        }
        let label = match self.label {
            None | Some(Value::Text("")) => None,
            Some(Value::Number(n)) if n >= 0.0 && n.fract() == 0.0 && n <= f64::from(u32::MAX) => {
                Some(Label::Number(n as u32))
            }
            Some(Value::Number(n)) => {
                return Err(bad(format!(
                    "the label {n} is neither a class number (0, 1, …) nor a name"
                )))
            }
            Some(Value::Text(text)) => Some(Label::Name(text.to_string())),
        };
        Ok(Row {
            path: path.to_string(),
            start,
            duration,
            label,
            text: self.text.map(str::to_string),
        })
    }
}

#[cfg(feature = "manifest")]
fn json_lines(name: &str, text: &str) -> Result<Vec<Row>> {
    use serde_json::Value as Json;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line_number = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |what: String| Error::Config(format!("{name}, line {line_number}: {what}"));
        if line.len() > MAX_LINE {
            return Err(bad(too_long()));
        }
        let object: serde_json::Map<String, Json> = serde_json::from_str(line).map_err(|e| {
            bad(format!(
                "not a JSON object ({e}); a manifest holds one per line"
            ))
        })?;
        let field = |keys: &[&str]| keys.iter().find_map(|k| object.get(*k));
        let value = |keys: &[&str], what: &str| -> Result<Option<Value<'_>>> {
            match field(keys) {
                None | Some(Json::Null) => Ok(None),
                Some(Json::Number(n)) => Ok(n.as_f64().map(Value::Number)),
                Some(Json::String(s)) => Ok(Some(Value::Text(s))),
                Some(other) => Err(bad(format!("its {what} is {other}, not a number or text"))),
            }
        };
        let path = match field(&PATH_KEYS) {
            Some(Json::String(path)) => Some(path.as_str()),
            Some(other) => return Err(bad(format!("its path is {other}, not text"))),
            None => None,
        };
        let text = match field(&TEXT_KEYS) {
            Some(Json::String(text)) => Some(text.as_str()),
            None | Some(Json::Null) => None,
            Some(other) => return Err(bad(format!("its text is {other}, not text"))),
        };
        let fields = Fields {
            path,
            start: value(&START_KEYS, "start")?,
            duration: value(&DURATION_KEYS, "duration")?,
            end: value(&END_KEYS, "end")?,
            label: value(&LABEL_KEYS, "label")?,
            text,
        };
        rows.push(fields.row(name, line_number)?);
    }
    Ok(rows)
}

#[cfg(not(feature = "manifest"))]
fn json_lines(name: &str, _: &str) -> Result<Vec<Row>> {
    Err(Error::Config(format!(
        "{name}: this build of nostall reads no JSON manifests; rebuild with the `manifest` \
         feature, or give a CSV manifest"
    )))
}

fn csv(name: &str, text: &str) -> Result<Vec<Row>> {
    let mut records = Records::new(text.strip_prefix('\u{feff}').unwrap_or(text));
    let first = records.next().transpose();
    let Some((_, header)) = first.map_err(|e| Error::Config(format!("{name}, {e}")))? else {
        return Ok(Vec::new());
    };
    let column = |keys: &[&str]| {
        header
            .iter()
            .position(|h| keys.iter().any(|k| h.trim().eq_ignore_ascii_case(k)))
    };
    let columns = [
        column(&PATH_KEYS),
        column(&START_KEYS),
        column(&DURATION_KEYS),
        column(&END_KEYS),
        column(&LABEL_KEYS),
        column(&TEXT_KEYS),
    ];
    if columns[0].is_none() {
        return Err(Error::Config(format!(
            "{name}, line 1: the header names no path column ({}); a CSV manifest starts \
             with a header row such as path,start,duration,label",
            PATH_KEYS.join(", ")
        )));
    }
    let mut rows = Vec::new();
    for record in records {
        let (line, fields) = record.map_err(|e| Error::Config(format!("{name}, {e}")))?;
        if fields.iter().all(|f| f.is_empty()) {
            continue;
        }
        let get = |c: Option<usize>| c.and_then(|c| fields.get(c)).map(String::as_str);
        let text = |c| get(c).map(Value::Text);
        let row = Fields {
            path: get(columns[0]),
            start: text(columns[1]),
            duration: text(columns[2]),
            end: text(columns[3]),
            label: text(columns[4]),
            text: get(columns[5]),
        };
        rows.push(row.row(name, line)?);
    }
    Ok(rows)
}

/// What a line over [`MAX_LINE`] bytes is told.
fn too_long() -> String {
    format!(
        "the line is over {MAX_LINE} bytes long, the limit for a row (is this a manifest, \
         with one row per line?)"
    )
}

/// CSV records (RFC 4180: fields separated by commas, optionally quoted, a quote doubled
/// inside quotes), each with the line it starts on; a record over [`MAX_LINE`] bytes is
/// an error.
struct Records<'a> {
    rest: std::iter::Peekable<std::str::Chars<'a>>,
    line: usize,
}

impl<'a> Records<'a> {
    fn new(text: &'a str) -> Records<'a> {
        Records {
            rest: text.chars().peekable(),
            line: 1,
        }
    }
}

impl Iterator for Records<'_> {
    type Item = std::result::Result<(usize, Vec<String>), String>;

    fn next(&mut self) -> Option<Self::Item> {
        self.rest.peek()?;
        let line = self.line;
        let mut fields = vec![String::new()];
        let mut quoted = false;
        let mut bytes = 0;
        while let Some(c) = self.rest.next() {
            bytes += c.len_utf8();
            if bytes > MAX_LINE {
                // The rest of the text is not read: the error ends the manifest's parse.
                return Some(Err(format!("line {line}: {}", too_long())));
            }
            let field = fields.last_mut().expect("one field at least");
            match c {
                '"' if quoted && self.rest.peek() == Some(&'"') => {
                    self.rest.next();
                    field.push('"');
                }
                '"' if quoted => quoted = false,
                '"' if field.is_empty() => quoted = true,
                '\n' if quoted => {
                    self.line += 1;
                    field.push(c);
                }
                ',' if !quoted => fields.push(String::new()),
                '\n' => {
                    self.line += 1;
                    break;
                }
                '\r' if !quoted && self.rest.peek() == Some(&'\n') => {}
                _ => field.push(c),
            }
        }
        if quoted {
            return Some(Err(format!("line {line}: a quoted field is never closed")));
        }
        Some(Ok((line, fields)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_rows_with_quotes_and_nemo_names() {
        let text = "audio_filepath,offset,duration,label\n\
                    a.flac,0,5,speech\r\n\
                    \"b, \"\"two\"\".opus\",12.5,,music\n\
                    \n\
                    c.wav,,4,\n";
        let rows = parse("m.csv", text.as_bytes()).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].path, "a.flac");
        assert_eq!(rows[0].duration, Some(5.0));
        assert_eq!(rows[0].label, Some(Label::Name("speech".into())));
        assert_eq!(rows[1].path, "b, \"two\".opus");
        assert_eq!((rows[1].start, rows[1].duration), (12.5, None));
        assert_eq!((rows[2].start, rows[2].label.clone()), (0.0, None));
    }

    #[test]
    fn an_end_is_a_duration_from_the_start() {
        let text = "{\"video\": \"a.mp4\", \"start\": 1.5, \"end\": 4, \"caption\": \"a dog\"}\n\
                    {\"video\": \"b.mp4\", \"end\": 2}\n";
        let rows = parse("m.jsonl", text.as_bytes()).unwrap();
        assert_eq!((rows[0].start, rows[0].duration), (1.5, Some(2.5)));
        assert_eq!(rows[0].text.as_deref(), Some("a dog"));
        assert_eq!((rows[1].start, rows[1].duration), (0.0, Some(2.0)));
        let rows = parse("m.csv", b"path,start,end\na.mp4,2,3.5\nb.mp4,1,\n").unwrap();
        assert_eq!((rows[0].start, rows[0].duration), (2.0, Some(1.5)));
        assert_eq!((rows[1].start, rows[1].duration), (1.0, None));
        let err = |text: &str| parse("m.csv", text.as_bytes()).unwrap_err().to_string();
        assert!(err("path,start,end\na.mp4,2,2\n").contains("line 2: the end 2 s is not after"));
        assert!(err("path,duration,end\na.mp4,2,3\n").contains("both a duration and an end"));
        assert!(err("path,end\na.mp4,soon\n").contains("the end \"soon\""));
    }

    #[test]
    fn csv_problems_name_the_line() {
        let err = |text: &str| parse("m.csv", text.as_bytes()).unwrap_err().to_string();
        assert!(err("file,start\na.wav,1\n").contains("line 1: the header names no path"));
        assert!(err("path,start\na.wav,1\nb.wav,soon\n").contains("line 3: the start \"soon\""));
        assert!(err("path,start\na.wav,-1\n").contains("line 2"));
        assert!(err("path,duration\na.wav,0\n").contains("the duration is 0 s"));
        assert!(err("path\n\"a.wav\n").contains("never closed"));
        assert!(err("path\n").contains("lists no segments"));
    }

    #[test]
    fn times_that_are_not_seconds_of_a_recording_name_the_line() {
        let err = |text: &str| parse("m.csv", text.as_bytes()).unwrap_err().to_string();
        for time in ["1e300", "86400.5", "inf", "NaN", "-1", "-1e300"] {
            let error = err(&format!("path,start\na.wav,1\nb.wav,{time}\n"));
            assert!(
                error.contains("m.csv, line 3: the start"),
                "{time}: {error}"
            );
            let error = err(&format!("path,duration\na.wav,{time}\n"));
            assert!(
                error.contains("m.csv, line 2: the duration"),
                "{time}: {error}"
            );
        }
        let error = err("path,start\na.wav,1e300\n");
        assert!(error.contains("the start 1e300 s is past a day"), "{error}");
        // A day is the last time there is.
        let rows = parse("m.csv", b"path,start,duration\na.wav,86400,86400\n").unwrap();
        assert_eq!(
            (rows[0].start, rows[0].duration),
            (86_400.0, Some(86_400.0))
        );
    }

    #[test]
    fn a_line_over_the_limit_is_refused_by_its_number() {
        let long = "a".repeat(MAX_LINE);
        let error = parse("m.csv", format!("path\nb.wav\n{long}.wav\n").as_bytes())
            .unwrap_err()
            .to_string();
        assert!(error.contains("m.csv, line 3: the line is over"), "{error}");
        // Quoted newlines count in their row's length.
        let half = "b\n".repeat(MAX_LINE / 3);
        let text = format!("path\n\"{half}\",\"{half}\"\n");
        let error = parse("m.csv", text.as_bytes()).unwrap_err().to_string();
        assert!(error.contains("m.csv, line 2: the line is over"), "{error}");
        // A row just within the limit is one.
        let path = "a".repeat(MAX_LINE - 1);
        assert_eq!(
            parse("m.csv", format!("path\n{path}\n").as_bytes()).unwrap()[0].path,
            path
        );
    }

    #[cfg(feature = "manifest")]
    #[test]
    fn a_json_line_over_the_limit_or_with_a_time_past_a_day_is_refused_by_its_number() {
        let err = |text: &str| parse("m.jsonl", text.as_bytes()).unwrap_err().to_string();
        let text = format!(
            "{{\"path\": \"a.wav\"}}\n{{\"path\": \"b.wav\", \"text\": \"{}\"}}\n",
            "a".repeat(10 << 20)
        );
        let error = err(&text);
        assert!(
            error.contains("m.jsonl, line 2: the line is over"),
            "{error}"
        );
        let error = err("{\"path\": \"a.wav\", \"offset\": 1e300}\n");
        assert!(
            error.contains("line 1: the start 1e300 s is past a day"),
            "{error}"
        );
        let error = err("{\"path\": \"a.wav\", \"duration\": -1e300}\n");
        assert!(
            error.contains("line 1: the duration -1e300 is not a time"),
            "{error}"
        );
    }

    #[cfg(feature = "manifest")]
    #[test]
    fn json_lines_as_nemo_writes_them() {
        let text = r#"{"audio_filepath": "/data/a.flac", "offset": 3.25, "duration": 4, "text": "hello"}
{"path": "b.opus", "label": 2}

{"audio": "c.wav", "start": 1, "label": null}
"#;
        let rows = parse("train.json", text.as_bytes()).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!((rows[0].start, rows[0].duration), (3.25, Some(4.0)));
        assert_eq!(rows[0].label, None);
        assert_eq!(rows[1].label, Some(Label::Number(2)));
        assert_eq!((rows[2].path.as_str(), rows[2].start), ("c.wav", 1.0));
        let err = |text: &str| parse("m.jsonl", text.as_bytes()).unwrap_err().to_string();
        assert!(err("{\"path\": \"a\"}\n[1]\n").contains("line 2: not a JSON object"));
        assert!(err("{\"path\": 3}\n").contains("its path is 3"));
        assert!(err("{\"path\": \"a\", \"label\": 1.5}\n").contains("neither a class number"));
        assert!(err("{\"path\": \"a\", \"duration\": \"long\"}\n").contains("not a number"));
    }
}
