//! Captions tokenized in the engine: a Hugging Face tokenizer, read from its
//! `tokenizer.json`, cutting or padding every text to one length, as the `input_ids` and
//! `attention_mask` a text encoder takes (OpenCLIP's 77 tokens, a speech model's
//! transcript).
//!
//! The tokenizer is the `tokenizers` crate, the one the Python package of that name wraps:
//! the same file gives the same ids. The file's normaliser, pre-tokeniser, model and
//! post-processor (a CLIP tokenizer's start and end tokens) are used as they are; its own
//! truncation and padding settings are replaced by [`Tokenizer::length`]: the ids are cut
//! to that length (the post-processor's special tokens kept, as `tokenizers` truncates)
//! and padded after with [`TokenizerArgs::pad_id`], the mask 1 on the text's tokens and 0
//! on the padding.
//!
//! A text is bounded before it is tokenized ([`TokenizerArgs::max_bytes`]): the work of a
//! tokenizer grows with the text (a BPE word's merges with its square), and a caption is
//! bytes from a dataset nobody checked. So is the work a byte can cost: a file whose split
//! or replace pattern needs the backtracking regex engine (look-around, back-references),
//! which a caption can keep busy for minutes, is refused when it is read, but for the
//! well-known word splits of GPT-2, GPT-4, LLaMA 3, Qwen2 and GPT-4o, whose cost is linear.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;

use tokenizers::{
    PaddingDirection, PaddingParams, PaddingStrategy, TruncationDirection, TruncationParams,
    TruncationStrategy,
};

use crate::error::{Cause, Error, Result};

/// How a [`Tokenizer`] cuts, pads and bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokenizerArgs {
    /// The number of ids of every text: longer ones cut, shorter ones padded.
    pub length: usize,
    /// The id the padding takes; `None`: the file's padding id where it sets one, else 0
    /// (OpenCLIP pads with 0).
    pub pad_id: Option<u32>,
    /// The longest text tokenized, in UTF-8 bytes; a longer one is an error.
    pub max_bytes: usize,
}

