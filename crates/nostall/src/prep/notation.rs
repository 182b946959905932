//! The operators' text form: how a list of operators is written for a person, a command
//! line or another process, and read back.
//!
//! It is Python's. An operator is written as the `repr` of its `nostall.ops` or
//! `nostall.audio` object, `RandomSolarize(threshold=128.0, p=0.5)`, and a pipeline as
//! the list's, `[Resize(size=256, interpolation='bilinear', antialias=True),
//! CenterCrop(size=(224, 224))]`. Written, every parameter is named
//! and every float is in the shortest form that reads back to the same bits, so what is
//! read back is the same operators: the `pipeline` setting carries a list of operators to
//! the node agent this way, and the agent groups jobs by that text. Read, the parameters
//! are those of the Python classes, by position or by keyword, with the same defaults, so
//! a command line may say `pipeline="[Resize(256), CenterCrop(224)]"`.
//!
//! Both ways go through the operators' declarations ([`image::DECLARATIONS`],
//! [`audio::DECLARATIONS`]): their names, their parameters and their defaults.
//!
//! The text may come from another process. Reading it allocates in proportion to its
//! length, recurses only into lists of operators and at most [`MAX_NESTING`] deep (a tuple
//! holds numbers only), and validates every operator it makes.

use std::fmt;
use std::str::FromStr;

use super::args::{Keywords, Value};
use super::audio::{self, AudioOp};
use super::image::op::MAX_NESTING;
use super::image::{self, Op};
use super::video::{self, VideoOp};
use crate::error::{Error, Result};

/// A pipeline given as operators: all of images, all of audio, or a video's clip and the
/// image operators its frames go through.
#[derive(Debug, Clone, PartialEq)]
pub enum Operators {
    /// Image operators ([`Op`]).
    Image(Vec<Op>),
    /// Audio operators ([`AudioOp`]).
    Audio(Vec<AudioOp>),
    /// Several views of each image, each its own list of image operators (written as a
    /// list of lists).
    Views(Vec<Vec<Op>>),
    /// A video's [`Clip`](video::Clip) (written first) and the image operators each frame
    /// goes through.
    Video(VideoOp, Vec<Op>),
    /// Several views of each video, each its own [`Clip`](video::Clip) and image
    /// operators (written as a list of lists, each starting with its clip).
    VideoViews(Vec<(VideoOp, Vec<Op>)>),
}

impl Operators {
    /// Whether `text` is written as operators rather than as a preset's name.
    pub fn written_in(text: &str) -> bool {
        text.contains('(') || text.trim_start().starts_with('[')
    }

    /// Whether a function of the caller's is among them (its text names it only: it
    /// does not read back).
    pub fn call_user_code(&self) -> bool {
        let image = |ops: &[Op]| ops.iter().any(|op| op.name() == "Python");
        match self {
            Operators::Image(ops) | Operators::Video(_, ops) => image(ops),
            Operators::Views(views) => views.iter().any(|ops| image(ops)),
            Operators::VideoViews(views) => views.iter().any(|(_, ops)| image(ops)),
            Operators::Audio(ops) => ops.iter().any(|op| op.name() == "Python"),
        }
    }
}

impl FromStr for Operators {
    type Err = Error;

