//! The operators' text form: how a list of operators is written for a person, a command
//! line or another process, and read back.
//!
//! It is Python's. An operator is written as the `repr` of its `nostall.ops` or
//! `nostall.audio` object, `RandomResizedCrop(size=(224, 224), scale=(0.08, 1.0),
//! ratio=(0.75, 1.3333333333333333))`, and a pipeline as the list's,
//! `[Resize(size=256), CenterCrop(size=(224, 224))]`. Written, every parameter is named
//! and every float is in the shortest form that reads back to the same bits, so what is
//! read back is the same operators: the `pipeline` setting carries a list of operators to
//! the node agent this way, and the agent groups jobs by that text. Read, the parameters
//! are those of the Python classes, by position or by keyword, with the same defaults, so
//! a command line may say `pipeline="[Resize(256), CenterCrop(224)]"`.
//!
//! The text may come from another process. Reading it allocates no more than its length,
//! never recurses (a tuple holds numbers only), and validates every operator it makes.

use std::fmt;
use std::str::FromStr;

use super::audio::{AudioOp, MelArgs, MelScale, ResampleQuality, ResampleWindow};
use super::image::{Op, Size, DEFAULT_CROP_RATIO, DEFAULT_CROP_SCALE};
use crate::error::{Error, Result};

/// A pipeline given as operators: all of images or all of audio.
#[derive(Debug, Clone, PartialEq)]
pub enum Operators {
    /// Image operators ([`Op`]).
    Image(Vec<Op>),
    /// Audio operators ([`AudioOp`]).
    Audio(Vec<AudioOp>),
}

/// The image operators' names.
const IMAGE: [&str; 5] = [
    "RandomResizedCrop",
    "Resize",
    "CenterCrop",
    "RandomHorizontalFlip",
    "Normalize",
];

/// The audio operators' names (`CenterCrop` is both: `length=` makes it audio's).
const AUDIO: [&str; 6] = [
    "Channels",
    "Resample",
    "RandomCrop",
    "CenterCrop",
    "MelSpectrogram",
    "Log",
];

impl Operators {
    /// Whether `text` is written as operators rather than as a preset's name.
    pub fn written_in(text: &str) -> bool {
        text.contains('(') || text.trim_start().starts_with('[')
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
        let calls = Reader { text, at: 0 }.pipeline()?;
        let unknown = |c: &&Call<'_>| !IMAGE.contains(&c.name) && !AUDIO.contains(&c.name);
        if let Some(call) = calls.iter().find(unknown) {
            return Err(Error::Config(format!(
                "unknown operator {:?}: the image operators are {}; the audio operators are {}",
                call.name,
                IMAGE.join(", "),
                AUDIO.join(", ")
            )));
        }
        let audio_only = calls.iter().find(|c| !IMAGE.contains(&c.name));
        let image_only = calls.iter().find(|c| !AUDIO.contains(&c.name));
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
            // Only CenterCrops: audio's takes a length.
            (None, None) => calls
                .iter()
                .any(|c| c.args.iter().any(|(key, _)| *key == Some("length"))),
        };
        if audio {
            let ops = calls.iter().map(audio_op).collect::<Result<_>>()?;
            Ok(Operators::Audio(ops))
        } else {
            let ops = calls.iter().map(image_op).collect::<Result<_>>()?;
            Ok(Operators::Image(ops))
        }
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
        match self {
            Operators::Image(ops) => list(f, ops),
            Operators::Audio(ops) => list(f, ops),
        }
    }
}

impl fmt::Display for Op {
    /// The `repr` of the `nostall.ops` object, every parameter named.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::RandomResizedCrop {
                size: (height, width),
                scale: (s0, s1),
                ratio: (r0, r1),
            } => write!(
                f,
                "RandomResizedCrop(size=({height}, {width}), scale=({s0:?}, {s1:?}), \
                 ratio=({r0:?}, {r1:?}))"
            ),
            Op::Resize(Size::Shorter(side)) => write!(f, "Resize(size={side})"),
            Op::Resize(Size::Exact { height, width }) => {
                write!(f, "Resize(size=({height}, {width}))")
            }
            Op::CenterCrop { height, width } => write!(f, "CenterCrop(size=({height}, {width}))"),
            Op::RandomHorizontalFlip { p } => write!(f, "RandomHorizontalFlip(p={p:?})"),
            Op::Normalize { mean: m, std: s } => write!(
                f,
                "Normalize(mean=({:?}, {:?}, {:?}), std=({:?}, {:?}, {:?}))",
                m[0], m[1], m[2], s[0], s[1], s[2]
            ),
        }
    }
}

