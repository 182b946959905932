//! What-if: the rate model swept along one knob at a time (cache size, prep threads,
//! storage bandwidth, nodes), remote prep (how many cores elsewhere remove the prep
//! stall), and the advice drawn from them in plain words.

use serde::{Deserialize, Serialize};

use nostall::sched::model::{Bottleneck, Prediction, Rates, Setup};
use nostall::sim::remote::{Limit, ReceiveCost, Trainer};

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

/// What remote prep costs, the inputs of its what-if.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RemoteCosts {
    /// The CPU this node spends receiving a batch, by its bytes.
    pub receive: ReceiveCost,
    /// The CPU a remote core spends sending a batch, as a multiple of what receiving it
    /// costs here.
    pub send_factor: f64,
    /// Cores of a remote host, to count hosts.
    pub host_cores: f64,
}

impl Default for RemoteCosts {
    /// The receive cost measured on the Ray testbed ([`ReceiveCost::MEASURED`]); sending
    /// assumed to cost what receiving does; hosts of 64 cores, assumed.
    fn default() -> RemoteCosts {
        RemoteCosts {
            receive: ReceiveCost::MEASURED,
            send_factor: 1.0,
            host_cores: 64.0,
        }
    }
}

impl RemoteCosts {
    /// Checks figures a user gave.
    ///
    /// # Errors
    ///
    /// [`nostall::Error::Config`] naming the figure.
    pub fn validate(&self) -> nostall::Result<()> {
        self.receive.validate()?;
        super::positive("send cost", self.send_factor, true)?;
        super::positive("host cores", self.host_cores, false)?;
        Ok(())
    }
}

/// The remote what-if: the node's prep threads prepare what they can while receiving
/// batches made elsewhere (`remote=`, docs/remote.md), and remote cores make the rest.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RemotePrep {
    /// Bytes of a batch as the loader delivers it.
    pub batch_bytes: f64,
    /// Milliseconds of this node's CPU to receive one.
    pub receive_ms: f64,
    /// Milliseconds of a core per sample at the configured thread count (threads / P(n)).
    pub prep_ms: f64,
    /// Milliseconds of a remote core per sample: one thread's (1 / P(1)) and the sending.
    pub remote_ms: f64,
    /// Samples/s the node's threads prepare while receiving.
    pub local: f64,
    /// Samples/s it receives.
    pub remote: f64,
    /// Remote cores that make them.
    pub cores: f64,
    /// Hosts of [`RemotePrep::host_cores`] cores that hold them.
    pub hosts: u64,
    /// Cores of a host.
    pub host_cores: f64,
    /// What limits the node: its own threads suffice, remote prep feeds the model,
    /// receiving costs more than preparing, or receiving alone is too much.
    pub limit: Limit,
}

/// The remote what-if for `setup`, whose samples are `sample_bytes` each; `None` without
/// a model rate (nothing to feed), a prep rate or a batch size (what a receive costs).
pub fn remote_prep(
    rates: &Rates,
    setup: &Setup,
    sample_bytes: usize,
    costs: &RemoteCosts,
) -> Option<RemotePrep> {
    let need = rates.model?;
    let threads = setup.threads.max(1);
    let prep = rates.prep_rate(threads);
    let one = rates.prep_rate(1);
    if !(prep > 0.0 && one > 0.0) || setup.batch_size == 0 {
        return None;
    }
    let batch = setup.batch_size as f64;
    let batch_bytes = batch * sample_bytes as f64;
    let receive_ms = costs.receive.ms(batch_bytes);
    let node = Trainer {
        cores: threads as f64,
        prep_ms: 1e3 * threads as f64 / prep,
        receive_ms: receive_ms / batch,
    };
    let share = node.share(need);
    let remote_ms = 1e3 / one + costs.send_factor * node.receive_ms;
    let cores = share.remote * remote_ms / 1e3;
    Some(RemotePrep {
        batch_bytes,
        receive_ms,
        prep_ms: node.prep_ms,
        remote_ms,
        local: share.local,
        remote: share.remote,
        cores,
        hosts: (cores / costs.host_cores - 1e-9).ceil().max(0.0) as u64,
        host_cores: costs.host_cores,
        limit: share.limit,
    })
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
    /// Remote prep's what-if; `None` without a model rate.
    #[serde(default)]
    pub remote: Option<RemotePrep>,
    /// A paragraph for someone who has not read the papers.
    pub verdict: String,
}

