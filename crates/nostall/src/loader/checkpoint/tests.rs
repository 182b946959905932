//! Resuming with settings changed: every sample once, or refused naming the setting.

use std::sync::Arc;

use crate::catalog::Catalog;
use crate::loader::tests::FakePrep;
use crate::loader::{Checkpoint, Loader, LoaderConfig, RunIdentity};
use crate::plan::Shard;
use crate::prep::Pipeline;
use crate::rng::Rng;
use crate::sample::Modality;
use crate::sample::SampleId;
use crate::storage::Memory;

/// The groups of the dataset (as a Parquet file's pages), of uneven lengths: 96 samples
/// of 9 bytes, so that a few hundred bytes for groups keep 1 to 7 of them open.
const LENGTHS: [u32; 12] = [10, 6, 8, 8, 12, 4, 8, 8, 9, 7, 8, 8];
const SAMPLES: usize = 96;

/// What a case sets of what could shape an epoch's order.
#[derive(Debug, Clone)]
struct Settings {
    world: usize,
    batch_size: usize,
    seed: u64,
    shuffle: bool,
    drop_last: bool,
    shard: Shard,
    memory: Option<u64>,
    group_memory: Option<u64>,
    prefetch: usize,
}

/// Each setting a case changes, and whether a resume may then go on (else it must be
/// refused, naming the setting).
const CHANGES: [(&str, bool); 9] = [
    ("memory", true),
    ("group_memory", true),
    ("world_size", true),
    ("prefetch", true),
    ("batch_size", false),
    ("seed", false),
    ("shuffle", false),
    ("drop_last", false),
    ("shard", false),
];

const MEMORY: [Option<u64>; 5] = [None, Some(1200), Some(2000), Some(2800), Some(4000)];
const GROUP_MEMORY: [Option<u64>; 5] = [None, Some(150), Some(250), Some(400), Some(10_000)];

/// One of `values` other than `now`.
fn other<T: PartialEq + Copy>(rng: &mut Rng, values: &[T], now: T) -> T {
    let others: Vec<T> = values.iter().copied().filter(|&v| v != now).collect();
    others[rng.below(others.len() as u64) as usize]
}

impl Settings {
    /// Settings under which an epoch delivers every sample once (no padding, no last
    /// batch dropped): the others are only reached by a change, which is refused.
    fn random(rng: &mut Rng) -> Settings {
        Settings {
            world: 1 + rng.below(4) as usize,
            batch_size: 2 + rng.below(3) as usize,
            seed: rng.below(1000),
            shuffle: rng.below(5) > 0,
            drop_last: false,
            shard: Shard::Pad,
            memory: MEMORY[rng.below(5) as usize],
            group_memory: GROUP_MEMORY[rng.below(5) as usize],
            prefetch: 1 + rng.below(3) as usize,
        }
    }

    /// These settings with `setting` changed.
    fn changed(&self, setting: &str, rng: &mut Rng) -> Settings {
        let mut s = self.clone();
        match setting {
            "memory" => s.memory = other(rng, &MEMORY, s.memory),
            "group_memory" => s.group_memory = other(rng, &GROUP_MEMORY, s.group_memory),
            "world_size" => s.world = other(rng, &[1, 2, 3, 4], s.world),
            "prefetch" => s.prefetch = other(rng, &[1, 2, 3], s.prefetch),
            "batch_size" => s.batch_size = other(rng, &[2, 3, 4], s.batch_size),
            "seed" => s.seed += 1,
            "shuffle" => s.shuffle = !s.shuffle,
            "drop_last" => s.drop_last = !s.drop_last,
            "shard" => s.shard = Shard::Drop,
            _ => unreachable!("{setting}"),
        }
        s
    }

    /// The loader of `rank` over the dataset, read in groups where `grouped`.
    fn loader(&self, rank: usize, grouped: bool) -> Loader {
        let samples: Vec<Vec<u8>> = (0..SAMPLES as u64)
            .map(|id| [&id.to_le_bytes()[..], b"."].concat())
            .collect();
        let mut catalog = Catalog::from_samples(
            "memory",
            Modality::Image,
            Vec::new(),
            (0..SAMPLES).map(|id| (format!("{id}.fake"), None, 9)),
        )
        .unwrap();
        if grouped {
            catalog = catalog.with_groups(LENGTHS.to_vec()).unwrap();
        }
        let mut config = LoaderConfig::new(Pipeline::new(FakePrep::default()));
        let plan = &mut config.plan;
        (plan.rank, plan.world, plan.batch_size) = (rank, self.world, self.batch_size);
        (plan.seed, plan.shuffle) = (self.seed, self.shuffle);
        (plan.drop_last, plan.shard) = (self.drop_last, self.shard);
        (config.memory, config.group_memory) = (self.memory, self.group_memory);
        (config.prep_threads, config.fetch_threads) = (1, 1);
        config.prefetch = self.prefetch;
        config.overlap_epochs = false;
        Loader::new(Arc::new(catalog), Arc::new(Memory::new(samples)), config).unwrap()
    }
}

/// The ids of `epoch`'s batches, `batches` of them at most.
fn ids(epoch: &mut crate::loader::Epoch, batches: usize) -> Vec<SampleId> {
    epoch
        .take(batches)
        .flat_map(|batch| batch.unwrap().ids().to_vec())
        .collect()
}

