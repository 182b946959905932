//! Fuzz targets: each takes arbitrary bytes and drives one of nostall's parsers of
//! untrusted input the way the loader does. A target never panics on its own account:
//! whatever it finds is a bug in nostall.
//!
//! - [`tar_index`]: a WebDataset shard, indexed and every sample read back.
//! - [`parquet`]: a Parquet file (a Hugging Face dataset's), indexed and every sample
//!   read back: the footer, the columns' metadata, the page headers and the pages.
//! - [`index`]: a saved catalog index (its body: the target appends the checksum, so that
//!   mutations reach the parser behind it).
//! - [`image`]: an encoded image through the header, the crop planning and the decode,
//!   then the whole training pipeline.
//! - [`audio`]: a recording (WAV, FLAC, Ogg Vorbis, Ogg Opus, MP3: the Ogg page reader,
//!   the WAV reader, and the C decoders minimp3 and libopus behind them) decoded whole,
//!   then through the `m5` pipeline, which decodes windows.
//! - [`video`]: a video (MP4, Matroska, AVI; H.264, HEVC, VP9, AV1, MPEG-4: FFmpeg's
//!   demuxers and decoders behind nostall-video's reader of the bytes) indexed, decoded
//!   whole, then clips of it prepared; and the same bytes read as a saved frame index.
//! - [`manifest`]: a manifest of segments of long recordings (NeMo's JSON lines, or CSV)
//!   opened as a dataset over real recordings beside it (whole, cut short, written to a
//!   pipe), then every segment read back, the first few prepared.
//! - [`peer_frames`]: bytes from the network, read as a peer server and as a peer client
//!   read them.
//! - [`s3_response`]: an HTTP response from an S3 endpoint (a responder on loopback
//!   answers every request with the input), to a ranged read and to a listing.
//! - [`agent_messages`]: a packet on the node agent's socket, read as the agent reads a
//!   job's (a hello's settings applied to a loader's configuration) and as a job reads
//!   the agent's.
//! - [`operators`]: the operators' text form, as the agent reads a job's `pipeline`
//!   setting; what reads must be written as text that reads back to the same operators.
//! - `fields` (`nostall::fields::prepare_for_fuzzing`): a member of a record read as a
//!   text, JSON, bytes, vector and npz field and as a record of them, under small bounds.
//! - `remote_wire` (`nostall_remote::wire::parse_for_fuzzing`): bytes from a remote
//!   preparer, read as a trainer reads its replies (each batch's samples decoded from
//!   their code), and as a preparer reads a part asked of it.
//!
//! The AFL++ entry points (`src/bin`, feature `afl`) run them under `bash bench/fuzz.sh`;
//! `tests/corpora.rs` replays the seed corpora and every crash found so far, and mutates
//! them with fixed seeds, in every `cargo test`. Both run under [`alloc::Counting`], which
//! ends the process when an input makes a target hold more than [`alloc::LIMIT`].

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use nostall::catalog::Catalog;
use nostall::prep::audio::AudioPipeline;
use nostall::prep::image::codec::{Decoder, Rect};
use nostall::prep::image::ImagePipeline;
use nostall::prep::image::Layout;
use nostall::prep::{DType, DecodeOnly, Modality, Operators, Prep, VideoPipeline};
use nostall::rng::Rng;
use nostall::storage::{
    BlobInfo, BlobStore, ParquetFiles, ReadMode, S3Config, S3Store, Source, TarShards,
};
use nostall::Cause;

pub mod alloc;

/// The pixel limit of the image target: lower than the loader's default so that an
/// execution stays in milliseconds (the limit itself is what a bomb runs into).
const MAX_PIXELS: u64 = 4_000_000;

/// The response limit of the peer target.
const MAX_RESPONSE_BYTES: u64 = 1 << 20;

/// A store holding one blob (a shard, a Parquet file), in memory.
#[derive(Debug)]
struct OneBlob {
    key: &'static str,
    bytes: Vec<u8>,
}

impl BlobStore for OneBlob {
    fn list(&self) -> nostall::Result<Vec<BlobInfo>> {
        Ok(vec![BlobInfo {
            key: self.key.into(),
            size: self.bytes.len() as u64,
            version: None,
        }])
    }