impl fmt::Display for AudioOp {
    /// The `repr` of the `nostall.audio` object, every parameter named.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AudioOp::Channels(count) => write!(f, "Channels(count={count})"),
            AudioOp::Resample { rate, quality } => {
                write!(
                    f,
                    "Resample(rate={rate}, lowpass_filter_width={}, rolloff={:?}, ",
                    quality.lowpass_width, quality.rolloff
                )?;
                match quality.window {
                    ResampleWindow::Kaiser { beta } => {
                        write!(f, "resampling_method='sinc_interp_kaiser', beta={beta:?})")
                    }
                    ResampleWindow::Hann => f.write_str("resampling_method='sinc_interp_hann')"),
                }
            }
            AudioOp::RandomCrop { length } => write!(f, "RandomCrop(length={length})"),
            AudioOp::CenterCrop { length } => write!(f, "CenterCrop(length={length})"),
            AudioOp::MelSpectrogram(s) => write!(
                f,
                "MelSpectrogram(sample_rate={}, n_fft={}, win_length={}, hop_length={}, \
                 f_min={:?}, f_max={:?}, n_mels={}, power={:?}, norm={}, mel_scale='{}')",
                s.sample_rate,
                s.n_fft,
                s.win_length,
                s.hop_length,
                s.f_min,
                s.f_max,
                s.n_mels,
                s.power,
                if s.slaney_norm { "'slaney'" } else { "None" },
                match s.mel_scale {
                    MelScale::Slaney => "slaney",
                    MelScale::Htk => "htk",
                },
            ),
            AudioOp::Log { offset } => write!(f, "Log(offset={offset:?})"),
        }
    }
}

/// An argument's value as written.
#[derive(Debug, Clone)]
enum Value<'a> {
    /// A number, not yet read as any type.
    Number(&'a str),
    /// A quoted string (no escapes).
    Text(&'a str),
    /// `None`.
    Nothing,
    /// Numbers in parentheses or brackets.
    Tuple(Vec<&'a str>),
}

/// One operator as written: its name and its arguments, each by position (no key) or by
/// keyword.
#[derive(Debug)]
struct Call<'a> {
    name: &'a str,
    args: Vec<(Option<&'a str>, Value<'a>)>,
}

/// Reads the text form's grammar (not what the operators mean).
struct Reader<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Reader<'a> {
    fn pipeline(mut self) -> Result<Vec<Call<'a>>> {
        self.space();
        let bracketed = self.eat('[');
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
        self.space();
        if !self.rest().is_empty() {
            return Err(self.error("the end of the list"));
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

    fn value(&mut self) -> Result<Value<'a>> {
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
                let Some(number) = self.number() else {
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
            return Ok(Value::Text(text));
        }
        if self.rest().starts_with("None") {
            let start = self.at;
            if self.word() == Some("None") {
                return Ok(Value::Nothing);
            }
            self.at = start;
        }
        match self.number() {
            Some(number) => Ok(Value::Number(number)),
            None => Err(self.error("a value: a number, a tuple of numbers, a string or None")),
        }
    }

    /// The characters a number may be written with (its reading checks it).
    fn number(&mut self) -> Option<&'a str> {
        let rest = self.rest();
        if !rest.starts_with(|c: char| c.is_ascii_digit() || "+-.".contains(c)) {
            return None;
        }
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || "+-._".contains(c)))
            .unwrap_or(rest.len());
        self.at += len;
        Some(&rest[..len])
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

/// A call's arguments matched to its operator's parameters.
struct Args<'a> {
    operator: &'a str,
    params: &'static [&'static str],
    values: Vec<Option<Value<'a>>>,
}