#[test]
fn a_resume_with_any_setting_changed_is_exact_or_refused_naming_it() {
    let mut rng = Rng::new(50);
    let mut resumed_in_other_groups = 0;
    for case in 0..120 {
        let (setting, goes_on) = CHANGES[case % CHANGES.len()];
        let before = Settings::random(&mut rng);
        let after = before.changed(setting, &mut rng);
        // Every rank delivers `k` whole batches of epoch 1 and saves its state.
        let per_rank = SAMPLES / before.world;
        let k = 1 + rng.below((per_rank / before.batch_size - 1) as u64) as usize;
        let mut delivered = vec![0usize; SAMPLES];
        let mut states: Vec<Checkpoint> = Vec::new();
        for rank in 0..before.world {
            let loader = before.loader(rank, true);
            let mut epoch = loader.epoch(1).unwrap();
            for id in ids(&mut epoch, k) {
                delivered[id as usize] += 1;
            }
            states.push(loader.checkpoint(&epoch));
        }
        // Every rank of the new run resumes from all the states, or from rank 0's alone.
        if rng.below(2) == 0 {
            states.truncate(1);
        }
        let what = format!("case {case}: {setting} changed, {before:?} -> {after:?}");
        for rank in 0..after.world {
            let loader = after.loader(rank, true);
            let mut epoch = match loader.resume_from(&states) {
                Ok(epoch) => epoch,
                Err(e) => {
                    assert!(!goes_on, "{what}: refused ({e})");
                    assert!(e.to_string().contains(setting), "{what}: {e}");
                    break;
                }
            };
            assert!(goes_on, "{what}: resumed");
            let own = (loader.identity().open_groups, loader.identity().groups);
            let dealt = loader.checkpoint(&epoch).identity;
            if (dealt.open_groups, dealt.groups) != own {
                resumed_in_other_groups += 1;
            }
            for id in ids(&mut epoch, usize::MAX) {
                delivered[id as usize] += 1;
            }
        }
        if goes_on {
            // Each sample once, but for the padding that evens out the new ranks.
            let rest = SAMPLES - before.world * k * before.batch_size;
            let padding = match after.world == before.world {
                true => 0,
                false => rest.div_ceil(after.world) * after.world - rest,
            };
            assert!(delivered.iter().all(|&n| n > 0), "{what}: {delivered:?}");
            let repeats: usize = delivered.iter().map(|n| n - 1).sum();
            assert_eq!(repeats, padding, "{what}: {delivered:?}");
        }
    }
    // The memory settings changed the groups kept open in many cases: the epoch went on
    // in the ones it was dealt in.
    assert!(resumed_in_other_groups > 20, "{resumed_in_other_groups}");
}

#[test]
fn a_state_saved_before_the_groups_were_recorded_resumes_only_without_groups() {
    let settings = Settings {
        world: 1,
        memory: Some(1200),
        ..Settings::random(&mut Rng::new(1))
    };
    for grouped in [false, true] {
        let loader = settings.loader(0, grouped);
        let mut epoch = loader.epoch(0).unwrap();
        let first = ids(&mut epoch, 2);
        let mut state = loader.checkpoint(&epoch);
        drop(epoch);
        // As `from_fields` reads a state saved before the two fields existed.
        let fields = state.identity.fields();
        let saved = |name: &str| {
            let field = fields.iter().find(|(n, _)| *n == name)?;
            (!["open_groups", "groups"].contains(&name)).then_some(field.1)
        };
        state.identity = RunIdentity::from_fields(saved).unwrap();
        assert_eq!(state.identity.open_groups, RunIdentity::UNRECORDED);
        match loader.resume_saved(&state) {
            Ok(mut rest) => {
                assert!(!grouped, "a grouped epoch resumed in groups it cannot know");
                let mut all: Vec<SampleId> = first
                    .into_iter()
                    .chain(ids(&mut rest, usize::MAX))
                    .collect();
                all.sort_unstable();
                assert_eq!(all, (0..SAMPLES as u64).collect::<Vec<_>>());
            }
            Err(e) => {
                assert!(grouped, "{e}");
                assert!(e.to_string().contains("identity.open_groups"), "{e}");
            }
        }
    }
}

#[test]
fn groups_a_dataset_does_not_have_are_refused() {
    let settings = Settings {
        memory: Some(1200),
        shuffle: true,
        ..Settings::random(&mut Rng::new(2))
    };
    let loader = settings.loader(0, true);
    let mut epoch = loader.epoch(0).unwrap();
    ids(&mut epoch, 1);
    let saved = loader.checkpoint(&epoch);
    drop(epoch);
    assert!(saved.identity.open_groups > 0);
    for (open_groups, groups) in [
        (saved.identity.open_groups, saved.identity.groups ^ 1),
        (LENGTHS.len() as u64, saved.identity.groups),
        (u64::MAX - 1, saved.identity.groups),
    ] {
        let mut state = saved.clone();
        (state.identity.open_groups, state.identity.groups) = (open_groups, groups);
        let e = loader.resolve(&[state]).unwrap_err().to_string();
        assert!(e.contains("groups this dataset does not have"), "{e}");
    }
}
