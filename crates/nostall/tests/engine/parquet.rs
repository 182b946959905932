//! Parquet datasets, as Hugging Face's `datasets` writes them: real photographs in an
//! `image` struct column (`{bytes, path}`), a `ClassLabel` column, the features in the
//! file's `huggingface` metadata, row groups of a few rows; and hostile files.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::common::{demo_rows, features, write, write_column, write_paged, write_with, Row};

use nostall::dataset::{self, Columns, Format, LabelColumn};
use nostall::loader::{LoaderBuilder, LoaderSettings, Threads};
use nostall::storage::{BlobStore, LocalDir, ParquetFiles, ReadMode, Source, Tier};
use nostall::{Cause, ErrorPolicy, Modality};
use parquet::basic::Compression;

fn open(location: &Path) -> nostall::Result<dataset::Dataset> {
    dataset::open(
        location.to_str().unwrap(),
        ReadMode::Cached,
        Modality::Image,
    )
}

/// The Parquet files of `dir` as a source, with `memory` for decoded row groups.
fn files_in(dir: &Path, memory: u64) -> ParquetFiles {
    let store = Arc::new(LocalDir::new(dir).unwrap());
    let listing = store.list().unwrap();
    let files = ParquetFiles::from_listing(store, listing, Modality::Image, &Columns::default());
    files.unwrap().with_memory(memory)
}

#[test]
fn a_datasets_file_reads_as_its_photographs_with_their_classes() {
    let (rows, classes) = demo_rows();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("train-00000-of-00001.parquet");
    write(&file, &rows, 5, Some(features(&classes)));
    for location in [file.as_path(), dir.path()] {
        let data = open(location).unwrap();
        assert_eq!(data.format, Format::Parquet);
        let catalog = &data.catalog;
        assert_eq!(catalog.len(), rows.len());
        assert_eq!(catalog.classes(), classes.as_slice());
        let mut out = Vec::new();
        // Backwards, so that row groups are not met in file order.
        for id in (0..rows.len() as u64).rev() {
            data.source.read(id, &mut out).unwrap();
            let (bytes, label) = &rows[id as usize];
            assert_eq!(&out, bytes.as_ref().unwrap(), "sample {id}");
            assert_eq!(catalog.label(id), Some(*label as u32));
        }
        assert!(data
            .source
            .location(7)
            .ends_with("train-00000-of-00001.parquet, row 7"));
    }
}

#[test]
fn each_row_group_is_read_once_while_it_is_kept() {
    let (dir, _, rows) = written(4);
    let size = std::fs::metadata(dir.path().join("a.parquet"))
        .unwrap()
        .len();
    let files = files_in(dir.path(), 1 << 30);
    let indexed = files.storage_bytes();
    assert!(
        indexed < size / 10,
        "opening reads footers and labels: {indexed} of {size}"
    );
    let mut out = Vec::new();
    // A row group decoded is in memory for the read-ahead's cost model.
    assert_eq!(
        (files.tier(0), files.tier(1)),
        (Tier::Storage, Tier::Storage)
    );
    files.read(0, &mut out).unwrap();
    assert_eq!(
        (files.tier(1), files.tier(4)),
        (Tier::Memory, Tier::Storage)
    );
    for _ in 0..2 {
        for id in (0..rows.len() as u64).rev() {
            files.read(id, &mut out).unwrap();
        }
    }
    // Exactly the image column's chunks, each once.
    let chunks = image_chunks(&dir.path().join("a.parquet"));
    assert_eq!(files.catalog().groups().len(), rows.len().div_ceil(4));
    assert_eq!(
        files.storage_bytes() - indexed,
        chunks,
        "each row group once"
    );

    // With room for the row group being read only, each read of another row group reads
    // it again.
    let files = files_in(dir.path(), 0);
    let n = rows.len() as u64;
    for id in (0..n).map(|i| i * 4 % n + i * 4 / n) {
        files.read(id, &mut out).unwrap();
        assert_eq!(&out, rows[id as usize].0.as_ref().unwrap());
    }
    assert!(files.storage_bytes() - indexed > 3 * chunks);
}