/// Advice for `setup`, whose prediction is `p`; thread counts are searched up to
/// `max_threads`, and remote prep is weighed for samples of `sample_bytes` at `costs`.
pub fn advise(
    rates: &Rates,
    setup: &Setup,
    p: &Prediction,
    max_threads: usize,
    sample_bytes: usize,
    costs: &RemoteCosts,
) -> Advice {
    let smallest_cache = rates.smallest_cache(setup.threads);
    let threads_needed = rates.threads_needed(max_threads);
    let bandwidth_needed = bandwidth_needed(rates, setup);
    let remote = remote_prep(rates, setup, sample_bytes, costs);
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
                    v.push_str(&remote.map(|r| remote_advice(&r, setup)).unwrap_or_default());
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
                    v.push_str(&remote.map(|r| remote_advice(&r, setup)).unwrap_or_default());
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
        remote,
        verdict: v.trim_end().to_string(),
    }
}

/// What remote prep would do for a prep stall, as sentences.
fn remote_advice(r: &RemotePrep, setup: &Setup) -> String {
    let receiving = format!(
        "receiving a batch of {:.1} MB costs this node about {:.1} ms of CPU",
        r.batch_bytes / 1e6,
        r.receive_ms
    );
    let per_sample = r.receive_ms / setup.batch_size.max(1) as f64;
    let threads = match setup.threads {
        1 => "its 1 prep thread".to_string(),
        n => format!("its {n} prep threads"),
    };
    match r.limit {
        Limit::Remote => format!(
            "Or prepare elsewhere (`remote=`, docs/remote.md): {receiving}, so {threads} \
             would prepare {:.0} samples/s themselves and receive {:.0} from about {:.1} \
             remote cores ({} host{} of {:.0} cores). ",
            r.local,
            r.remote,
            r.cores,
            r.hosts,
            if r.hosts == 1 { "" } else { "s" },
            r.host_cores
        ),
        Limit::ReceiveCost => format!(
            "Remote prep (`remote=`) cannot help: {receiving} ({per_sample:.2} ms a sample), \
             no less than the {:.2} ms a sample its threads take to prepare; smaller batches \
             in bytes (uint8, normalised on the GPU) cost less to receive. ",
            r.prep_ms
        ),
        Limit::Receiving => format!(
            "Remote prep (`remote=`) alone cannot feed the model: {receiving}, so {threads} \
             could receive at most {:.0} samples/s, preparing none; smaller batches in bytes \
             (uint8, normalised on the GPU) cost less to receive. ",
            r.remote
        ),
        _ => String::new(),
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

    /// Bytes of a sample in the tests: a batch of 64 is 1 MB.
    const SAMPLE: usize = 15_625;

    /// A flat 32 ms to receive a batch of 64 whatever its bytes (0.5 ms a sample), hosts
    /// of 64 cores.
    fn costs() -> RemoteCosts {
        RemoteCosts {
            receive: ReceiveCost {
                small: (1e6, 32.0),
                large: (2e6, 32.0),
            },
            send_factor: 1.0,
            host_cores: 64.0,
        }
    }

    fn batches_of_64(threads: usize) -> Setup {
        Setup {
            batch_size: 64,
            ..Setup::single(1.0, threads)
        }
    }

    #[test]
    fn remote_cores_worked_out_by_hand() {
        // One thread prepares 400 samples/s (2.5 ms a sample) for a model taking 600.
        // Received R and made L: 2.5 L + 0.5 R = 1 000 ms/s and L + R = 600, so R = 250
        // and L = 350. A remote core takes 2.5 + 0.5 (sending) ms a sample: 0.75 cores.
        let r = rates();
        let setup = batches_of_64(1);
        let remote = remote_prep(&r, &setup, SAMPLE, &costs()).unwrap();
        assert_eq!(remote.limit, Limit::Remote);
        assert!((remote.batch_bytes - 1e6).abs() < 1e-6);
        assert!((remote.receive_ms - 32.0).abs() < 1e-9);
        assert!((remote.prep_ms - 2.5).abs() < 1e-9);
        assert!((remote.remote - 250.0).abs() < 1e-9, "{remote:?}");
        assert!((remote.local - 350.0).abs() < 1e-9);
        assert!((remote.remote_ms - 3.0).abs() < 1e-9);
        assert!((remote.cores - 0.75).abs() < 1e-9);
        assert_eq!(remote.hosts, 1);
        let a = advise(&r, &setup, &r.predict(&setup), 16, SAMPLE, &costs());
        assert_eq!(a.remote, Some(remote));
        assert!(
            a.verdict.contains("prepare 350 samples/s themselves and receive 250 from about 0.8 remote cores (1 host of 64 cores)"),
            "{}",
            a.verdict
        );
        // The measured receive cost scales with the batch's bytes: a uint8 batch of 64 ×
        // 224 × 224 × 3 costs what was measured.
        let measured = remote_prep(&r, &setup, 150_528, &RemoteCosts::default()).unwrap();
        assert!((measured.receive_ms - 5.9).abs() < 1e-9);
    }

    #[test]
    fn no_stall_needs_no_remote_core() {
        // Two threads prepare 700 samples/s for a model taking 600.
        let r = rates();
        let setup = batches_of_64(2);
        let remote = remote_prep(&r, &setup, SAMPLE, &costs()).unwrap();
        assert_eq!(remote.limit, Limit::Local);
        assert_eq!((remote.remote, remote.cores, remote.hosts), (0.0, 0.0, 0));
        let a = advise(&r, &setup, &r.predict(&setup), 16, SAMPLE, &costs());
        assert!(!a.verdict.contains("remote"), "{}", a.verdict);
        // Without a model there is nothing to feed.
        let alone = Rates {
            model: None,
            ..rates()
        };
        assert_eq!(remote_prep(&alone, &setup, SAMPLE, &costs()), None);
    }

    #[test]
    fn remote_prep_cannot_help_when_receiving_costs_more_than_preparing() {
        // 200 ms to receive a batch of 64 is 3.1 ms a sample; one thread prepares one in
        // 2.5 ms.
        let r = rates();
        let setup = batches_of_64(1);
        let dear = RemoteCosts {
            receive: ReceiveCost {
                small: (1e6, 200.0),
                large: (2e6, 200.0),
            },
            ..costs()
        };
        let remote = remote_prep(&r, &setup, SAMPLE, &dear).unwrap();
        assert_eq!(remote.limit, Limit::ReceiveCost);
        assert_eq!((remote.remote, remote.hosts), (0.0, 0));
        let a = advise(&r, &setup, &r.predict(&setup), 16, SAMPLE, &dear);
        assert!(
            a.verdict.contains("Remote prep (`remote=`) cannot help"),
            "{}",
            a.verdict
        );
        // 100 ms a batch (1.6 ms a sample) helps, but receiving a model of 2 000 samples/s
        // alone would take 3.1 cores of one: at most 640 samples/s.
        let fast = Rates {
            model: Some(2_000.0),
            ..rates()
        };
        let bound = RemoteCosts {
            receive: ReceiveCost {
                small: (1e6, 100.0),
                large: (2e6, 100.0),
            },
            ..costs()
        };
        let remote = remote_prep(&fast, &setup, SAMPLE, &bound).unwrap();
        assert_eq!(remote.limit, Limit::Receiving);
        assert!((remote.remote - 640.0).abs() < 1e-9);
        let a = advise(&fast, &setup, &fast.predict(&setup), 16, SAMPLE, &bound);
        assert!(
            a.verdict.contains("alone cannot feed the model"),
            "{}",
            a.verdict
        );
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
        let a = advise(&r, &setup, &r.predict(&setup), 16, SAMPLE, &costs());
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
        let a = advise(
            &r,
            &model_bound,
            &r.predict(&model_bound),
            16,
            SAMPLE,
            &costs(),
        );
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
        let a = advise(
            &r,
            &prep_bound,
            &r.predict(&prep_bound),
            16,
            SAMPLE,
            &costs(),
        );
        assert_eq!(a.bottleneck, Bottleneck::Prep);
        assert!(
            a.verdict.contains("2 prep threads (cores) would keep up"),
            "{}",
            a.verdict
        );
    }
}
