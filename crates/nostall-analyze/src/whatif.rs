//! What-if: the rate model swept along one knob at a time (cache size, prep threads,
//! storage bandwidth, nodes), and the advice drawn from it in plain words.

use serde::{Deserialize, Serialize};

use nostall::sched::model::{Bottleneck, Prediction, Rates, Setup};

/// One point of a sweep: the knob's value and what the model predicts there.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// The knob's value, in the sweep's unit.
    pub x: f64,
    /// Samples per second (per node for the node sweep).
    pub throughput: f64,
    /// F there.
    pub fetch: f64,
    /// P(n) there.
    pub prep: f64,
    /// Share of epoch time the model computes.
    pub compute_share: f64,
    /// Share of epoch time lost to prep.
    pub prep_stall_share: f64,
    /// Share of epoch time lost to fetch.
    pub fetch_stall_share: f64,
}

impl Point {
    fn new(x: f64, p: &Prediction) -> Point {
        Point {
            x,
            throughput: p.throughput,
            fetch: p.fetch,
            prep: p.prep,
            compute_share: p.compute_share,
            prep_stall_share: p.prep_stall_share,
            fetch_stall_share: p.fetch_stall_share,
        }
    }
}

/// The four sweeps, each around the configuration analysed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WhatIf {
    /// x: the share of the dataset cached, 0–1.
    pub cache: Vec<Point>,
    /// x: prep threads.
    pub threads: Vec<Point>,
    /// Thread counts up to this one were measured; beyond, P(n) is extrapolated.
    pub threads_measured: usize,
    /// x: storage bandwidth in MB/s (10^6 bytes).
    pub bandwidth: Vec<Point>,
    /// x: nodes, each caching [`WhatIf::node_cache_share`] of the dataset in a
    /// partitioned cache; throughput per node.
    pub nodes: Vec<Point>,
    /// The share of the dataset each node caches in the node sweep.
    pub node_cache_share: f64,
    /// The network bandwidth between nodes assumed in the node sweep, bytes/s.
    pub network_bytes_per_s: f64,
}

/// Sweeps the model around `setup`. The node sweep gives every node a cache of
/// `node_cache_share` of the dataset and a network of `network_bytes_per_s`.
pub fn sweep(
    rates: &Rates,
    setup: &Setup,
    node_cache_share: f64,
    network_bytes_per_s: f64,
) -> WhatIf {
    let cache = (0..=20)
        .map(|i| {
            let x = i as f64 / 20.0;
            Point::new(
                x,
                &rates.predict(&Setup {
                    cache_fraction: x,
                    ..*setup
                }),
            )
        })
        .collect();
    let threads_measured = rates.prep.len();
    let threads = (1..=(2 * threads_measured).max(8).max(setup.threads))
        .map(|n| {
            Point::new(
                n as f64,
                &rates.predict(&Setup {
                    threads: n,
                    ..*setup
                }),
            )
        })
        .collect();
    // From 1/16 to 16 times the measured bandwidth, four points per doubling.
    let bandwidth = (-16..=16)
        .map(|k| {
            let bytes = rates.storage_bytes_per_s * 2f64.powf(k as f64 / 4.0);
            let scaled = Rates {
                storage_bytes_per_s: bytes,
                ..rates.clone()
            };
            Point::new(bytes / 1e6, &scaled.predict(setup))
        })
        .collect();
    let nodes = [1, 2, 4, 8, 16, 32, 64]
        .into_iter()
        .map(|k| {
            let node = Setup {
                cache_fraction: node_cache_share,
                nodes: k,
                network_bytes_per_s,
                ..*setup
            };
            Point::new(k as f64, &rates.predict(&node))
        })
        .collect();
    WhatIf {
        cache,
        threads,
        threads_measured,
        bandwidth,
        nodes,
        node_cache_share,
        network_bytes_per_s,
    }
}

/// What to change, from the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Advice {
    /// What limits the configuration analysed.
    pub bottleneck: Bottleneck,
    /// x*: the smallest share of the dataset to cache so that fetch keeps up with prep
    /// and the model at the configured thread count; `None` if no cache can.
    pub smallest_cache: Option<f64>,
    /// n*: the fewest prep threads that keep up with the model (`None` without a model
    /// rate, or beyond the search limit); may be extrapolated (see
    /// [`WhatIf::threads_measured`]).
    pub threads_needed: Option<usize>,
    /// The storage bandwidth, bytes/s, at which fetch keeps up with the configured
    /// cache; `None` when the cache alone suffices or the target is unbounded.
    pub bandwidth_needed: Option<f64>,
    /// A paragraph for someone who has not read the papers.
    pub verdict: String,
}