impl<'a> Args<'a> {
    fn bind(call: &Call<'a>, params: &'static [&'static str]) -> Result<Args<'a>> {
        let operator = call.name;
        let mut values = vec![None; params.len()];
        let mut keywords = false;
        for (position, (key, value)) in call.args.iter().enumerate() {
            let slot = match key {
                Some(key) => {
                    keywords = true;
                    params.iter().position(|p| p == key).ok_or_else(|| {
                        Error::Config(format!(
                            "{operator} has no parameter {key:?}: its parameters are {}",
                            params.join(", ")
                        ))
                    })?
                }
                None if keywords => {
                    return Err(Error::Config(format!(
                        "{operator}: a positional argument follows a keyword argument"
                    )))
                }
                None if position < params.len() => position,
                None => {
                    return Err(Error::Config(format!(
                        "{operator} takes at most {} arguments ({})",
                        params.len(),
                        params.join(", ")
                    )))
                }
            };
            if values[slot].replace(value.clone()).is_some() {
                return Err(Error::Config(format!(
                    "{operator}: {} is given twice",
                    params[slot]
                )));
            }
        }
        Ok(Args {
            operator,
            params,
            values,
        })
    }

    /// The value of `param` (one of the operator's), unless not given.
    fn get(&self, param: &str) -> Option<&Value<'a>> {
        let slot = self.params.iter().position(|p| *p == param);
        slot.and_then(|slot| self.values[slot].as_ref())
    }

    fn wrong(&self, param: &str, takes: &str, value: &Value<'_>) -> Error {
        let given = match value {
            Value::Number(text) => text.to_string(),
            Value::Text(text) => format!("{text:?}"),
            Value::Nothing => "None".into(),
            Value::Tuple(items) => format!("({})", items.join(", ")),
        };
        Error::Config(format!(
            "{}: {param} takes {takes}, not {given}",
            self.operator
        ))
    }

    fn required<T>(
        &self,
        param: &str,
        read: impl Fn(&Self, &str) -> Result<Option<T>>,
    ) -> Result<T> {
        read(self, param)?.ok_or_else(|| Error::Config(format!("{} needs {param}", self.operator)))
    }

    /// A number, `None` where not given or given as `None` (for the parameters whose
    /// default follows from the others).
    fn number_or_none<T: FromStr>(&self, param: &str) -> Result<Option<T>> {
        match self.get(param) {
            Some(Value::Nothing) => Ok(None),
            _ => self.number(param),
        }
    }

    /// A number, `None` where not given.
    fn number<T: FromStr>(&self, param: &str) -> Result<Option<T>> {
        match self.get(param) {
            None => Ok(None),
            Some(value @ Value::Number(text)) => text
                .parse()
                .map(Some)
                .map_err(|_| self.wrong(param, "a number", value)),
            Some(value) => Err(self.wrong(param, "a number", value)),
        }
    }

    /// Numbers in a tuple of `N`.
    fn tuple<T: FromStr + Copy + Default, const N: usize>(
        &self,
        param: &str,
    ) -> Result<Option<[T; N]>> {
        let takes = format!("a tuple of {N} numbers");
        let Some(value) = self.get(param) else {
            return Ok(None);
        };
        let Value::Tuple(items) = value else {
            return Err(self.wrong(param, &takes, value));
        };
        if items.len() != N {
            return Err(self.wrong(param, &takes, value));
        }
        let mut out = [T::default(); N];
        for (slot, item) in out.iter_mut().zip(items) {
            *slot = item.parse().map_err(|_| self.wrong(param, &takes, value))?;
        }
        Ok(Some(out))
    }

    /// A size: one number, or a `(height, width)` pair.
    fn size(&self, param: &str) -> Result<Option<Size>> {
        match self.get(param) {
            Some(Value::Tuple(_)) => {
                let [height, width] = self.tuple(param)?.expect("given");
                Ok(Some(Size::Exact { height, width }))
            }
            Some(Value::Number(_)) => Ok(self.number(param)?.map(Size::Shorter)),
            None => Ok(None),
            Some(value) => Err(self.wrong(param, "an int or a (height, width) pair", value)),
        }
    }

    fn text(&self, param: &str) -> Result<Option<&'a str>> {
        match self.get(param) {
            None | Some(Value::Nothing) => Ok(None),
            Some(Value::Text(text)) => Ok(Some(*text)),
            Some(value) => Err(self.wrong(param, "a string", value)),
        }
    }
}

