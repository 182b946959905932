//! What the order of a Parquet dataset costs and gives, at several memory budgets: bytes
//! read per epoch (the file's sample column read through [`ParquetFiles`], each rank's
//! samples in its plan's order by its own reader, with that much memory for decoded pages:
//! [`ParquetFiles::storage_bytes`], summed over the ranks), and two measures of how well
//! each global batch (every rank's batch together) is mixed, against a uniformly random
//! permutation of the same dataset:
//!
//! - distinct pages (or row groups) per batch (a permutation of a dataset of many pages
//!   gives nearly one per sample);
//! - the chi-square of a batch's labels against the dataset's label distribution (a
//!   dataset sorted by class, read in order, gives batches of one class: a large value),
//!   as a mean and a 95th percentile over the batches of all epochs.
//!
//! Usage: `cargo run --release -p nostall --example parquet_shuffle -- DATA.parquet
//! [EPOCHS] [BATCH] [RANKS]`; budgets are 10%, 25%, 50% and 100% of the decoded sample
//! column, for each rank.

use std::sync::Arc;

use nostall::dataset::Columns;
use nostall::plan::{Blocks, EpochPlan, PlanConfig};
use nostall::storage::{BlobInfo, BlobStore, LocalDir, ParquetFiles, Source};
use nostall::Modality;

/// Adds the distinct groups and the label chi-square of each full batch of `order` to
/// `groups` and `chi`.
fn mix(
    order: &[u64],
    batch: usize,
    (group_of, labels, p): (&[u32], &[u32], &[f64]),
    groups: &mut Vec<f64>,
    chi: &mut Vec<f64>,
) {
    for b in order.chunks_exact(batch) {
        let mut seen: Vec<u32> = b.iter().map(|&id| group_of[id as usize]).collect();
        seen.sort_unstable();
        seen.dedup();
        groups.push(seen.len() as f64);
        let mut counts = vec![0.0; p.len()];
        for &id in b {
            counts[labels[id as usize] as usize] += 1.0;
        }
        chi.push(
            counts
                .iter()
                .zip(p)
                .map(|(o, p)| (o - p * batch as f64).powi(2) / (p * batch as f64))
                .sum::<f64>(),
        );
    }
}

/// The mean of `values` and their 95th percentile.
fn summary(values: &mut [f64]) -> (f64, f64) {
    values.sort_by(f64::total_cmp);
    let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
    (mean, values[values.len() * 95 / 100])
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = std::path::Path::new(args.get(1).ok_or("give a .parquet file")?);
    let epochs: u64 = args.get(2).map_or(Ok(20), |a| a.parse())?;
    let batch: usize = args.get(3).map_or(Ok(64), |a| a.parse())?;
    let ranks: usize = args.get(4).map_or(Ok(1), |a| a.parse())?;
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
        "{}: {len} samples in {} pages (or row groups), {classes} classes, sample column \
         {:.1} MB ({:.1} MB decoded); {epochs} epochs, {ranks} ranks of batch {batch}",
        path.display(),
        lengths.len(),
        column as f64 / 1e6,
        total as f64 / 1e6
    );
    println!(
        "memory per rank | pages open per rank | read per epoch, all ranks (x the column) \
         | pages per global batch (permutation) | label chi-square per global batch, \
         mean and 95th percentile (permutation)"
    );
    let table = (&group_of[..], &labels[..], &p[..]);
    for share in [0.1, 0.25, 0.5, 1.0] {
        let memory = (total as f64 * share) as u64;
        let blocks = Blocks::within(&lengths, total, memory);
        let readers = (0..ranks)
            .map(|_| open(memory))
            .collect::<nostall::Result<Vec<_>>>()?;
        let mut read = 0u64;
        let (mut groups, mut chi) = (Vec::new(), Vec::new());
        let (mut uniform_groups, mut uniform_chi) = (Vec::new(), Vec::new());
        for epoch in 0..epochs {
            let mut global = Vec::with_capacity(len + ranks);
            let mut permutation = Vec::with_capacity(len + ranks);
            let mut plans = Vec::new();
            for (rank, files) in readers.iter().enumerate() {
                let mut config = PlanConfig::default();
                (config.batch_size, config.rank, config.world) = (batch, rank, ranks);
                config.blocks = blocks.clone();
                let plan = EpochPlan::new(&config, len, epoch)?;
                config.blocks = None;
                let uniform = EpochPlan::new(&config, len, epoch)?;
                let before = files.storage_bytes();
                let mut out = Vec::new();
                for &id in plan.samples() {
                    files.read(id, &mut out).map_err(|c| c.to_string())?;
                }
                read += files.storage_bytes() - before;
                plans.push((plan, uniform));
            }
            // Rank r's i-th sample is the global order's (i × ranks + r)-th.
            for i in 0..plans[0].0.samples().len() {
                for (plan, uniform) in &plans {
                    global.push(plan.samples()[i]);
                    permutation.push(uniform.samples()[i]);
                }
            }
            mix(&global, batch * ranks, table, &mut groups, &mut chi);
            mix(
                &permutation,
                batch * ranks,
                table,
                &mut uniform_groups,
                &mut uniform_chi,
            );
        }
        let ((groups, _), (chi, chi95)) = (summary(&mut groups), summary(&mut chi));
        let ((uniform_groups, _), (uniform_chi, uniform_chi95)) =
            (summary(&mut uniform_groups), summary(&mut uniform_chi));
        println!(
            "{:.0}% ({:.0} MB) | {} | {:.2} | {groups:.1} ({uniform_groups:.1}) | {chi:.1}, \
             {chi95:.1} ({uniform_chi:.1}, {uniform_chi95:.1})",
            share * 100.0,
            memory as f64 / 1e6,
            blocks
                .as_ref()
                .map_or("all (a permutation)".to_string(), |b| b.open.to_string()),
            read as f64 / epochs as f64 / column as f64,
        );
    }
    Ok(())
}