    /// A list of operators, bracketed or not: `[Resize(256), CenterCrop(224)]`.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] saying where the text stops making sense, or naming the operator
    /// and parameter that is unknown, missing or out of its bounds.
    fn from_str(text: &str) -> Result<Operators> {
        if Reader::new(text).lists_views() {
            let views = Reader::new(text).views()?;
            let clip = |calls: &[Call<'_>]| {
                calls
                    .first()
                    .is_some_and(|c| video::Declaration::find(c.name).is_some())
            };
            if views.iter().any(|calls| clip(calls)) {
                return video_views(views);
            }
            let views = views
                .into_iter()
                .map(|calls| calls.into_iter().map(image_op).collect::<Result<Vec<_>>>())
                .collect::<Result<_>>()?;
            return Ok(Operators::Views(views));
        }
        let mut calls = Reader::new(text).pipeline()?;
        if calls
            .first()
            .is_some_and(|c| video::Declaration::find(c.name).is_some())
        {
            let clip = video_op(calls.remove(0))?;
            if let Some(c) = calls
                .iter()
                .find(|c| video::Declaration::find(c.name).is_some())
            {
                return Err(video::not_video(&format!("a second {}", c.name)));
            }
            let ops = calls.into_iter().map(image_op).collect::<Result<_>>()?;
            return Ok(Operators::Video(clip, ops));
        }
        if let Some(c) = calls
            .iter()
            .find(|c| video::Declaration::find(c.name).is_some())
        {
            return Err(video::not_video(&format!("{} is not first", c.name)));
        }
        let image = |c: &Call<'_>| image::Declaration::find(c.name).is_some();
        let audio = |c: &Call<'_>| audio::Declaration::find(c.name).is_some();
        if let Some(call) = calls.iter().find(|c| !image(c) && !audio(c)) {
            let images: Vec<_> = image::DECLARATIONS.iter().map(|d| d.name).collect();
            let audio: Vec<_> = audio::DECLARATIONS.iter().map(|d| d.name).collect();
            return Err(Error::Config(format!(
                "unknown operator {:?}: the image operators are {}; the audio operators are {}",
                call.name,
                images.join(", "),
                audio.join(", ")
            )));
        }
        let audio_only = calls.iter().find(|c| !image(c));
        let image_only = calls.iter().find(|c| !audio(c));
        let audio = match (audio_only, image_only) {
            (Some(a), Some(i)) => {
                return Err(Error::Config(format!(
                    "{} is an audio operator and {} an image operator: a pipeline's \
                     operators are all of images or all of audio",
                    a.name, i.name
                )))
            }
            (Some(_), None) => true,
            (None, Some(_)) => false,
            // Only crops, which both have: audio's take a length.
            (None, None) => calls
                .iter()
                .any(|c| c.args.iter().any(|(key, _)| *key == Some("length"))),
        };
        if audio {
            let ops = calls.into_iter().map(audio_op).collect::<Result<_>>()?;
            Ok(Operators::Audio(ops))
        } else {
            let ops = calls.into_iter().map(image_op).collect::<Result<_>>()?;
            Ok(Operators::Image(ops))
        }
    }
}

impl FromStr for Op {
    type Err = Error;

    /// One image operator as Python writes it: `Resize(256)`, `RandomSolarize(threshold=128)`.
    ///
    /// # Errors
    ///
    /// As [`Operators`]' reading.
    fn from_str(text: &str) -> Result<Op> {
        let mut reader = Reader::new(text);
        reader.space();
        let call = reader.call()?;
        reader.space();
        if !reader.rest().is_empty() {
            return Err(reader.error("the end of the operator"));
        }
        image_op(call)
    }
}

impl fmt::Display for Operators {
    /// The list's `repr`: `[op, op, ...]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn list<T: fmt::Display>(f: &mut fmt::Formatter<'_>, ops: &[T]) -> fmt::Result {
            f.write_str("[")?;
            for (i, op) in ops.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{op}")?;
            }
            f.write_str("]")
        }
        fn video(f: &mut fmt::Formatter<'_>, clip: &VideoOp, ops: &[Op]) -> fmt::Result {
            write!(f, "[{clip}")?;
            for op in ops {
                write!(f, ", {op}")?;
            }
            f.write_str("]")
        }
        match self {
            Operators::Image(ops) => list(f, ops),
            Operators::Audio(ops) => list(f, ops),
            Operators::Video(clip, ops) => video(f, clip, ops),
            Operators::VideoViews(views) => {
                f.write_str("[")?;
                for (i, (clip, ops)) in views.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    video(f, clip, ops)?;
                }
                f.write_str("]")
            }
            Operators::Views(views) => {
                f.write_str("[")?;
                for (i, ops) in views.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    list(f, ops)?;
                }
                f.write_str("]")
            }
        }
    }
}

/// One operator as written: its name and its arguments, each by position (no key) or by
/// keyword.
#[derive(Debug)]
struct Call<'a> {
    name: &'a str,
    args: Vec<(Option<&'a str>, Value)>,
}

impl Call<'_> {
    /// The arguments by position, then by keyword.
    fn split(self) -> Result<(Vec<Value>, Keywords)> {
        let (mut positional, mut keywords) = (Vec::new(), Vec::new());
        for (key, value) in self.args {
            match key {
                Some(key) => keywords.push((key.to_string(), value)),
                None if keywords.is_empty() => positional.push(value),
                None => {
                    return Err(Error::Config(format!(
                        "{}: a positional argument follows a keyword argument",
                        self.name
                    )))
                }
            }
        }
        Ok((positional, keywords))
    }
}

