//! A model of remote prep at a job's scale: trainer nodes whose GPUs take more samples
//! than their own cores prepare, fed by CPU hosts (the `nostall-remote` crate, one
//! preparer per Ray actor, each serving one rank).
//!
//! # The steady state: [`Trainer`] and [`Job`]
//!
//! A trainer node has `C` cores for data (after the training processes' own), its GPUs
//! take `N` samples/s, one sample costs `c` ms of a core to prepare and a batch of `b`
//! bytes costs `r(b)` ms of a core to receive (`ρ = r(b) / batch` per sample, see
//! [`ReceiveCost`]). Alone the node prepares `1000·C / c` samples/s. Fed by remote
//! preparers it receives `R` samples/s and prepares `L` itself, within its cores:
//!
//! ```text
//! L·c + R·ρ = 1000·C,   L + R = N   ⇒   R = (N·c − 1000·C) / (c − ρ)
//! ```
//!
//! so a sample received instead of prepared frees `c − ρ` ms: when `ρ ≥ c` remote prep
//! cannot help ([`Limit::ReceiveCost`]), and when `N·ρ > 1000·C` the node cannot even
//! receive all it needs ([`Limit::Receiving`]). A host of `H` cores makes
//! `1000·H / (c + s·ρ)` samples/s, `s` the cost of sending a batch relative to receiving
//! it. [`Job::row`] adds the network (bytes into a trainer node and out of a host) and
//! the control plane: with the trainers' own clients each rank talks to its own actors
//! (connections, part requests, a TLS handshake per actor per epoch, since each epoch is
//! a run of its own), against a central dispatcher every rank would ask for every part
//! (tf.data service's design), modelled as one core serving requests of a fixed cost
//! (M/M/1).
//!
//! # The client, event by event: [`ClientSim`]
//!
//! The steady state ignores what the client does with time: a window of parts, parts of
//! random length, a straggler at the head of the window, a preparer lost, an epoch's
//! start. [`ClientSim`] plays one rank's client over its local preparer and its actors,
//! with the rules of `nostall_remote`'s client restated (its schedule lives among
//! threads, sockets and batches of real data, and `nostall` cannot depend on that
//! crate, so the rules are written again here rather than shared):
//!
//! - a run (an epoch) is cut into parts of `part_batches` batches; the lowest part not
//!   given goes to the next preparer that asks, as long as it lies within `window =
//!   preparers × parts_per_preparer` parts of the part being delivered;
//! - the local preparer makes one part at a time; an actor has up to
//!   `parts_per_preparer` parts asked and makes them in order, each batch reaching the
//!   client half a round trip after it is made;
//! - the part the consumer waits on is given to one more preparer once it has been out
//!   `hedge_factor` times as long as the run's parts took on average (once per part);
//!   the first copy of each batch is kept, a later one dropped;
//! - a lost actor's parts are given again; it comes back after a while;
//! - each epoch is a run of its own: the actors are connected anew (a few round trips),
//!   and the part times the hedge reads start again; with `ahead`, the actors connect to
//!   the next run and take its parts once every part of the current one is given out,
//!   making them after what they were asked before.
//!
//! Part times are drawn per preparer from a seeded stream of its own (log-normal around
//! the preparer's mean, and for an actor now and then a straggler), so a run is the same
//! for a seed, and adding an actor leaves the others' draws as they were.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::rng::{derive, Rng};

/// The CPU time a trainer spends receiving a batch: a line through two measured points,
/// a fixed cost per batch and a cost per byte.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReceiveCost {
    /// A smaller batch: its bytes and the milliseconds of CPU it took to receive.
    pub small: (f64, f64),
    /// A larger batch: its bytes and milliseconds.
    pub large: (f64, f64),
}

impl ReceiveCost {
    /// Bytes of a uint8 batch of 64 × 224 × 224 × 3: the batch measured.
    pub const U8_BATCH_BYTES: f64 = 9_633_792.0;
    /// Bytes of the same batch in float32.
    pub const F32_BATCH_BYTES: f64 = 38_535_168.0;

    /// docs/benchmarks.md, "Remote prep: float32 batches received at the output pass's
    /// speed" (2026-11-30): the trainer in a half-core cgroup receiving every batch from
    /// two actors (TLS 1.3, one copy from the socket into its batch buffers) spent 5.9 ms
    /// of CPU per uint8 batch of 64 × 224 × 224 × 3 and 11.4 ms per float32 one (sent as
    /// its bytes, each converted by the image output pass's vector kernel). A float32
    /// batch sent as values (audio) costs more than this line says: it was 24.8 ms at
    /// 38.5 MB on the network.
    pub const MEASURED: ReceiveCost = ReceiveCost::through(5.9, 11.4);

    /// The line through `u8_ms` for the uint8 batch of 64 × 224 × 224 × 3 and `f32_ms`
    /// for the float32 one.
    pub const fn through(u8_ms: f64, f32_ms: f64) -> ReceiveCost {
        ReceiveCost {
            small: (Self::U8_BATCH_BYTES, u8_ms),
            large: (Self::F32_BATCH_BYTES, f32_ms),
        }
    }

    /// Checks that the line is one a receiver could have.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] unless both batches have bytes (the larger more), and the
    /// larger took at least as long as the smaller, a finite time above 0.
    pub fn validate(&self) -> Result<()> {
        let ((b0, m0), (b1, m1)) = (self.small, self.large);
        let ok = [b0, m0, b1, m1].iter().all(|v| v.is_finite() && *v > 0.0);
        if !ok || b1 <= b0 || m1 < m0 {
            return Err(Error::Config(format!(
                "receive cost {m0} ms at {b0} bytes, {m1} ms at {b1} bytes: give times above \
                 0, the larger batch's at least the smaller's"
            )));
        }
        Ok(())
    }

    /// Milliseconds of CPU per byte.
    pub fn ms_per_byte(&self) -> f64 {
        (self.large.1 - self.small.1) / (self.large.0 - self.small.0)
    }

    /// Milliseconds of CPU per batch whatever its size (the line at 0 bytes; not below 0).
    pub fn fixed_ms(&self) -> f64 {
        self.ms(0.0)
    }

    /// Milliseconds of the trainer's CPU to receive a batch of `bytes`.
    pub fn ms(&self, bytes: f64) -> f64 {
        (self.small.1 + self.ms_per_byte() * (bytes - self.small.0)).max(0.0)
    }
}

/// What limits a trainer node fed by its own cores and remote preparers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum Limit {
    /// Its own cores prepare all its GPUs take: no remote prep is needed.
    Local,
    /// Remote preparers make up what its cores cannot: the GPUs are fed.
    Remote,
    /// Receiving a sample costs the node at least what preparing it does: remote prep
    /// cannot add anything.
    ReceiveCost,
    /// Receiving every sample, preparing none, takes more than the node's cores: remote
    /// prep helps, but cannot feed the GPUs at this batch size and output type.
    Receiving,
}

impl Limit {
    /// A short name, as tables print it.
    pub fn name(self) -> &'static str {
        match self {
            Limit::Local => "own cores",
            Limit::Remote => "fed",
            Limit::ReceiveCost => "receive>prep",
            Limit::Receiving => "receive-bound",
        }
    }
}

/// How a trainer node meets its GPUs' demand, in samples/s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Share {
    /// What its GPUs take.
    pub need: f64,
    /// What its cores prepare alone.
    pub alone: f64,
    /// What its cores prepare while receiving [`Share::remote`].
    pub local: f64,
    /// What it receives from remote preparers.
    pub remote: f64,
    /// What limits it.
    pub limit: Limit,
}

