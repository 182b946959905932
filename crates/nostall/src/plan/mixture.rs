//! Several datasets mixed by weight: the order of a mixture's epoch, as Mosaic's streams
//! with proportions define it.
//!
//! The sources are numbered into one id space (source `s`'s sample `k` is
//! `offset(s) + k`, the sources one after another), so the rest of the plan (sharding
//! over ranks, batches, resume) works on a mixture as on one dataset.
//!
//! An epoch of the mixture has [`Mixture::epoch_len`] samples, of which source `s` gives
//! a fixed [`count`](Mixture::counts) (its weight's share, rounded by largest remainder):
//! the shares hold exactly in every epoch, not only on average. Each source is read as
//! its own endless stream of passes, each pass a permutation of the source keyed by
//! (seed, source, pass); epoch `e` takes the source's stream from `e · count` on. A small
//! source therefore repeats (several passes an epoch), a large one is sampled (a pass
//! spans several epochs), and no sample of a source comes twice before its pass ends.
//!
//! Which of an epoch's places each source fills is a seeded shuffle of the places; a
//! source's samples fill its places in its stream's order, so its passes stay whole in
//! delivery order too. Everything is a pure function of (seed, epoch): a resumed or
//! re-sharded epoch computes the same order, and no source keeps a cursor in the state.

use super::Blocks;
use crate::error::{Error, Result};
use crate::rng::{derive, Rng};
use crate::sample::SampleId;

/// One source of a mixture: how many samples it has and its weight.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Source {
    /// Its number of samples (at least 1).
    pub len: usize,
    /// Its weight (positive and finite; weights need not sum to 1).
    pub weight: f64,
}

/// The order of a mixture's epochs (module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct Mixture {
    sources: Vec<Source>,
    offsets: Vec<u64>,
    counts: Vec<usize>,
    /// Each source's groups read as one (a Parquet file's row groups), if it has them:
    /// its passes then keep a few groups open ([`Blocks`]) instead of being a plain
    /// permutation.
    blocks: Vec<Option<Blocks>>,
}

// Weights are checked finite in `Mixture::new`, so equality is total.
impl Eq for Mixture {}

impl Mixture {
    /// A mixture of `sources`, `epoch_len` samples an epoch (by default the sources'
    /// lengths summed).
    ///
    /// # Errors
    ///
    /// No source, an empty source, a weight not positive and finite, or an epoch of no
    /// sample.
    pub fn new(sources: &[Source], epoch_len: Option<usize>) -> Result<Mixture> {
        let bad = |message: String| Err(Error::Config(format!("mixture: {message}")));
        if sources.is_empty() {
            return bad("give at least one source".into());
        }
        for (s, source) in sources.iter().enumerate() {
            if source.len == 0 {
                return bad(format!("source {s} has no sample"));
            }
            if !(source.weight.is_finite() && source.weight > 0.0) {
                return bad(format!(
                    "source {s}'s weight {} must be positive and finite",
                    source.weight
                ));
            }
        }
        let epoch_len = epoch_len.unwrap_or_else(|| sources.iter().map(|s| s.len).sum());
        if epoch_len == 0 {
            return bad("an epoch needs at least one sample".into());
        }
        let mut offsets = Vec::with_capacity(sources.len());
        let mut next = 0u64;
        for source in sources {
            offsets.push(next);
            next += source.len as u64;
        }
        Ok(Mixture {
            sources: sources.to_vec(),
            offsets,
            counts: largest_remainder(sources, epoch_len),
            blocks: vec![None; sources.len()],
        })
    }

    /// Samples an epoch.
    pub fn epoch_len(&self) -> usize {
        self.counts.iter().sum()
    }

    /// The mixture with source `s` read in groups (`blocks`: its groups' lengths, adding up
    /// to its samples, and how many are open at once): each of its passes keeps a few
    /// groups open and reads each once, as [`Blocks`] orders one dataset.
    ///
    /// # Errors
    ///
    /// No source `s`, or groups that do not add up to its samples.
    pub fn with_blocks(mut self, s: usize, blocks: Blocks) -> Result<Mixture> {
        let total: u64 = blocks.lengths.iter().map(|&l| u64::from(l)).sum();
        match self.sources.get(s) {
            Some(source) if total == source.len as u64 => {
                self.blocks[s] = Some(blocks);
                Ok(self)
            }
            _ => Err(Error::Config(format!(
                "mixture: groups of {total} samples for source {s}"
            ))),
        }
    }

    /// Samples of every source together: the size of the mixture's id space.
    pub fn samples(&self) -> usize {
        self.sources.iter().map(|s| s.len).sum()
    }

    /// The sources.
    pub fn sources(&self) -> &[Source] {
        &self.sources
    }

