"""Repeated augmentation (`aug_repeats=`): each sample drawn into the epoch several times,
as DeiT's and torchvision's `RASampler` deal them, each repeat its own augmentation."""

import collections

import pytest
import torch

import nostall
from nostall import ops

PIPELINE = [ops.RandomResizedCrop(32), ops.RandomHorizontalFlip(), ops.ColorJitter(0.4, 0.4, 0.4),
            ops.Normalize(mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))]


def epoch(photos, threads=2, **kwargs):
    loader = nostall.Loader(photos, batch_size=8, pipeline=PIPELINE, seed=4, threads=threads, **kwargs)
    ids, images = [], []
    for x, _ in loader:
        ids.extend(loader.last_ids)
        images.append(x.clone())
    return ids, torch.cat(images)


def test_each_sample_comes_in_repeats_each_its_own_augmentation(photos):
    ids, images = epoch(photos, aug_repeats=3)
    # 32 photographs, under 256: an epoch of 32 samples on one rank, as without repeats.
    assert len(ids) == 32
    counts = collections.Counter(ids)
    # Three in a row of each drawn sample, the last cut short by the epoch's end: 10 x 3 + 2.
    assert sorted(counts.values()) == [2] + [3] * 10
    for i in range(0, 30, 3):
        assert ids[i] == ids[i + 1] == ids[i + 2]
        # The same photograph, three augmentations.
        assert not torch.equal(images[i], images[i + 1]) and not torch.equal(images[i + 1], images[i + 2])


def test_repeats_go_to_consecutive_ranks_and_nothing_is_delivered_twice(photos):
    world = 2
    per_rank = [epoch(photos, aug_repeats=2, rank=r, world_size=world)[0] for r in range(world)]
    assert [len(ids) for ids in per_rank] == [16, 16]
    # With two ranks and two repeats, each drawn sample goes once to each rank.
    assert per_rank[0] == per_rank[1]
    assert len(set(per_rank[0])) == 16


def test_the_same_batches_for_any_number_of_threads_and_after_resume(photos):
    ids, one = epoch(photos, threads=1, aug_repeats=3)
    for threads in (2, 4):
        assert torch.equal(epoch(photos, threads=threads, aug_repeats=3)[1], one)
    kwargs = dict(batch_size=8, pipeline=PIPELINE, seed=4, threads=2, aug_repeats=3)
    loader = nostall.Loader(photos, **kwargs)
    it = iter(loader)
    next(it)
    next(it)
    state = loader.state_dict()
    del loader, it
    resumed = nostall.Loader(photos, **kwargs)
    resumed.load_state_dict(state)
    rest = torch.cat([x.clone() for x, _ in resumed])
    assert torch.equal(rest, one[16:])


def test_without_repeats_the_batches_are_as_before(photos):
    assert torch.equal(epoch(photos)[1], epoch(photos, aug_repeats=1)[1])


@pytest.mark.parametrize("kwargs,says", [
    (dict(aug_repeats=0), "aug_repeats"),
    (dict(aug_repeats=17), "aug_repeats"),
    (dict(aug_repeats=2, share="auto"), "share"),
], ids=["zero", "too-many", "share"])
def test_bad_repeats_are_config_errors(photos, kwargs, says):
    with pytest.raises(nostall.ConfigError, match=says):
        nostall.Loader(photos, batch_size=8, **kwargs)
