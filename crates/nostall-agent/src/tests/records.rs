//! Records of named fields and mixtures of datasets through the agent: the job sends its
//! fields (a tokenizer in a memfd beside the hello) and its datasets with their weights;
//! every member gets the batches its own loader would give, byte for byte.

use std::sync::Arc;
use std::time::Duration;

use nostall::fields::{Field, FieldKind, Fields};
use nostall::loader::{LoaderBuilder, LoaderSettings};
use nostall::prep::tokens::{Tokenizer, TokenizerArgs};
use nostall::{Modality, Position};

use super::{read_epoch, settings, strip, Fixture, MAX_MESSAGE};
use crate::socket::Channel;
use crate::wire::{FieldsSent, Reply, Request, StorageSettings, PROTOCOL};
use crate::{Client, Reading};

/// A word-level `tokenizer.json` (what `tokenizers.Tokenizer.to_str()` writes).
const TOKENIZER: &str = r#"{"version":"1.0","truncation":null,"padding":null,
"added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"Whitespace"},
"post_processor":null,"decoder":null,"model":{"type":"WordLevel",
"vocab":{"[PAD]":0,"[UNK]":1,"a":2,"cat":3,"on":4,"the":5,"mat":6},"unk_token":"[UNK]"}}"#;

/// A caption beside each photograph (`<stem>.txt`), and the fields reading it twice:
/// tokenized and as text.
fn captioned(f: &Fixture) -> Fields {
    let mut n = 0;
    for class in std::fs::read_dir(&f.photos).unwrap() {
        for photo in std::fs::read_dir(class.unwrap().path()).unwrap() {
            let path = photo.unwrap().path();
            if path.extension().is_some_and(|e| e != "txt") {
                n += 1;
                let words = ["a cat", "on the mat", "the cat on a mat"][n % 3];
                std::fs::write(path.with_extension("txt"), format!("{words} {n}")).unwrap();
            }
        }
    }
    let tokenizer = Tokenizer::from_json(TOKENIZER.as_bytes(), TokenizerArgs::new(8)).unwrap();
    Fields::new(vec![
        Field::new("image", "jpg;jpeg;png", Modality::Image).unwrap(),
        Field::new("caption", "txt", Modality::Image)
            .unwrap()
            .with_kind(FieldKind::tokens(Arc::new(tokenizer))),
        Field::new("text", "txt", Modality::Image).unwrap(),
    ])
    .unwrap()
}

fn expected(builder: &LoaderBuilder) -> Vec<(Vec<u64>, Vec<i64>, Vec<u8>)> {
    let (loader, _) = builder.open().unwrap();
    loader
        .epoch(0)
        .unwrap()
        .map(|b| {
            let b = b.unwrap();
            (b.ids().to_vec(), b.labels().to_vec(), b.data().to_vec())
        })
        .collect()
}

/// `a` and `b` read epoch 0 side by side (a group waits for its slowest member), each
/// getting `expected` from the group's stream.
fn both_read_as(a: &mut Client, b: &mut Client, expected: &[(Vec<u64>, Vec<i64>, Vec<u8>)]) {
    let (read_a, read_b) = std::thread::scope(|scope| {
        let hb = scope.spawn(|| read_epoch(b, Position::start_of(0), None).0);
        (
            read_epoch(a, Position::start_of(0), None).0,
            hb.join().unwrap(),
        )
    });
    for read in [read_a, read_b] {
        assert!(
            strip(&read) == expected,
            "the group's batches are the job's own"
        );
        assert!(
            read.iter().all(|b| b.3),
            "every batch from the group's stream"
        );
    }
}

fn attach(f: &Fixture, reading: &Reading) -> Client {
    Client::attach_within(Duration::from_secs(30), &f.socket, reading).unwrap()
}

#[test]
fn jobs_reading_records_share_them_with_their_tokenizer_sent_beside_the_hello() {
    let f = Fixture::new(3, Duration::from_secs(30));
    let fields = captioned(&f);
    let s: LoaderSettings = settings(5);
    let mut own = LoaderBuilder::with_settings(&f.photos, s.clone());
    own.fields(Some(fields.clone()));
    let expected = expected(&own);
    let reading = Reading::new(&f.photos, s.clone()).with_fields(Some(fields));
    let (mut a, mut b) = (attach(&f, &reading), attach(&f, &reading));
    assert_eq!(a.attached().group, b.attached().group);
    let layout = own.config().unwrap().pipeline.layout().clone();
    assert_eq!(a.attached().sample_shape, layout.shape());
    both_read_as(&mut a, &mut b, &expected);
    // Without fields, the same photographs are another stream.
    let plain = attach(&f, &Reading::new(&f.photos, s));
    assert_ne!(plain.attached().group, a.attached().group);
}