/// Advice for `setup`, whose prediction is `p`; thread counts are searched up to
/// `max_threads`.
pub fn advise(rates: &Rates, setup: &Setup, p: &Prediction, max_threads: usize) -> Advice {
    let smallest_cache = rates.smallest_cache(setup.threads);
    let threads_needed = rates.threads_needed(max_threads);
    let bandwidth_needed = bandwidth_needed(rates, setup);
    let mut v = String::new();
    let model = rates.model;
    let pct = |share: f64| format!("{:.0}%", 100.0 * share);
    let cache_words = if setup.cache_fraction > 0.0 {
        format!("a cache of {} of the dataset", pct(setup.cache_fraction))
    } else {
        "no cache".to_string()
    };
    match (p.bottleneck, model) {
        (Bottleneck::Model, Some(g)) => {
            v.push_str(&format!(
                "The model (the GPU) sets the pace. With {} prep threads and {cache_words}, \
                 the input pipeline can deliver {:.0} samples/s, more than the model \
                 consumes ({g:.0} samples/s). More cache, cores or storage bandwidth would \
                 not make training faster. ",
                setup.threads,
                p.fetch.min(p.prep)
            ));
            let stall = p.prep_stall_share + p.fetch_stall_share;
            if stall > 0.02 {
                v.push_str(&format!(
                    "The one wait left is for each epoch's first batch: {} of the time \
                     here, because an epoch is only {:.0} batches long; it shrinks as \
                     epochs grow.",
                    pct(stall),
                    rates.samples as f64
                        / setup.nodes.max(1) as f64
                        / setup.batch_size.max(1) as f64
                ));
            }
        }
        (bottleneck, _) => {
            let demand = model.map_or_else(
                || "The model's speed was not given, so this is how fast the input pipeline alone can go. ".to_string(),
                |g| format!("The model could consume {g:.0} samples/s, but training runs at {:.0}: {} of every epoch is spent waiting for data. ", p.throughput, pct(p.fetch_stall_share + p.prep_stall_share)),
            );
            v.push_str(&demand);
            if bottleneck == Bottleneck::Fetch {
                v.push_str(&format!(
                    "The bottleneck is reading samples: storage and cache together deliver \
                     {:.0} samples/s, while decoding and augmenting with {} threads could \
                     handle {:.0}. ",
                    p.fetch, setup.threads, p.prep
                ));
                match smallest_cache {
                    Some(x) if x <= 1.0 => v.push_str(&format!(
                        "Caching {} of the dataset ({:.0} MB) in memory with nostall's \
                         MinIO cache (`--cache minio --cache-size {:.0}%`) would remove \
                         this stall. ",
                        pct(x),
                        x * rates.dataset_bytes as f64 / 1e6,
                        (100.0 * x).ceil()
                    )),
                    _ => v.push_str("Even caching the whole dataset would not remove it. "),
                }
                if let Some(bytes) = bandwidth_needed {
                    v.push_str(&format!(
                        "So would storage reading {:.0} MB/s instead of {:.0} MB/s. ",
                        bytes / 1e6,
                        rates.storage_bytes_per_s / 1e6
                    ));
                }
                if p.prep < model.unwrap_or(f64::INFINITY) {
                    v.push_str("After that, prep would be the limit: ");
                    v.push_str(&threads_advice(threads_needed, rates, max_threads));
                }
            } else {
                v.push_str(&format!(
                    "The bottleneck is decoding and augmenting: {} prep threads deliver \
                     {:.0} samples/s; reading keeps up ({:.0} samples/s). ",
                    setup.threads, p.prep, p.fetch
                ));
                if model.is_some() {
                    // A sentence of its own here: capitalised.
                    let advice = threads_advice(threads_needed, rates, max_threads);
                    let mut chars = advice.chars();
                    if let Some(first) = chars.next() {
                        v.extend(first.to_uppercase());
                        v.push_str(chars.as_str());
                    }
                } else {
                    v.push_str(
                        "Each further thread adds what the threads chart shows, up to the \
                         number of cores. ",
                    );
                }
            }
        }
    }
    Advice {
        bottleneck: p.bottleneck,
        smallest_cache,
        threads_needed,
        bandwidth_needed,
        verdict: v.trim_end().to_string(),
    }
}

