//! Crafted Parquet files among real photographs in files as `datasets` writes them (the
//! demo set). A crafted page makes the rows of its group skipped by cause, for 1, 2 and 4
//! threads alike, the rest delivered once an epoch with the same bytes; a crafted footer
//! or label column refuses the dataset at open, naming the file; and the peak resident
//! memory of a run over the crafted files stays under twice that over the good ones
//! (each run in a process of its own). Every run is under a watchdog: never a panic, a
//! hang or an abort. `make test` runs this in a release build too.

use std::io::Write;
use std::path::Path;

use crate::common::{demo_rows, features, peak_rss, run_alone, watchdog, write, Row};
use bytes::Bytes;
use nostall::loader::{LoaderBuilder, LoaderSettings, Threads};
use nostall::storage::{BlobStore, LocalDir, ParquetFiles, Source};
use nostall::{dataset::Columns, Cause, ErrorPolicy, Modality};
use parquet::basic::Compression;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader, ParquetMetaDataWriter};

/// Rows a file of the corpus holds, in row groups of [`GROUP`].
const ROWS: usize = 6;
const GROUP: usize = 3;

/// Parquet's page types and the encodings the crafted pages use.
const DATA_PAGE: i64 = 0;
const DICTIONARY_PAGE: i64 = 2;
const DATA_PAGE_V2: i64 = 3;
const PLAIN: i64 = 0;
const RLE: i64 = 3;
const RLE_DICTIONARY: i64 = 8;
const DELTA_LENGTH_BYTE_ARRAY: i64 = 6;

/// A Thrift compact struct of `i32` and struct fields, as page headers are written.
#[derive(Default)]
struct Thrift {
    bytes: Vec<u8>,
    last: Vec<i64>,
}

impl Thrift {
    fn varint(&mut self, mut v: u64) -> &mut Self {
        while v >= 0x80 {
            self.bytes.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.bytes.push(v as u8);
        self
    }

    fn header(&mut self, id: i64, kind: u8) -> &mut Self {
        let last = self.last.last_mut().unwrap();
        self.bytes.push((((id - *last) as u8) << 4) | kind);
        *last = id;
        self
    }

    fn int(&mut self, id: i64, value: i64) -> &mut Self {
        self.header(id, 5);
        self.varint(((value << 1) ^ (value >> 63)) as u64)
    }

    fn open(&mut self, id: i64) -> &mut Self {
        self.header(id, 12);
        self.last.push(0);
        self
    }

    fn close(&mut self) -> &mut Self {
        self.last.pop();
        self.bytes.push(0);
        self
    }
}

/// A page: its header (type, sizes, then `sub` as field `sub_id`) and its body.
fn page(kind: i64, sizes: (i64, usize), sub_id: i64, sub: &[(i64, i64)], body: &[u8]) -> Vec<u8> {
    let mut t = Thrift::default();
    t.last.push(0);
    t.int(1, kind).int(2, sizes.0).int(3, sizes.1 as i64);
    t.open(sub_id);
    for &(id, value) in sub {
        t.int(id, value);
    }
    t.close().close();
    t.bytes.extend(body);
    t.bytes
}

/// A v1 data page of `values` values in `encoding`, `body` after its definition levels
/// (every row present), declaring `uncompressed` bytes.
fn data_page(values: i64, encoding: i64, body: &[u8], uncompressed: Option<i64>) -> Vec<u8> {
    // The levels: an RLE run of `values` twos (the image and its struct present).
    let run = [((values as u8) << 1), 2];
    let mut payload = (run.len() as u32).to_le_bytes().to_vec();
    payload.extend(run);
    payload.extend(body);
    let declared = uncompressed.unwrap_or(payload.len() as i64);
    let sub = [(1, values), (2, encoding), (3, RLE), (4, RLE)];
    page(DATA_PAGE, (declared, payload.len()), 5, &sub, &payload)
}

/// `photos` as plain binary values, each behind its length.
fn plain(photos: &[&[u8]]) -> Vec<u8> {
    photos
        .iter()
        .flat_map(|p| {
            (p.len() as u32)
                .to_le_bytes()
                .into_iter()
                .chain(p.iter().copied())
        })
        .collect()
}

/// `file` (one written by [`write`]) with its `column`-th column chunk of the first row
/// group replaced by `chunk`, compressed with `codec`; the footer rewritten to match.
fn replace_chunk(file: &[u8], column: usize, chunk: &[u8], codec: Compression) -> Vec<u8> {
    rewrite(file, Some((column, chunk, codec)), |m| m)
}

/// `file` with a column chunk of its first row group replaced (`(column, chunk, codec)`),
/// and its footer rewritten to match, then changed by `edit`.
fn rewrite(
    file: &[u8],
    replace: Option<(usize, &[u8], Compression)>,
    edit: impl FnOnce(ParquetMetaData) -> ParquetMetaData,
) -> Vec<u8> {
    let meta = ParquetMetaDataReader::new()
        .parse_and_finish(&Bytes::copy_from_slice(file))
        .unwrap();
    let mut out = b"PAR1".to_vec();
    let mut groups = Vec::new();
    for (g, group) in meta.row_groups().iter().enumerate() {
        let mut columns = Vec::new();
        for (c, col) in group.columns().iter().enumerate() {
            let (start, len) = col.byte_range();
            let start_at = out.len() as i64;
            let replaced = replace.filter(|r| g == 0 && r.0 == c);
            match replaced {
                Some((_, chunk, _)) => out.extend(chunk),
                None => out.extend(&file[start as usize..(start + len) as usize]),
            }
            let shift = start_at - start as i64;
            let dictionary = match replaced {
                Some(_) => None,
                None => col.dictionary_page_offset().map(|d| d + shift),
            };
            columns.push(
                col.clone()
                    .into_builder()
                    .set_compression(replaced.map_or(col.compression(), |r| r.2))
                    .set_dictionary_page_offset(dictionary)
                    .set_data_page_offset(match replaced {
                        Some(_) => start_at,
                        None => col.data_page_offset() + shift,
                    })
                    .set_total_compressed_size(out.len() as i64 - start_at)
                    .set_offset_index_offset(None)
                    .set_offset_index_length(None)
                    .set_column_index_offset(None)
                    .set_column_index_length(None)
                    .build()
                    .unwrap(),
            );
        }
        groups.push(
            group
                .clone()
                .into_builder()
                .set_column_metadata(columns)
                .build()
                .unwrap(),
        );
    }
    let meta = edit(ParquetMetaData::new(meta.file_metadata().clone(), groups));
    ParquetMetaDataWriter::new(&mut out, &meta)
        .finish()
        .unwrap();
    out
}

/// A crafted file: its name and its bytes (its first row group's rows are skipped as
/// corrupt, its second read).
struct Crafted {
    name: &'static str,
    bytes: Vec<u8>,
}

/// Zeros of `len` bytes, compressed with gzip.
fn gzip_zeros(len: usize) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let block = vec![0u8; 1 << 20];
    for _ in 0..len >> 20 {
        encoder.write_all(&block).unwrap();
    }
    encoder.finish().unwrap()
}

