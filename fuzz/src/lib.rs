//! Fuzz targets: each takes arbitrary bytes and drives one of nostall's parsers of
//! untrusted input the way the loader does. A target never panics on its own account:
//! whatever it finds is a bug in nostall.
//!
//! - [`tar_index`]: a WebDataset shard, indexed and every sample read back.
//! - [`index`]: a saved catalog index (its body: the target appends the checksum, so that
//!   mutations reach the parser behind it).
//! - [`image`]: an encoded image through the header, the crop planning and the decode,
//!   then the whole training pipeline.
//! - [`peer_frames`]: bytes from the network, read as a peer server and as a peer client
//!   read them.
//!
//! The AFL++ entry points (`src/bin`, feature `afl`) run them under `bash bench/fuzz.sh`;
//! `tests/corpora.rs` replays the seed corpora and every crash found so far, and mutates
//! them with fixed seeds, in every `cargo test`.

use std::path::Path;
use std::sync::Arc;

use nostall::catalog::Catalog;
use nostall::codec::{Decoder, Rect};
use nostall::ops::Prep;
use nostall::rng::Rng;
use nostall::storage::{BlobInfo, BlobStore, Source, TarShards};
use nostall::{Cause, Pipeline};

/// The pixel limit of the image target: lower than the loader's default so that an
/// execution stays in milliseconds (the limit itself is what a bomb runs into).
const MAX_PIXELS: u64 = 4_000_000;

/// The response limit of the peer target.
const MAX_RESPONSE_BYTES: u64 = 1 << 20;

/// A store holding one shard, in memory.
#[derive(Debug)]
struct OneShard {
    bytes: Vec<u8>,
}

impl BlobStore for OneShard {
    fn list(&self) -> nostall::Result<Vec<BlobInfo>> {
        Ok(vec![BlobInfo {
            key: "shard.tar".into(),
            size: self.bytes.len() as u64,
            version: None,
        }])
    }

    fn read_range(&self, _: &str, offset: u64, len: u64, out: &mut Vec<u8>) -> Result<(), Cause> {
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
    let store = Arc::new(OneShard {
        bytes: data.to_vec(),
    });
    let Ok(shards) = TarShards::open(store) else {
        return;
    };
    let mut out = Vec::new();
    for id in 0..shards.catalog().len() as u64 {
        let _ = shards.read(id, &mut out);
        let _ = shards.location(id);
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
    let pipeline = Pipeline::imagenet_train(32);
    let Ok(mut prep) = Prep::new(MAX_PIXELS) else {
        return;
    };
    let mut out = vec![0; pipeline.sample_bytes()];
    let _ = prep.run(&pipeline, data, &mut Rng::new(7), &mut out);
}

/// Bytes from the network, as a peer server and a peer client read them.
pub fn peer_frames(data: &[u8]) {
    nostall_peer::wire::parse_for_fuzzing(data, MAX_RESPONSE_BYTES);
}
