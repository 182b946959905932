use std::sync::Arc;

use super::*;
use crate::error::Cause;
use crate::prep::image::codec::{encode_jpeg, EncodePixels};
use crate::prep::{Pipeline, Prep, Prepared, ViewsPipeline};
use crate::rng::Rng;
use crate::storage::tar::tests::tar;
use crate::storage::{LocalDir, Source, TarShards};

fn photo() -> Vec<u8> {
    let (w, h) = (96u32, 64u32);
    let px: Vec<u8> = (0..w * h)
        .flat_map(|i| [(i % w * 255 / w) as u8, (i / w * 255 / h) as u8, 90])
        .collect();
    encode_jpeg(&px, w, h, EncodePixels::Rgb, 90, false).unwrap()
}

fn pipeline() -> Pipeline {
    crate::prep::ImagePipeline::imagenet_val(32).into()
}

fn field(name: &str, members: &str) -> Field {
    Field::new(name, members, Modality::Image).unwrap()
}

/// Shards of `files` opened as records of `fields`.
fn records(files: &[(&str, Vec<u8>)], fields: &Fields) -> (tempfile::TempDir, TarShards) {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in files {
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    let store = Arc::new(LocalDir::new(dir.path()).unwrap());
    let listing = crate::storage::BlobStore::list(&*store).unwrap();
    let shards =
        TarShards::records_from_listing(store, listing, Modality::Image, &fields.others().concat())
            .unwrap();
    (dir, shards)
}

/// What `prep` makes of sample `id` of `shards`, with the generator of seed 7.
fn prepare(prep: &RecordPrep, shards: &TarShards, id: u64) -> Result<Vec<u8>, Cause> {
    let mut data = Vec::new();
    shards.read(id, &mut data)?;
    let mut out = vec![0xAB; prep.layout().bytes()];
    let prepared = prep
        .preparer()
        .unwrap()
        .prepare(&data, &mut Rng::new(7), &mut out)?;
    assert!(matches!(prepared, Prepared::InSlot));
    Ok(out)
}

fn part<'a>(prep: &RecordPrep, out: &'a [u8], name: &str) -> &'a [u8] {
    let layout = prep.layout();
    let part = layout.parts().iter().find(|p| p.name == name).unwrap();
    &out[part.offset..part.offset + part.form.bytes()]
}

fn var(slot: &[u8]) -> &[u8] {
    let len = u32::from_le_bytes(slot[..4].try_into().unwrap()) as usize;
    &slot[4..4 + len]
}