    /// The identity of the mixture for a saved position: its sources' lengths and how
    /// many each gives an epoch.
    pub fn digest(&self) -> u64 {
        let parts = self.sources.iter().zip(&self.counts).zip(&self.blocks);
        parts.fold(self.sources.len() as u64, |h, ((s, &c), blocks)| {
            let grouped = blocks.as_ref().map_or(0, |b| {
                let lengths = b.lengths.iter();
                lengths.fold(b.open as u64, |h, &l| derive(&[h, l.into()]))
            });
            derive(&[h, s.len as u64, c as u64, grouped])
        })
    }

    /// How many samples each source gives an epoch.
    pub fn counts(&self) -> &[usize] {
        &self.counts
    }

    /// The source an id of the mixture belongs to, and its sample there.
    pub fn source_of(&self, id: SampleId) -> Option<(usize, u64)> {
        let s = self
            .offsets
            .partition_point(|&offset| offset <= id)
            .checked_sub(1)?;
        let k = id - self.offsets[s];
        (k < self.sources[s].len as u64).then_some((s, k))
    }

    /// Which pass of source `s` epoch `epoch` starts in, and where in it: the source's
    /// state at the epoch's start, for its metrics (`epoch · count` samples of its stream
    /// read before).
    pub fn pass_at(&self, s: usize, epoch: u64) -> (u64, u64) {
        let read = epoch.saturating_mul(self.counts[s] as u64);
        let len = self.sources[s].len as u64;
        (read / len, read % len)
    }

    /// The global order of `epoch`: [`epoch_len`](Self::epoch_len) ids of the mixture's
    /// id space. Without `shuffle`, each source's places come together in source order
    /// and its passes in catalog order.
    pub fn order(&self, seed: u64, epoch: u64, shuffle: bool) -> Vec<SampleId> {
        let mut places: Vec<u32> = self
            .counts
            .iter()
            .enumerate()
            .flat_map(|(s, &count)| std::iter::repeat_n(s as u32, count))
            .collect();
        if shuffle {
            Rng::new(derive(&[seed, epoch, 0x4d49_5850])).shuffle(&mut places);
        }
        let mut streams: Vec<Stream> = (0..self.sources.len())
            .map(|s| Stream::at(self, s, seed, epoch, shuffle))
            .collect();
        places
            .into_iter()
            .map(|s| {
                let s = s as usize;
                self.offsets[s] + streams[s].next()
            })
            .collect()
    }
}

/// Source `s`'s endless stream of passes, read from a position on.
struct Stream {
    source: usize,
    len: u64,
    seed: u64,
    shuffle: bool,
    pass: u64,
    at: u64,
    order: Vec<SampleId>,
    blocks: Option<Blocks>,
}

impl Stream {
    fn at(mixture: &Mixture, s: usize, seed: u64, epoch: u64, shuffle: bool) -> Stream {
        let (pass, at) = mixture.pass_at(s, epoch);
        let mut stream = Stream {
            source: s,
            len: mixture.sources[s].len as u64,
            seed,
            shuffle,
            pass,
            at,
            order: Vec::new(),
            blocks: mixture.blocks[s].clone(),
        };
        stream.load();
        stream
    }

    /// The current pass's order: a permutation, or groups kept together.
    fn load(&mut self) {
        self.order = (0..self.len).collect();
        if self.shuffle {
            let mut rng = Rng::new(derive(&[
                self.seed,
                self.source as u64,
                self.pass,
                0x5041_5353,
            ]));
            // `with_blocks` checked the groups against the source.
            match self
                .blocks
                .as_ref()
                .map(|b| b.order(&mut rng, self.len as usize, 1))
            {
                Some(Ok(grouped)) => self.order = grouped,
                _ => rng.shuffle(&mut self.order),
            }
        }
    }

    fn next(&mut self) -> SampleId {
        if self.at == self.len {
            (self.pass, self.at) = (self.pass + 1, 0);
            self.load();
        }
        let id = self.order[self.at as usize];
        self.at += 1;
        id
    }
}

/// `total` shared by the sources' weights, each share rounded down and the rest given one
/// each to the largest remainders (ties to the earlier source).
fn largest_remainder(sources: &[Source], total: usize) -> Vec<usize> {
    let sum: f64 = sources.iter().map(|s| s.weight).sum();
    let exact: Vec<f64> = sources
        .iter()
        .map(|s| s.weight / sum * total as f64)
        .collect();
    let mut counts: Vec<usize> = exact.iter().map(|x| x.floor() as usize).collect();
    let given: usize = counts.iter().sum();
    let mut by_remainder: Vec<usize> = (0..sources.len()).collect();
    by_remainder.sort_by(|&a, &b| {
        let (ra, rb) = (exact[a] - exact[a].floor(), exact[b] - exact[b].floor());
        rb.total_cmp(&ra).then(a.cmp(&b))
    });
    for &s in by_remainder
        .iter()
        .cycle()
        .take(total.saturating_sub(given))
    {
        counts[s] += 1;
    }
    counts
}

#[cfg(test)]
mod tests;