impl Share {
    /// What reaches the GPUs.
    pub fn delivered(&self) -> f64 {
        self.local + self.remote
    }

    /// What its cores alone leave the GPUs short of.
    pub fn deficit(&self) -> f64 {
        (self.need - self.alone).max(0.0)
    }
}

/// A trainer node's (or one rank's share of its) cores and what a sample costs them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trainer {
    /// Cores that prepare and receive batches.
    pub cores: f64,
    /// Milliseconds of a core to prepare a sample.
    pub prep_ms: f64,
    /// Milliseconds of a core to receive a sample (its batch's cost over its samples).
    pub receive_ms: f64,
}

impl Trainer {
    /// Samples/s its cores prepare alone.
    pub fn alone(&self) -> f64 {
        1e3 * self.cores / self.prep_ms
    }

    /// Samples/s its cores prepare while receiving `received` samples/s (at least 0).
    pub fn local_while_receiving(&self, received: f64) -> f64 {
        ((1e3 * self.cores - received * self.receive_ms) / self.prep_ms).max(0.0)
    }

    /// How it meets `need` samples/s with the fewest samples from remote preparers: its
    /// cores prepare all they can besides receiving the rest.
    pub fn share(&self, need: f64) -> Share {
        let alone = self.alone();
        let (local, remote, limit) = if alone >= need {
            (need, 0.0, Limit::Local)
        } else if self.receive_ms >= self.prep_ms {
            (alone, 0.0, Limit::ReceiveCost)
        } else {
            let remote =
                (need * self.prep_ms - 1e3 * self.cores) / (self.prep_ms - self.receive_ms);
            if remote <= need {
                (need - remote, remote, Limit::Remote)
            } else {
                (0.0, 1e3 * self.cores / self.receive_ms, Limit::Receiving)
            }
        };
        Share {
            need,
            alone,
            local,
            remote,
            limit,
        }
    }

    /// What it prepares and receives, samples/s, when remote preparers offer `supply`
    /// samples/s: it takes all of it (a client takes every part a preparer makes), up to
    /// `need` and to what its cores can receive, and prepares what its cores have left,
    /// up to `need`.
    pub fn fed(&self, need: f64, supply: f64) -> (f64, f64) {
        let remote = supply.min(need).min(1e3 * self.cores / self.receive_ms);
        let local = self.local_while_receiving(remote).min(need - remote);
        (local, remote)
    }
}

/// A recipe on a model: what a sample costs to prepare, how fast a GPU takes samples,
/// and a sample's output bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Its name in tables.
    pub name: String,
    /// Milliseconds of one core to prepare a sample.
    pub prep_ms: f64,
    /// Samples/s one GPU takes.
    pub gpu_rate: f64,
    /// Bytes of a prepared sample in the trainer's batch: what receiving it costs.
    pub sample_bytes: f64,
    /// Bytes of a sample on the network: a float32 image sample travels as the byte each
    /// element was computed from (`nostall-remote`'s coding), a quarter of its output.
    pub wire_bytes: f64,
}

/// A data-parallel job fed by remote preparers, and the figures the model needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Trainer nodes.
    pub trainers: usize,
    /// GPUs (ranks) per trainer node.
    pub gpus: usize,
    /// Cores of a trainer node that prepare and receive batches.
    pub trainer_cores: f64,
    /// Cores of a CPU host.
    pub host_cores: f64,
    /// Cores of an actor (a preparer serves one rank); `None`: sized to what a rank
    /// needs, in whole cores, at most a host's.
    pub actor_cores: Option<f64>,
    /// Samples per batch.
    pub batch_size: usize,
    /// What receiving a batch costs a trainer.
    pub receive: ReceiveCost,
    /// What sending a batch costs a host, as a multiple of what receiving it costs.
    pub send_factor: f64,
    /// Batches in a part.
    pub part_batches: u64,
    /// Parts asked of a preparer at once.
    pub parts_per_preparer: usize,
    /// Samples in an epoch of the whole job (the dataset).
    pub epoch_samples: u64,
    /// A central dispatcher's CPU time per part request, microseconds.
    pub dispatcher_us: f64,
}

/// A dispatcher serving every rank's part requests on one core.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dispatcher {
    /// Requests it must serve, per second.
    pub requests_per_s: f64,
    /// Cores its requests keep busy (above 1: one core cannot serve them).
    pub busy: f64,
    /// The mean time a request spends there, waiting and served (M/M/1), milliseconds;
    /// `None` when one core cannot keep up.
    pub response_ms: Option<f64>,
}

/// The model's figures for one workload of a [`Job`].
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The workload.
    pub workload: Workload,
    /// Bytes of a batch.
    pub batch_bytes: f64,
    /// Milliseconds of a trainer's CPU to receive a batch.
    pub receive_ms: f64,
    /// One trainer node's samples/s: what it needs, makes and receives.
    pub trainer: Share,
    /// Samples/s one busy host makes (sending included).
    pub host_rate: f64,
    /// Hosts' worth of cores per trainer node.
    pub hosts_per_trainer: f64,
    /// Hosts whose cores the job's remote samples keep busy, rounded up.
    pub hosts: u64,
    /// Cores of each actor.
    pub actor_cores: f64,
    /// Hosts that hold every rank's actors, whole actors to a host (at least
    /// [`Row::hosts`]: an actor's cores are its rank's alone, busy or not).
    pub hosts_placed: u64,
    /// Bytes/s into each trainer node from remote preparers.
    pub bytes_into_trainer: f64,
    /// Bytes/s out of each host (the remote samples spread over the hosts).
    pub bytes_out_of_host: f64,
    /// Actors each rank talks to.
    pub actors_per_rank: u64,
    /// Connections from trainers to actors, job-wide.
    pub connections: u64,
    /// Epochs a rank runs per second (each a run of its own).
    pub epochs_per_s: f64,
    /// TLS handshakes per second, job-wide: each run connects to its actors anew.
    pub handshakes_per_s: f64,
    /// Parts a rank asks of its actors per second.
    pub parts_per_rank: f64,
    /// Parts all ranks ask of their actors per second.
    pub parts_job: f64,
    /// At most the bytes of parts out per trainer node (its ranks' windows).
    pub window_bytes: f64,
    /// A central dispatcher asked for every part of every rank instead.
    pub dispatcher: Dispatcher,
}

impl Job {
    /// Ranks in the job.
    pub fn ranks(&self) -> usize {
        self.trainers * self.gpus
    }

    /// Batches of a rank's epoch (the last partial batch dropped).
    pub fn epoch_batches(&self) -> u64 {
        self.epoch_samples / (self.ranks() as u64 * self.batch_size as u64).max(1)
    }

    /// Checks the job's figures.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the figure: a count of 0, cores or costs not above 0, a
    /// dataset too small for one batch per rank.
    pub fn validate(&self) -> Result<()> {
        let counts = [
            ("trainers", self.trainers as u64),
            ("GPUs per trainer", self.gpus as u64),
            ("batch size", self.batch_size as u64),
            ("part batches", self.part_batches),
            ("parts per preparer", self.parts_per_preparer as u64),
        ];
        for (what, n) in counts {
            if n == 0 {
                return Err(Error::Config(format!("{what}: give at least 1")));
            }
        }
        let figures = [
            ("trainer cores", self.trainer_cores, false),
            ("host cores", self.host_cores, false),
            ("send cost", self.send_factor, true),
            ("dispatcher cost", self.dispatcher_us, true),
        ];
        for (what, v, zero_ok) in figures {
            if !(v.is_finite() && (v > 0.0 || (zero_ok && v == 0.0))) {
                return Err(Error::Config(format!("{what}={v}: give a number above 0")));
            }
        }
        if let Some(cores) = self.actor_cores {
            if !(cores.is_finite() && cores > 0.0 && cores <= self.host_cores) {
                return Err(Error::Config(format!(
                    "actor cores={cores}: give a number above 0, at most a host's {}",
                    self.host_cores
                )));
            }
        }
        self.receive.validate()?;
        if self.epoch_batches() == 0 {
            return Err(Error::Config(format!(
                "an epoch of {} samples gives each of {} ranks no batch of {}",
                self.epoch_samples,
                self.ranks(),
                self.batch_size
            )));
        }
        Ok(())
    }