/// Files whose first row group's image chunk is crafted: every kind of the review's table
/// that lies in a sample column's pages.
fn crafted(good: &[u8], rows: &[Row]) -> Vec<Crafted> {
    let photos: Vec<&[u8]> = rows[..GROUP]
        .iter()
        .map(|r| r.0.as_deref().unwrap())
        .collect();
    let values = plain(&photos);
    let n = GROUP as i64;
    let with = |name, chunk: Vec<u8>, codec| Crafted {
        name,
        bytes: replace_chunk(good, 0, &chunk, codec),
    };
    let dictionary = {
        let dict = plain(&photos);
        let mut chunk = page(
            DICTIONARY_PAGE,
            (dict.len() as i64, dict.len()),
            7,
            &[(1, i32::MAX.into()), (2, PLAIN)],
            &dict,
        );
        // Indices 0, 1, 2 at bit width 2: one bit-packed group of eight.
        chunk.extend(data_page(
            n,
            RLE_DICTIONARY,
            &[2, 0b11, 0b0010_0100, 0],
            None,
        ));
        chunk
    };
    let delta = {
        // Block of 128 values in 4 miniblocks, 2^33 values, the first 0.
        let mut lengths = vec![0x80, 0x01, 0x04, 0x80, 0x80, 0x80, 0x80, 0x20, 0x00];
        lengths.extend(&values);
        data_page(n, DELTA_LENGTH_BYTE_ARRAY, &lengths, None)
    };
    let gzip_bomb = {
        let bomb = gzip_zeros(256 << 20);
        // Declared 64 KiB: within 256 times its compressed size, so only the codec can
        // tell.
        page(
            DATA_PAGE,
            (64 << 10, bomb.len()),
            5,
            &[(1, n), (2, PLAIN), (3, RLE), (4, RLE)],
            &bomb,
        )
    };
    let lz4_bomb = {
        let mut frame = lz4_flex::frame::FrameEncoder::new(Vec::new());
        let block = vec![0u8; 1 << 20];
        for _ in 0..256 {
            frame.write_all(&block).unwrap();
        }
        let bomb = frame.finish().unwrap();
        page(
            DATA_PAGE,
            (1 << 20, bomb.len()),
            5,
            &[(1, n), (2, PLAIN), (3, RLE), (4, RLE)],
            &bomb,
        )
    };
    let size_twice = {
        // Field 2 again, as an i64 declaring 2 GB after the page's honest header.
        let honest = data_page(n, PLAIN, &values, None);
        let header_len = honest.len() - values.len() - 6;
        let mut chunk = honest[..header_len - 1].to_vec();
        chunk.extend([0x06, 0x04, 0x80, 0xa0, 0xd9, 0xe6, 0x1d, 0x00]);
        chunk.extend(&honest[header_len..]);
        chunk
    };
    let past_end = {
        let mut chunk = data_page(n, PLAIN, &values, None);
        chunk.truncate(chunk.len() - 10);
        chunk
    };
    let levels_lie = page(
        DATA_PAGE_V2,
        (values.len() as i64, values.len()),
        8,
        &[(1, n), (2, 0), (3, n), (4, PLAIN), (5, 1 << 30), (6, 0)],
        &values,
    );
    let more_values = data_page(1 << 30, PLAIN, &values, None);
    vec![
        with(
            "dictionary-2e31.parquet",
            dictionary,
            Compression::UNCOMPRESSED,
        ),
        with("delta-2e33.parquet", delta, Compression::UNCOMPRESSED),
        with(
            "gzip-bomb.parquet",
            gzip_bomb,
            Compression::GZIP(Default::default()),
        ),
        with("lz4-bomb.parquet", lz4_bomb, Compression::LZ4),
        with("size-twice.parquet", size_twice, Compression::UNCOMPRESSED),
        with("past-end.parquet", past_end, Compression::UNCOMPRESSED),
        with("levels-lie.parquet", levels_lie, Compression::UNCOMPRESSED),
        with(
            "more-values.parquet",
            more_values,
            Compression::UNCOMPRESSED,
        ),
        Crafted {
            name: "cut-values.parquet",
            bytes: damaged(good, rows),
        },
    ]
}

