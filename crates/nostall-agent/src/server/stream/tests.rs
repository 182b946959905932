use std::sync::Arc;

use nostall::plan::Blocks;
use nostall::storage::Columns;
use nostall::{LoaderConfig, Pipeline};
use ring::digest::{digest, SHA256};

use super::*;

fn settings(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

#[test]
fn jobs_group_only_with_the_same_server_and_credentials() {
    let one = settings(&[
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:9000"),
        ("AWS_ACCESS_KEY_ID", "reader"),
        ("AWS_SECRET_ACCESS_KEY", "the-secret-key-itself"),
    ]);
    let of = |s: &[(String, String)]| storage_of("s3://bucket/train", s);
    assert_eq!(of(&one).key(), of(&one.clone()).key());
    let words = of(&one).words;
    assert!(
        words.contains("http://127.0.0.1:9000 in us-east-1"),
        "{words}"
    );
    assert!(!of(&one).key().contains("the-secret-key-itself"));
    let mut other_server = one.clone();
    other_server[0].1 = "http://127.0.0.1:9001".into();
    let mut other_secret = one.clone();
    other_secret[2].1 = "another-secret-key".into();
    let no_keys = settings(&[("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")]);
    for other in [other_server, other_secret, no_keys] {
        assert_ne!(of(&one).digest, of(&other).digest, "{other:?}");
    }
    // A local dataset is read from the agent's own filesystem: no storage to tell.
    let local = storage_of("/data/train", &one);
    assert_eq!((local.words.as_str(), local.digest), ("", None));
}

fn config(blocks: Option<Blocks>) -> LoaderConfig {
    let mut config = LoaderConfig::new(Pipeline::imagenet_val(8));
    config.plan.batch_size = 4;
    config.plan.blocks = blocks;
    config
}

#[test]
fn the_identity_is_a_sha256_of_the_resolved_description_with_what_its_words_name_whole() {
    let storage = storage_of("/data/train", &[]);
    let columns = Columns::default();
    let tokenizer: Arc<[u8]> = b"{\"a tokenizer\": 1}".as_slice().into();
    let other_tokenizer: Arc<[u8]> = b"{\"a tokenizer\": 2}".as_slice().into();
    let fields = fields_digest("[]", std::slice::from_ref(&tokenizer));
    let other_fields = fields_digest("[]", std::slice::from_ref(&other_tokenizer));
    let parts = |fields| Parts {
        datasets: "/data/train",
        columns: &columns,
        storage: &storage,
        fields,
        node: None,
    };
    let (plain, grouped) = (config(None), config(Blocks::new(&[10, 10, 10, 10], 2)));
    let asked = parts(Some(&fields)).asked(&plain);
    // Tokenizers of other bytes are another stream, whatever the words show (the
    // loader's fingerprint names a tokenizer by a 64-bit digest).
    let other = parts(Some(&other_fields)).asked(&plain);
    assert_eq!(asked.words, other.words);
    assert_ne!(asked.digest, other.digest);

    let resolved = asked.resolved(&plain);
    let mut described = b"nostall-agent/group/1".to_vec();
    described.extend_from_slice(&asked.digest);
    described.extend_from_slice(format!("{:?}", plain.plan).as_bytes());
    assert_eq!(
        resolved.identity.as_slice(),
        digest(&SHA256, &described).as_ref()
    );
    assert_eq!(auto_name(&resolved.identity).len(), 16);
    // The same settings dealt from groups of samples kept open: another group, and the
    // words say how.
    let dealt = asked.resolved(&grouped);
    assert_ne!(dealt.identity, resolved.identity);
    assert_eq!(resolved.words, asked.words);
    assert!(
        dealt
            .words
            .ends_with(", dealt from 2 of 4 groups of samples open at once"),
        "{}",
        dealt.words
    );
    let fewer_open = asked.resolved(&config(Blocks::new(&[10, 10, 10, 10], 1)));
    assert_ne!(fewer_open.identity, dealt.identity);
}

#[test]
fn the_parquet_columns_and_repeats_are_part_of_the_stream() {
    let storage = storage_of("/data/train", &[]);
    let default = Columns::default();
    let mut labelled = Columns::default();
    labelled.sample = Some("png".into());
    let asked = |columns, config: &LoaderConfig| {
        Parts {
            datasets: "/data/train",
            columns,
            storage: &storage,
            fields: None,
            node: None,
        }
        .asked(config)
    };
    let plain = config(None);
    let mut repeated = config(None);
    repeated.plan.repeats = 3;
    let base = asked(&default, &plain);
    assert_ne!(base.digest, asked(&labelled, &plain).digest);
    let repeats = asked(&default, &repeated);
    assert_ne!(base.digest, repeats.digest);
    assert!(repeats.words.contains("aug_repeats 3"), "{}", repeats.words);
}