    fn read_version(
        &self,
        _: &str,
        _: Option<&str>,
        offset: u64,
        len: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), Cause> {
        out.clear();
        let end = offset
            .checked_add(len)
            .filter(|&end| end <= self.bytes.len() as u64)
            .ok_or_else(|| Cause::Io(format!("bytes {offset}+{len} lie outside the blob")))?;
        out.extend_from_slice(&self.bytes[offset as usize..end as usize]);
        Ok(())
    }

    fn root(&self) -> String {
        "memory://".into()
    }
}

/// A tar shard: indexed, then every sample it catalogs read back.
pub fn tar_index(data: &[u8]) {
    let store = Arc::new(OneBlob {
        key: "shard.tar",
        bytes: data.to_vec(),
    });
    let Ok(shards) = TarShards::open(store, nostall::Modality::Image) else {
        return;
    };
    let mut out = Vec::new();
    for id in 0..shards.catalog().len() as u64 {
        let _ = shards.read(id, &mut out);
        let _ = shards.location(id);
    }
}

/// A Parquet file: its footer, columns and labels indexed by `ParquetFiles`, then every
/// sample read back (its row group's pages walked and decoded).
pub fn parquet(data: &[u8]) {
    let store = Arc::new(OneBlob {
        key: "data.parquet",
        bytes: data.to_vec(),
    });
    let Ok(listing) = store.list() else { return };
    let columns = nostall::dataset::Columns::default();
    let Ok(files) = ParquetFiles::from_listing(store, listing, nostall::Modality::Image, &columns)
    else {
        return;
    };
    let mut out = Vec::new();
    for id in 0..files.catalog().len() as u64 {
        let _ = files.read(id, &mut out);
        let _ = files.location(id);
    }
}

/// A saved index body (the checksum is appended): decoded, then every sample's fields read.
pub fn index(data: &[u8]) {
    let sealed = nostall::catalog::seal_index(data.to_vec());
    let Ok(catalog) = Catalog::from_index_bytes(&sealed, Path::new("fuzz.idx")) else {
        return;
    };
    let _ = catalog.total_bytes();
    let _ = catalog.classes();
    for id in 0..catalog.len() as u64 {
        let _ = (
            catalog.relative_path(id),
            catalog.size(id),
            catalog.label(id),
        );
        let _ = catalog.path(id);
    }
}

/// An encoded image: header, a crop of the middle at a small size, a full decode, and the
/// training pipeline, with one decoder throughout (as a prep thread keeps one).
pub fn image(data: &[u8]) {
    let Ok(mut decoder) = Decoder::new(MAX_PIXELS) else {
        return;
    };
    if let Ok(header) = decoder.header(data) {
        let (w, h) = (f64::from(header.width), f64::from(header.height));
        let middle = Rect {
            x: w / 4.0,
            y: h / 4.0,
            w: w / 2.0,
            h: h / 2.0,
        };
        let _ = decoder.decode(data, &header, middle, (16, 16));
    }
    let _ = decoder.decode_full(data);
    let pipeline = ImagePipeline::imagenet_train(32).with_max_pixels(MAX_PIXELS);
    let Ok(mut prep) = pipeline.preparer() else {
        return;
    };
    let mut out = vec![0; pipeline.sample_bytes()];
    let _ = prep.prepare(data, &mut Rng::new(7), &mut out);
}

/// The longest recording the audio target decodes: short, so that an execution stays in
/// milliseconds (the limit itself is what a long file runs into).
const MAX_AUDIO_SECONDS: u32 = 20;

/// A recording decoded whole (every channel at its own rate), then prepared by the `m5`
/// pipeline with two seeds (two windows, each decoded alone).
pub fn audio(data: &[u8]) {
    if let Ok(mut whole) = DecodeOnly::new(Modality::Audio) {
        let _ = whole.decode(data);
    }
    let Ok(pipeline) = AudioPipeline::preset("m5") else {
        return;
    };
    let pipeline = pipeline.with_max_seconds(MAX_AUDIO_SECONDS);
    let Ok(mut prep) = pipeline.preparer() else {
        return;
    };
    let mut out = vec![0; pipeline.layout().bytes()];
    for seed in [1, 2] {
        let _ = prep.prepare(data, &mut Rng::new(seed), &mut out);
    }
}