/// A value as Python writes it: a number, a string, `None`, `True`, `False`, a tuple of
/// numbers, or a list of image operators (what [`Param`]s' defaults are written in).
pub(crate) fn read_value(text: &str) -> Result<Value> {
    let mut reader = Reader::new(text);
    reader.space();
    let value = reader.value()?;
    reader.space();
    if !reader.rest().is_empty() {
        return Err(reader.error("the end of the value"));
    }
    Ok(value)
}

/// Reads the text form's grammar (not what the operators mean).
struct Reader<'a> {
    text: &'a str,
    at: usize,
    depth: usize,
}

impl<'a> Reader<'a> {
    fn new(text: &'a str) -> Reader<'a> {
        Reader {
            text,
            at: 0,
            depth: 0,
        }
    }

    fn pipeline(mut self) -> Result<Vec<Call<'a>>> {
        self.space();
        let bracketed = self.eat('[');
        let calls = self.calls(bracketed)?;
        self.space();
        if !self.rest().is_empty() {
            return Err(self.error("the end of the list"));
        }
        Ok(calls)
    }

    /// Whether the text is a list of lists (views).
    fn lists_views(mut self) -> bool {
        self.space();
        if !self.eat('[') {
            return false;
        }
        self.space();
        self.eat('[')
    }

    /// Views: bracketed lists of calls in a bracketed list, to the end.
    fn views(mut self) -> Result<Vec<Vec<Call<'a>>>> {
        self.space();
        self.expect('[', "'[' opening the list of views")?;
        let mut views = Vec::new();
        loop {
            self.space();
            if self.eat(']') {
                break;
            }
            self.expect('[', "'[' opening a view's list of operators")?;
            views.push(self.calls(true)?);
            self.space();
            if !self.eat(',') {
                self.expect(']', "a comma or the closing ']' of the list of views")?;
                break;
            }
        }
        self.space();
        if !self.rest().is_empty() {
            return Err(self.error("the end of the list of views"));
        }
        Ok(views)
    }

    /// Calls separated by commas, up to the list's `]` where `bracketed` (eaten), else to
    /// the end.
    fn calls(&mut self, bracketed: bool) -> Result<Vec<Call<'a>>> {
        let mut calls = Vec::new();
        loop {
            self.space();
            if (bracketed && self.eat(']')) || (!bracketed && self.rest().is_empty()) {
                break;
            }
            calls.push(self.call()?);
            self.space();
            if !self.eat(',') {
                if bracketed {
                    self.expect(']', "a comma or the list's closing ']'")?;
                }
                break;
            }
        }
        Ok(calls)
    }

    fn call(&mut self) -> Result<Call<'a>> {
        let Some(name) = self.word() else {
            return Err(self.error("an operator, e.g. Resize(256)"));
        };
        self.space();
        self.expect('(', "'(' after the operator's name")?;
        let mut args = Vec::new();
        loop {
            self.space();
            if self.eat(')') {
                break;
            }
            let key = self.keyword();
            args.push((key, self.value()?));
            self.space();
            if !self.eat(',') {
                self.expect(')', "a comma or the operator's closing ')'")?;
                break;
            }
        }
        Ok(Call { name, args })
    }

    /// `name=`, or nothing (the reader stays where it was).
    fn keyword(&mut self) -> Option<&'a str> {
        let start = self.at;
        if let Some(word) = self.word() {
            self.space();
            if self.eat('=') {
                self.space();
                return Some(word);
            }
        }
        self.at = start;
        None
    }

    fn value(&mut self) -> Result<Value> {
        if self.rest().starts_with('[') {
            let start = self.at;
            self.at += 1;
            self.space();
            let operators = self.rest().starts_with(|c: char| c.is_ascii_alphabetic());
            self.at = start;
            if operators {
                return self.operators();
            }
        }
        if let Some(close) = [('(', ')'), ('[', ']')]
            .into_iter()
            .find_map(|(open, close)| self.eat(open).then_some(close))
        {
            let mut items = Vec::new();
            loop {
                self.space();
                if self.eat(close) {
                    break;
                }
                let Some(number) = self.number()? else {
                    return Err(self.error("a number (a tuple holds numbers only)"));
                };
                items.push(number);
                self.space();
                if !self.eat(',') {
                    self.expect(close, "a comma or the tuple's end")?;
                    break;
                }
            }
            return Ok(Value::Tuple(items));
        }
        if let Some(quote) = ['\'', '"'].into_iter().find(|&q| self.eat(q)) {
            let Some(len) = self.rest().find(quote) else {
                return Err(self.error("the string's closing quote"));
            };
            let text = &self.rest()[..len];
            self.at += len + 1;
            return Ok(Value::Str(text.into()));
        }
        let start = self.at;
        match self.word() {
            Some("None") => return Ok(Value::None),
            Some("True") => return Ok(Value::Bool(true)),
            Some("False") => return Ok(Value::Bool(false)),
            _ => self.at = start,
        }
        match self.number()? {
            Some(number) => Ok(number),
            None => {
                Err(self
                    .error("a value: a number, a tuple of numbers, a string, True, False or None"))
            }
        }
    }

    /// A list of image operators, `[Op(...), ...]`, each made and checked.
    fn operators(&mut self) -> Result<Value> {
        if self.depth == MAX_NESTING {
            return Err(self.error(&format!(
                "no more than {MAX_NESTING} levels of lists of operators"
            )));
        }
        self.depth += 1;
        self.expect('[', "'['")?;
        let calls = self.calls(true)?;
        self.depth -= 1;
        let ops = calls.into_iter().map(image_op).collect::<Result<_>>()?;
        Ok(Value::Ops(ops))
    }

    /// A number: an int where it has only digits and a sign, else a float as Python
    /// writes one (`inf` and `nan` only behind a sign, as no word is a number).
    fn number(&mut self) -> Result<Option<Value>> {
        let rest = self.rest();
        if !rest.starts_with(|c: char| c.is_ascii_digit() || "+-.".contains(c)) {
            return Ok(None);
        }
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || "+-._".contains(c)))
            .unwrap_or(rest.len());
        let text = &rest[..len];
        let value = if text.bytes().skip(1).all(|b| b.is_ascii_digit()) {
            text.parse().ok().map(Value::Int)
        } else {
            None
        };
        let Some(value) = value.or_else(|| text.parse().ok().map(Value::Float)) else {
            return Err(self.error("a number"));
        };
        self.at += len;
        Ok(Some(value))
    }

    fn word(&mut self) -> Option<&'a str> {
        let rest = self.rest();
        if !rest.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
            return None;
        }
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        self.at += len;
        Some(&rest[..len])
    }

    fn rest(&self) -> &'a str {
        &self.text[self.at..]
    }

    fn space(&mut self) {
        let rest = self.rest();
        self.at += rest.len() - rest.trim_start().len();
    }

    fn eat(&mut self, c: char) -> bool {
        let found = self.rest().starts_with(c);
        if found {
            self.at += c.len_utf8();
        }
        found
    }

    fn expect(&mut self, c: char, what: &str) -> Result<()> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.error(what))
        }
    }

    fn error(&self, expected: &str) -> Error {
        let found: String = self.rest().chars().take(24).collect();
        let found = if found.is_empty() {
            "the end".to_string()
        } else {
            format!("{found:?}")
        };
        Error::Config(format!(
            "the list of operators at character {}: expected {expected}, found {found}",
            self.text[..self.at].chars().count() + 1
        ))
    }
}

