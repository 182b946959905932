//! What the order of a Parquet dataset costs and gives, at several memory budgets: bytes
//! read per epoch (the file's sample column read through [`ParquetFiles`], in the plan's
//! order, with that much memory for decoded row groups: [`ParquetFiles::storage_bytes`]), and two measures of how well
//! each batch is mixed, against a uniformly random permutation of the same dataset:
//!
//! - distinct row groups per batch (a permutation of a dataset of many row groups gives
//!   nearly one per sample);
//! - the chi-square of a batch's labels against the dataset's label distribution (a
//!   dataset sorted by class, read in order, gives batches of one class: a large value).
//!
//! Usage: `cargo run --release -p nostall --example parquet_shuffle -- DATA.parquet
//! [EPOCHS] [BATCH]`; budgets are 10%, 25%, 50% and 100% of the decoded sample column.

use std::sync::Arc;

use nostall::dataset::Columns;
use nostall::plan::{Blocks, EpochPlan, PlanConfig};
use nostall::storage::{BlobInfo, BlobStore, LocalDir, ParquetFiles, Source};
use nostall::Modality;

/// Mean distinct row groups and mean label chi-square per full batch of `order`.
fn mix(order: &[u64], batch: usize, group_of: &[u32], labels: &[u32], p: &[f64]) -> (f64, f64) {
    let (mut groups, mut chi, mut n) = (0.0, 0.0, 0.0);
    for b in order.chunks_exact(batch) {
        let mut seen: Vec<u32> = b.iter().map(|&id| group_of[id as usize]).collect();
        seen.sort_unstable();
        seen.dedup();
        groups += seen.len() as f64;
        let mut counts = vec![0.0; p.len()];
        for &id in b {
            counts[labels[id as usize] as usize] += 1.0;
        }
        chi += counts
            .iter()
            .zip(p)
            .map(|(o, p)| (o - p * batch as f64).powi(2) / (p * batch as f64))
            .sum::<f64>();
        n += 1.0;
    }
    (groups / n, chi / n)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = std::path::Path::new(args.get(1).ok_or("give a .parquet file")?);
    let epochs: u64 = args.get(2).map_or(Ok(20), |a| a.parse())?;
    let batch: usize = args.get(3).map_or(Ok(64), |a| a.parse())?;
    let dir = path.parent().ok_or("a file in a directory")?;
    let name = path.file_name().ok_or("a file")?.to_string_lossy();
    let store = Arc::new(LocalDir::new(dir)?);
    let listing: Vec<BlobInfo> = store
        .list()?
        .into_iter()
        .filter(|b| b.key == name)
        .collect();
    let open = |memory| -> nostall::Result<ParquetFiles> {
        let files = ParquetFiles::from_listing(
            store.clone(),
            listing.clone(),
            Modality::Image,
            &Columns::default(),
        )?;
        Ok(files.with_memory(memory))
    };
    let catalog = open(0)?.catalog().clone();
    let (len, lengths) = (catalog.len(), catalog.groups().to_vec());
    let group_of: Vec<u32> = lengths
        .iter()
        .enumerate()
        .flat_map(|(g, &l)| std::iter::repeat_n(g as u32, l as usize))
        .collect();
    let labels: Vec<u32> = (0..len as u64)
        .map(|id| catalog.label(id).unwrap_or(0))
        .collect();
    let classes = labels.iter().max().map_or(1, |&m| m as usize + 1);
    let mut p = vec![0.0; classes];
    for &l in &labels {
        p[l as usize] += 1.0 / len as f64;
    }
    let total = catalog.total_bytes();
    let column: u64 = {
        let files = open(u64::MAX)?;
        let indexed = files.storage_bytes();
        let mut out = Vec::new();
        for id in 0..len as u64 {
            files.read(id, &mut out).map_err(|c| c.to_string())?;
        }
        files.storage_bytes() - indexed
    };
    println!(
        "{}: {len} samples in {} row groups, {classes} classes, sample column {:.1} MB \
         ({:.1} MB decoded); {epochs} epochs, batch {batch}",
        path.display(),
        lengths.len(),
        column as f64 / 1e6,
        total as f64 / 1e6
    );
    println!("budget | open row groups | read per epoch (x the column) | row groups per batch (permutation) | label chi-square per batch (permutation)");
    for share in [0.1, 0.25, 0.5, 1.0] {
        let memory = (total as f64 * share) as u64;
        let blocks = Blocks::within(&lengths, total, memory);
        let files = open(memory)?;
        let (mut read, mut mixed, mut uniform) = (0u64, (0.0, 0.0), (0.0, 0.0));
        for epoch in 0..epochs {
            let mut config = PlanConfig::default();
            config.batch_size = batch;
            config.blocks = blocks.clone();
            let plan = EpochPlan::new(&config, len, epoch)?;
            config.blocks = None;
            let permutation = EpochPlan::new(&config, len, epoch)?;
            let before = files.storage_bytes();
            let mut out = Vec::new();
            for &id in plan.samples() {
                files.read(id, &mut out).map_err(|c| c.to_string())?;
            }
            read += files.storage_bytes() - before;
            let m = mix(plan.samples(), batch, &group_of, &labels, &p);
            let u = mix(permutation.samples(), batch, &group_of, &labels, &p);
            mixed = (mixed.0 + m.0, mixed.1 + m.1);
            uniform = (uniform.0 + u.0, uniform.1 + u.1);
        }
        let e = epochs as f64;
        println!(
            "{:.0}% ({:.0} MB) | {} | {:.2} | {:.1} ({:.1}) | {:.1} ({:.1})",
            share * 100.0,
            memory as f64 / 1e6,
            blocks
                .as_ref()
                .map_or("all (a permutation)".to_string(), |b| b.open.to_string()),
            read as f64 / e / column as f64,
            mixed.0 / e,
            uniform.0 / e,
            mixed.1 / e,
            uniform.1 / e
        );
    }
    Ok(())
}