    /// The model's figures for `workload`.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when the workload's figures are not above 0.
    pub fn row(&self, workload: &Workload) -> Result<Row> {
        let w = workload;
        for (what, v) in [
            ("prep ms", w.prep_ms),
            ("GPU rate", w.gpu_rate),
            ("sample bytes", w.sample_bytes),
            ("wire bytes", w.wire_bytes),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::Config(format!(
                    "{}: {what}={v}: give a number above 0",
                    w.name
                )));
            }
        }
        let batch = self.batch_size as f64;
        let batch_bytes = batch * w.sample_bytes;
        let receive_ms = self.receive.ms(batch_bytes);
        let per_sample = receive_ms / batch;
        let trainer = Trainer {
            cores: self.trainer_cores,
            prep_ms: w.prep_ms,
            receive_ms: per_sample,
        }
        .share(self.gpus as f64 * w.gpu_rate);
        let host_ms = w.prep_ms + self.send_factor * per_sample;
        let host_rate = 1e3 * self.host_cores / host_ms;
        let remote_job = trainer.remote * self.trainers as f64;
        // A whole host for the last fraction: hosts are not shared with other jobs here.
        let hosts = (remote_job / host_rate - 1e-9).ceil().max(0.0) as u64;
        let remote_rank = trainer.remote / self.gpus as f64;
        let rank_cores = remote_rank * host_ms / 1e3;
        let actor_cores = self
            .actor_cores
            .unwrap_or_else(|| (rank_cores - 1e-9).ceil().clamp(1.0, self.host_cores));
        let actors_per_rank = (rank_cores / actor_cores - 1e-9).ceil().max(0.0) as u64;
        let actors_per_host = (self.host_cores / actor_cores + 1e-9).floor().max(1.0) as u64;
        let hosts_placed = (actors_per_rank * self.ranks() as u64).div_ceil(actors_per_host);
        let ranks = self.ranks() as f64;
        let rank_rate = trainer.delivered() / self.gpus as f64;
        let epoch_samples = (self.epoch_batches() * self.batch_size as u64) as f64;
        let epochs_per_s = rank_rate / epoch_samples;
        let part_samples = self.part_batches as f64 * batch;
        let parts_per_rank = remote_rank / part_samples;
        let preparers = actors_per_rank + 1;
        let window_bytes = self.gpus as f64
            * (preparers * self.parts_per_preparer as u64) as f64
            * self.part_batches as f64
            * batch_bytes;
        // Every part of every rank, the local ones too: a dispatcher decides who makes
        // each.
        let requests = ranks * rank_rate / part_samples;
        let busy = requests * self.dispatcher_us * 1e-6;
        let dispatcher = Dispatcher {
            requests_per_s: requests,
            busy,
            response_ms: (busy < 1.0).then(|| self.dispatcher_us * 1e-3 / (1.0 - busy)),
        };
        Ok(Row {
            workload: w.clone(),
            batch_bytes,
            receive_ms,
            trainer,
            host_rate,
            hosts_per_trainer: trainer.remote / host_rate,
            hosts,
            actor_cores,
            hosts_placed,
            bytes_into_trainer: trainer.remote * w.wire_bytes,
            bytes_out_of_host: if hosts == 0 {
                0.0
            } else {
                remote_job * w.wire_bytes / hosts as f64
            },
            actors_per_rank,
            connections: actors_per_rank * self.ranks() as u64,
            epochs_per_s,
            handshakes_per_s: ranks * actors_per_rank as f64 * epochs_per_s,
            parts_per_rank,
            parts_job: ranks * parts_per_rank,
            window_bytes,
            dispatcher,
        })
    }
}

/// How long parts take, around their mean: a log-normal spread, and now and then a
/// straggler.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// The coefficient of variation of an ordinary part's time (0: every part the same).
    pub cv: f64,
    /// The share of parts that straggle (0 to 1).
    pub straggler_share: f64,
    /// How many times longer a straggling part takes.
    pub straggler_slowdown: f64,
}

impl Spread {
    /// No spread: every part takes its mean time.
    pub const NONE: Spread = Spread {
        cv: 0.0,
        straggler_share: 0.0,
        straggler_slowdown: 1.0,
    };

    /// A part's time over the mean of an ordinary one. Always two draws, so that a
    /// preparer's stream does not depend on the figures.
    fn draw(&self, rng: &mut Rng) -> f64 {
        let z = rng.normal();
        let u = rng.next_f64();
        let sigma2 = (1.0 + self.cv * self.cv).ln();
        let ordinary = (sigma2.sqrt() * z - sigma2 / 2.0).exp();
        if u < self.straggler_share {
            ordinary * self.straggler_slowdown
        } else {
            ordinary
        }
    }
}

/// An actor lost during a [`ClientSim`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Failure {
    /// The first actor to start a part numbered this or later (counting every run's parts
    /// from the first run's first) dies as it starts it.
    pub part: u64,
    /// Seconds until it is back, restarted and reachable.
    pub down_s: f64,
}

/// One rank's client over its preparers, event by event (see the module's
/// documentation for the rules).
#[derive(Debug, Clone, PartialEq)]
pub struct ClientSim {
    /// Batches in a run (an epoch of the rank).
    pub epoch_batches: u64,
    /// Runs, one after the other.
    pub epochs: u64,
    /// Batches in a part.
    pub part_batches: u64,
    /// Parts asked of an actor at once.
    pub parts_per_preparer: usize,
    /// A part the consumer waits on is hedged once out this many times the mean part
    /// time (infinite: never).
    pub hedge_factor: f64,
    /// Seconds the GPU takes per batch.
    pub gpu_batch_s: f64,
    /// Mean seconds the local preparer takes per part; `None`: no local preparer.
    pub local_part_s: Option<f64>,
    /// Actors.
    pub actors: usize,
    /// Mean seconds an actor takes per part.
    pub actor_part_s: f64,
    /// How part times spread: an actor's, and the local preparer's but for stragglers
    /// (a host's noisy neighbours, a lost packet, a collection are what a straggler
    /// stands for).
    pub spread: Spread,
    /// Round trip between the client and an actor, seconds.
    pub rtt_s: f64,
    /// Seconds to connect to an actor at a run's start (TCP, TLS, the loader's check).
    pub connect_s: f64,
    /// Whether the actors start the next run once every part of the current one is given
    /// out (the client's `RemoteOptions::ahead`): on a connection of its own, its parts
    /// made after the ones asked before them; the local preparer joins it when the
    /// consumer reaches it.
    pub ahead: bool,
    /// An actor lost.
    pub failure: Option<Failure>,
    /// Seed of the part times.
    pub seed: u64,
}

