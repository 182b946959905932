//! A tokenized field: a member of UTF-8 text tokenized in the engine, held as its
//! `input_ids` then its `attention_mask`, each of the tokenizer's length. A tokenizer's
//! file is megabytes: the portable text names it by index, and it travels beside.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::{text, var, Declaration, FieldKind, Kind, Settings};
use crate::error::Cause;
use crate::prep::tokens::{Tokenizer, TokenizerArgs};
use crate::sample::{PartForm, SampleLayout};

/// Declared for no extension: a field is given its tokenizer.
pub(super) const DECLARATION: Declaration = Declaration {
    name: "tokens",
    extensions: &[],
    settings: &["tokenizer", "length", "pad_id", "max_bytes"],
    make,
};

#[derive(Debug)]
pub(in crate::fields) struct Tokens(Arc<Tokenizer>);

impl FieldKind {
    /// UTF-8 text tokenized: `input_ids` and `attention_mask` of the tokenizer's length.
    pub fn tokens(tokenizer: Arc<Tokenizer>) -> FieldKind {
        FieldKind::of(Tokens(tokenizer))
    }
}

fn make(settings: &mut Settings<'_>) -> Result<FieldKind, String> {
    let index = settings.number("tokenizer")?;
    let length = settings.number("length")?;
    let (Some(index), Some(length)) = (index, length) else {
        // Only the portable text names a tokenizer by number: Python gives it whole.
        return Err("a tokenized field is given its tokenizer: Field(\"txt\", \
                    tokenizer=nostall.Tokenizer(...))"
            .into());
    };
    let mut args = TokenizerArgs::new(length);
    if let Some(max_bytes) = settings.number("max_bytes")? {
        args.max_bytes = max_bytes;
    }
    args.pad_id = match settings.value("pad_id") {
        None | Some(Value::Null) => None,
        Some(id) => Some(
            id.as_u64()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or("a bad pad_id")?,
        ),
    };
    Ok(FieldKind::tokens(settings.tokenizer(index, args)?))
}

impl Tokens {
    /// Its tokenizer.
    #[cfg(test)]
    pub(in crate::fields) fn tokenizer(&self) -> &Arc<Tokenizer> {
        &self.0
    }
}

impl Kind for Tokens {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    fn form(&self, _: &SampleLayout) -> PartForm {
        PartForm::Tokens {
            length: self.0.length(),
        }
    }

    fn fingerprint(&self) -> String {
        self.0.fingerprint()
    }

    fn prepare(&self, field: &str, member: &[u8], slot: &mut [u8]) -> Result<(), Cause> {
        var::too_large(field, member, self.0.args().max_bytes)?;
        let text = text::utf8(field, member)?;
        // The ids, then the mask, native-endian `i64`.
        let length = self.0.length();
        let mut ids = vec![0i64; length];
        let mut mask = vec![0i64; length];
        self.0
            .encode_into(text, &mut ids, &mut mask)
            .map_err(|cause| text::bad_text(field, cause))?;
        for (chunk, v) in slot.chunks_exact_mut(8).zip(ids.iter().chain(&mask)) {
            chunk.copy_from_slice(&v.to_ne_bytes());
        }
        Ok(())
    }

    fn settings(&self, tokenizers: &mut Vec<Arc<[u8]>>) -> Map<String, Value> {
        let index = match tokenizers.iter().position(|t| **t == *self.0.json()) {
            Some(i) => i,
            None => {
                tokenizers.push(self.0.json().into());
                tokenizers.len() - 1
            }
        };
        let args = self.0.args();
        Map::from_iter([
            ("tokenizer".into(), json!(index)),
            ("length".into(), json!(args.length)),
            ("pad_id".into(), json!(args.pad_id)),
            ("max_bytes".into(), json!(args.max_bytes)),
        ])
    }
}
