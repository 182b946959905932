use std::collections::HashMap;

use tokenizers::models::wordlevel::WordLevel;
use tokenizers::pre_tokenizers::whitespace::Whitespace;
use tokenizers::processors::template::TemplateProcessing;

use super::*;

/// A word-level tokenizer's JSON: `[PAD]` 0, `[UNK]` 1, `<s>` 2, `</s>` 3, then the
/// words; split on whitespace, each text between `<s>` and `</s>`.
pub(crate) fn json() -> Vec<u8> {
    let words = [
        "[PAD]", "[UNK]", "<s>", "</s>", "a", "cat", "on", "the", "mat",
    ];
    let vocab: HashMap<String, u32> = words
        .iter()
        .enumerate()
        .map(|(i, w)| (w.to_string(), i as u32))
        .collect();
    let model = WordLevel::builder()
        .vocab(vocab.into_iter().collect())
        .unk_token("[UNK]".into())
        .build()
        .unwrap();
    let mut tokenizer = tokenizers::Tokenizer::new(model);
    tokenizer.with_pre_tokenizer(Some(Whitespace {}));
    tokenizer.with_post_processor(Some(
        TemplateProcessing::builder()
            .try_single("<s> $A </s>")
            .unwrap()
            .special_tokens(vec![("<s>", 2), ("</s>", 3)])
            .build()
            .unwrap(),
    ));
    tokenizer.to_string(false).unwrap().into_bytes()
}

fn encode(tokenizer: &Tokenizer, text: &str) -> (Vec<i64>, Vec<i64>, usize) {
    let n = tokenizer.length();
    let (mut ids, mut mask) = (vec![-1; n], vec![-1; n]);
    let kept = tokenizer.encode_into(text, &mut ids, &mut mask).unwrap();
    (ids, mask, kept)
}

#[test]
fn texts_are_cut_or_padded_to_the_length_the_special_tokens_kept() {
    let tokenizer = Tokenizer::from_json(&json(), TokenizerArgs::new(6)).unwrap();
    assert_eq!(
        encode(&tokenizer, "a cat"),
        (vec![2, 4, 5, 3, 0, 0], vec![1, 1, 1, 1, 0, 0], 4)
    );
    // Cut: the text's first words, then the end token, as `tokenizers` truncates.
    assert_eq!(
        encode(&tokenizer, "a cat on the mat a cat"),
        (vec![2, 4, 5, 6, 7, 3], vec![1; 6], 6)
    );
    // An unknown word is the unknown token; an empty text its special tokens alone.
    assert_eq!(encode(&tokenizer, "dog").0, vec![2, 1, 3, 0, 0, 0]);
    assert_eq!(encode(&tokenizer, "").0, vec![2, 3, 0, 0, 0, 0]);
}

#[test]
fn the_padding_id_is_the_one_asked_for() {
    let args = TokenizerArgs {
        pad_id: Some(3),
        ..TokenizerArgs::new(5)
    };
    let tokenizer = Tokenizer::from_json(&json(), args).unwrap();
    assert_eq!(tokenizer.pad_id(), 3);
    assert_eq!(
        encode(&tokenizer, "mat"),
        (vec![2, 8, 3, 3, 3], vec![1, 1, 1, 0, 0], 3)
    );
}

#[test]
fn a_text_over_the_bound_is_the_samples_error_and_leaves_the_next_alone() {
    let args = TokenizerArgs {
        max_bytes: 8,
        ..TokenizerArgs::new(4)
    };
    let tokenizer = Tokenizer::from_json(&json(), args).unwrap();
    let (mut ids, mut mask) = (vec![0; 4], vec![0; 4]);
    let err = tokenizer
        .encode_into("the cat on the mat", &mut ids, &mut mask)
        .unwrap_err();
    assert_eq!(
        err,
        Cause::TooLarge {
            bytes: 18,
            limit: 8,
            field: None,
        }
    );
    assert_eq!(encode(&tokenizer, "a cat").0, vec![2, 4, 5, 3]);
}