/// What a [`ClientSim`] delivered.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    /// Seconds from the first run's start to the GPU's last batch.
    pub seconds: f64,
    /// Batches delivered.
    pub batches: u64,
    /// Of those, made by the local preparer.
    pub local_batches: u64,
    /// Seconds the GPU waited for a batch.
    pub wait_s: f64,
    /// Parts hedged.
    pub hedges: u64,
    /// Batches that arrived after another copy of them (dropped).
    pub late_copies: u64,
    /// Parts given again after their preparer was lost.
    pub given_again: u64,
    /// The actor lost, if any was.
    pub failed_actor: Option<usize>,
}

impl Outcome {
    /// Batches per second delivered.
    pub fn batches_per_s(&self) -> f64 {
        self.batches as f64 / self.seconds
    }

    /// The share of time the GPU waited for data.
    pub fn wait_share(&self) -> f64 {
        self.wait_s / self.seconds
    }
}

impl ClientSim {
    /// Checks the settings.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the setting: no batch, part or preparer, a time that is
    /// not finite and above 0 (the round trip and connection may be 0), a straggler share
    /// outside 0..1.
    pub fn validate(&self) -> Result<()> {
        if self.epoch_batches == 0 || self.epochs == 0 || self.part_batches == 0 {
            return Err(Error::Config(
                "simulate at least one run of one batch, in parts of at least one".into(),
            ));
        }
        if self.parts_per_preparer == 0 || (self.actors == 0 && self.local_part_s.is_none()) {
            return Err(Error::Config(
                "a client needs a preparer, and asks each for at least one part".into(),
            ));
        }
        let positive = |v: f64| v.is_finite() && v > 0.0;
        let times = [
            ("GPU time per batch", self.gpu_batch_s, false),
            ("actor part time", self.actor_part_s, false),
            ("local part time", self.local_part_s.unwrap_or(1.0), false),
            ("round trip", self.rtt_s, true),
            ("connection time", self.connect_s, true),
            ("part time spread", self.spread.cv, true),
            ("down time", self.failure.map_or(1.0, |f| f.down_s), true),
        ];
        for (what, v, zero_ok) in times {
            if !(positive(v) || (zero_ok && v == 0.0)) {
                return Err(Error::Config(format!("{what}={v}: give a number above 0")));
            }
        }
        let s = self.spread;
        if !(0.0..=1.0).contains(&s.straggler_share)
            || s.straggler_slowdown.is_nan()
            || s.straggler_slowdown < 1.0
        {
            return Err(Error::Config(
                "a straggler share in 0..1 and a slowdown of at least 1".into(),
            ));
        }
        if self.hedge_factor.is_nan() || self.hedge_factor <= 0.0 {
            return Err(Error::Config("a hedge factor above 0".into()));
        }
        Ok(())
    }

    /// Runs the simulation.
    ///
    /// # Errors
    ///
    /// Those of [`ClientSim::validate`].
    pub fn run(&self) -> Result<Outcome> {
        self.validate()?;
        Ok(Sim::new(self).run())
    }

    fn parts(&self) -> u64 {
        self.epoch_batches.div_ceil(self.part_batches)
    }

    /// Batches in part `part` of a run.
    fn part_len(&self, part: u64) -> u64 {
        self.part_batches
            .min(self.epoch_batches - part * self.part_batches)
    }
}

/// What happens at an instant. `life` is the preparer's incarnation, `plan` its
/// schedule's and `run` the run an event belongs to: an event of a dead preparer, of a
/// schedule made again or of an ended run is dropped.
#[derive(Debug, Clone, Copy)]
enum Event {
    Batch {
        prep: usize,
        life: u32,
        plan: u32,
        run: u64,
        part: u64,
        index: u64,
    },
    End {
        prep: usize,
        life: u32,
        plan: u32,
        run: u64,
    },
    Gpu,
    Wake,
    Fail {
        prep: usize,
        life: u32,
    },
    Up {
        prep: usize,
    },
    Connected {
        prep: usize,
        life: u32,
        run: u64,
    },
}

/// An event due at `at`; events due together happen in the order they were scheduled.
struct Due {
    at: f64,
    seq: u64,
    event: Event,
}

impl PartialEq for Due {
    fn eq(&self, other: &Due) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Due) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    /// Reversed: `BinaryHeap` pops the greatest, and the earliest is due first.
    fn cmp(&self, other: &Due) -> Ordering {
        other.at.total_cmp(&self.at).then(other.seq.cmp(&self.seq))
    }
}

struct Preparer {
    local: bool,
    rng: Rng,
    /// Parts asked and not ended, with their runs, in the order they are made.
    asked: VecDeque<(u64, u64)>,
    /// When it is through with what it makes (an actor finishes a batch no one wants).
    free_at: f64,
    life: u32,
    /// Bumped when the parts it was asked are scheduled again (a run it made parts of
    /// for nobody was let go).
    plan: u32,
    up: bool,
    /// Connected to the current run.
    connected: bool,
    /// Connected to the run started ahead.
    connected_ahead: bool,
    /// When the part at the front of `asked` began, as the client times it.
    began: f64,
}

impl Preparer {
    fn new(local: bool, rng: Rng) -> Preparer {
        Preparer {
            local,
            rng,
            asked: VecDeque::new(),
            free_at: 0.0,
            life: 0,
            plan: 0,
            up: true,
            connected: local,
            connected_ahead: false,
            began: 0.0,
        }
    }
}

/// A part given out.
struct Open {
    arrived: Vec<bool>,
    ended: bool,
    holders: Vec<usize>,
    given: f64,
    hedged: bool,
}

/// One run's schedule (the real client's `State`, without the data).
struct Run {
    id: u64,
    parts: u64,
    next_new: u64,
    again: BTreeSet<u64>,
    open: BTreeMap<u64, Open>,
    delivering: u64,
    taken: u64,
    window: u64,
    part_seconds: (f64, u64),
}

impl Run {
    fn new(sim: &ClientSim, id: u64, preparers: usize) -> Run {
        Run {
            id,
            parts: sim.parts(),
            next_new: 0,
            again: BTreeSet::new(),
            open: BTreeMap::new(),
            delivering: 0,
            taken: 0,
            window: (preparers * sim.parts_per_preparer).max(1) as u64,
            part_seconds: (0.0, 0),
        }
    }

    /// The part preparer `me` makes next, if any is due at `now`.
    fn give(&mut self, sim: &ClientSim, me: usize, now: f64) -> Option<u64> {
        while let Some(part) = self.again.pop_first() {
            if let Some(open) = self.open.get_mut(&part) {
                open.holders.push(me);
                return Some(part);
            }
        }
        if self.next_new < self.parts && self.next_new < self.delivering + self.window {
            let part = self.next_new;
            self.next_new += 1;
            self.open.insert(
                part,
                Open {
                    arrived: vec![false; sim.part_len(part) as usize],
                    ended: false,
                    holders: vec![me],
                    given: now,
                    hedged: false,
                },
            );
            return Some(part);
        }
        let hedge_at = self.hedge_at(sim)?;
        let open = self.open.get_mut(&self.delivering)?;
        if now > hedge_at && !open.holders.contains(&me) {
            open.hedged = true;
            open.holders.push(me);
            return Some(self.delivering);
        }
        None
    }

    /// When the part delivered becomes late enough to hedge, if it can be hedged.
    fn hedge_at(&self, sim: &ClientSim) -> Option<f64> {
        let (seconds, made) = self.part_seconds;
        let open = self.open.get(&self.delivering)?;
        if made == 0 || open.hedged || open.ended {
            return None;
        }
        Some(open.given + sim.hedge_factor * seconds / made as f64)
    }

    fn wants(&self, part: u64, index: u64) -> bool {
        if part < self.delivering || (part == self.delivering && index < self.taken) {
            return false;
        }
        self.open
            .get(&part)
            .is_some_and(|open| !open.arrived[index as usize])
    }
}