/// How many prep threads would keep up with the model, as the end of a sentence.
fn threads_advice(needed: Option<usize>, rates: &Rates, max: usize) -> String {
    match needed {
        Some(n) if n > rates.prep.len() => format!(
            "about {n} prep threads (cores) would keep up with the model (estimated: only \
             1 to {} threads were measured). ",
            rates.prep.len()
        ),
        Some(n) => format!("{n} prep threads (cores) would keep up with the model. "),
        None => format!(
            "even {max} prep threads would not keep up with the model; lighter \
             augmentation or smaller images would. "
        ),
    }
}

/// The storage bandwidth (bytes/s) at which fetch, with the configured cache, keeps up
/// with `min(P(n), G)`: solves `c/C + (1−c)/S = 1/m` for `S`.
fn bandwidth_needed(rates: &Rates, setup: &Setup) -> Option<f64> {
    let target = rates
        .prep_rate(setup.threads)
        .min(rates.model.unwrap_or(f64::INFINITY));
    let c = setup.cache_fraction.clamp(0.0, 1.0);
    let left = 1.0 / target - c / rates.cache;
    if !target.is_finite() || left <= 0.0 || c >= 1.0 {
        return None;
    }
    let samples_per_s = (1.0 - c) / left;
    let needed = samples_per_s * rates.dataset_bytes as f64 / rates.samples.max(1) as f64;
    (needed > rates.storage_bytes_per_s).then_some(needed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostall::sched::model::Rates;

    /// The rate model tests' figures: storage 500 samples/s, prep 400/700/900, model 600.
    fn rates() -> Rates {
        Rates {
            samples: 10_000,
            dataset_bytes: 1_000_000_000,
            prep: vec![400.0, 700.0, 900.0],
            storage_bytes_per_s: 50e6,
            cache: 20_000.0,
            model: Some(600.0),
        }
    }

    #[test]
    fn sweeps_cover_their_ranges_and_agree_with_the_model() {
        let r = rates();
        let setup = Setup::single(0.0, 2);
        let w = sweep(&r, &setup, 0.25, 1e9);
        assert_eq!(w.cache.len(), 21);
        assert_eq!(w.cache[0].throughput, r.predict(&setup).throughput);
        // More cache never hurts; the full cache reaches the model's rate.
        assert!(w
            .cache
            .windows(2)
            .all(|p| p[1].throughput >= p[0].throughput));
        assert!((w.cache[20].throughput - 600.0).abs() < 1e-9);
        assert_eq!(w.threads_measured, 3);
        assert_eq!(w.threads.len(), 8);
        // The bandwidth sweep is centred on the measured bandwidth (50 MB/s).
        assert!((w.bandwidth[16].x - 50.0).abs() < 1e-9);
        assert_eq!(w.nodes.first().unwrap().x, 1.0);
    }

    #[test]
    fn the_verdict_names_the_bottleneck_and_the_fix() {
        let r = rates();
        let setup = Setup::single(0.0, 2);
        let a = advise(&r, &setup, &r.predict(&setup), 16);
        assert_eq!(a.bottleneck, Bottleneck::Fetch);
        let x = a.smallest_cache.unwrap();
        assert!(
            a.verdict.contains(&format!("Caching {:.0}%", 100.0 * x)),
            "{}",
            a.verdict
        );
        // Storage must reach the model's 600 samples/s of 100 kB: 60 MB/s.
        assert!((a.bandwidth_needed.unwrap() - 60e6).abs() < 1.0);
        assert!(a.verdict.contains("60 MB/s"), "{}", a.verdict);

        let model_bound = Setup::single(1.0, 2);
        let a = advise(&r, &model_bound, &r.predict(&model_bound), 16);
        assert_eq!(a.bottleneck, Bottleneck::Model);
        assert!(
            a.verdict.starts_with("The model (the GPU) sets the pace"),
            "{}",
            a.verdict
        );
        assert!(
            !a.verdict.contains("first batch"),
            "long epochs: {}",
            a.verdict
        );

        let prep_bound = Setup::single(1.0, 1);
        let a = advise(&r, &prep_bound, &r.predict(&prep_bound), 16);
        assert_eq!(a.bottleneck, Bottleneck::Prep);
        assert!(
            a.verdict.contains("2 prep threads (cores) would keep up"),
            "{}",
            a.verdict
        );
    }
}
