//! A kind's settings by name, as Python's `Field(max_bytes=..., keys=...)` gives them and
//! the portable text carries them beside a field's name and members: what a kind's
//! [`Declaration::make`](super::Declaration) reads, each setting absent taking its default.

#[cfg(feature = "tokenize")]
use std::sync::Arc;

use serde_json::{Map, Value};

#[cfg(feature = "tokenize")]
use crate::fields::portable::Sent;
use crate::fields::DEFAULT_FIELD_BYTES;
#[cfg(feature = "tokenize")]
use crate::prep::tokens::{Tokenizer, TokenizerArgs};

/// Settings by name, and the tokenizers sent with them.
#[derive(Default)]
pub(in crate::fields) struct Settings<'a> {
    values: Map<String, Value>,
    /// The tokenizers the portable text was sent with; `None` for Python's settings (a
    /// tokenized field there is given its tokenizer, not made of settings).
    #[cfg(feature = "tokenize")]
    sent: Option<&'a mut Sent>,
    #[cfg(not(feature = "tokenize"))]
    sent: std::marker::PhantomData<&'a ()>,
}

impl<'a> Settings<'a> {
    /// `values`, by name.
    pub(in crate::fields) fn new(values: Map<String, Value>) -> Settings<'a> {
        Settings {
            values,
            ..Settings::default()
        }
    }

    /// `values`, by name, naming the tokenizers of `sent` by index.
    #[cfg(feature = "tokenize")]
    pub(in crate::fields) fn sent(values: Map<String, Value>, sent: &'a mut Sent) -> Settings<'a> {
        Settings {
            values,
            sent: Some(sent),
        }
    }

    /// The names of the settings given.
    pub(super) fn names(&self) -> impl Iterator<Item = &str> {
        self.values.keys().map(String::as_str)
    }

    /// Setting `key` as it was given.
    pub(super) fn value(&self, key: &str) -> Option<&Value> {
        self.values.get(key)
    }

    /// Setting `key`, a whole number.
    pub(super) fn number(&self, key: &str) -> Result<Option<usize>, String> {
        self.values
            .get(key)
            .map(|v| {
                v.as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| format!("{key}={v} is not a whole number"))
            })
            .transpose()
    }

    /// `max_bytes`: [`DEFAULT_FIELD_BYTES`] unless given.
    pub(super) fn max_bytes(&self) -> Result<usize, String> {
        Ok(self.number("max_bytes")?.unwrap_or(DEFAULT_FIELD_BYTES))
    }

    /// Setting `key`, a list of text: empty unless given.
    pub(super) fn strings(&self, key: &str) -> Result<Vec<String>, String> {
        match self.values.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(list)) => list
                .iter()
                .map(|s| s.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| format!("{key}= is not a list of text")),
            Some(_) => Err(format!("{key}= is not a list of text")),
        }
    }

    /// The tokenizer sent as number `index`, with `args`.
    #[cfg(feature = "tokenize")]
    pub(super) fn tokenizer(
        &mut self,
        index: usize,
        args: TokenizerArgs,
    ) -> Result<Arc<Tokenizer>, String> {
        match &mut self.sent {
            Some(sent) => sent.tokenizer(index, args),
            None => Err(format!("tokenizer {index} named, and none was sent")),
        }
    }
}