/// The largest frame the video target decodes: small, so that an execution stays in
/// milliseconds (the limit itself is what a lying header runs into).
const MAX_VIDEO_PIXELS: u64 = 1 << 20;

/// A video decoded whole, then two clips of it (two seeds: two places, two seeks)
/// prepared as a training pipeline would; and the bytes read as a saved frame index.
pub fn video(data: &[u8]) {
    let limits = nostall_video::Limits::new(1024, 1024, 1 << 12);
    let _ = nostall_video::FrameIndex::from_bytes(data, &limits);
    let _ = nostall_video::decode_all(data, &limits, &mut |_, _| {});
    let Ok(Operators::Video(clip, ops)) =
        "[Clip(4, stride=2), RandomResizedCrop(16), RandomHorizontalFlip()]".parse()
    else {
        return;
    };
    let Ok(pipeline) = VideoPipeline::new(clip, ops, DType::U8, Layout::Chw) else {
        return;
    };
    let pipeline = pipeline.with_max_pixels(MAX_VIDEO_PIXELS);
    let Ok(mut prep) = pipeline.preparer() else {
        return;
    };
    let mut out = vec![0; pipeline.layout().bytes()];
    for seed in [1, 2] {
        let _ = prep.prepare(data, &mut Rng::new(seed), &mut out);
    }
}

/// The recordings the [`manifest`] target's segments are cut from: real ones of each
/// format the index walks or carries whole (1.25-3 s of music, from the engine's tests),
/// and the kinds of damage it must bound by the file: a FLAC and an Ogg Opus cut short,
/// a FLAC cut inside its metadata, a WAV written to a pipe (its sizes unknown).
fn recordings() -> Vec<(&'static str, Vec<u8>)> {
    const WAV: &[u8] = include_bytes!("../../crates/nostall/tests/audio/knolls.wav");
    const FLAC: &[u8] = include_bytes!("../../crates/nostall/tests/audio/the_deep_path.flac");
    const OPUS: &[u8] = include_bytes!("../../crates/nostall/tests/audio/journeys_end.opus");
    const MP3: &[u8] = include_bytes!("../../crates/nostall/tests/audio/underground.mp3");
    const VORBIS: &[u8] = include_bytes!("../corpus/audio/vorbis.ogg");
    let mut pipe = WAV.to_vec();
    let data = pipe
        .windows(4)
        .position(|w| w == b"data")
        .expect("a data chunk");
    for at in [4, data + 4] {
        pipe[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    }
    vec![
        ("knolls.wav", WAV.to_vec()),
        ("the_deep_path.flac", FLAC.to_vec()),
        ("journeys_end.opus", OPUS.to_vec()),
        ("underground.mp3", MP3.to_vec()),
        ("vorbis.ogg", VORBIS.to_vec()),
        ("cut.flac", FLAC[..FLAC.len() * 3 / 5].to_vec()),
        ("cut-metadata.flac", FLAC[..60].to_vec()),
        ("cut.opus", OPUS[..OPUS.len() / 2].to_vec()),
        ("pipe.wav", pipe),
    ]
}

/// The directory of the [`manifest`] target's recordings, written once for every
/// process (each file whole, by a rename, so that processes beside each other, a fuzzer
/// and a test, never read one half written).
fn recordings_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join("nostall-fuzz-recordings");
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        for (name, bytes) in recordings() {
            let path = dir.join(name);
            if std::fs::read(&path).ok() != Some(bytes.clone()) {
                let part = dir.join(format!(".{name}.{}", std::process::id()));
                std::fs::write(&part, &bytes).expect("a recording written");
                std::fs::rename(&part, &path).expect("a recording in place");
            }
        }
        dir
    })
}

/// The longest segment the [`manifest`] target prepares: a segment is decoded for its
/// window only, but one of a recording carried whole is decoded up to it.
const MAX_SEGMENT_SECONDS: u32 = 20;

/// The segments of a manifest the [`manifest`] target prepares, of those it reads back:
/// preparing (decoding, resampling) is what costs, and a manifest of hundreds of
/// segments of one recording would spend each execution decoding it again.
const PREPARED: u64 = 8;