#[test]
fn pages_listed_in_the_offset_index_are_read_alone() {
    let (rows, classes) = demo_rows();
    let dir = tempfile::tempdir().unwrap();
    write_paged(
        &dir.path().join("a.parquet"),
        &rows,
        8,
        2,
        Some(features(&classes)),
    );
    let files = files_in(dir.path(), 1 << 30);
    assert_eq!(
        files.catalog().groups(),
        vec![2; 16].as_slice(),
        "pages of 2"
    );
    let indexed = files.storage_bytes();
    let mut out = Vec::new();
    for id in [9, 8, 31] {
        files.read(id, &mut out).unwrap();
        assert_eq!(&out, rows[id as usize].0.as_ref().unwrap());
    }
    // Two pages read: about four photographs, not the two row groups' eight each.
    let pair = |id: usize| rows[id..id + 2].iter().map(|r| r.0.as_ref().unwrap().len());
    let photos: usize = pair(8).chain(pair(30)).sum();
    let read = (files.storage_bytes() - indexed) as usize;
    assert!(
        read >= photos && read < photos + 1000,
        "{read} for {photos}"
    );
    assert!(files.location(31).ends_with("a.parquet, row 31"));
    // With a dictionary page first, the row group is the unit.
    let dir = tempfile::tempdir().unwrap();
    write(
        &dir.path().join("a.parquet"),
        &rows,
        8,
        Some(features(&classes)),
    );
    assert_eq!(
        files_in(dir.path(), 1 << 30).catalog().groups(),
        vec![8; 4].as_slice()
    );
}

#[test]
fn open_row_groups_are_read_once_an_epoch_each() {
    let (dir, _, rows) = written(2);
    let files = files_in(dir.path(), 0);
    let catalog = files.catalog().clone();
    assert_eq!(catalog.groups(), vec![2; 16].as_slice());
    // 3 row groups open at once; room for twice as many of the largest.
    let files = Arc::new(files.with_memory(6 * largest_group(&rows, 2)));
    let mut settings = in_order();
    settings.plan.blocks = nostall::plan::Blocks::new(catalog.groups(), 3);
    let builder = LoaderBuilder::with_settings(dir.path().to_str().unwrap(), settings);
    let loader = builder.build(catalog.clone(), files.clone()).unwrap();
    let mut before = files.storage_bytes();
    let mut firsts = Vec::new();
    for epoch in 0..2 {
        let ids: Vec<u64> = loader
            .epoch(epoch)
            .unwrap()
            .flat_map(|b| b.unwrap().ids().to_vec())
            .collect();
        let read = files.storage_bytes() - before;
        before += read;
        let chunks = image_chunks(&dir.path().join("a.parquet"));
        if epoch == 0 {
            assert_eq!(read, chunks, "each row group once");
        } else {
            assert!(read <= chunks, "at most once: {read} > {chunks}");
        }
        // The first batch's samples come from at most the 3 open row groups (of 2 rows).
        let groups: std::collections::HashSet<u64> = ids[..4].iter().map(|id| id / 2).collect();
        assert!(groups.len() <= 3 && groups.len() >= 2, "{ids:?}");
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..rows.len() as u64).collect::<Vec<_>>());
        firsts.push(ids);
    }
    assert_ne!(firsts[0], firsts[1], "each epoch its own order");
}

#[test]
fn two_ranks_read_their_own_row_groups() {
    let (dir, path, rows) = written(2);
    let catalog = files_in(dir.path(), 0).catalog().clone();
    let largest = largest_group(&rows, 2);
    let (world, open) = (2, 2);
    let mut reads = Vec::new();
    let mut delivered = Vec::new();
    for rank in 0..world {
        let files = Arc::new(files_in(dir.path(), 3 * largest));
        let mut settings = in_order();
        (settings.plan.rank, settings.plan.world) = (rank, world);
        settings.plan.blocks = nostall::plan::Blocks::new(catalog.groups(), open);
        let builder = LoaderBuilder::with_settings(dir.path().to_str().unwrap(), settings);
        let loader = builder.build(catalog.clone(), files.clone()).unwrap();
        let before = files.storage_bytes();
        for batch in loader.epoch(0).unwrap() {
            delivered.extend_from_slice(batch.unwrap().ids());
        }
        reads.push(files.storage_bytes() - before);
    }
    delivered.sort_unstable();
    assert_eq!(delivered, (0..rows.len() as u64).collect::<Vec<_>>());
    // Each rank reads its own row groups: together the column once, and the few that
    // both ranks draw from at the end of the epoch.
    let column = image_chunks(&path);
    let both: u64 = reads.iter().sum();
    assert!(
        both <= column + world as u64 * open as u64 * largest,
        "{reads:?} for a column of {column}"
    );
    assert!(reads.iter().all(|&r| r < column * 3 / 4), "{reads:?}");
}