/// `good` with its first row group's image chunk damaged as the crate finds out, not
/// nostall's checks: a page whose values stop half way through.
fn damaged(good: &[u8], rows: &[Row]) -> Vec<u8> {
    let photos: Vec<&[u8]> = rows[..GROUP]
        .iter()
        .map(|r| r.0.as_deref().unwrap())
        .collect();
    let values = plain(&photos);
    let chunk = data_page(GROUP as i64, PLAIN, &values[..values.len() / 2], None);
    replace_chunk(good, 0, &chunk, Compression::UNCOMPRESSED)
}

/// A dataset folder: good files of the demo photographs, and the crafted ones.
struct Corpus {
    dir: tempfile::TempDir,
    /// The rows that must be delivered, by `file#row`.
    good: usize,
    crafted: Vec<&'static str>,
}

fn corpus(with_crafted: bool) -> Corpus {
    let (rows, classes) = demo_rows();
    let dir = tempfile::tempdir().unwrap();
    let meta = Some(features(&classes));
    let mut good = 0;
    for (i, chunk) in rows.chunks(ROWS).enumerate() {
        write(
            &dir.path().join(format!("good-{i}.parquet")),
            chunk,
            GROUP,
            meta.clone(),
        );
        good += chunk.len();
    }
    let template = dir.path().join("template.parquet");
    write(&template, &rows[..ROWS], GROUP, meta);
    let honest = std::fs::read(&template).unwrap();
    std::fs::remove_file(&template).unwrap();
    let mut names = Vec::new();
    // Without the crafted files, their honest originals in their place: the same run
    // over good files.
    for c in crafted(&honest, &rows[..ROWS]) {
        let bytes = if with_crafted { &c.bytes } else { &honest };
        std::fs::write(dir.path().join(c.name), bytes).unwrap();
        good += if with_crafted { ROWS - GROUP } else { ROWS };
        if with_crafted {
            names.push(c.name);
        }
    }
    Corpus {
        dir,
        good,
        crafted: names,
    }
}