#[test]
fn bad_files_and_arguments_are_config_errors_that_say_what_to_change() {
    let message = |r: Result<Tokenizer>| r.unwrap_err().to_string();
    assert!(
        message(Tokenizer::from_json(b"{\"not\": 1}", TokenizerArgs::new(4)))
            .contains("not a tokenizer.json")
    );
    assert!(message(Tokenizer::from_json(&json(), TokenizerArgs::new(0))).contains("length 0"));
    let args = TokenizerArgs {
        max_bytes: 0,
        ..TokenizerArgs::new(4)
    };
    assert!(message(Tokenizer::from_json(&json(), args)).contains("max_bytes"));
    let missing = Tokenizer::from_file(
        Path::new("/nonexistent/tokenizer.json"),
        TokenizerArgs::new(4),
    );
    assert!(message(missing).contains("/nonexistent/tokenizer.json"));
    let bad =
        std::env::temp_dir().join(format!("nostall-bad-tokenizer-{}.json", std::process::id()));
    std::fs::write(&bad, b"{}").unwrap();
    let named = message(Tokenizer::from_file(&bad, TokenizerArgs::new(4)));
    std::fs::remove_file(&bad).unwrap();
    // Said once, with the file named.
    assert_eq!(named.matches("invalid configuration").count(), 1, "{named}");
    assert!(named.contains("not a tokenizer.json") && named.contains(&bad.display().to_string()));
}

/// `json()` with its pre-tokenizer a `Split` on `pattern`, and its normalizer `normalizer`.
fn with_patterns(pattern: &str, normalizer: serde_json::Value) -> Vec<u8> {
    let mut tokenizer: serde_json::Value = serde_json::from_slice(&json()).unwrap();
    tokenizer["normalizer"] = normalizer;
    tokenizer["pre_tokenizer"] = serde_json::json!({
        "type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false
    });
    serde_json::to_vec(&tokenizer).unwrap()
}

/// A split whose every search, in a run of `a`, backtracks through the 2^16 ways of
/// matching it before it takes one character: 10 s for a 1000-byte caption (11 minutes for
/// one of 64 KiB) before patterns were checked at load.
const HOSTILE: &str = r"(?:(?:a|a){1,16}(?!a)|.)";

#[test]
fn a_pattern_that_needs_the_backtracking_engine_is_refused_at_load_naming_it() {
    let refused = |json: Vec<u8>| match Tokenizer::from_json(&json, TokenizerArgs::new(4)) {
        Err(Error::Config(message)) => message,
        Err(other) => panic!("not a configuration error: {other}"),
        Ok(_) => panic!("loaded"),
    };
    let message = refused(with_patterns(HOSTILE, serde_json::Value::Null));
    assert!(
        message.contains(&format!("{HOSTILE:?} of pre_tokenizer"))
            && message.contains("backtracking")
            && message.contains("Rewrite it"),
        "{message}"
    );
    // Wherever it is: a normaliser's replacement deep in a sequence; a look-behind, a
    // back-reference, an atomic group, a word boundary.
    let replace = |pattern: &str| {
        serde_json::json!({"type": "Sequence", "normalizers": [
            {"type": "NFC"},
            {"type": "Replace", "pattern": {"Regex": pattern}, "content": " "},
        ]})
    };
    for pattern in [r"(?<=a)\s+", r"(\w)\1", r"(?>a+)b", r"\bcat\b"] {
        let message = refused(with_patterns(r"\s+", replace(pattern)));
        assert!(
            message.contains(&format!("{pattern:?} of normalizer.normalizers[1]")),
            "{message}"
        );
    }
    // A replacement that matches the empty text would grow a caption past its bound
    // before the split; one that matches something, or inserts nothing, is kept.
    let replace_with = |pattern: serde_json::Value, content: &str| {
        serde_json::json!({"type": "Sequence", "normalizers": [
            {"type": "NFC"},
            {"type": "Replace", "pattern": pattern, "content": content},
        ]})
    };
    for pattern in [
        serde_json::json!({"Regex": "x*"}),
        serde_json::json!({"Regex": ""}),
        serde_json::json!({"String": ""}),
    ] {
        let message = refused(with_patterns(r"\s+", replace_with(pattern, "ab")));
        assert!(
            message.contains("Replace of normalizer.normalizers[1]")
                && message.contains("empty text"),
            "{message}"
        );
    }
    for (pattern, content) in [
        (serde_json::json!({"Regex": "x+"}), "ab"),
        (serde_json::json!({"Regex": "x*"}), ""),
    ] {
        Tokenizer::from_json(
            &with_patterns(r"\s+", replace_with(pattern, content)),
            TokenizerArgs::new(4),
        )
        .unwrap();
    }
    // From a file, the file is named too.
    let path = std::env::temp_dir().join(format!(
        "nostall-backtracking-tokenizer-{}.json",
        std::process::id()
    ));
    std::fs::write(&path, with_patterns(HOSTILE, serde_json::Value::Null)).unwrap();
    let named = Tokenizer::from_file(&path, TokenizerArgs::new(4))
        .unwrap_err()
        .to_string();
    std::fs::remove_file(&path).unwrap();
    assert!(
        named.contains(HOSTILE) && named.contains(&path.display().to_string()),
        "{named}"
    );
}