#[test]
fn the_memory_for_pages_is_a_setting_and_part_of_the_budget() {
    let (dir, path, _) = written(2);
    let column = image_chunks(&path);
    // Bytes read in the second epoch, and the loader's split of its budget.
    let second_epoch = |group_memory: Option<u64>, memory: Option<u64>| {
        let files = Arc::new(files_in(dir.path(), 1 << 30));
        let catalog = files.catalog().clone();
        let mut settings = in_order();
        (settings.group_memory, settings.memory) = (group_memory, memory);
        let builder = LoaderBuilder::with_settings(dir.path().to_str().unwrap(), settings);
        let loader = builder.build(catalog, files.clone()).unwrap();
        for epoch in 0..2 {
            let before = files.storage_bytes();
            assert_eq!(loader.epoch(epoch).unwrap().count(), 8);
            if epoch == 1 {
                return (files.storage_bytes() - before, loader.memory_plan());
            }
        }
        unreachable!()
    };
    // The whole column fits the default: read once, kept.
    assert_eq!(second_epoch(None, None), (0, None));
    // Room for a few row groups: pages open, each read again every epoch.
    let (read, _) = second_epoch(Some(column / 4), None);
    assert!(read > column / 2 && read <= column, "{read} of {column}");
    // Under a budget, a quarter of it.
    let (read, plan) = second_epoch(None, Some(column));
    let plan = plan.unwrap();
    assert_eq!(plan.groups, column / 4);
    assert!(read > column / 2, "{read} of {column}");
}

#[test]
fn an_epoch_of_eight_ranks_resumed_by_one_reads_the_file_about_once() {
    // 32 photographs (1.3 MB) in row groups of 2, one open on each of 8 ranks, which
    // deliver a batch of 1 each; one rank resumes the rest, with room for 3 row groups.
    // Dealt sample by sample, its stream drew from the 8 ranks' open row groups in turn
    // and decoded one again for nearly every sample.
    let (dir, path, rows) = written(2);
    let catalog = files_in(dir.path(), 0).catalog().clone();
    let room = 3 * largest_group(&rows, 2);
    let loader = |rank, world, files: &Arc<ParquetFiles>| {
        let mut settings = in_order();
        (settings.plan.rank, settings.plan.world) = (rank, world);
        (settings.plan.batch_size, settings.group_memory) = (1, Some(room));
        settings.plan.blocks = nostall::plan::Blocks::new(catalog.groups(), 1);
        let builder = LoaderBuilder::with_settings(dir.path().to_str().unwrap(), settings);
        builder.build(catalog.clone(), files.clone()).unwrap()
    };
    let mut delivered = Vec::new();
    let mut states = Vec::new();
    for rank in 0..8 {
        let loader = loader(rank, 8, &Arc::new(files_in(dir.path(), room)));
        let mut epoch = loader.epoch(0).unwrap();
        delivered.extend_from_slice(epoch.next().unwrap().unwrap().ids());
        states.push(loader.checkpoint(&epoch));
    }
    let files = Arc::new(files_in(dir.path(), room));
    let before = files.storage_bytes();
    for batch in loader(0, 1, &files).resume_from(&states).unwrap() {
        delivered.extend_from_slice(batch.unwrap().ids());
    }
    let read = files.storage_bytes() - before;
    delivered.sort_unstable();
    assert_eq!(delivered, (0..rows.len() as u64).collect::<Vec<_>>());
    let column = image_chunks(&path);
    assert!(
        read * 10 <= column * 11,
        "{read} bytes read for a column of {column}"
    );
}