struct Sim<'a> {
    sim: &'a ClientSim,
    now: f64,
    queue: BinaryHeap<Due>,
    seq: u64,
    preparers: Vec<Preparer>,
    run: Run,
    /// The next run, started ahead by the actors.
    ahead: Option<Run>,
    gpu_busy: bool,
    /// When the next hedge check is due (scheduled once).
    wake_at: f64,
    failure_done: bool,
    done: bool,
    out: Outcome,
}

impl<'a> Sim<'a> {
    fn new(sim: &'a ClientSim) -> Sim<'a> {
        let stream = |i: usize| Rng::new(derive(&[sim.seed, 0x5245_4D4F, i as u64]));
        let mut preparers = Vec::new();
        if sim.local_part_s.is_some() {
            preparers.push(Preparer::new(true, stream(0)));
        }
        for i in 0..sim.actors {
            preparers.push(Preparer::new(false, stream(i + 1)));
        }
        let run = Run::new(sim, 0, preparers.len());
        Sim {
            sim,
            now: 0.0,
            queue: BinaryHeap::new(),
            seq: 0,
            preparers,
            run,
            ahead: None,
            gpu_busy: false,
            wake_at: f64::INFINITY,
            failure_done: false,
            done: false,
            out: Outcome {
                seconds: 0.0,
                batches: 0,
                local_batches: 0,
                wait_s: 0.0,
                hedges: 0,
                late_copies: 0,
                given_again: 0,
                failed_actor: None,
            },
        }
    }

    fn at(&mut self, at: f64, event: Event) {
        self.seq += 1;
        self.queue.push(Due {
            at,
            seq: self.seq,
            event,
        });
    }

    fn run(mut self) -> Outcome {
        self.start_run(0);
        self.settle();
        while let Some(due) = self.queue.pop() {
            self.now = due.at;
            self.handle(due.event);
            self.settle();
            if self.done {
                break;
            }
        }
        // Some preparer always has an event coming (a part, a restart) until every batch
        // is delivered.
        debug_assert!(self.done, "the simulation stalled at {} s", self.now);
        let compute = self.out.batches as f64 * self.sim.gpu_batch_s;
        self.out.wait_s = (self.out.seconds - compute).max(0.0);
        self.out
    }

    fn start_run(&mut self, id: u64) {
        self.run = Run::new(self.sim, id, self.preparers.len());
        self.ahead = None;
        let now = self.now;
        let batch_s = self.sim.actor_part_s / self.sim.part_batches as f64;
        for i in 0..self.preparers.len() {
            let p = &mut self.preparers[i];
            p.asked.clear();
            p.connected_ahead = false;
            if p.local {
                // The local loader stops its part at the next batch: it is in-process.
                p.free_at = now;
                p.connected = true;
            } else {
                // A remote preparer notices the closed connection at its next batch.
                p.free_at = p.free_at.min(now + batch_s).max(now);
                p.connected = false;
                if p.up {
                    let life = p.life;
                    self.at(
                        now + self.sim.connect_s,
                        Event::Connected {
                            prep: i,
                            life,
                            run: id,
                        },
                    );
                }
            }
        }
    }

    fn handle(&mut self, event: Event) {
        let current = self.run.id;
        match event {
            Event::Batch {
                prep,
                life,
                plan,
                run,
                part,
                index,
            } => {
                let p = &self.preparers[prep];
                let local = p.local;
                if (life, plan) != (p.life, p.plan) {
                    return;
                }
                let Some(r) = self.run_of(run) else { return };
                if r.wants(part, index) {
                    let open = r.open.get_mut(&part).expect("wanted parts are open");
                    open.arrived[index as usize] = true;
                    if local {
                        self.out.local_batches += 1;
                    }
                } else {
                    self.out.late_copies += 1;
                }
            }
            Event::End {
                prep,
                life,
                plan,
                run,
            } => {
                let p = &self.preparers[prep];
                if (life, plan) != (p.life, p.plan) || self.run_of(run).is_none() {
                    return;
                }
                let p = &mut self.preparers[prep];
                let (of, part) = p.asked.pop_front().expect("an end follows an ask");
                debug_assert_eq!(of, run, "parts end in the order they were asked");
                let took = self.now - p.began;
                p.began = self.now;
                let r = self.run_of(run).expect("checked above");
                let (seconds, made) = r.part_seconds;
                r.part_seconds = (seconds + took, made + 1);
                if let Some(open) = r.open.get_mut(&part) {
                    open.ended = true;
                    open.holders.retain(|&h| h != prep);
                }
            }
            Event::Gpu => self.gpu_busy = false,
            Event::Wake => self.wake_at = f64::INFINITY,
            Event::Fail { prep, life } => {
                if life != self.preparers[prep].life {
                    return;
                }
                let p = &mut self.preparers[prep];
                p.up = false;
                p.connected = false;
                p.connected_ahead = false;
                p.life += 1;
                p.free_at = self.now;
                let lost: Vec<(u64, u64)> = p.asked.drain(..).collect();
                for (run, part) in lost {
                    let Some(r) = self.run_of(run) else { continue };
                    if let Some(open) = r.open.get_mut(&part) {
                        open.holders.retain(|&h| h != prep);
                        if open.holders.is_empty() && !open.ended {
                            r.again.insert(part);
                            self.out.given_again += 1;
                        }
                    }
                }
                let index = prep - usize::from(self.sim.local_part_s.is_some());
                self.out.failed_actor = Some(index);
                let down = self.sim.failure.map_or(0.0, |f| f.down_s);
                self.at(self.now + down, Event::Up { prep });
            }
            Event::Up { prep } => {
                let p = &mut self.preparers[prep];
                p.up = true;
                p.free_at = self.now;
                let life = p.life;
                let runs = std::iter::once(current).chain(self.ahead.as_ref().map(|r| r.id));
                for run in runs.collect::<Vec<_>>() {
                    let event = Event::Connected { prep, life, run };
                    self.at(self.now + self.sim.connect_s, event);
                }
            }
            Event::Connected { prep, life, run } => {
                let ahead = self.ahead.as_ref().map(|r| r.id);
                let p = &mut self.preparers[prep];
                if life == p.life && p.up {
                    if run == current {
                        p.connected = true;
                    } else if Some(run) == ahead {
                        p.connected_ahead = true;
                    }
                }
            }
        }
    }

    /// The run `id`: the current one or the one started ahead; `None` for an ended one.
    fn run_of(&mut self, id: u64) -> Option<&mut Run> {
        if id == self.run.id {
            return Some(&mut self.run);
        }
        self.ahead.as_mut().filter(|r| r.id == id)
    }

    /// After an event: the GPU takes what it can, preparers ask for what is due, and a
    /// hedge check is scheduled for when the part delivered becomes late.
    fn settle(&mut self) {
        self.consume();
        if self.done {
            return;
        }
        self.dispatch();
        self.start_ahead();
        self.dispatch_ahead();
        if let Some(at) = self.run.hedge_at(self.sim) {
            // Strictly after: a part is hedged once out longer than the bound.
            let at = at + 1e-9 * at.abs().max(1e-3);
            if at > self.now && at < self.wake_at {
                self.wake_at = at;
                self.at(at, Event::Wake);
            }
        }
    }

    fn consume(&mut self) {
        while !self.gpu_busy {
            if self.run.delivering >= self.run.parts {
                if self.run.id + 1 >= self.sim.epochs {
                    self.done = true;
                    self.out.seconds = self.now;
                    return;
                }
                self.next_run();
                continue;
            }
            let part = self.run.delivering;
            let Some(open) = self.run.open.get(&part) else {
                return;
            };
            let taken = self.run.taken as usize;
            if taken < open.arrived.len() {
                if !open.arrived[taken] {
                    return;
                }
                self.run.taken += 1;
                self.out.batches += 1;
                self.gpu_busy = true;
                self.at(self.now + self.sim.gpu_batch_s, Event::Gpu);
            } else if open.ended {
                self.run.open.remove(&part);
                self.run.delivering += 1;
                self.run.taken = 0;
            } else {
                return;
            }
        }
    }

    /// The consumer is through with the current run: the one started ahead becomes
    /// current (the local preparer joins it, and the actors' connections to the run before
    /// are let go), or the next is started now.
    fn next_run(&mut self) {
        let next = self.run.id + 1;
        let Some(mut ahead) = self.ahead.take().filter(|r| r.id == next) else {
            return self.start_run(next);
        };
        if self.sim.local_part_s.is_some() {
            ahead.window += self.sim.parts_per_preparer as u64;
        }
        self.run = ahead;
        let now = self.now;
        let batch_s = self.sim.actor_part_s / self.sim.part_batches as f64;
        let mut again = Vec::new();
        for (i, p) in self.preparers.iter_mut().enumerate() {
            if p.local {
                p.asked.clear();
                p.free_at = now;
                continue;
            }
            p.connected = p.connected_ahead;
            p.connected_ahead = false;
            if p.asked.iter().all(|&(run, _)| run == next) {
                continue;
            }
            // Parts of the run before are still asked (hedged copies, a straggler): the
            // actor notices their connection closed at its next batch, and makes the new
            // run's parts from then.
            let parts: Vec<u64> = p
                .asked
                .iter()
                .filter(|&&(run, _)| run == next)
                .map(|&(_, part)| part)
                .collect();
            p.asked.clear();
            p.plan += 1;
            p.free_at = p.free_at.min(now + batch_s).max(now);
            again.push((i, parts));
        }
        for (i, parts) in again {
            for part in parts {
                self.ask(i, next, part);
            }
        }
    }

    /// With `ahead`: starts the next run on the actors once every part of the current one
    /// is given out, unless the current one is the last.
    fn start_ahead(&mut self) {
        let r = &self.run;
        let given = r.next_new >= r.parts && r.again.is_empty();
        let last = r.id + 1 >= self.sim.epochs;
        if !self.sim.ahead || self.sim.actors == 0 || self.ahead.is_some() || !given || last {
            return;
        }
        let id = r.id + 1;
        self.ahead = Some(Run::new(self.sim, id, self.sim.actors));
        for prep in 0..self.preparers.len() {
            let p = &self.preparers[prep];
            if !p.local && p.up {
                let event = Event::Connected {
                    prep,
                    life: p.life,
                    run: id,
                };
                self.at(self.now + self.sim.connect_s, event);
            }
        }
    }

    /// Actors connected to the run started ahead ask for its parts, each up to its
    /// number of parts at once on that connection.
    fn dispatch_ahead(&mut self) {
        let Some(id) = self.ahead.as_ref().map(|r| r.id) else {
            return;
        };
        loop {
            let mut gave = false;
            for i in 0..self.preparers.len() {
                let p = &self.preparers[i];
                let asked = p.asked.iter().filter(|&&(run, _)| run == id).count();
                if p.local || !(p.up && p.connected_ahead) || asked >= self.sim.parts_per_preparer {
                    continue;
                }
                let ahead = self.ahead.as_mut().expect("checked above");
                if let Some(part) = ahead.give(self.sim, i, self.now) {
                    self.ask(i, id, part);
                    gave = true;
                }
            }
            if !gave {
                return;
            }
        }
    }

    fn dispatch(&mut self) {
        loop {
            let mut order: Vec<usize> = (0..self.preparers.len()).collect();
            // Idle preparers wait on the schedule and ask first; busy ones ask once
            // their next reply comes.
            order.sort_by_key(|&i| !self.preparers[i].asked.is_empty());
            let mut gave = false;
            for i in order {
                let p = &self.preparers[i];
                let current = self.run.id;
                let asked = p.asked.iter().filter(|&&(run, _)| run == current).count();
                let room = if p.local {
                    asked == 0
                } else {
                    asked < self.sim.parts_per_preparer
                };
                if !(p.up && p.connected && room) {
                    continue;
                }
                let was_head = self.run.delivering;
                let hedge = self.run.open.get(&was_head).is_some_and(|o| o.hedged);
                if let Some(part) = self.run.give(self.sim, i, self.now) {
                    if part == was_head && !hedge && self.run.open[&part].hedged {
                        self.out.hedges += 1;
                    }
                    self.ask(i, self.run.id, part);
                    gave = true;
                }
            }
            if !gave {
                return;
            }
        }
    }

    /// Preparer `i` is asked for `part` of run `run`: when it will make it, and when its
    /// batches reach the client.
    fn ask(&mut self, i: usize, run: u64, part: u64) {
        let sim = self.sim;
        let now = self.now;
        let global = run * sim.parts() + part;
        let p = &mut self.preparers[i];
        if p.asked.is_empty() {
            p.began = now;
        }
        p.asked.push_back((run, part));
        let (mean, latency) = match (p.local, sim.local_part_s) {
            (true, Some(local)) => (local, 0.0),
            _ => (sim.actor_part_s, sim.rtt_s / 2.0),
        };
        let start = p.free_at.max(now + latency);
        let (life, plan) = (p.life, p.plan);
        if !p.local && !self.failure_done && sim.failure.is_some_and(|f| global >= f.part) {
            self.failure_done = true;
            p.free_at = start;
            self.at(start, Event::Fail { prep: i, life });
            return;
        }
        let spread = if p.local {
            Spread {
                straggler_share: 0.0,
                ..sim.spread
            }
        } else {
            sim.spread
        };
        let took = mean * spread.draw(&mut p.rng);
        p.free_at = start + took;
        let n = sim.part_len(part);
        for index in 0..n {
            let made = start + took * (index + 1) as f64 / n as f64;
            self.at(
                made + latency,
                Event::Batch {
                    prep: i,
                    life,
                    plan,
                    run,
                    part,
                    index,
                },
            );
        }
        let end = Event::End {
            prep: i,
            life,
            plan,
            run,
        };
        self.at(start + took + latency, end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn the_receive_cost_goes_through_both_measurements() {
        let r = ReceiveCost::MEASURED;
        r.validate().unwrap();
        assert!(close(r.ms(ReceiveCost::U8_BATCH_BYTES), 5.9));
        assert!(close(r.ms(ReceiveCost::F32_BATCH_BYTES), 11.4));
        // 5.5 ms over 28 901 376 bytes, and what is left of 5.9 ms at 9 633 792 bytes.
        assert!(close(r.ms_per_byte() * 1e6, 5.5 / 28.901_376));
        assert!(close(r.fixed_ms(), 5.9 - 9.633_792 * 5.5 / 28.901_376));
        assert!((r.fixed_ms() - 4.067).abs() < 1e-3);
        assert!(ReceiveCost::through(8.4, 8.0).validate().is_err());
        assert!(ReceiveCost::through(0.0, 8.0).validate().is_err());
        assert!(ReceiveCost::through(8.4, f64::NAN).validate().is_err());
    }

    /// A job whose figures are worked out by hand in the tests: a flat 5 ms to receive a
    /// batch of 10 samples of 100 bytes (0.5 ms a sample), 2 ms to prepare a sample, GPUs
    /// taking 2 000 samples/s.
    fn hand_job() -> (Job, Workload) {
        let job = Job {
            trainers: 2,
            gpus: 4,
            trainer_cores: 8.0,
            host_cores: 16.0,
            actor_cores: Some(4.0),
            batch_size: 10,
            receive: ReceiveCost {
                small: (1_000.0, 5.0),
                large: (2_000.0, 5.0),
            },
            send_factor: 1.0,
            part_batches: 2,
            parts_per_preparer: 2,
            epoch_samples: 80_000,
            dispatcher_us: 100.0,
        };
        let workload = Workload {
            name: "hand".into(),
            prep_ms: 2.0,
            gpu_rate: 2_000.0,
            sample_bytes: 100.0,
            // Sent as bytes, received as float32.
            wire_bytes: 25.0,
        };
        (job, workload)
    }

    #[test]
    fn a_job_worked_out_by_hand() {
        let (job, w) = hand_job();
        job.validate().unwrap();
        let row = job.row(&w).unwrap();
        let t = row.trainer;
        // 4 GPUs × 2 000 = 8 000 samples/s; 8 cores at 2 ms make 4 000. Received R and made
        // L: 2 L + 0.5 R = 8 000 ms/s and L + R = 8 000, so R = 8 000 / 1.5.
        assert_eq!(t.limit, Limit::Remote);
        assert!(close(t.need, 8_000.0) && close(t.alone, 4_000.0));
        assert!(close(t.deficit(), 4_000.0));
        assert!(close(t.remote, 8_000.0 / 1.5), "{t:?}");
        assert!(close(t.local, 8_000.0 - 8_000.0 / 1.5));
        assert!(close(2.0 * t.local + 0.5 * t.remote, 8_000.0));
        assert!(close(row.receive_ms, 5.0) && close(row.batch_bytes, 1_000.0));
        // A host: 16 cores at 2 + 0.5 ms (sending costs what receiving does) = 6 400/s.
        assert!(close(row.host_rate, 6_400.0));
        assert!(close(row.hosts_per_trainer, 8_000.0 / 1.5 / 6_400.0));
        // Two trainers' 10 667 samples/s need 1.67 hosts: 2.
        assert_eq!(row.hosts, 2);
        assert!(close(row.bytes_into_trainer, 25.0 * 8_000.0 / 1.5));
        assert!(close(row.bytes_out_of_host, 25.0 * 8_000.0 / 1.5));
        // A rank receives 1 333 samples/s, 3.33 cores' worth; an actor of 4 cores makes
        // 1 600: one actor, four to a host, 8 ranks' on two hosts.
        assert_eq!(row.actors_per_rank, 1);
        assert_eq!(row.connections, 8);
        assert_eq!((row.actor_cores, row.hosts_placed), (4.0, 2));
        // Sized to the need instead: 4 whole cores. Actors of 3 cores make 1 200 a second:
        // two a rank, 5 to a host of 16 cores, 16 actors on 4 hosts.
        let sized = Job {
            actor_cores: None,
            ..job.clone()
        };
        assert_eq!(sized.row(&w).unwrap().actor_cores, 4.0);
        let small = Job {
            actor_cores: Some(3.0),
            ..job.clone()
        }
        .row(&w)
        .unwrap();
        assert_eq!((small.actors_per_rank, small.hosts_placed), (2, 4));
        assert!(Job {
            actor_cores: Some(17.0),
            ..job.clone()
        }
        .validate()
        .is_err());
        // An epoch of a rank: 80 000 / 8 ranks = 10 000 samples, at 2 000/s: 0.2 a second.
        assert_eq!(job.epoch_batches(), 1_000);
        assert!(close(row.epochs_per_s, 0.2));
        assert!(close(row.handshakes_per_s, 8.0 * 0.2));
        // Parts of 20 samples: 1 333 / 20 a rank from its actors.
        assert!(close(row.parts_per_rank, 8_000.0 / 1.5 / 4.0 / 20.0));
        assert!(close(row.parts_job, 8.0 * row.parts_per_rank));
        // 4 ranks × (1 actor + local) × 2 parts × 2 batches × 1 000 bytes.
        assert!(close(row.window_bytes, 32_000.0));
        // A dispatcher: 8 ranks × 2 000 / 20 = 800 requests/s at 0.1 ms: 8% of a core.
        let d = row.dispatcher;
        assert!(close(d.requests_per_s, 800.0) && close(d.busy, 0.08));
        assert!(close(d.response_ms.unwrap(), 0.1 / 0.92));
    }

    #[test]
    fn each_limit_is_named() {
        let trainer = |receive_ms| Trainer {
            cores: 8.0,
            prep_ms: 2.0,
            receive_ms,
        };
        assert_eq!(trainer(0.5).share(3_000.0).limit, Limit::Local);
        assert_eq!(trainer(0.5).share(3_000.0).remote, 0.0);
        // Receiving costs what preparing does: nothing to gain.
        let s = trainer(2.0).share(8_000.0);
        assert_eq!(
            (s.limit, s.remote, s.local),
            (Limit::ReceiveCost, 0.0, 4_000.0)
        );
        // 40 000 samples/s at 0.5 ms each to receive is 20 cores' worth: at most 16 000.
        let s = trainer(0.5).share(40_000.0);
        assert_eq!(s.limit, Limit::Receiving);
        assert!(close(s.delivered(), 16_000.0) && s.local == 0.0);
        let (job, w) = hand_job();
        // 800 requests/s at 10 ms each: eight cores' worth.
        let slow = Job {
            dispatcher_us: 1e4,
            ..job.clone()
        };
        let d = slow.row(&w).unwrap().dispatcher;
        assert!(close(d.busy, 8.0) && d.response_ms.is_none());
        assert!(job.row(&Workload { prep_ms: 0.0, ..w }).is_err());
        assert!(Job {
            epoch_samples: 79,
            ..job.clone()
        }
        .validate()
        .is_err());
        assert!(Job { trainers: 0, ..job }.validate().is_err());
    }

    #[test]
    fn more_remote_samples_never_deliver_fewer_until_the_gpus_are_fed() {
        let trainer = Trainer {
            cores: 8.0,
            prep_ms: 2.0,
            receive_ms: 0.5,
        };
        let need = 8_000.0;
        let mut last = 0.0;
        for hosts in 0..=20 {
            let (local, remote) = trainer.fed(need, 500.0 * hosts as f64);
            let delivered = local + remote;
            assert!(
                delivered >= last - 1e-9,
                "{hosts} hosts: {delivered} < {last}"
            );
            assert!(delivered <= need + 1e-9);
            last = delivered;
        }
        assert!(close(last, need));
        // What `share` asks of the hosts is what `fed` needs to reach the GPUs.
        let share = trainer.share(need);
        let (local, remote) = trainer.fed(need, share.remote);
        assert!(close(local + remote, need) && close(local, share.local));
        // Where receiving costs more than preparing, remote samples take from the total.
        let costly = Trainer {
            receive_ms: 3.0,
            ..trainer
        };
        let (l0, r0) = costly.fed(need, 0.0);
        let (l1, r1) = costly.fed(need, 1_000.0);
        assert!(l1 + r1 < l0 + r0);
    }

    /// One rank's client fed by `actors` actors of 40 ms parts and a local preparer of
    /// 60 ms parts, parts of 4 batches, a GPU at 5 ms a batch, 40-batch runs.
    fn client(actors: usize) -> ClientSim {
        ClientSim {
            epoch_batches: 40,
            epochs: 30,
            part_batches: 4,
            parts_per_preparer: 2,
            hedge_factor: 3.0,
            gpu_batch_s: 0.005,
            local_part_s: Some(0.060),
            actors,
            actor_part_s: 0.040,
            spread: Spread {
                cv: 0.2,
                straggler_share: 0.03,
                straggler_slowdown: 10.0,
            },
            rtt_s: 0.000_2,
            connect_s: 0.000_6,
            // Each epoch from its start: what these tests weigh is the window and the
            // hedge (the run started ahead is worked out by hand below).
            ahead: false,
            failure: None,
            seed: 7,
        }
    }

    #[test]
    fn one_preparer_without_spread_worked_out_by_hand() {
        // Parts of one batch each taking 1 s, one after the other; the GPU takes 0.5 s a
        // batch: batches at 1, 2, 3 and 4 s, the last one done at 4.5 s.
        let sim = ClientSim {
            epoch_batches: 4,
            epochs: 1,
            part_batches: 1,
            parts_per_preparer: 2,
            hedge_factor: 3.0,
            gpu_batch_s: 0.5,
            local_part_s: Some(1.0),
            actors: 0,
            actor_part_s: 1.0,
            spread: Spread::NONE,
            rtt_s: 0.0,
            connect_s: 0.0,
            ahead: false,
            failure: None,
            seed: 0,
        };
        let out = sim.run().unwrap();
        assert!(close(out.seconds, 4.5), "{out:?}");
        assert_eq!((out.batches, out.local_batches), (4, 4));
        assert!(close(out.wait_s, 2.5));
        assert_eq!((out.hedges, out.late_copies, out.given_again), (0, 0, 0));
        // An actor instead: it connects (0.3 s), each request and each batch travel half a
        // round trip (0.1 s), and with two parts asked at once it never waits for a
        // request.
        let actor = ClientSim {
            local_part_s: None,
            actors: 1,
            rtt_s: 0.2,
            connect_s: 0.3,
            ..sim
        };
        let out = actor.run().unwrap();
        assert!(close(out.seconds, 0.3 + 0.2 + 4.0 + 0.5), "{out:?}");
        // Two epochs of two batches: the second run starts once the GPU is through with
        // the first run's last batch (3 s), and connects again.
        let two = ClientSim {
            epoch_batches: 2,
            epochs: 2,
            ..actor
        };
        let out = two.run().unwrap();
        assert!(close(out.seconds, 3.0 + 0.3 + 0.2 + 2.0 + 0.5), "{out:?}");
        // The second run started ahead: both of the first run's parts were given at 0.3 s,
        // so the actor connects to the second at 0.6 s and asks its two parts, which it
        // makes after the first run's (done at 2.4 s): its batches reach the client at 3.5
        // and 4.5 s, and the GPU is through at 5 s.
        let ahead = ClientSim { ahead: true, ..two };
        let out = ahead.run().unwrap();
        assert!(close(out.seconds, 5.0), "{out:?}");
        assert_eq!((out.batches, out.late_copies, out.given_again), (4, 0, 0));
    }

    #[test]
    fn a_seed_gives_the_same_run() {
        let a = client(2).run().unwrap();
        assert_eq!(a, client(2).run().unwrap());
        let other = ClientSim {
            seed: 8,
            ..client(2)
        };
        assert_ne!(a, other.run().unwrap());
        assert_eq!(a.batches, 30 * 40);
    }

    #[test]
    fn more_actors_never_deliver_less_until_the_gpu_is_fed() {
        // Batches/s the preparers make together: the local one 4 per 60 ms, each actor 4
        // per 40 ms; the GPU takes 200.
        let made = |actors: usize| 4.0 / 0.060 + actors as f64 * 4.0 / 0.040;
        for seed in 0..4 {
            let rates: Vec<f64> = (0..=8)
                .map(|actors| {
                    let out = ClientSim {
                        seed,
                        ..client(actors)
                    }
                    .run()
                    .unwrap();
                    assert_eq!(out.batches, 30 * 40);
                    out.batches_per_s()
                })
                .collect();
            let best = rates.iter().copied().fold(0.0, f64::max);
            assert!(best <= 200.0 + 1e-9);
            for actors in 1..rates.len() {
                let (before, now) = (rates[actors - 1], rates[actors]);
                if made(actors - 1) < 200.0 {
                    assert!(
                        now >= before,
                        "seed {seed}, {actors} actors: {now:.1} < {before:.1}"
                    );
                } else {
                    // Enough to feed the GPU: what is left is where the few stragglers
                    // fall (about 9 parts in 300), which moves with who makes which part.
                    assert!(now >= 0.9 * best, "seed {seed}, {actors} actors: {rates:?}");
                }
            }
        }
    }

    #[test]
    fn a_straggler_at_the_head_is_hedged() {
        let straggling = Spread {
            cv: 0.1,
            straggler_share: 0.05,
            straggler_slowdown: 20.0,
        };
        let hedged = ClientSim {
            spread: straggling,
            ..client(3)
        };
        let unhedged = ClientSim {
            hedge_factor: f64::INFINITY,
            ..hedged.clone()
        };
        let (on, off) = (hedged.run().unwrap(), unhedged.run().unwrap());
        assert!(on.hedges > 0 && on.late_copies > 0, "{on:?}");
        assert_eq!((off.hedges, off.late_copies), (0, 0));
        assert!(
            on.batches_per_s() > 1.1 * off.batches_per_s(),
            "hedged {on:?}, not {off:?}"
        );
        // Parts of equal length are never late enough to hedge.
        let even = ClientSim {
            spread: Spread::NONE,
            ..client(3)
        };
        assert_eq!(even.run().unwrap().hedges, 0);
    }

    #[test]
    fn a_lost_actor_s_parts_are_made_by_the_others() {
        // Two actors alone, as fast together as the GPU: one lost for a second leaves the
        // other to make its parts.
        let whole = ClientSim {
            local_part_s: None,
            spread: Spread::NONE,
            ..client(2)
        };
        let sim = ClientSim {
            failure: Some(Failure {
                part: 25,
                down_s: 1.0,
            }),
            ..whole.clone()
        };
        let out = sim.run().unwrap();
        assert_eq!(out.batches, 30 * 40, "every batch once");
        assert!(
            out.failed_actor.is_some() && out.given_again >= 1,
            "{out:?}"
        );
        let whole = whole.run().unwrap();
        assert_eq!((whole.failed_actor, whole.given_again), (None, 0));
        // A second at half the GPU's rate is up to half a second more, less the waits at
        // epochs' starts it overlaps.
        assert!(
            out.seconds > whole.seconds + 0.25,
            "{out:?} against {whole:?}"
        );
        // With stragglers too, every batch comes once.
        let straggling = ClientSim {
            local_part_s: Some(0.060),
            spread: client(2).spread,
            ..sim
        };
        let out = straggling.run().unwrap();
        assert_eq!(out.batches, 30 * 40);
        assert!(out.given_again >= 1);
        // The same seed loses the same actor at the same part.
        assert_eq!(out, straggling.run().unwrap());
    }

    #[test]
    fn settings_are_checked() {
        assert!(client(0).validate().is_ok());
        let none = ClientSim {
            local_part_s: None,
            ..client(0)
        };
        assert!(none.run().is_err());
        for bad in [
            ClientSim {
                gpu_batch_s: 0.0,
                ..client(1)
            },
            ClientSim {
                hedge_factor: 0.0,
                ..client(1)
            },
            ClientSim {
                parts_per_preparer: 0,
                ..client(1)
            },
            ClientSim {
                spread: Spread {
                    straggler_share: 1.5,
                    ..Spread::NONE
                },
                ..client(1)
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
