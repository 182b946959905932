use super::*;

#[test]
fn a_request_in_a_log_never_shows_the_peer_secret() {
    let request = Request::Hello {
        protocol: PROTOCOL,
        location: "/data/train".into(),
        settings: Vec::new(),
        group: String::new(),
        node: Some(Box::new(JobNode::of(&NodeConfig::new(
            0,
            vec!["127.0.0.1:7070".into()],
            "30%".parse().unwrap(),
            Secret::new(b"do-not-log-this-secret").unwrap(),
        )))),
        ranks: None,
        storage: StorageSettings(vec![(
            "AWS_SECRET_ACCESS_KEY".into(),
            "do-not-log-this-key".into(),
        )]),
        sources: Vec::new(),
        fields: None,
    };
    let shown = format!("{request:?}");
    assert!(
        shown.contains("SecretBytes(22 bytes, not shown)"),
        "{shown}"
    );
    let bytes = b"do-not-log-this-secret".map(|b| b.to_string()).join(", ");
    assert!(
        !shown.contains("do-not-log") && !shown.contains(&bytes),
        "{shown}"
    );
    assert!(shown.contains("AWS_SECRET_ACCESS_KEY"), "{shown}");
}

#[test]
fn requests_and_replies_read_back_as_written() {
    let requests = [
        Request::Hello {
            protocol: PROTOCOL,
            location: "/data/train".into(),
            settings: vec![("batch_size".into(), "64".into())],
            group: "search".into(),
            node: None,
            ranks: Some(LocalRanks {
                job: 42,
                local_rank: 1,
                local_world: 8,
            }),
            storage: StorageSettings::default(),
            sources: Vec::new(),
            fields: None,
        },
        Request::Hello {
            protocol: PROTOCOL,
            location: "s3://b/train".into(),
            settings: Vec::new(),
            group: String::new(),
            node: Some(Box::new(JobNode::of(&NodeConfig::new(
                1,
                vec!["10.0.0.1:7070".into(), "10.0.0.2:7070".into()],
                "30%".parse().unwrap(),
                Secret::new(b"sixteen bytes at least").unwrap(),
            )))),
            ranks: None,
            storage: StorageSettings(vec![
                ("AWS_ENDPOINT_URL".into(), "http://127.0.0.1:9000".into()),
                ("AWS_ACCESS_KEY_ID".into(), "me".into()),
            ]),
            sources: Vec::new(),
            fields: None,
        },
        Request::Hello {
            protocol: PROTOCOL,
            location: "/a + /b".into(),
            settings: Vec::new(),
            group: String::new(),
            node: None,
            ranks: None,
            storage: StorageSettings::default(),
            sources: vec![("/a".into(), Some(0.7)), ("/b".into(), None)],
            fields: Some(FieldsSent {
                text: "x".repeat(MAX_TEXT * 4),
                tokenizers: vec![2_000_000, 17],
            }),
        },
        Request::Next {
            at: nostall::Position {
                epoch: 3,
                batch: 7,
                sample: 448,
            },
            ask: 12,
            credits: 2,
        },
        Request::Release { ticket: 9 },
    ];
    for r in requests {
        assert_eq!(Request::decode(&r.encode()).unwrap(), r);
    }
    let replies = [
        Reply::Welcome(crate::Attached {
            group: "g".into(),
            members: 2,
            batches_per_epoch: 10,
            dataset_len: 640,
            sample_shape: vec![3, 224, 224],
            dtype: "float32".into(),
            classes: vec!["cat".into(), "dog".into()],
            lease: Duration::from_millis(2500),
        }),
        Reply::Working { ask: 7 },
        Reply::Forget {
            buffers: vec![3, u64::MAX],
        },
        Reply::Forget {
            buffers: vec![1; MAX_FORGET],
        },
        Reply::Batch(BatchHeader {
            ask: 5,
            ticket: 1,
            buffer: 2,
            buffer_len: 4096,
            data_len: 1024,
            index: 0,
            epoch: 0,
            batch: 1,
            sample: 2,
            shared: true,
            labels: vec![-1, 4],
            ids: vec![10, 11],
            group: crate::GroupStats {
                members: 3,
                produced: 9,
                delivered: 20,
                detached: 1,
                ahead: 2,
            },
            node: Some(NodeFigures {
                served_local_bytes: 7,
                ..NodeFigures::default()
            }),
        }),
        Reply::End { epoch: 4, ask: 1 },
        Reply::Failed {
            failure: Failure::text("no"),
            ask: 0,
        },
        Reply::Failed {
            failure: Failure {
                message: "bad".into(),
                sample: Some(SampleFailure {
                    sample_id: 3,
                    location: "/d/a.jpg".into(),
                    cause: "corrupt".into(),
                    detail: "not a JPEG".into(),
                }),
            },
            ask: 7,
        },
    ];
    for r in replies {
        assert_eq!(Reply::decode(&r.encode()).unwrap(), r);
    }
}