fn image_op(call: Call<'_>) -> Result<Op> {
    let name = call.name;
    let (positional, keywords) = call.split()?;
    Op::call(name, positional, keywords)
}

fn video_op(call: Call<'_>) -> Result<VideoOp> {
    let name = call.name;
    let (positional, keywords) = call.split()?;
    VideoOp::call(name, positional, keywords)
}

/// Views of videos: each a list of calls starting with its clip, then image operators.
fn video_views(views: Vec<Vec<Call<'_>>>) -> Result<Operators> {
    let is_clip = |c: &Call<'_>| video::Declaration::find(c.name).is_some();
    let mut made = Vec::with_capacity(views.len());
    for (place, mut calls) in views.into_iter().enumerate() {
        if !calls.first().is_some_and(is_clip) {
            return Err(video::not_video(&format!(
                "view {place} does not start with a Clip: every view of a video is its own \
                 Clip and the image operators its frames go through"
            )));
        }
        let clip = video_op(calls.remove(0))?;
        if let Some(c) = calls.iter().find(|c| is_clip(c)) {
            return Err(video::not_video(&format!(
                "a second {} in view {place}",
                c.name
            )));
        }
        let ops = calls.into_iter().map(image_op).collect::<Result<_>>()?;
        made.push((clip, ops));
    }
    Ok(Operators::VideoViews(made))
}

fn audio_op(call: Call<'_>) -> Result<AudioOp> {
    let name = call.name;
    let (positional, keywords) = call.split()?;
    AudioOp::call(name, positional, keywords)
}

#[cfg(test)]
mod tests;