/// A manifest of segments, as JSON lines (as NeMo writes them) when its first byte that
/// is not blank is `{`, else as CSV: opened as a dataset over [`recordings`] (the
/// manifest parsed, each recording walked once), then every segment read back and
/// located, and the first [`PREPARED`] prepared by the `m5` pipeline.
pub fn manifest(data: &[u8]) {
    let dir = recordings_dir();
    let json = data.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    // Named for this process: beside the recordings, which its paths are relative to.
    let name = format!(
        ".manifest-{}.{}",
        std::process::id(),
        if json { "jsonl" } else { "csv" }
    );
    let path = dir.join(name);
    std::fs::write(&path, data).expect("a manifest written");
    let location = path.to_str().expect("a temporary directory named in UTF-8");
    let opened = nostall::dataset::open(location, ReadMode::Cached, Modality::Audio);
    std::fs::remove_file(&path).expect("the manifest removed");
    let Ok(dataset) = opened else { return };
    let Ok(pipeline) = AudioPipeline::preset("m5") else {
        return;
    };
    let pipeline = pipeline.with_max_seconds(MAX_SEGMENT_SECONDS);
    let Ok(mut prep) = pipeline.preparer() else {
        return;
    };
    let mut prepared = vec![0; pipeline.layout().bytes()];
    let mut out = Vec::new();
    for id in 0..dataset.catalog.len() as u64 {
        let _ = dataset.source.location(id);
        if dataset.source.read(id, &mut out).is_ok() && id < PREPARED {
            let _ = prep.prepare(&out, &mut Rng::new(id), &mut prepared);
        }
    }
}

/// The loopback endpoint [`s3_response`] talks to: it answers every request with the
/// response set last.
struct Responder {
    response: Arc<Mutex<Vec<u8>>>,
    store: S3Store,
}

fn responder() -> &'static Responder {
    static RESPONDER: OnceLock<Responder> = OnceLock::new();
    RESPONDER.get_or_init(|| {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let endpoint = format!("http://{}", listener.local_addr().expect("bound"));
        let response = Arc::new(Mutex::new(Vec::new()));
        let answer = response.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(&stream);
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                    line.clear();
                }
                let bytes = answer.lock().unwrap_or_else(|e| e.into_inner()).clone();
                let _ = stream.write_all(&bytes);
            }
        });
        let mut config = S3Config::from_url("s3://bucket/prefix").expect("a valid URL");
        config.endpoint = Some(endpoint);
        config.allow_http = true;
        config.region = "us-east-1".into();
        config.access_key_id = Some("fuzz".into());
        config.secret_access_key = Some("fuzz-secret".into());
        config.max_retries = 0;
        config.retry_window = Duration::from_millis(200);
        config.request_timeout = Duration::from_secs(2);
        Responder {
            response,
            store: S3Store::new(config).expect("an S3 client"),
        }
    })
}

/// An HTTP response from an S3 endpoint: to a ranged read of 100 bytes (with an
/// `If-Match`) and to a listing.
pub fn s3_response(data: &[u8]) {
    let responder = responder();
    *responder.response.lock().unwrap_or_else(|e| e.into_inner()) = data.to_vec();
    let mut out = Vec::new();
    let read = responder
        .store
        .read_version("a.jpg", Some("\"etag\""), 0, 100, &mut out);
    assert!(
        read.is_err() || out.len() == 100,
        "a short or long read passed"
    );
    assert!(read.is_ok() || out.is_empty(), "a failed read left bytes");
    let _ = responder.store.list();
}

/// A packet on the node agent's socket, as the agent and as a job read it.
pub fn agent_messages(data: &[u8]) {
    nostall_agent::parse_for_fuzzing(data);
}

/// The operators' text form: read, then what it read written and read again.
pub fn operators(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(ops) = text.parse::<Operators>() {
        let written = ops.to_string();
        let again: Result<Operators, _> = written.parse();
        assert_eq!(
            again.ok().as_ref(),
            Some(&ops),
            "{text:?} was written {written:?}"
        );
    }
}

/// Bytes from the network, as a peer server and as a peer client read them.
pub fn peer_frames(data: &[u8]) {
    nostall_peer::wire::parse_for_fuzzing(data, MAX_RESPONSE_BYTES);
}
