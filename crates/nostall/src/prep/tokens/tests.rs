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
            limit: 8
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