#[test]
fn a_forget_naming_more_buffers_than_allowed_is_refused() {
    let mut m = Reply::Forget {
        buffers: vec![1; MAX_FORGET],
    }
    .encode();
    m[1..5].copy_from_slice(&(MAX_FORGET as u32 + 1).to_le_bytes());
    m.extend_from_slice(&1u64.to_le_bytes());
    let err = Reply::decode(&m).unwrap_err();
    assert!(err.0.contains("buffers to forget"), "{err}");
}

#[test]
fn credits_outside_their_bounds_are_refused() {
    for credits in [0, MAX_CREDITS + 1, u32::MAX] {
        let next = Request::Next {
            at: nostall::Position::start_of(0),
            ask: 1,
            credits,
        };
        let err = Request::decode(&next.encode()).unwrap_err();
        assert!(err.0.contains("credits"), "{err}");
    }
}

#[test]
fn a_job_of_more_nodes_than_allowed_is_refused() {
    let mut config = NodeConfig::new(
        0,
        vec!["127.0.0.1:7070".into()],
        "30%".parse().unwrap(),
        Secret::new(b"sixteen bytes at least").unwrap(),
    );
    config.membership = nostall_peer::Membership::Rendezvous {
        at: "127.0.0.1:7070".into(),
        own: "127.0.0.1:0".into(),
    };
    for (nodes, accepted) in [
        (MAX_NODES, true),
        (MAX_NODES + 1, false),
        (u32::MAX as usize, false),
    ] {
        config.nodes = nodes;
        let hello = Request::Hello {
            protocol: PROTOCOL,
            location: "/d".into(),
            settings: Vec::new(),
            group: String::new(),
            node: Some(Box::new(JobNode::of(&config))),
            ranks: None,
            storage: StorageSettings::default(),
            sources: Vec::new(),
            fields: None,
        };
        let decoded = Request::decode(&hello.encode());
        assert_eq!(decoded.is_ok(), accepted, "{nodes} nodes: {decoded:?}");
    }
}

#[test]
fn a_hello_may_carry_storage_settings_only() {
    let hello = |name: &str| Request::Hello {
        protocol: PROTOCOL,
        location: "s3://b/train".into(),
        settings: Vec::new(),
        group: String::new(),
        node: None,
        ranks: None,
        storage: StorageSettings(vec![(name.into(), "x".into())]),
        sources: Vec::new(),
        fields: None,
    };
    assert!(Request::decode(&hello("AWS_REGION").encode()).is_ok());
    let err = Request::decode(&hello("LD_PRELOAD").encode()).unwrap_err();
    assert!(err.0.contains("not a storage setting"), "{err}");
}

/// The fuzz target's seeds are messages of this protocol (when it changes, they must
/// be written again, or fuzzing starts from bytes every parser refuses at once); a hello
/// may be followed by its memfd's bytes, the tokenizers that make its fields.
#[test]
fn the_fuzz_corpus_seeds_are_valid_messages() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/agent_messages");
    let (mut seeds, mut attached) = (0, 0);
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        seeds += 1;
        match Request::read_prefix(&bytes) {
            Ok((
                Request::Hello {
                    protocol, fields, ..
                },
                rest,
            )) => {
                assert_eq!(protocol, PROTOCOL, "{}", path.display());
                if rest.is_empty() {
                    continue;
                }
                let fields = fields.expect("only tokenizers come beside a hello");
                let memfd = crate::attachment::write(&[rest.into()]).unwrap();
                let tokenizers = crate::attachment::received(Some(memfd), &fields.tokenizers);
                let made =
                    nostall::fields::Fields::from_portable(&fields.text, &tokenizers.unwrap());
                assert!(made.is_ok(), "{}: {made:?}", path.display());
                attached += 1;
            }
            Ok((_, [])) => {}
            request => {
                let reply = Reply::decode(&bytes);
                assert!(reply.is_ok(), "{}: {request:?} / {reply:?}", path.display());
            }
        }
    }
    assert!(
        seeds >= 9 && attached >= 3,
        "{seeds} seeds, {attached} with tokenizers"
    );
}