#[test]
fn linear_patterns_and_the_well_known_splits_load_and_tokenize_as_tokenizers_does() {
    // CLIP's, as OpenCLIP's tokenizer is converted (python/nostall/_tokenizer.py): its word
    // split, and replacements of curly quotes and whitespace runs, on the regex crate's
    // automata; then GPT-2's split, `tokenizers`' own, in `ByteLevel`.
    let clip = r"'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+";
    let mut cases = vec![(
        clip,
        serde_json::json!({"type": "Sequence", "normalizers": [
            {"type": "Replace", "pattern": {"Regex": "[\u{2bc}\u{2018}-\u{201b}]"}, "content": "'"},
            {"type": "Replace", "pattern": {"Regex": "[\u{201c}-\u{201f}]"}, "content": "\""},
            {"type": "NFC"},
            {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "},
            {"type": "Lowercase"},
        ]}),
    )];
    for (_, split) in super::patterns::WELL_KNOWN_SPLITS {
        cases.push((split, serde_json::Value::Null));
    }
    // A trailing look-ahead fancy-regex rewrites for the automata.
    cases.push((r"\w+(?=\s)", serde_json::Value::Null));
    for (pattern, normalizer) in cases {
        let json = with_patterns(pattern, normalizer);
        let tokenizer = Tokenizer::from_json(&json, TokenizerArgs::new(12))
            .unwrap_or_else(|e| panic!("{pattern:?}: {e}"));
        let mut reference = tokenizers::Tokenizer::from_bytes(&json).unwrap();
        reference
            .with_truncation(Some(TruncationParams {
                max_length: 12,
                ..TruncationParams::default()
            }))
            .unwrap();
        reference.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::Fixed(12),
            ..PaddingParams::default()
        }));
        let text = "The cat\u{2019}s   on\tthe MAT, a cat on  the mat";
        let want = reference.encode(text, true).unwrap();
        let want: Vec<i64> = want.get_ids().iter().map(|&id| i64::from(id)).collect();
        assert_eq!(encode(&tokenizer, text).0, want, "{pattern:?}");
    }
    let mut byte_level: serde_json::Value = serde_json::from_slice(&json()).unwrap();
    byte_level["pre_tokenizer"] = serde_json::json!({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": clip}, "behavior": "Removed", "invert": true},
        {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    ]});
    Tokenizer::from_json(
        &serde_json::to_vec(&byte_level).unwrap(),
        TokenizerArgs::new(4),
    )
    .unwrap();
}

#[test]
fn fancy_regex_is_asked_which_engine_a_pattern_needs() {
    use super::patterns::needs_backtracking;
    for linear in [r"\s+", r"[\p{L}]+|[\p{N}]", r"a(?=b)", "", r"(?i:'s|'t)"] {
        assert!(!needs_backtracking(linear).unwrap(), "{linear:?}");
    }
    for backtracking in [
        r"\s+(?!\S)",
        r"(?<!a)b",
        r"(a)\1",
        r"(?>a|ab)c",
        r"\b",
        r"a++b",
    ] {
        assert!(
            needs_backtracking(backtracking).unwrap(),
            "{backtracking:?}"
        );
    }
    assert!(needs_backtracking("(").is_err());
}
