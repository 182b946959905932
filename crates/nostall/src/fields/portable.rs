//! Fields as another process is sent them: a JSON text naming each field, its members and
//! its kind, and the `tokenizer.json` of each tokenizer beside it (a tokenizer's file is
//! megabytes: it travels apart from the text, which stays small).
//!
//! The node agent makes a job's loader from what the job sends ([`Fields::portable`] on
//! the job's side, [`Fields::from_portable`] on the agent's): both must find the same
//! fields, the same record layout and the same fingerprint, or their batches would be
//! read with another layout. What the agent is sent is checked as a user's argument
//! would be ([`Fields::new`], [`Tokenizer::from_json`]).

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::{Field, FieldKind, Fields};
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

impl Fields {
    /// These fields as another process makes them again ([`Fields::from_portable`]).
    pub fn portable(&self) -> PortableFields {
        #[allow(unused_mut)] // Without tokenizers, nothing is added to it.
        let mut tokenizers: Vec<Arc<[u8]>> = Vec::new();
        let fields: Vec<Value> = self
            .iter()
            .map(|f| {
                let mut v = json!({ "name": f.name, "members": f.members });
                let kind = match &f.kind {
                    FieldKind::Sample => json!({ "kind": "sample" }),
                    FieldKind::Label => json!({ "kind": "label" }),
                    FieldKind::Text { max_bytes } => {
                        json!({ "kind": "text", "max_bytes": max_bytes })
                    }
                    FieldKind::Json { max_bytes, keys } => {
                        json!({ "kind": "json", "max_bytes": max_bytes, "keys": keys })
                    }
                    FieldKind::Bytes { max_bytes } => {
                        json!({ "kind": "bytes", "max_bytes": max_bytes })
                    }
                    FieldKind::Vector { length } => json!({ "kind": "vector", "length": length }),
                    #[cfg(feature = "tokenize")]
                    FieldKind::Tokens(tokenizer) => {
                        let index = match tokenizers.iter().position(|t| **t == *tokenizer.json()) {
                            Some(i) => i,
                            None => {
                                tokenizers.push(tokenizer.json().into());
                                tokenizers.len() - 1
                            }
                        };
                        let args = tokenizer.args();
                        json!({
                            "kind": "tokens",
                            "tokenizer": index,
                            "length": args.length,
                            "pad_id": args.pad_id,
                            "max_bytes": args.max_bytes,
                        })
                    }
                };
                if let (Value::Object(v), Value::Object(kind)) = (&mut v, kind) {
                    v.extend(kind);
                }
                v
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
    /// kind is unknown, a tokenizer is missing or not a tokenizer, or what
    /// [`Fields::new`] refuses.
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
        // Each tokenizer parsed once for the fields that name it alike: 40 fields naming a
        // 16 MB tokenizer held 40 parses (675 MB) in the agent for a group's lifetime.
        #[cfg(feature = "tokenize")]
        let mut parsed: Vec<(usize, TokenizerArgs, Arc<Tokenizer>)> = Vec::new();
        for v in &list {
            let Value::Object(v) = v else {
                return Err(bad("a field is not an object".into()));
            };
            let name = string(v, "name").map_err(bad)?;
            let members = match v.get("members") {
                Some(Value::Array(m)) => m
                    .iter()
                    .map(|m| m.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>(),
                _ => None,
            }
            .ok_or_else(|| bad(format!("field {name:?}: no list of members")))?;
            let members = super::parse_members(&name, &members.join(";"))?;
            let max_bytes = || number(v, "max_bytes").map_err(|e| bad(format!("{name:?}: {e}")));
            let kind = match string(v, "kind").map_err(bad)?.as_str() {
                "sample" => FieldKind::Sample,
                "label" => FieldKind::Label,
                "text" => FieldKind::Text {
                    max_bytes: max_bytes()?,
                },
                "json" => FieldKind::Json {
                    max_bytes: max_bytes()?,
                    keys: match v.get("keys") {
                        Some(Value::Array(k)) => k
                            .iter()
                            .map(|k| k.as_str().map(str::to_string))
                            .collect::<Option<Vec<_>>>(),
                        _ => None,
                    }
                    .ok_or_else(|| bad(format!("field {name:?}: no list of keys")))?,
                },
                "bytes" => FieldKind::Bytes {
                    max_bytes: max_bytes()?,
                },
                "vector" => FieldKind::Vector {
                    length: number(v, "length").map_err(bad)?,
                },
                #[cfg(feature = "tokenize")]
                "tokens" => {
                    let index = number(v, "tokenizer").map_err(bad)?;
                    let json = tokenizers.get(index).ok_or_else(|| {
                        bad(format!(
                            "field {name:?} names tokenizer {index} of {}",
                            tokenizers.len()
                        ))
                    })?;
                    let mut args = TokenizerArgs::new(number(v, "length").map_err(bad)?);
                    args.max_bytes = max_bytes()?;
                    args.pad_id = match v.get("pad_id") {
                        None | Some(Value::Null) => None,
                        Some(id) => Some(
                            id.as_u64()
                                .and_then(|id| u32::try_from(id).ok())
                                .ok_or_else(|| bad(format!("field {name:?}: a bad pad_id")))?,
                        ),
                    };
                    let known = parsed.iter().find(|(i, a, _)| *i == index && *a == args);
                    let tokenizer = match known {
                        Some((_, _, tokenizer)) => tokenizer.clone(),
                        None => {
                            let tokenizer = Arc::new(Tokenizer::from_json(json, args.clone())?);
                            parsed.push((index, args, tokenizer.clone()));
                            tokenizer
                        }
                    };
                    FieldKind::Tokens(tokenizer)
                }
                #[cfg(not(feature = "tokenize"))]
                "tokens" => {
                    return Err(bad(format!(
                        "field {name:?} is tokenized, and this build has no tokenizer (the \
                         `tokenize` feature)"
                    )))
                }
                other => return Err(bad(format!("field {name:?} of unknown kind {other:?}"))),
            };
            fields.push(Field {
                name,
                members,
                kind,
            });
        }
        Fields::new(fields)
    }
}

fn string(v: &Map<String, Value>, key: &str) -> std::result::Result<String, String> {
    v.get(key)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| format!("no text {key:?}"))
}

fn number(v: &Map<String, Value>, key: &str) -> std::result::Result<usize, String> {
    v.get(key)
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| format!("no whole number {key:?}"))
}