/// The photographs written as `datasets` writes them, `group` rows a row group, to
/// `a.parquet` in a new directory: the directory, the file and the rows.
fn written(group: usize) -> (tempfile::TempDir, PathBuf, Vec<Row>) {
    let (rows, classes) = demo_rows();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.parquet");
    write(&path, &rows, group, Some(features(&classes)));
    (dir, path, rows)
}

/// Settings for loaders whose reads are counted: the `val` preset at 16 pixels, batches
/// of 4, one read at a time (reads follow the plan's order, an epoch after the other).
fn in_order() -> LoaderSettings {
    let mut settings = LoaderSettings::default();
    settings
        .set("pipeline", "val")
        .unwrap()
        .set("image_size", "16")
        .unwrap();
    settings.plan.batch_size = 4;
    settings.overlap_epochs = false;
    settings.fetch_threads = 1;
    settings
}

/// The bytes of the largest group of `rows` in groups of `group`.
fn largest_group(rows: &[Row], group: usize) -> u64 {
    rows.chunks(group)
        .map(|g| {
            g.iter()
                .map(|r| r.0.as_ref().map_or(0, Vec::len) as u64)
                .sum()
        })
        .max()
        .unwrap_or(0)
}

/// The bytes of the image column's chunks in a file written by [`write`].
fn image_chunks(path: &Path) -> u64 {
    let file = std::fs::File::open(path).unwrap();
    let reader = parquet::file::serialized_reader::SerializedFileReader::new(file).unwrap();
    parquet::file::reader::FileReader::metadata(&reader)
        .row_groups()
        .iter()
        .map(|g| g.column(0).compressed_size() as u64)
        .sum()
}

#[test]
fn a_loader_delivers_every_row_once_an_epoch_for_any_thread_count() {
    let (rows, classes) = demo_rows();
    let dir = tempfile::tempdir().unwrap();
    write(
        &dir.path().join("a.parquet"),
        &rows[..20],
        6,
        Some(features(&classes)),
    );
    write(
        &dir.path().join("b.parquet"),
        &rows[20..],
        6,
        Some(features(&classes)),
    );
    let mut seen = Vec::new();
    for threads in [1, 3] {
        let mut settings = LoaderSettings::default();
        settings
            .set("pipeline", "val")
            .unwrap()
            .set("image_size", "32")
            .unwrap();
        settings.plan.batch_size = 5;
        settings.threads = Threads::Count(threads);
        let (loader, data) = LoaderBuilder::with_settings(dir.path().to_str().unwrap(), settings)
            .open()
            .unwrap();
        assert_eq!(data.format, Format::Parquet);
        let mut ids = Vec::new();
        let mut labels = Vec::new();
        for batch in loader.epoch(0).unwrap() {
            let batch = batch.unwrap();
            ids.extend_from_slice(batch.ids());
            labels.extend_from_slice(batch.labels());
        }
        let expected: Vec<i64> = ids.iter().map(|&id| rows[id as usize].1).collect();
        assert_eq!(labels, expected, "each row's class");
        seen.push(ids);
    }
    assert_eq!(seen[0], seen[1], "the same order for any thread count");
    let mut sorted = seen[0].clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..rows.len() as u64).collect::<Vec<_>>());
}