/// A size as a crop takes it: one number is a square.
fn square(size: Size) -> (u32, u32) {
    match size {
        Size::Shorter(side) => (side, side),
        Size::Exact { height, width } => (height, width),
    }
}

fn image_op(call: &Call<'_>) -> Result<Op> {
    let op = match call.name {
        "RandomResizedCrop" => {
            let args = Args::bind(call, &["size", "scale", "ratio"])?;
            let [s0, s1] = args.tuple("scale")?.unwrap_or(DEFAULT_CROP_SCALE.into());
            let [r0, r1] = args.tuple("ratio")?.unwrap_or(DEFAULT_CROP_RATIO.into());
            Op::RandomResizedCrop {
                size: square(args.required("size", Args::size)?),
                scale: (s0, s1),
                ratio: (r0, r1),
            }
        }
        "Resize" => Op::Resize(Args::bind(call, &["size"])?.required("size", Args::size)?),
        "CenterCrop" => {
            let size = Args::bind(call, &["size"])?.required("size", Args::size)?;
            let (height, width) = square(size);
            Op::CenterCrop { height, width }
        }
        "RandomHorizontalFlip" => {
            let args = Args::bind(call, &["p"])?;
            Op::RandomHorizontalFlip {
                p: args.number("p")?.unwrap_or(0.5),
            }
        }
        _ => {
            let args = Args::bind(call, &["mean", "std"])?;
            Op::Normalize {
                mean: args.required("mean", Args::tuple)?,
                std: args.required("std", Args::tuple)?,
            }
        }
    };
    op.validate()?;
    Ok(op)
}

fn audio_op(call: &Call<'_>) -> Result<AudioOp> {
    let op = match call.name {
        "Channels" => {
            let args = Args::bind(call, &["count"])?;
            AudioOp::Channels(args.number("count")?.unwrap_or(1))
        }
        "Resample" => {
            let params = &[
                "rate",
                "lowpass_filter_width",
                "rolloff",
                "resampling_method",
                "beta",
            ];
            let args = Args::bind(call, params)?;
            let quality = ResampleQuality::torchaudio(
                args.number("lowpass_filter_width")?.unwrap_or(6),
                args.number("rolloff")?.unwrap_or(0.99),
                args.text("resampling_method")?
                    .unwrap_or("sinc_interp_hann"),
                args.number_or_none("beta")?,
            )?;
            AudioOp::Resample {
                rate: args.required("rate", Args::number)?,
                quality,
            }
        }
        "RandomCrop" => AudioOp::RandomCrop {
            length: Args::bind(call, &["length"])?.required("length", Args::number)?,
        },
        "CenterCrop" => AudioOp::CenterCrop {
            length: Args::bind(call, &["length"])?.required("length", Args::number)?,
        },
        "MelSpectrogram" => {
            let params = &[
                "sample_rate",
                "n_fft",
                "win_length",
                "hop_length",
                "f_min",
                "f_max",
                "n_mels",
                "power",
                "norm",
                "mel_scale",
            ];
            let args = Args::bind(call, params)?;
            let d = MelArgs::default();
            let mel = MelArgs {
                sample_rate: args.number("sample_rate")?.unwrap_or(d.sample_rate),
                n_fft: args.number("n_fft")?.unwrap_or(d.n_fft),
                win_length: args.number_or_none("win_length")?,
                hop_length: args.number_or_none("hop_length")?,
                f_min: args.number("f_min")?.unwrap_or(d.f_min),
                f_max: args.number_or_none("f_max")?,
                n_mels: args.number("n_mels")?.unwrap_or(d.n_mels),
                power: args.number("power")?.unwrap_or(d.power),
                norm: args.text("norm")?,
                mel_scale: args.text("mel_scale")?.unwrap_or(d.mel_scale),
            };
            AudioOp::MelSpectrogram(mel.spec()?)
        }
        _ => {
            let args = Args::bind(call, &["offset"])?;
            AudioOp::Log {
                offset: args.number("offset")?.unwrap_or(1e-6),
            }
        }
    };
    op.validate()?;
    Ok(op)
}

#[cfg(test)]
mod tests;
