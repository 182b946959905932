use super::*;

/// One text for each knob, none of them its default.
const EVERY: [(&str, &str); SETTING_COUNT] = [
    ("pipeline", "val"),
    ("image_size", "96"),
    ("dtype", "uint8"),
    ("layout", "HWC"),
    ("pad_to_largest", "32"),
    ("batch_size", "32"),
    ("shuffle", "false"),
    ("seed", "7"),
    ("drop_last", "true"),
    ("aug_repeats", "3"),
    ("shard", "drop"),
    ("rank", "1"),
    ("world_size", "2"),
    ("threads", "3"),
    ("balance_ranks", "true"),
    ("fetch_threads", "4"),
    ("adaptive_reads", "false"),
    ("adaptive_prep", "false"),
    ("worker_nice", "10"),
    ("prefetch", "5"),
    ("overlap_epochs", "false"),
    ("on_error", "skip"),
    ("quarantine", "/tmp/bad.jsonl"),
    ("cache", "35%"),
    ("cache_policy", "lru"),
    ("cache_epochs", "90"),
    ("cache_fill", "before"),
    ("readahead", "16MiB"),
    ("memory", "2GiB"),
    ("group_memory", "256MiB"),
    ("frame_index_cache", "1MiB"),
    ("read", "cold"),
    ("throttle", "20,5"),
    ("sample_column", "jpg"),
    ("label_column", "none"),
];

#[test]
fn every_knob_reads_its_text_and_writes_it_back() {
    let set: Vec<&str> = EVERY.iter().map(|(name, _)| *name).collect();
    let known: Vec<&str> = KNOBS.iter().map(|(name, _)| *name).collect();
    assert_eq!(set, known, "every knob exercised, in the documented order");
    let s = LoaderSettings::from_texts(EVERY).unwrap();
    assert_eq!(s.image_size, Some(96));
    assert_eq!((s.dtype, s.layout), (DType::U8, Layout::Hwc));
    assert_eq!(s.pad_to_largest, Some(32));
    assert_eq!(
        (s.plan.batch_size, s.plan.seed, s.plan.rank, s.plan.world),
        (32, 7, 1, 2)
    );
    assert!(!s.plan.shuffle && s.plan.drop_last);
    assert_eq!(s.threads, Threads::Count(3));
    assert!(s.balances_ranks(), "given, whatever the thread count");
    assert_eq!((s.fetch_threads, s.prefetch), (4, 5));
    assert!(!s.adaptive_reads && !s.adaptive_prep && !s.overlap_epochs);
    assert_eq!(s.worker_nice, 10);
    assert_eq!(s.on_error, ErrorPolicy::Skip);
    assert_eq!(s.cache.capacity, Capacity::Fraction(0.35));
    assert_eq!(s.cache.planned_epochs, 90);
    assert_eq!((s.readahead, s.memory), (16 << 20, Some(2 << 30)));
    assert_eq!(s.group_memory, Some(256 << 20));
    assert_eq!(s.frame_index_cache, 1 << 20);
    let off = LoaderSettings::from_texts([("frame_index_cache", "0")]).unwrap();
    assert_eq!(off.frame_index_cache, 0, "a bare 0 is bytes, not a share");
    assert_eq!(s.read, ReadMode::Cold);
    assert_eq!(
        s.throttle.unwrap().latency,
        Duration::from_millis(5),
        "{:?}",
        s.throttle
    );
    assert_eq!(s.columns.sample.as_deref(), Some("jpg"));
    assert_eq!(s.columns.label, crate::dataset::LabelColumn::Unlabeled);
    let texts = s.texts();
    assert_eq!(texts.len(), KNOBS.len(), "every knob differs: {texts:?}");
    let again = LoaderSettings::from_texts(texts.iter().map(|(n, v)| (&**n, &**v))).unwrap();
    assert_eq!(again, s, "the texts read back to the same settings");
    assert!(LoaderSettings::default().texts().is_empty());
}

#[test]
fn threads_imply_balancing_unless_told() {
    let mut s = LoaderSettings::default();
    assert!(s.balances_ranks());
    s.set("threads", "2").unwrap();
    assert!(!s.balances_ranks(), "a count pins the threads");
    s.set("balance_ranks", "true").unwrap();
    assert!(s.balances_ranks());
    // The same, given in the other order: the settings do not depend on it.
    let other = LoaderSettings::from_texts([("balance_ranks", "true"), ("threads", "2")]);
    assert_eq!(other.unwrap(), s);
    s.set("threads", "auto").unwrap();
    assert_eq!(
        s.config_with(Pipeline::imagenet_val(8)).prep_threads,
        auto_threads()
    );
}

#[test]
fn nonsense_is_refused_naming_the_knob() {
    let mut s = LoaderSettings::default();
    for (name, value) in [
        ("batch_size", "many"),
        ("shuffle", "maybe"),
        ("on_error", "ignore"),
        ("pipeline", "resnet"),
        ("pipeline", "[Resize(256), Blur(3)]"),
        ("cache", "lots"),
        ("cache_fill", "sometimes"),
        ("readahead", "50%"),
        ("frame_index_cache", "35%"),
        ("read", "warm"),
        ("throttle", "-3"),
        ("throttle", "20,5,0"),
        ("threads", "some"),
        ("dtype", "float16"),
        ("layout", "CWH"),
        ("colour", "blue"),
    ] {
        let why = s.set(name, value).unwrap_err().to_string();
        assert!(why.contains(name), "{name}={value}: {why}");
    }
    assert_eq!(s, LoaderSettings::default(), "nothing refused was kept");
}

#[cfg(feature = "serde")]
#[test]
fn settings_are_a_map_of_knob_texts_for_serde() {
    let s = LoaderSettings::from_texts(EVERY).unwrap();
    let json = serde_json::to_string(&s).unwrap();
    assert!(json.contains(r#""batch_size":"32""#), "{json}");
    let back: LoaderSettings = serde_json::from_str(&json).unwrap();
    assert_eq!(back, s);
    let why = serde_json::from_str::<LoaderSettings>(r#"{"prefetch": "many"}"#)
        .unwrap_err()
        .to_string();
    assert!(why.contains("prefetch"), "{why}");
    assert_eq!(
        serde_json::to_string(&LoaderSettings::default()).unwrap(),
        "{}"
    );
}

#[test]
fn links_read_back_exactly() {
    for text in ["20", "20,5", "unlimited,5", "0.5,0.25,4"] {
        let link: Link = text.parse().unwrap();
        assert_eq!(link.to_string().parse::<Link>().unwrap(), link, "{text}");
    }
    assert_eq!("unlimited,5".parse::<Link>().unwrap().bandwidth, None);
}

#[test]
fn every_declared_default_and_choice_reads() {
    for setting in SETTINGS {
        if let Some(default) = setting.default_text() {
            let mut s = LoaderSettings::default();
            s.set(setting.name, &default).unwrap();
            assert_eq!(s, LoaderSettings::default(), "{}={default:?}", setting.name);
        }
        if let SettingKind::Choice(words) = setting.kind {
            for word in words {
                let mut s = LoaderSettings::default();
                s.set(setting.name, word).unwrap();
                assert_eq!(
                    s.texts().len(),
                    usize::from(Some(word.to_string()) != setting.default_text())
                );
            }
        }
        assert!(setting.doc.ends_with('.'), "{}: a sentence", setting.name);
    }
}