#[test]
fn the_usual_codecs_read_and_others_are_refused_by_name() {
    let (rows, classes) = demo_rows();
    let dir = tempfile::tempdir().unwrap();
    for (name, codec) in [
        ("zstd", Compression::ZSTD(Default::default())),
        ("gzip", Compression::GZIP(Default::default())),
        ("lz4", Compression::LZ4_RAW),
        ("lz4-hadoop", Compression::LZ4),
        ("plain", Compression::UNCOMPRESSED),
    ] {
        let path = dir.path().join(format!("{name}.parquet"));
        write_with(&path, &rows[..6], 4, Some(features(&classes)), codec);
        let data = open(&path).unwrap();
        let mut out = Vec::new();
        for id in 0..6 {
            data.source.read(id, &mut out).unwrap();
            assert_eq!(&out, rows[id as usize].0.as_ref().unwrap(), "{name}");
        }
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn audio_rows_read_as_their_recordings_through_the_m5_pipeline() {
    let clips = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/audio");
    let mut names: Vec<String> = std::fs::read_dir(&clips)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| Modality::Audio.accepts(n))
        .collect();
    names.sort();
    let rows: Vec<Row> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (Some(std::fs::read(clips.join(n)).unwrap()), (i % 2) as i64))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("speech.parquet");
    let metadata = r#"{"info": {"features": {"audio": {"_type": "Audio", "sampling_rate": 44100}, "label": {"names": ["a", "b"], "_type": "ClassLabel"}}}}"#;
    write_column(
        &path,
        "audio",
        &rows,
        3,
        Some(metadata.into()),
        Compression::SNAPPY,
    );
    let mut settings = LoaderSettings::default();
    settings.set("pipeline", "m5").unwrap();
    settings.plan.batch_size = 3;
    let (loader, data) = LoaderBuilder::with_settings(path.to_str().unwrap(), settings)
        .open()
        .unwrap();
    assert_eq!(data.catalog.modality(), Modality::Audio);
    assert_eq!(data.catalog.classes(), ["a", "b"]);
    let mut ids = Vec::new();
    for batch in loader.epoch(0).unwrap() {
        let batch = batch.unwrap();
        assert_eq!(
            batch.as_f32().unwrap().len(),
            batch.len() * 32_000,
            "m5's crops"
        );
        let labels: Vec<i64> = batch.ids().iter().map(|&id| (id % 2) as i64).collect();
        assert_eq!(batch.labels(), labels.as_slice());
        ids.extend_from_slice(batch.ids());
    }
    ids.sort_unstable();
    assert_eq!(ids, (0..rows.len() as u64).collect::<Vec<_>>());
}

#[test]
fn columns_are_found_by_name_without_metadata_or_as_told() {
    let (rows, _) = demo_rows();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain.parquet");
    write(&file, &rows[..8], 3, None);
    // No features: `image` and `label` by their names, bare class numbers.
    let data = open(&file).unwrap();
    assert_eq!(data.catalog.label(7), Some(rows[7].1 as u32));
    assert!(data.catalog.classes().is_empty());
    // Told: no labels; a column that is not there; a column that holds no samples.
    let location = file.to_str().unwrap();
    let with = |sample: Option<&str>, label: LabelColumn| {
        let mut columns = Columns::default();
        columns.sample = sample.map(String::from);
        columns.label = label;
        let var = |_: &str| None;
        dataset::open_in(location, ReadMode::Cached, Modality::Image, &columns, &var)
    };
    let unlabeled = with(None, LabelColumn::Unlabeled).unwrap();
    assert_eq!(unlabeled.catalog.label(0), None);
    let missing = with(Some("jpg"), LabelColumn::Auto)
        .unwrap_err()
        .to_string();
    assert!(
        missing.contains("plain.parquet") && missing.contains("no column \"jpg\""),
        "{missing}"
    );
    let numbers = with(Some("label"), LabelColumn::Auto)
        .unwrap_err()
        .to_string();
    assert!(
        numbers.contains("not the bytes of encoded samples"),
        "{numbers}"
    );
    let no_label = with(None, LabelColumn::Named("class".into()))
        .unwrap_err()
        .to_string();
    assert!(no_label.contains("no label column \"class\""), "{no_label}");
    // An audio loader finds no audio column, and says which columns there are.
    let var = |_: &str| None;
    let audio = dataset::open_in(
        location,
        ReadMode::Cached,
        Modality::Audio,
        &Columns::default(),
        &var,
    );
    let audio = audio.unwrap_err().to_string();
    assert!(
        audio.contains("image, label") && audio.contains("sample_column="),
        "{audio}"
    );
}