fn settings(threads: usize) -> LoaderSettings {
    let mut settings = LoaderSettings::default();
    settings
        .set("pipeline", "val")
        .unwrap()
        .set("image_size", "32")
        .unwrap();
    settings.plan.batch_size = 4;
    settings.plan.seed = 5;
    settings.threads = Threads::Count(threads);
    settings.fetch_threads = threads;
    settings.on_error = ErrorPolicy::Skip;
    settings
}

/// One epoch's batches (ids and bytes), and what was skipped: `(file, cause)` by row.
type Epoch = (Vec<(Vec<u64>, Vec<u8>)>, Vec<(String, &'static str)>);

fn epochs(dir: &Path, threads: usize, count: u64) -> Vec<Epoch> {
    let location = dir.to_str().unwrap().to_string();
    watchdog(format!("{threads} threads"), move || {
        let (loader, _) = LoaderBuilder::with_settings(&location, settings(threads))
            .open()
            .unwrap();
        (0..count)
            .map(|epoch| {
                let mut it = loader.epoch(epoch).unwrap();
                let batches = it
                    .by_ref()
                    .map(|b| b.unwrap())
                    .map(|b| (b.ids().to_vec(), b.data().to_vec()))
                    .collect();
                let mut skipped: Vec<_> = it
                    .skipped()
                    .into_iter()
                    .map(|e| {
                        let file = e.location.rsplit('/').next().unwrap();
                        (file.split(',').next().unwrap().to_string(), e.cause.kind())
                    })
                    .collect();
                skipped.sort();
                (batches, skipped)
            })
            .collect()
    })
}

#[test]
fn crafted_pages_skip_their_row_group_exactly_for_any_thread_count() {
    let corpus = corpus(true);
    let one = epochs(corpus.dir.path(), 1, 2);
    let expected: Vec<(String, &str)> = {
        let mut e: Vec<_> = corpus
            .crafted
            .iter()
            .flat_map(|name| std::iter::repeat_n((name.to_string(), "corrupt"), GROUP))
            .collect();
        e.sort();
        e
    };
    for (epoch, (batches, skipped)) in one.iter().enumerate() {
        assert_eq!(skipped, &expected, "epoch {epoch}");
        let mut ids: Vec<u64> = batches.iter().flat_map(|b| b.0.clone()).collect();
        ids.sort_unstable();
        let all = ids.len();
        ids.dedup();
        assert_eq!(
            (all, ids.len()),
            (corpus.good, corpus.good),
            "epoch {epoch}"
        );
    }
    assert!(
        one == epochs(corpus.dir.path(), 2, 2),
        "2 threads differ from 1"
    );
    assert!(
        one == epochs(corpus.dir.path(), 4, 2),
        "4 threads differ from 1"
    );
}

#[test]
fn a_damaged_row_group_is_read_once_for_all_its_rows() {
    let (rows, classes) = demo_rows();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.parquet");
    write(&path, &rows[..ROWS], GROUP, Some(features(&classes)));
    let good = std::fs::read(&path).unwrap();
    std::fs::write(&path, damaged(&good, &rows[..ROWS])).unwrap();
    let store = std::sync::Arc::new(LocalDir::new(dir.path()).unwrap());
    let listing = store.list().unwrap();
    let files =
        ParquetFiles::from_listing(store, listing, Modality::Image, &Columns::default()).unwrap();
    let mut out = Vec::new();
    let opened = files.storage_bytes();
    let cause = files.read(0, &mut out).unwrap_err();
    assert!(matches!(cause, Cause::Corrupt(_)), "{cause:?}");
    let once = files.storage_bytes() - opened;
    for id in 1..GROUP as u64 {
        assert_eq!(files.read(id, &mut out).unwrap_err(), cause);
    }
    assert_eq!(
        files.storage_bytes() - opened,
        once,
        "read again for its other rows"
    );
    // A pass over its rows is done: the next epoch tries again (the file may be mended).
    files.read(0, &mut out).unwrap_err();
    assert_eq!(files.storage_bytes() - opened, 2 * once);
    // The other row group reads.
    for id in GROUP as u64..ROWS as u64 {
        files.read(id, &mut out).unwrap();
        assert_eq!(&out, rows[id as usize].0.as_ref().unwrap());
    }
}

#[test]
fn crafted_footers_and_label_columns_are_refused_at_open_naming_the_file() {
    let (rows, classes) = demo_rows();
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("template.parquet");
    write(&template, &rows[..ROWS], GROUP, Some(features(&classes)));
    let good = std::fs::read(&template).unwrap();
    std::fs::remove_file(&template).unwrap();
    write(
        &dir.path().join("a-good.parquet"),
        &rows[..ROWS],
        GROUP,
        Some(features(&classes)),
    );
    let labels: Vec<u8> = (0..GROUP as i64).flat_map(|l| l.to_le_bytes()).collect();
    let label_page = |dictionary_values: i64| {
        let mut chunk = page(
            DICTIONARY_PAGE,
            (labels.len() as i64, labels.len()),
            7,
            &[(1, dictionary_values), (2, PLAIN)],
            &labels,
        );
        // Definition levels: a run of GROUP ones at bit width 1; then indices 0, 1, 2.
        let mut payload = 2u32.to_le_bytes().to_vec();
        payload.extend([(GROUP as u8) << 1, 1, 2, 0b11, 0b0010_0100, 0]);
        let sub = [(1, GROUP as i64), (2, RLE_DICTIONARY), (3, RLE), (4, RLE)];
        chunk.extend(page(
            DATA_PAGE,
            (payload.len() as i64, payload.len()),
            5,
            &sub,
            &payload,
        ));
        chunk
    };
    let cut = good.len() - 20;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "label-dictionary.parquet",
            {
                let chunk = label_page(i32::MAX.into());
                replace_chunk(&good, 2, &chunk, Compression::UNCOMPRESSED)
            },
            "values in",
        ),
        (
            "rows.parquet",
            rewrite(&good, None, |m| {
                let groups = m
                    .row_groups()
                    .iter()
                    .map(|g| {
                        g.clone()
                            .into_builder()
                            .set_num_rows(1 << 40)
                            .build()
                            .unwrap()
                    })
                    .collect();
                ParquetMetaData::new(m.file_metadata().clone(), groups)
            }),
            "rows in",
        ),
        (
            "cut-footer.parquet",
            {
                let mut bytes = good[..cut].to_vec();
                bytes.extend(&good[good.len() - 8..]);
                bytes
            },
            "not a Parquet file",
        ),
    ];
    // The honest label page reads: the crafting is not what refuses the others.
    let honest = replace_chunk(
        &good,
        2,
        &label_page(GROUP as i64),
        Compression::UNCOMPRESSED,
    );
    std::fs::write(dir.path().join("honest.parquet"), &honest).unwrap();
    let location = dir.path().to_str().unwrap().to_string();
    LoaderBuilder::with_settings(&location, settings(1))
        .open()
        .unwrap();
    std::fs::remove_file(dir.path().join("honest.parquet")).unwrap();
    for (name, bytes, why) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let location = location.clone();
        let err = watchdog(name.to_string(), move || {
            LoaderBuilder::with_settings(&location, settings(1))
                .open()
                .map(drop)
                .unwrap_err()
                .to_string()
        });
        assert!(err.contains(name) && err.contains(why), "{name}: {err}");
        std::fs::remove_file(&path).unwrap();
    }
}