#[test]
fn a_record_gives_each_field_and_the_image_of_a_loader_without_fields() {
    let jpg = photo();
    let long = format!("{}/000002", "d".repeat(120));
    let [jpg2, txt2, json2, cls2] = ["jpg", "txt", "json", "cls"].map(|e| format!("{long}.{e}"));
    let fields = Fields::new(vec![
        field("image", "jpg;png"),
        field("caption", "txt"),
        field("meta", "json"),
        field("label", "cls"),
    ])
    .unwrap();
    let shard = tar(&[
        ("000001.jpg", &jpg),
        ("000001.npy", &[9; 700]), // not asked for: inside the run, skipped
        ("000001.txt", "a red café".as_bytes()),
        ("000001.json", br#"{"w": 96, "tags": ["a", "b"]}"#),
        ("000001.cls", b"3"),
        (&jpg2, &jpg),
        (&txt2, b"second"),
        (&json2, b"{}"),
        (&cls2, b"1"),
    ]);
    let (_dir, shards) = records(&[("a.tar", shard)], &fields);
    assert_eq!(shards.catalog().len(), 2);
    assert_eq!(shards.catalog().relative_path(0), "a.tar/000001");
    assert_eq!(shards.catalog().label(0), Some(3));
    assert_eq!(shards.catalog().relative_path(1), format!("a.tar/{long}"));

    let prep = RecordPrep::new(pipeline(), fields).unwrap();
    let out = prepare(&prep, &shards, 0).unwrap();
    let mut alone = vec![0u8; pipeline().sample_bytes()];
    let mut preparer = pipeline().prep().preparer().unwrap();
    preparer
        .prepare(&jpg, &mut Rng::new(7), &mut alone)
        .unwrap();
    assert_eq!(part(&prep, &out, "image"), alone);
    assert_eq!(var(part(&prep, &out, "caption")), "a red café".as_bytes());
    assert_eq!(
        var(part(&prep, &out, "meta")),
        br#"{"w": 96, "tags": ["a", "b"]}"#
    );
    assert!(part(&prep, &out, "label").is_empty());
    // The slot's bytes past the text are zeros: nothing of a previous sample remains.
    let caption = part(&prep, &out, "caption");
    assert!(caption[4 + "a red café".len()..].iter().all(|&b| b == 0));

    // A key whose name takes a long-name header: its record starts at that header.
    let out = prepare(&prep, &shards, 1).unwrap();
    assert_eq!(var(part(&prep, &out, "caption")), b"second");
    assert_eq!(part(&prep, &out, "image"), alone);
}

#[test]
fn each_part_starts_aligned_and_the_fingerprint_follows_the_fields() {
    let fields = Fields::new(vec![field("caption", "txt"), field("image", "jpg")]).unwrap();
    let prep = RecordPrep::new(pipeline(), fields).unwrap();
    let layout = prep.layout();
    assert_eq!(layout.parts()[0].offset, 0);
    assert_eq!(
        layout.parts()[1].offset,
        (4 + DEFAULT_FIELD_BYTES).next_multiple_of(8)
    );
    assert_eq!(layout.bytes() % 8, 0);
    let other = RecordPrep::new(
        pipeline(),
        Fields::new(vec![
            field("caption", "txt").with_kind(FieldKind::text(64)),
            field("image", "jpg"),
        ])
        .unwrap(),
    )
    .unwrap();
    assert_ne!(prep.fingerprint(), other.fingerprint());
}

#[test]
fn a_bad_field_is_its_samples_cause_naming_the_field() {
    let jpg = photo();
    // Within the field's 16 KiB, so that its depth is what refuses it.
    let deep = "[".repeat(5_000) + &"]".repeat(5_000);
    let fields = Fields::new(vec![
        field("image", "jpg"),
        field("caption", "txt").with_kind(FieldKind::text(64)),
        field("meta", "json").with_kind(FieldKind::json(DEFAULT_FIELD_BYTES, vec!["w".into()])),
    ])
    .unwrap();
    let shard = tar(&[
        ("ok.jpg", &jpg),
        ("ok.txt", b"fine"),
        ("ok.json", br#"{"w": 1}"#),
        ("latin.jpg", &jpg),
        ("latin.txt", b"caf\xe9"),
        ("latin.json", br#"{"w": 2}"#),
        ("long.jpg", &jpg),
        ("long.txt", &[b'a'; 65]),
        ("long.json", br#"{"w": 3}"#),
        ("deep.jpg", &jpg),
        ("deep.txt", b"x"),
        ("deep.json", deep.as_bytes()),
        ("broken.jpg", &jpg),
        ("broken.txt", b"x"),
        ("broken.json", b"{\"a\": "),
        ("nocap.jpg", &jpg),
        ("nocap.json", br#"{"w": 4}"#),
        ("nokey.jpg", &jpg),
        ("nokey.txt", b"x"),
        ("nokey.json", br#"{"h": 4}"#),
        ("array.jpg", &jpg),
        ("array.txt", b"x"),
        ("array.json", b"[1]"),
    ]);
    let (_dir, shards) = records(&[("a.tar", shard)], &fields);
    let prep = RecordPrep::new(pipeline(), fields).unwrap();
    let cause = |id| prepare(&prep, &shards, id).unwrap_err();
    assert!(prepare(&prep, &shards, 0).is_ok());
    let kinds: Vec<&str> = (1..8).map(|id| cause(id).kind()).collect();
    assert_eq!(
        kinds,
        [
            "bad-text",
            "bad-text",
            "bad-json",
            "bad-json",
            "missing-field",
            "bad-json",
            "bad-json"
        ]
    );
    assert!(
        cause(6).to_string().contains("no key \"w\""),
        "{}",
        cause(6)
    );
    assert!(
        cause(7).to_string().contains("not an object"),
        "{}",
        cause(7)
    );
    assert!(cause(1).to_string().contains("\"caption\""), "{}", cause(1));
    assert!(
        cause(2).to_string().contains("max_bytes=64"),
        "{}",
        cause(2)
    );
    assert!(cause(3).to_string().contains("recursion"), "{}", cause(3));
    let missing = cause(5).to_string();
    assert!(
        missing.contains("txt") && missing.contains("\"caption\""),
        "{missing}"
    );
    // A failure leaves the preparer as it was: the good sample after it is the same.
    assert_eq!(prepare(&prep, &shards, 0), prepare(&prep, &shards, 0));
}

#[test]
fn a_member_over_its_fields_bound_is_refused_for_its_size_before_it_is_read() {
    let jpg = photo();
    let length = 4;
    let fields = Fields::new(vec![
        field("image", "jpg"),
        field("meta", "json").with_kind(FieldKind::json(1024, Vec::new())),
        field("embedding", "npy").with_kind(FieldKind::vector(length)),
    ])
    .unwrap();
    let values: Vec<u8> = (0..4).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let good_npy = super::npy::tests::npy_file("<f4", "(4,)", &values);
    // A JSON array of zeros: one `serde_json::Value` of 32 bytes for each 2 of them, had
    // it been parsed before its size was looked at (the review's 60 MB members took 3.7 GB).
    let zeros = |bytes: usize| {
        let mut json = "[0".to_string() + &",0".repeat((bytes - 3) / 2);
        json.push_str(if bytes.is_multiple_of(2) { " ]" } else { "]" });
        assert_eq!(json.len(), bytes);
        json.into_bytes()
    };
    let most = kind::vector::most_bytes(length);
    let mut npy_huge = good_npy.clone();
    npy_huge.resize(most + 1, 0);
    let shard = tar(&[
        ("a.jpg", &jpg),
        ("a.json", &zeros(1024)),
        ("a.npy", &good_npy),
        ("big.jpg", &jpg),
        ("big.json", &zeros(4 << 20)),
        ("big.npy", &good_npy),
        // Not JSON at all: had it been parsed first, it would be `bad-json`.
        ("junk.jpg", &jpg),
        ("junk.json", &[b'{'; 1025]),
        ("junk.npy", &good_npy),
        ("vec.jpg", &jpg),
        ("vec.json", b"{}"),
        ("vec.npy", &zeros(4 << 20)),
        ("vecjunk.jpg", &jpg),
        ("vecjunk.json", b"{}"),
        ("vecjunk.npy", &vec![b'['; most + 1]),
        ("npy.jpg", &jpg),
        ("npy.json", b"{}"),
        ("npy.npy", &npy_huge),
        ("z.jpg", &jpg),
        ("z.json", b"{}"),
        ("z.npy", &good_npy),
    ]);
    let (_dir, shards) = records(&[("a.tar", shard)], &fields);
    let prep = RecordPrep::new(pipeline(), fields).unwrap();
    let out = prepare(&prep, &shards, 0).unwrap();
    assert_eq!(
        var(part(&prep, &out, "meta")).len(),
        1024,
        "max_bytes itself holds"
    );
    let cause = |id| prepare(&prep, &shards, id).unwrap_err();
    for id in [1, 2] {
        assert_eq!(
            cause(id),
            Cause::TooLarge {
                bytes: if id == 1 { 4 << 20 } else { 1025 },
                limit: 1024,
                field: Some("meta".into()),
            }
        );
    }
    assert_eq!(
        cause(2).to_string(),
        "field \"meta\" is 1025 bytes, over its limit of 1024 bytes (its max_bytes)"
    );
    for id in [3, 4, 5] {
        let why = cause(id);
        assert_eq!(why.kind(), "bad-vector", "{why}");
        let why = why.to_string();
        assert!(
            why.contains("\"embedding\"")
                && why.contains("more than a .npy array or a JSON array of 4 numbers takes"),
            "{why}"
        );
    }
    // The sample after them is as it would be alone.
    let last = prepare(&prep, &shards, 6).unwrap();
    let floats: Vec<f32> = part(&prep, &last, "embedding")
        .chunks_exact(4)
        .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(floats, [0.0, 1.0, 2.0, 3.0]);
}

#[cfg(feature = "tokenize")]
#[test]
fn a_caption_to_tokenize_over_its_bound_is_too_large_whatever_its_bytes() {
    use crate::prep::tokens::{Tokenizer, TokenizerArgs};
    let mut args = TokenizerArgs::new(6);
    args.max_bytes = 16;
    let tokenizer = Tokenizer::from_json(&crate::prep::tokens::tests::json(), args).unwrap();
    let text = field("text", "txt").with_kind(FieldKind::tokens(Arc::new(tokenizer)));
    let mut slot = vec![
        0u8;
        text.kind
            .form(&SampleLayout::new(vec![1], crate::sample::DType::U8))
            .bytes()
    ];
    // Not UTF-8 either: its size is looked at first.
    let got = text.prepare(&[0xff; 17], &mut slot);
    assert_eq!(
        got,
        Err(Cause::TooLarge {
            bytes: 17,
            limit: 16,
            field: Some("text".into()),
        })
    );
    assert_eq!(
        text.prepare(&[0xff; 16], &mut slot).map_err(|c| c.kind()),
        Err("bad-text")
    );
}

#[test]
fn damaged_records_are_corrupt_not_a_panic() {
    let jpg = photo();
    let fields = Fields::new(vec![field("image", "jpg"), field("caption", "txt")]).unwrap();
    let prep = RecordPrep::new(pipeline(), fields).unwrap();
    let record = {
        let shard = tar(&[("k.jpg", &jpg), ("k.txt", b"words")]);
        shard[..shard.len() - 1024].to_vec()
    };
    let mut preparer = prep.preparer().unwrap();
    let mut out = vec![0u8; prep.layout().bytes()];
    assert!(preparer
        .prepare(&record, &mut Rng::new(1), &mut out)
        .is_ok());
    for cut in [0, 100, 511, 512, 700, record.len() - 1] {
        let got = preparer.prepare(&record[..cut], &mut Rng::new(1), &mut out);
        assert!(
            matches!(got, Err(Cause::Corrupt(_) | Cause::MissingField { .. })),
            "cut at {cut}: {got:?}"
        );
    }
    let mut flipped = record.clone();
    flipped[130] ^= 0x55; // inside the first header's size field
    assert!(preparer
        .prepare(&flipped, &mut Rng::new(1), &mut out)
        .is_err());
}

#[cfg(feature = "tokenize")]
#[test]
fn a_tokenized_field_holds_the_tokenizers_ids_then_its_mask() {
    use crate::prep::tokens::{Tokenizer, TokenizerArgs};
    let tokenizer =
        Tokenizer::from_json(&crate::prep::tokens::tests::json(), TokenizerArgs::new(6)).unwrap();
    let fields = Fields::new(vec![
        field("image", "jpg"),
        field("text", "txt").with_kind(FieldKind::tokens(Arc::new(tokenizer.clone()))),
    ])
    .unwrap();
    let jpg = photo();
    let shard = tar(&[("k.jpg", &jpg), ("k.txt", b"a cat on the mat today")]);
    let (_dir, shards) = records(&[("a.tar", shard)], &fields);
    let prep = RecordPrep::new(pipeline(), fields).unwrap();
    let out = prepare(&prep, &shards, 0).unwrap();
    let slot = part(&prep, &out, "text");
    let values: Vec<i64> = slot
        .chunks_exact(8)
        .map(|c| i64::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    let (mut ids, mut mask) = (vec![0; 6], vec![0; 6]);
    tokenizer
        .encode_into("a cat on the mat today", &mut ids, &mut mask)
        .unwrap();
    assert_eq!(values[..6], ids);
    assert_eq!(values[6..], mask);
    assert_eq!(ids, [2, 4, 5, 6, 7, 3]);
}

#[test]
fn fields_that_cannot_work_are_refused() {
    let why = |fields: Vec<Field>| Fields::new(fields).unwrap_err().to_string();
    assert!(why(vec![]).contains("no field"));
    assert!(why(vec![field("caption", "txt")]).contains("modality"));
    assert!(Fields::new(vec![field("a", "jpg"), field("b", "png")]).is_ok());
    assert!(why(vec![field("a", "jpg"), field("a", "txt")]).contains("two fields are named"));
    assert!(why(vec![
        field("image", "jpg"),
        field("caption", "txt").with_kind(FieldKind::text(0))
    ])
    .contains("max_bytes=0"));
    assert!(why(vec![
        field("image", "jpg"),
        field("label", "txt").with_kind(FieldKind::label())
    ])
    .contains(".cls"));
    assert!(Field::new("image", "jpg;;png", Modality::Image).is_err());
    assert_eq!(field("x", "PNG").kind.name(), "sample");
    assert_eq!(field("x", "cls").kind.name(), "label");
    assert_eq!(field("x", "seg.png").kind.name(), "sample");
    assert_eq!(field("x", "npy").kind.name(), "bytes");
}

#[test]
#[cfg(feature = "tokenize")]
fn portable_fields_make_the_same_fields_and_hostile_ones_are_refused() {
    use crate::prep::tokens::{Tokenizer, TokenizerArgs};
    let mut args = TokenizerArgs::new(6);
    args.pad_id = Some(1);
    let tokenizer =
        Arc::new(Tokenizer::from_json(&crate::prep::tokens::tests::json(), args).unwrap());
    let fields = Fields::new(vec![
        field("image", "jpg;png"),
        field("label", "cls"),
        field("caption", "txt").with_kind(FieldKind::tokens(tokenizer.clone())),
        field("again", "text").with_kind(FieldKind::tokens(tokenizer)),
        field("meta", "json").with_kind(FieldKind::json(100, vec!["url".into()])),
        field("raw", "bin"),
    ])
    .unwrap();
    let sent = fields.portable();
    assert_eq!(sent.tokenizers.len(), 1, "one tokenizer sent once");
    let made = Fields::from_portable(&sent.text, &sent.tokenizers).unwrap();
    assert_eq!(made.fingerprint(), fields.fingerprint());
    let sample = SampleLayout::new(vec![3, 8, 8], crate::sample::DType::F32);
    assert_eq!(made.layout(&sample), fields.layout(&sample));
    assert_eq!(made.portable(), sent);
    // Parsed once for both fields that name it alike (the agent holds what it makes).
    let parsed: Vec<_> = made
        .iter()
        .filter_map(|f| f.kind.get::<kind::tokens::Tokens>())
        .map(|t| t.tokenizer().clone())
        .collect();
    assert_eq!(parsed.len(), 2);
    assert!(
        Arc::ptr_eq(&parsed[0], &parsed[1]),
        "one tokenizer, parsed once"
    );

    let refused = |text: &str, tokenizers: &[Arc<[u8]>]| {
        Fields::from_portable(text, tokenizers)
            .unwrap_err()
            .to_string()
    };
    let why = refused(&sent.text, &[]);
    assert!(why.contains("names tokenizer 0 of 0"), "{why}");
    let not_a_tokenizer: Arc<[u8]> = b"{}".as_slice().into();
    let why = refused(&sent.text, &[not_a_tokenizer]);
    assert!(why.contains("not a tokenizer.json"), "{why}");
    for (text, expect) in [
        ("{", "the fields sent"),
        ("{}", "not a JSON array"),
        ("[1]", "not an object"),
        (
            r#"[{"name":"i","members":["jpg"],"kind":"picture"}]"#,
            "unknown kind",
        ),
        (r#"[{"name":"i","members":["jpg"]}]"#, "no text \"kind\""),
        (
            r#"[{"name":"t","members":["txt"],"kind":"text","max_bytes":-1}]"#,
            "max_bytes",
        ),
        (
            r#"[{"name":"i","members":["jpg"],"kind":"sample"},{"name":"t","members":["txt"],"kind":"text","max_bytes":99999999999}]"#,
            "out of bounds",
        ),
        (
            r#"[{"name":"t","members":["txt"],"kind":"text","max_bytes":10}]"#,
            "modality",
        ),
    ] {
        let why = refused(text, &[]);
        assert!(why.contains(expect), "{text}: {why}");
    }
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    assert!(refused(&deep, &[]).contains("the fields sent"));
    let long = format!(
        r#"[{{"name":"i","members":["{}"],"kind":"sample"}}]"#,
        "x".repeat(300)
    );
    assert!(refused(&long, &[]).contains("255"));
}

#[test]
fn a_second_image_of_a_sample_draws_its_own_and_leaves_the_first_as_it_was() {
    let jpg = photo();
    let fields = Fields::new(vec![field("image", "jpg"), field("other", "other.jpg")]).unwrap();
    assert_eq!((fields.first_sample(), fields.samples()), (0, 2));
    assert_eq!(fields.others(), vec![vec!["other.jpg".to_string()]]);
    let shard = tar(&[("000001.jpg", &jpg), ("000001.other.jpg", &jpg)]);
    let (_dir, shards) = records(&[("a.tar", shard)], &fields);
    let train: Pipeline = crate::prep::ImagePipeline::imagenet_train(32).into();
    let prep = RecordPrep::new(train.clone(), fields.clone()).unwrap();
    let out = prepare(&prep, &shards, 0).unwrap();
    let mut alone = vec![0u8; train.sample_bytes()];
    let mut preparer = train.prep().preparer().unwrap();
    preparer
        .prepare(&jpg, &mut Rng::new(7), &mut alone)
        .unwrap();
    assert_eq!(part(&prep, &out, "image"), alone);
    assert_ne!(
        part(&prep, &out, "other"),
        alone,
        "the same photograph, its own crop"
    );
    assert_eq!(prepare(&prep, &shards, 0).unwrap(), out);
    // A record without the second image is that field's missing-field.
    let shard = tar(&[("000001.jpg", &jpg)]);
    let (_dir, shards) = records(&[("b.tar", shard)], &fields);
    let err = prepare(&prep, &shards, 0).unwrap_err();
    assert_eq!(err.kind(), "missing-field");
}

#[test]
fn vector_and_npz_fields_travel_as_they_are() {
    let fields = Fields::new(vec![
        field("image", "jpg"),
        field("embedding", "npy").with_kind(FieldKind::vector(512)),
        field("feat", "npz").with_kind(FieldKind::npz(vec![
            ("mask".into(), vec![16, 16]),
            ("scores".into(), vec![3]),
        ])),
    ])
    .unwrap();
    let sent = fields.portable();
    assert!(
        sent.text
            .contains(r#""arrays":[["mask",[16,16]],["scores",[3]]]"#),
        "{}",
        sent.text
    );
    let made = Fields::from_portable(&sent.text, &sent.tokenizers).unwrap();
    assert_eq!(made.fingerprint(), fields.fingerprint());
    let sample = SampleLayout::new(vec![3, 8, 8], crate::sample::DType::F32);
    assert_eq!(made.layout(&sample), fields.layout(&sample));
    assert_eq!(made.portable(), sent);
    assert_eq!(made.layout(&sample).parts()[2].form.bytes(), (256 + 3) * 4);
    // What the agent is sent is checked as a user's fields are.
    let text = sent.text.replace("[16,16]", "[16,0]");
    let why = Fields::from_portable(&text, &[]).unwrap_err().to_string();
    assert!(why.contains("field \"feat\": array \"mask\""), "{why}");
}

/// A grey PNG label map of `width` × `height`, each pixel's class its column's tenth.
fn label_map(width: u32, height: u32) -> Vec<u8> {
    let rows: Vec<u8> = (0..width * height)
        .map(|i| (i % width / 10) as u8)
        .collect();
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Grayscale);
    encoder.set_depth(png::BitDepth::Eight);
    encoder
        .write_header()
        .unwrap()
        .write_image_data(&rows)
        .unwrap();
    out
}

/// The pipelines of `views`, a list of lists of operators.
fn views(views: &str) -> Vec<crate::prep::ImagePipeline> {
    let crate::prep::Operators::Views(views) = views.parse().unwrap() else {
        panic!("a list of pipelines: {views}");
    };
    let pipeline = |ops| {
        crate::prep::ImagePipeline::new(
            ops,
            crate::prep::DType::F32,
            crate::prep::image::Layout::Chw,
        )
    };
    views
        .into_iter()
        .map(|ops| pipeline(ops).unwrap())
        .collect()
}

#[test]
fn each_view_holds_the_targets_its_pipeline_alone_gives_with_the_same_draws() {
    let jpg = photo();
    let fields = Fields::new(vec![
        field("image", "jpg"),
        field("caption", "txt"),
        field("boxes", "json").with_kind(FieldKind::boxes(4, "xyxy").unwrap()),
        field("seg", "png").with_kind(FieldKind::mask(1 << 16, 255)),
    ])
    .unwrap();
    let boxes = br#"{"boxes": [[10, 8, 60, 40], [50, 30, 90, 60]], "labels": [1, 2]}"#;
    let shard = tar(&[
        ("000001.jpg", &jpg),
        ("000001.txt", b"two boxes"),
        ("000001.json", boxes),
        ("000001.png", &label_map(96, 64)),
    ]);
    let (_dir, shards) = records(&[("a.tar", shard)], &fields);
    let pipelines = views(
        "[[RandomResizedCrop(40), RandomHorizontalFlip(), RandomVerticalFlip()], \
         [CenterCrop((48, 56))], [Resize((24, 36)), RandomRotation(30)]]",
    );
    let sample: Pipeline = ViewsPipeline::new(pipelines.clone()).unwrap().into();
    let prep = RecordPrep::new(sample, fields.clone()).unwrap();
    let out = prepare(&prep, &shards, 0).unwrap();
    let layout = prep.layout();
    let of = |name: &str| {
        let part = layout.parts().iter().find(|p| p.name == name).unwrap();
        let PartForm::Views { views } = &part.form else {
            panic!("{name} is one part a view: {:?}", part.form);
        };
        views
            .iter()
            .map(|(at, form)| &out[part.offset + at..part.offset + at + form.bytes()])
            .collect::<Vec<_>>()
    };
    let (images, view_boxes, maps) = (of("image"), of("boxes"), of("seg"));
    assert_eq!(var(part(&prep, &out, "caption")), b"two boxes");
    for (place, pipeline) in pipelines.into_iter().enumerate() {
        let alone = RecordPrep::new(pipeline.clone().into(), fields.clone()).unwrap();
        let mut data = Vec::new();
        shards.read(0, &mut data).unwrap();
        let mut slot = vec![0u8; alone.layout().bytes()];
        let mut rng = crate::prep::image::view_rng(&Rng::new(7), place);
        alone
            .preparer()
            .unwrap()
            .prepare(&data, &mut rng, &mut slot)
            .unwrap();
        assert_eq!(images[place].len(), pipeline.sample_bytes());
        assert_eq!(
            view_boxes[place],
            part(&alone, &slot, "boxes"),
            "view {place}"
        );
        assert_eq!(maps[place], part(&alone, &slot, "seg"), "view {place}");
        let (height, width) = (pipeline.sample_shape()[1], pipeline.sample_shape()[2]);
        assert_eq!(
            maps[place].len(),
            height * width,
            "view {place} at its size"
        );
    }
    assert_eq!(prepare(&prep, &shards, 0).unwrap(), out);
}

#[test]
fn views_with_targets_refuse_what_targets_cannot_follow_naming_the_view() {
    let fields = Fields::new(vec![
        field("image", "jpg"),
        field("boxes", "json").with_kind(FieldKind::boxes(4, "xyxy").unwrap()),
    ])
    .unwrap();
    let pipelines = views("[[CenterCrop(32)], [RandomResizedCrop(32), AugMix()]]");
    let sample: Pipeline = ViewsPipeline::new(pipelines).unwrap().into();
    let why = RecordPrep::new(sample, fields).unwrap_err().to_string();
    assert!(why.contains("field \"boxes\": view 1: AugMix"), "{why}");
}

#[test]
fn a_record_of_views_lays_each_views_targets_aligned_and_bounds_their_size() {
    let fields = Fields::new(vec![
        field("image", "jpg"),
        field("label", "cls"),
        field("boxes", "json").with_kind(FieldKind::boxes(3, "xyxy").unwrap()),
    ])
    .unwrap();
    let sample = ViewsPipeline::new(views("[[CenterCrop(5)], [CenterCrop((3, 7))]]")).unwrap();
    let layout = fields.layout(&Prep::layout(&sample));
    let forms: Vec<&PartForm> = layout.parts().iter().map(|p| &p.form).collect();
    // The images back to back as the pipeline writes them, the label nothing.
    let PartForm::Views { views: images } = forms[0] else {
        panic!("{:?}", forms[0]);
    };
    assert_eq!(
        images.iter().map(|(at, _)| *at).collect::<Vec<_>>(),
        [0, 4 * 3 * 25]
    );
    assert_eq!(forms[0].bytes(), Prep::layout(&sample).bytes());
    assert_eq!(forms[1], &PartForm::Label);
    let PartForm::Views { views: boxes } = forms[2] else {
        panic!("{:?}", forms[2]);
    };
    assert!(boxes.iter().all(|(at, _)| at % 8 == 0));
    assert_eq!(forms[2].bytes(), boxes[1].0 + boxes[1].1.bytes());
    // A size past memory saturates, for the batch's bound to refuse.
    let huge = PartForm::Floats {
        length: usize::MAX / 4,
    };
    assert_eq!(
        PartForm::of_views(vec![huge.clone(), huge], 8).bytes(),
        usize::MAX
    );
}
