//! Shared test fixtures: small datasets of generated JPEGs (behaviour tests only; speed
//! is measured on real photographs in bench/).

// Each test binary uses a different subset of these fixtures.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use nostall::codec::{encode_jpeg, EncodePixels};
use nostall::storage::{LocalFiles, ReadMode};
use nostall::{Catalog, Loader, LoaderConfig, Pipeline};

/// A textured picture, different for every `seed`, so that crops and flips show.
pub fn picture(width: u32, height: u32, seed: u32) -> Vec<u8> {
    let mut px = Vec::with_capacity((width * height * 3) as usize);
    for y in 0..height {
        for x in 0..width {
            let v = x.wrapping_mul(7 + seed) ^ y.wrapping_mul(13 + seed);
            px.extend([
                (x * 255 / width) as u8,
                (y * 255 / height) as u8,
                (v % 251) as u8,
            ]);
        }
    }
    px
}

pub fn jpeg(width: u32, height: u32, seed: u32) -> Vec<u8> {
    encode_jpeg(
        &picture(width, height, seed),
        width,
        height,
        EncodePixels::Rgb,
        90,
        seed % 3 == 0,
    )
    .unwrap()
}

/// `classes` × `per_class` JPEGs of assorted sizes in ImageFolder layout.
pub fn image_folder(root: &Path, classes: usize, per_class: usize) {
    for c in 0..classes {
        let dir = root.join(format!("class{c}"));
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..per_class {
            let seed = (c * per_class + i) as u32;
            let (w, h) = [(96, 72), (72, 96), (120, 90), (64, 64)][seed as usize % 4];
            std::fs::write(dir.join(format!("img{i:03}.jpg")), jpeg(w, h, seed)).unwrap();
        }
    }
}

pub fn loader(root: &Path, config: LoaderConfig) -> Loader {
    let (catalog, _) = Catalog::scan(root).unwrap();
    let catalog = Arc::new(catalog);
    let source = Arc::new(LocalFiles::new(catalog.clone(), ReadMode::Cached));
    Loader::new(catalog, source, config).unwrap()
}

pub fn config(batch_size: usize, threads: usize) -> LoaderConfig {
    let mut config = LoaderConfig::new(Pipeline::imagenet_train(32));
    config.plan.batch_size = batch_size;
    config.plan.seed = 5;
    config.prep_threads = threads;
    config.fetch_threads = threads;
    config.prefetch = 2;
    config
}
