//! The regular expressions of a `tokenizer.json`, checked when it is read.
//!
//! `tokenizers` runs the patterns of its `Split` pre-tokenizers and `Replace` normalizers
//! with fancy-regex. A pattern without look-around, back-references, atomic groups or word
//! boundaries goes to the regex crate's automata, linear in the text for each search;
//! one with any of them runs on fancy-regex's backtracking VM, whose only bound is a million
//! backtracks per search. A caption can make every search spend most of that: a hostile
//! split took 10 s on a 1000-byte caption, and would take 11 minutes on one of 64 KiB, on
//! a loader's (or a node agent's) thread.
//!
//! A time limit would make whether a sample fails depend on the machine and its load, and
//! the project's output must not. So the bound is set where the file is read: a pattern
//! that needs the backtracking VM is refused, naming it, unless it is one of the
//! well-known word splits below, whose cost is linear in the text (64 KiB of the most
//! costly of 30 texts tried took each under 0.1 s to tokenize, as with `tokenizers`' own
//! `ByteLevel` split).
//!
//! A `Replace` normaliser whose pattern matches the empty text is refused too: it inserts
//! its content at every position, so `max_bytes` would no longer bound the text split.
//!
//! The automata keep their own, milder, worst case: a search may read on to the end of the
//! text before it settles on a short match, so a contrived split such as `[a-z]*X|[a-z]`
//! costs the square of a run of letters (7 s for 64 KiB). Well-formed splits match what
//! they read; `max_bytes` bounds the rest.

use std::fmt;

use serde_json::Value;

/// The pre-tokenizer splits of widely used tokenizers, accepted although they need the
/// backtracking VM (for `\s+(?!\S)`: a whitespace run but its last character, which then
/// starts the next word). Their cost is linear: every position starts a match, each
/// alternative but that one runs on the regex crate's automata, and that one backtracks
/// once. `tokenizers`' own `ByteLevel` pre-tokenizer runs GPT-2's, not read from the file.
pub(crate) const WELL_KNOWN_SPLITS: [(&str, &str); 4] = [
    (
        "GPT-2's",
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    ),
    (
        "GPT-4's and LLaMA 3's",
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    (
        "Qwen2's",
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    (
        "GPT-4o's",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
];

/// Refuses the `tokenizer.json` `json` (already read by `tokenizers`) where a `Replace`
/// normalizer would grow a caption ([`grows`]), or one of its regular expressions needs
/// the backtracking VM and is not a well-known split: the message names the pattern, where
/// it is and what to do. One walk over the file finds both.
pub(super) fn check(json: &[u8]) -> Result<(), String> {
    let tree: Value = serde_json::from_slice(json)
        .map_err(|e| format!("Tokenizer: not a tokenizer.json: {e}"))?;
    let (mut found, mut growing) = (Vec::new(), None);
    objects(&tree, &mut String::new(), &mut |at, map| {
        if let Some(Value::String(pattern)) = map
            .get("pattern")
            .and_then(|p| p.as_object())
            .and_then(|p| p.get("Regex"))
        {
            let name = if at.is_empty() { "the top level" } else { at };
            found.push((name.to_owned(), pattern.as_str()));
        }
        if growing.is_none() && at.starts_with("normalizer") {
            growing = grows(map).map(|content| (at.to_owned(), content.to_owned()));
        }
    });
    if let Some((at, content)) = growing {
        return Err(format!(
            "Tokenizer: the Replace of {at} matches the empty text, so it inserts {content:?} \
             at every position and a caption grows many times over its max_bytes before it \
             is split: give it a pattern that matches at least one character"
        ));
    }
    for (at, pattern) in found {
        if WELL_KNOWN_SPLITS.iter().any(|(_, known)| *known == pattern) {
            continue;
        }
        match needs_backtracking(pattern) {
            Ok(false) => {}
            Ok(true) => {
                let known: Vec<&str> = WELL_KNOWN_SPLITS.iter().map(|(name, _)| *name).collect();
                return Err(format!(
                    "Tokenizer: the pattern {pattern:?} of {at} needs the backtracking regex \
                     engine (it has a look-around, a back-reference, an atomic group or a \
                     word boundary), on which one caption can hold a thread for minutes. \
                     Rewrite it without those, to run on the linear-time engine, or use one \
                     of the well-known splits accepted as they are ({})",
                    known.join(", ")
                ));
            }
            Err(e) => {
                return Err(format!(
                    "Tokenizer: the pattern {pattern:?} of {at} is not a regular expression: {e}"
                ))
            }
        }
    }
    Ok(())
}

/// The content of `map` where it is a `Replace` whose pattern matches the empty text and
/// whose content is not empty: it inserts its content at every position, so a caption
/// within `max_bytes` would grow many times before it is split.
fn grows(map: &serde_json::Map<String, Value>) -> Option<&str> {
    let content = map.get("content").and_then(Value::as_str).unwrap_or("");
    if map.get("type").and_then(Value::as_str) != Some("Replace") || content.is_empty() {
        return None;
    }
    let pattern = map.get("pattern").and_then(Value::as_object);
    match (
        pattern.and_then(|p| p.get("Regex")).and_then(Value::as_str),
        pattern
            .and_then(|p| p.get("String"))
            .and_then(Value::as_str),
    ) {
        // A pattern that does not compile is refused by `check`, naming its error.
        (Some(regex), _) => {
            fancy_regex::Regex::new(regex).is_ok_and(|r| r.is_match("").unwrap_or(false))
        }
        (None, Some(literal)) => literal.is_empty(),
        (None, None) => false,
    }
    .then_some(content)
}

/// Calls `visit` on every object under `value` (a `Split` pre-tokenizer, a `Replace`
/// normalizer or decoder, at any depth of a `Sequence`) with where it is:
/// `pre_tokenizer.pretokenizers[0]`. A `{"String": ...}` pattern is a literal, escaped by
/// `tokenizers`, so never backtracks.
fn objects<'a>(
    value: &'a Value,
    at: &mut String,
    visit: &mut impl FnMut(&str, &'a serde_json::Map<String, Value>),
) {
    let len = at.len();
    match value {
        Value::Object(map) => {
            visit(at, map);
            for (key, child) in map {
                if !at.is_empty() {
                    at.push('.');
                }
                at.push_str(key);
                objects(child, at, visit);
                at.truncate(len);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                at.push_str(&format!("[{i}]"));
                objects(child, at, visit);
                at.truncate(len);
            }
        }
        _ => {}
    }
}

/// Whether fancy-regex, compiling `pattern` as `tokenizers` does, runs it on its
/// backtracking VM rather than the regex crate's automata.
///
/// Its own decision, not a guess from the syntax: fancy-regex rewrites some patterns (a
/// trailing look-ahead) so that the automata can run them, and sends word boundaries to the
/// VM. `debug_print` (public, if undocumented) says which it chose; should it ever say it
/// differently, every pattern reads as needing the VM and is refused, which the tests of
/// the patterns known to be linear catch.
pub(crate) fn needs_backtracking(pattern: &str) -> Result<bool, fancy_regex::Error> {
    struct Program<'a>(&'a fancy_regex::Regex);
    impl fmt::Display for Program<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            self.0.debug_print(f)
        }
    }
    let regex = fancy_regex::Regex::new(pattern)?;
    Ok(!Program(&regex).to_string().starts_with("wrapped Regex"))
}
