//! Fields as another process is sent them: a JSON text naming each field, its members,
//! its kind and the kind's settings, and the `tokenizer.json` of each tokenizer beside it
//! (a tokenizer's file is megabytes: it travels apart from the text, which stays small).
//!
//! The node agent makes a job's loader from what the job sends ([`Fields::portable`] on
//! the job's side, [`Fields::from_portable`] on the agent's): both must find the same
//! fields, the same record layout and the same fingerprint, or their batches would be
//! read with another layout. What the agent is sent is checked as a user's argument
//! would be (each kind made of its settings as Python's `Field` makes it, then
//! [`Fields::new`]).

use std::sync::Arc;

use serde_json::{json, Value};

use super::kind::{self, Settings};
use super::{Field, Fields};
use crate::error::{Error, Result};
#[cfg(feature = "tokenize")]
use crate::prep::tokens::{Tokenizer, TokenizerArgs};

/// [`Fields`] in their portable form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortableFields {
    /// The fields as a JSON array.
    pub text: String,
    /// The `tokenizer.json` of each tokenizer the text names by index.
    pub tokenizers: Vec<Arc<[u8]>>,
}

/// The keys of a field's object that are not its kind's settings.
const FIELD_KEYS: [&str; 3] = ["name", "members", "kind"];

impl Fields {
    /// These fields as another process makes them again ([`Fields::from_portable`]).
    pub fn portable(&self) -> PortableFields {
        let mut tokenizers: Vec<Arc<[u8]>> = Vec::new();
        let fields: Vec<Value> = self
            .iter()
            .map(|f| {
                let mut v = f.kind.settings(&mut tokenizers);
                v.insert("name".into(), json!(f.name));
                v.insert("members".into(), json!(f.members));
                v.insert("kind".into(), json!(f.kind.name()));
                Value::Object(v)
            })
            .collect();
        PortableFields {
            text: Value::Array(fields).to_string(),
            tokenizers,
        }
    }

    /// The fields [`Fields::portable`] gave, checked as [`Fields::new`] checks a user's.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming what is wrong: the text is not such an array, a field's
    /// kind is unknown or its settings are not the kind's, a tokenizer is missing or not
    /// a tokenizer, or what [`Fields::new`] refuses.
    pub fn from_portable(
        text: &str,
        #[cfg_attr(not(feature = "tokenize"), allow(unused_variables))] tokenizers: &[Arc<[u8]>],
    ) -> Result<Fields> {
        let bad = |why: String| Error::Config(format!("the fields sent: {why}"));
        let value: Value = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        let Value::Array(list) = value else {
            return Err(bad("not a JSON array".into()));
        };
        let mut fields = Vec::with_capacity(list.len());
        #[cfg(feature = "tokenize")]
        let mut sent = Sent {
            tokenizers: tokenizers.to_vec(),
            parsed: Vec::new(),
        };
        for v in list {
            let Value::Object(mut v) = v else {
                return Err(bad("a field is not an object".into()));
            };
            let name = string(&v, "name").map_err(bad)?;
            let members = match v.get("members") {
                Some(Value::Array(m)) => m
                    .iter()
                    .map(|m| m.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>(),
                _ => None,
            }
            .ok_or_else(|| bad(format!("field {name:?}: no list of members")))?;
            let members = super::parse_members(&name, &members.join(";"))?;
            let kind = string(&v, "kind").map_err(bad)?;
            v.retain(|key, _| !FIELD_KEYS.contains(&key.as_str()));
            #[cfg(feature = "tokenize")]
            let mut settings = Settings::sent(v, &mut sent);
            #[cfg(not(feature = "tokenize"))]
            let mut settings = Settings::new(v);
            let kind = kind::made(&kind, &mut settings)
                .map_err(|why| bad(format!("field {name:?}: {why}")))?;
            fields.push(Field {
                name,
                members,
                kind,
            });
        }
        Fields::new(fields)
    }
}

/// The tokenizers sent beside the text, each parsed once for the fields that name it
/// alike: 40 fields naming a 16 MB tokenizer held 40 parses (675 MB) in the agent for a
/// group's lifetime.
#[cfg(feature = "tokenize")]
pub(super) struct Sent {
    tokenizers: Vec<Arc<[u8]>>,
    parsed: Vec<(usize, TokenizerArgs, Arc<Tokenizer>)>,
}

#[cfg(feature = "tokenize")]
impl Sent {
    /// Tokenizer `index` with `args`, parsed once.
    pub(super) fn tokenizer(
        &mut self,
        index: usize,
        args: TokenizerArgs,
    ) -> std::result::Result<Arc<Tokenizer>, String> {
        if let Some((_, _, tokenizer)) = self
            .parsed
            .iter()
            .find(|(i, a, _)| *i == index && *a == args)
        {
            return Ok(tokenizer.clone());
        }
        let json = self
            .tokenizers
            .get(index)
            .ok_or_else(|| format!("names tokenizer {index} of {}", self.tokenizers.len()))?;
        let tokenizer =
            Arc::new(Tokenizer::from_json(json, args.clone()).map_err(|e| e.to_string())?);
        self.parsed.push((index, args, tokenizer.clone()));
        Ok(tokenizer)
    }
}

fn string(v: &serde_json::Map<String, Value>, key: &str) -> std::result::Result<String, String> {
    v.get(key)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| format!("no text {key:?}"))
}