#[test]
fn a_tokenizer_named_by_many_fields_is_made_once_for_every_job_and_group_reading_them() {
    let f = Fixture::new(2, Duration::from_secs(30));
    captioned(&f); // the captions beside the photographs
    let tokenizer =
        Arc::new(Tokenizer::from_json(TOKENIZER.as_bytes(), TokenizerArgs::new(8)).unwrap());
    let mut fields = vec![Field::new("image", "jpg;jpeg;png", Modality::Image).unwrap()];
    fields.extend((0..40).map(|i| {
        Field::new(&format!("caption{i}"), "txt", Modality::Image)
            .unwrap()
            .with_kind(FieldKind::tokens(tokenizer.clone()))
    }));
    let fields = Fields::new(fields).unwrap();
    let sent = fields.portable();
    assert_eq!(sent.tokenizers.len(), 1, "the job sends its tokenizer once");
    let reading = |seed| Reading::new(&f.photos, settings(seed)).with_fields(Some(fields.clone()));
    // Two jobs of one group, and a job of another seed: another group.
    let (a, b) = (attach(&f, &reading(5)), attach(&f, &reading(5)));
    let other = attach(&f, &reading(6));
    assert_eq!(a.attached().group, b.attached().group);
    assert_ne!(a.attached().group, other.attached().group);
    let made = || {
        f.agent
            .fields
            .made
            .load(std::sync::atomic::Ordering::SeqCst)
    };
    assert_eq!(made(), 1, "the fields (and their tokenizer) made once");
    drop((a, b, other));
}

#[test]
fn jobs_mixing_datasets_by_weight_share_the_mixtures_batches() {
    let f = Fixture::new(3, Duration::from_secs(30));
    let other = tempfile::tempdir().unwrap();
    let other = nostall_demo::write(other.path()).unwrap();
    let sources = |w: f64| {
        vec![
            (f.photos.clone(), Some(w)),
            (other.to_string_lossy().into_owned(), Some(1.0 - w)),
        ]
    };
    let s = settings(9);
    let mut own = LoaderBuilder::with_settings("", s.clone());
    own.mixture(sources(0.25));
    let expected = expected(&own);
    let reading = |w| Reading::new("", s.clone()).mixing(sources(w));
    let (mut a, mut b) = (attach(&f, &reading(0.25)), attach(&f, &reading(0.25)));
    assert_eq!(a.attached().group, b.attached().group);
    both_read_as(&mut a, &mut b, &expected);
    let weighed_otherwise = attach(&f, &reading(0.5));
    assert_ne!(weighed_otherwise.attached().group, a.attached().group);
}

#[test]
fn fields_or_tokenizers_that_do_not_come_as_the_hello_says_are_refused() {
    let f = Fixture::new(2, Duration::from_secs(30));
    let fields = captioned(&f);
    let reading = Reading::new(&f.photos, settings(1)).with_fields(Some(fields));
    let mut job = attach(&f, &reading); // the agent listens
    let hello = |fields: FieldsSent| Request::Hello {
        protocol: PROTOCOL,
        location: f.photos.clone(),
        settings: Vec::new(),
        group: String::new(),
        node: None,
        ranks: None,
        storage: StorageSettings::default(),
        sources: Vec::new(),
        fields: Some(fields),
    };
    let refusal = |message: Request, fd: Option<std::os::fd::OwnedFd>| -> String {
        let channel = Channel::connect(&f.socket).unwrap();
        channel
            .send(&message.encode(), fd.as_ref().map(std::os::fd::AsFd::as_fd))
            .unwrap();
        let mut buf = vec![0u8; MAX_MESSAGE];
        let r = channel.recv(&mut buf).unwrap();
        match Reply::decode(&buf[..r.len]).unwrap() {
            Reply::Failed { failure, .. } => failure.message,
            other => panic!("expected a refusal, got {other:?}"),
        }
    };
    let tokenizer: Arc<[u8]> = TOKENIZER.as_bytes().into();
    let text = |kind: &str| {
        format!(
            r#"[{{"name":"image","members":["jpg"],"kind":"sample"}},{{"name":"t","members":["txt"],{kind}}}]"#
        )
    };
    let tokens = text(r#""kind":"tokens","tokenizer":0,"length":8,"max_bytes":100"#);
    let sent = |tokenizers: Vec<u64>| FieldsSent {
        text: tokens.clone(),
        tokenizers,
    };
    let why = refusal(hello(sent(vec![tokenizer.len() as u64])), None);
    assert!(why.contains("names tokenizers but sent none"), "{why}");
    let memfd = crate::attachment::write(std::slice::from_ref(&tokenizer)).unwrap();
    let why = refusal(hello(sent(vec![tokenizer.len() as u64 + 1])), Some(memfd));
    assert!(why.contains("not a file of the"), "{why}");
    let memfd = crate::attachment::write(&[b"not json".as_slice().into()]).unwrap();
    let why = refusal(hello(sent(vec![8])), Some(memfd));
    assert!(why.contains("not a tokenizer.json"), "{why}");
    let unknown = FieldsSent {
        text: text(r#""kind":"hologram""#),
        tokenizers: Vec::new(),
    };
    let why = refusal(hello(unknown.clone()), None);
    assert!(why.contains("unknown kind \"hologram\""), "{why}");
    let memfd = crate::attachment::write(&[tokenizer]).unwrap();
    let why = refusal(hello(unknown), Some(memfd));
    assert!(why.contains("a descriptor came with the hello"), "{why}");
    // The agent serves on, its jobs and new ones.
    let (read, _) = read_epoch(&mut job, Position::start_of(0), None);
    assert!(!read.is_empty());
    let mut again = attach(&f, &reading);
    let read_again = read_epoch(&mut again, Position::start_of(0), None).0;
    assert!(
        strip(&read_again) == strip(&read),
        "another job reads the same epoch"
    );
}