impl TokenizerArgs {
    /// `length` ids a text, the other arguments their defaults.
    pub fn new(length: usize) -> TokenizerArgs {
        TokenizerArgs {
            length,
            pad_id: None,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// [`TokenizerArgs::max_bytes`] unless set: 64 KiB, far beyond a caption or a transcript
/// and a bounded cost.
pub const DEFAULT_MAX_BYTES: usize = 64 << 10;

/// The longest [`TokenizerArgs::length`]: a text model's context is a few thousand
/// tokens; this bounds the ids of a batch.
pub const MAX_LENGTH: usize = 1 << 16;

/// A tokenizer from a `tokenizer.json`, at one length. Shared by reference between
/// threads: encoding takes `&self`.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    args: TokenizerArgs,
    pad_id: u32,
    /// The `tokenizer.json` it was read from: what another process (the node agent) is
    /// sent to make the same tokenizer.
    json: Arc<[u8]>,
    /// A digest of `json`.
    digest: u64,
}

impl Tokenizer {
    /// The tokenizer saved at `path` (`tokenizer.json`).
    ///
    /// # Errors
    ///
    /// The file cannot be read, or is not a tokenizer, or is refused as
    /// [`from_json`](Self::from_json) refuses; the arguments are out of bounds.
    pub fn from_file(path: &Path, args: TokenizerArgs) -> Result<Tokenizer> {
        let json = std::fs::read(path).map_err(|e| {
            Error::Config(format!("Tokenizer: cannot read {}: {e}", path.display()))
        })?;
        Tokenizer::from_json(&json, args).map_err(|e| match e {
            Error::Config(message) => Error::Config(format!("{message} ({})", path.display())),
            other => other,
        })
    }

    /// The tokenizer whose `tokenizer.json` is `json` (what `tokenizers.Tokenizer.to_str()`
    /// gives in Python).
    ///
    /// # Errors
    ///
    /// `json` is not a tokenizer, or one of its regular expressions needs the backtracking
    /// engine and is not a well-known split (the message names it); the arguments are out
    /// of bounds.
    pub fn from_json(json: &[u8], args: TokenizerArgs) -> Result<Tokenizer> {
        if args.length == 0 || args.length > MAX_LENGTH {
            return Err(Error::Config(format!(
                "Tokenizer: length {} is out of bounds: use 1 to {MAX_LENGTH}",
                args.length
            )));
        }
        if args.max_bytes == 0 {
            return Err(Error::Config(
                "Tokenizer: max_bytes must be at least 1".into(),
            ));
        }
        // The `tokenizers` crate panics on some malformed files (a `decoder` with a syntax
        // error): a file that is not a tokenizer is the caller's error, not a crash of the
        // training process or the node agent reading a job's.
        let parsed = catch_unwind(AssertUnwindSafe(|| tokenizers::Tokenizer::from_bytes(json)))
            .map_err(|_| {
                Error::Config(
                    "Tokenizer: not a tokenizer.json: the tokenizers crate failed reading it"
                        .into(),
                )
            })?;
        let mut inner =
            parsed.map_err(|e| Error::Config(format!("Tokenizer: not a tokenizer.json: {e}")))?;
        patterns::check(json).map_err(Error::Config)?;
        let pad_id = args
            .pad_id
            .or_else(|| inner.get_padding().map(|p| p.pad_id))
            .unwrap_or(0);
        let pad_token = inner.id_to_token(pad_id).unwrap_or_else(|| "[PAD]".into());
        inner
            .with_truncation(Some(TruncationParams {
                max_length: args.length,
                strategy: TruncationStrategy::LongestFirst,
                direction: TruncationDirection::Right,
                stride: 0,
            }))
            .map_err(|e| Error::Config(format!("Tokenizer: length {}: {e}", args.length)))?;
        inner.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::Fixed(args.length),
            direction: PaddingDirection::Right,
            pad_to_multiple_of: None,
            pad_id,
            pad_type_id: 0,
            pad_token,
        }));
        Ok(Tokenizer {
            inner,
            pad_id,
            digest: crate::rng::digest_text(&String::from_utf8_lossy(json)),
            json: json.into(),
            args,
        })
    }

    /// Text that changes whenever its ids would: the file's digest and the arguments
    /// (what a loader's saved position is checked against).
    pub fn fingerprint(&self) -> String {
        format!(
            "tokenizer {:016x} length={} pad_id={} max_bytes={}",
            self.digest, self.args.length, self.pad_id, self.args.max_bytes
        )
    }

    /// The `tokenizer.json` it was made from.
    pub fn json(&self) -> &[u8] {
        &self.json
    }

    /// How it cuts, pads and bounds.
    pub fn args(&self) -> &TokenizerArgs {
        &self.args
    }

    /// The number of ids of every text.
    pub fn length(&self) -> usize {
        self.args.length
    }

    /// The id the padding takes.
    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }

    /// Tokenizes `text` into `ids` and `mask`, each [`length`](Self::length) long: the
    /// text's ids (the post-processor's special tokens included), cut or padded, and 1
    /// where an id is the text's, 0 where it is padding. Returns how many are the text's.
    ///
    /// # Errors
    ///
    /// The sample's cause: [`Cause::TooLarge`] for a text longer than
    /// [`TokenizerArgs::max_bytes`], [`Cause::Corrupt`] where the tokenizer fails on it.
    ///
    /// # Panics
    ///
    /// `ids` or `mask` is not [`length`](Self::length) long.
    pub fn encode_into(
        &self,
        text: &str,
        ids: &mut [i64],
        mask: &mut [i64],
    ) -> std::result::Result<usize, Cause> {
        let length = self.args.length;
        assert!(
            ids.len() == length && mask.len() == length,
            "Tokenizer::encode_into: ids and mask must be {length} long"
        );
        if text.len() > self.args.max_bytes {
            return Err(Cause::TooLarge {
                bytes: text.len() as u64,
                limit: self.args.max_bytes as u64,
                field: None,
            });
        }
        let encoding = self
            .inner
            .encode(text, true)
            .map_err(|e| Cause::Corrupt(format!("the tokenizer failed on its text: {e}")))?;
        let (got_ids, got_mask) = (encoding.get_ids(), encoding.get_attention_mask());
        // Fixed padding makes every encoding `length` long; a tokenizer whose
        // post-processor adds tokens past the truncation would break that, so check.
        if got_ids.len() != length {
            return Err(Cause::Corrupt(format!(
                "the tokenizer gave {} ids for a length of {length}",
                got_ids.len()
            )));
        }
        for (out, id) in ids.iter_mut().zip(got_ids) {
            *out = i64::from(*id);
        }
        let mut kept = 0;
        for (out, m) in mask.iter_mut().zip(got_mask) {
            *out = i64::from(*m);
            kept += *m as usize;
        }
        Ok(kept)
    }
}

mod patterns;

#[cfg(test)]
pub(crate) mod tests;