#[test]
fn a_hellos_protocol_is_read_from_its_first_bytes_whatever_follows() {
    let mut later = vec![HELLO];
    later.extend_from_slice(&(PROTOCOL + 1).to_le_bytes());
    later.extend_from_slice(b"a layout this version does not know");
    assert_eq!(hello_protocol(&later), Some(PROTOCOL + 1));
    assert_eq!(hello_protocol(&later[..5]), Some(PROTOCOL + 1));
    assert_eq!(hello_protocol(&later[..4]), None);
    assert_eq!(
        hello_protocol(&Request::Release { ticket: 1 }.encode()),
        None
    );
    let versions = Reply::Versions {
        protocol: PROTOCOL,
        release: NOSTALL_VERSION.into(),
    };
    assert_eq!(Reply::decode(&versions.encode()), Ok(versions));
}

#[test]
fn every_cut_and_every_flipped_tag_is_an_error_not_a_panic() {
    let hello = Request::Hello {
        protocol: PROTOCOL,
        location: "/d".into(),
        settings: vec![("seed".into(), "1".into()); 3],
        group: String::new(),
        node: Some(Box::new(JobNode::of(&NodeConfig::new(
            0,
            vec!["127.0.0.1:1".into()],
            "100%".parse().unwrap(),
            Secret::new(&[0xff; 16]).unwrap(),
        )))),
        ranks: Some(LocalRanks {
            job: u64::MAX,
            local_rank: 3,
            local_world: 4,
        }),
        storage: StorageSettings(vec![("AWS_REGION".into(), "eu-west-1".into())]),
        sources: Vec::new(),
        fields: None,
    }
    .encode();
    for cut in 0..hello.len() {
        assert!(Request::decode(&hello[..cut]).is_err(), "cut at {cut}");
    }
    let mut long = hello.clone();
    long.push(0);
    assert!(Request::decode(&long).is_err());
    for tag in 0..=255u8 {
        let mut m = hello.clone();
        m[0] = tag;
        let _ = Request::decode(&m);
        let _ = Reply::decode(&m);
    }
    // Local ranks that would size their table past the limit, or a rank past them
    // (the ranks' two numbers come before the storage settings, the datasets' count and
    // the fields' flag).
    let storage = 4 + 4 + "AWS_REGION".len() + 4 + "eu-west-1".len() + 4 + 1;
    for (rank, ranks) in [(0u32, u32::MAX), (4, 4), (0, 1)] {
        let mut m = hello.clone();
        let at = m.len() - storage - 8;
        m[at..at + 4].copy_from_slice(&rank.to_le_bytes());
        m[at + 4..at + 8].copy_from_slice(&ranks.to_le_bytes());
        let err = Request::decode(&m).unwrap_err();
        assert!(err.0.contains("local ranks"), "{err}");
    }
    // A length field claiming far more than the message holds.
    let mut huge = vec![HELLO];
    huge.extend_from_slice(&PROTOCOL.to_le_bytes());
    huge.extend_from_slice(&u32::MAX.to_le_bytes());
    let err = Request::decode(&huge).unwrap_err();
    assert!(err.0.contains("more than"), "{err}");
}

#[test]
fn a_hellos_fields_and_tokenizers_are_bounded() {
    let hello = |text: String, tokenizers: Vec<u64>| {
        Request::decode(
            &Request::Hello {
                protocol: PROTOCOL,
                location: "/d".into(),
                settings: Vec::new(),
                group: String::new(),
                node: None,
                ranks: None,
                storage: StorageSettings::default(),
                sources: Vec::new(),
                fields: Some(FieldsSent { text, tokenizers }),
            }
            .encode(),
        )
    };
    assert!(hello("f".repeat(MAX_FIELDS_TEXT), vec![MAX_TOKENIZER_BYTES]).is_ok());
    let err = hello("f".repeat(MAX_FIELDS_TEXT + 1), Vec::new()).unwrap_err();
    assert!(err.0.contains("the fields"), "{err}");
    let err = hello(String::new(), vec![MAX_TOKENIZER_BYTES, 1]).unwrap_err();
    assert!(err.0.contains("tokenizers of"), "{err}");
    let err = hello(String::new(), vec![u64::MAX, u64::MAX]).unwrap_err();
    assert!(err.0.contains("tokenizers of"), "{err}");
    let err = hello(String::new(), vec![1; MAX_TOKENIZERS + 1]).unwrap_err();
    assert!(err.0.contains("the tokenizers"), "{err}");
}