/// Set in the process [`peak_memory_over_crafted_files_stays_near_that_over_good_ones`]
/// starts: the corpus to read.
const CHILD: &str = "NOSTALL_TEST_RSS_CORPUS";

/// Not a test of its own: the body of a process that
/// [`peak_memory_over_crafted_files_stays_near_that_over_good_ones`] starts, so that the
/// peak it reports is of one run alone.
#[test]
#[ignore = "run by peak_memory_over_crafted_files_stays_near_that_over_good_ones"]
fn one_run_in_its_own_process() {
    let dir = std::env::var(CHILD).expect("started by the peak memory test");
    let epochs = epochs(Path::new(&dir), 2, 1);
    let delivered: usize = epochs[0].0.iter().map(|b| b.0.len()).sum();
    println!("delivered {delivered} peak {}", peak_rss());
}

#[test]
fn peak_memory_over_crafted_files_stays_near_that_over_good_ones() {
    let good = corpus(false);
    let hostile = corpus(true);
    let (good_delivered, good_peak) = run_alone(
        module_path!(),
        "one_run_in_its_own_process",
        CHILD,
        good.dir.path(),
    );
    let (hostile_delivered, hostile_peak) = run_alone(
        module_path!(),
        "one_run_in_its_own_process",
        CHILD,
        hostile.dir.path(),
    );
    assert_eq!(
        (good_delivered, hostile_delivered),
        (good.good, hostile.good)
    );
    println!("peak resident memory: {good_peak} bytes over the good files, {hostile_peak} with the crafted ones");
    assert!(
        hostile_peak < 2 * good_peak,
        "peak resident memory {hostile_peak} bytes over the crafted files, {good_peak} over the \
         good ones"
    );
}