#[test]
fn hostile_files_are_errors_naming_the_file_or_the_row() {
    let (mut rows, classes) = demo_rows();
    rows.truncate(9);
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.parquet");
    write(&good, &rows, 3, Some(features(&classes)));
    let bytes = std::fs::read(&good).unwrap();
    let refused = |name: &str, content: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        let e = open(&path).unwrap_err().to_string();
        assert!(e.contains(name), "{name}: {e}");
        std::fs::remove_file(&path).unwrap();
        e
    };
    assert!(refused("empty.parquet", b"").contains("not a Parquet file"));
    assert!(refused("cut.parquet", &bytes[..bytes.len() / 2]).contains("PAR1"));
    let mut huge_footer = bytes.clone();
    let n = huge_footer.len();
    huge_footer[n - 8..n - 4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(refused("footer.parquet", &huge_footer).contains("footer declares"));
    let mut damaged_footer = bytes.clone();
    let footer_len = u32::from_le_bytes(bytes[n - 8..n - 4].try_into().unwrap()) as usize;
    for b in &mut damaged_footer[n - 8 - footer_len..n - 8 - footer_len / 2] {
        *b = 0xff;
    }
    refused("damaged.parquet", &damaged_footer);

    // Labels outside the classes: -1, as Hugging Face writes for "no label".
    let mut unlabeled = rows.clone();
    unlabeled[4].1 = -1;
    let path = dir.path().join("minus.parquet");
    write(&path, &unlabeled, 3, Some(features(&classes)));
    let e = open(&path).unwrap_err().to_string();
    assert!(
        e.contains("minus.parquet") && e.contains("row 4") && e.contains("label_column=none"),
        "{e}"
    );
    std::fs::remove_file(&path).unwrap();

    // A null image: that row's sample is an error naming its row; the rest read.
    let mut holes = rows.clone();
    holes[5].0 = None;
    let path = dir.path().join("holes.parquet");
    write(&path, &holes, 3, Some(features(&classes)));
    let data = open(&path).unwrap();
    let mut out = Vec::new();
    let cause = data.source.read(5, &mut out).unwrap_err();
    assert!(
        matches!(cause, Cause::Corrupt(ref why) if why.contains("null")),
        "{cause:?}"
    );
    assert!(data.source.location(5).ends_with("holes.parquet, row 5"));
    for id in [0, 4, 6, 8] {
        data.source.read(id, &mut out).unwrap();
        assert_eq!(&out, rows[id as usize].0.as_ref().unwrap());
    }
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn damaged_pages_fail_their_row_group_only_and_never_panic() {
    let (mut rows, classes) = demo_rows();
    rows.truncate(9);
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.parquet");
    write(&good, &rows, 3, Some(features(&classes)));
    let bytes = std::fs::read(&good).unwrap();
    let first = rows[0].0.as_ref().unwrap();
    let at = bytes.windows(64).position(|w| w == &first[..64]).unwrap();
    // Bytes inside the first row group's data, and its first page header, spoiled in
    // turn: whatever the decoder makes of them, the other row groups read.
    for (name, range) in [("inside", at + 100..at + 4000), ("header", 4..at)] {
        let mut spoiled = bytes.clone();
        for b in &mut spoiled[range] {
            *b = b.wrapping_mul(31).wrapping_add(7);
        }
        let path = dir.path().join(format!("{name}.parquet"));
        std::fs::write(&path, &spoiled).unwrap();
        let data = open(&path).unwrap();
        let mut out = Vec::new();
        for id in 3..9 {
            data.source.read(id, &mut out).unwrap();
            assert_eq!(&out, rows[id as usize].0.as_ref().unwrap());
        }
        // The first row group: an error, or bytes that are not the photograph (a page
        // without a checksum cannot tell); never a panic.
        match data.source.read(0, &mut out) {
            Err(Cause::Corrupt(why)) => assert!(why.contains("rows 0..3"), "{why}"),
            Err(other) => panic!("{other:?}"),
            Ok(()) => assert_ne!(&out, first),
        }
        // Through a loader that skips bad samples, the rest are delivered.
        let mut settings = in_order();
        settings.on_error = ErrorPolicy::Skip;
        let (loader, _) = LoaderBuilder::with_settings(path.to_str().unwrap(), settings)
            .open()
            .unwrap();
        let delivered: usize = loader.epoch(0).unwrap().map(|b| b.unwrap().len()).sum();
        assert!(delivered >= 6, "{name}: {delivered}");
    }
}
