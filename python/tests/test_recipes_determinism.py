"""Every operator at once: the same batches for any number of threads, after a mid-epoch
resume, and, under repeated augmentation, for one rank or two (each repeat of a sample
is the same bytes wherever it is prepared)."""

import hashlib

import torch

import nostall
from nostall import ops

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def every_operator():
    """Each declared operator that runs on its own, in a pipeline order the stages allow."""
    return [
        ops.RandomResizedCrop(48, interpolation="bicubic"), ops.RandomHorizontalFlip(),
        ops.ColorJitter(0.4, 0.4, 0.4, 0.1), ops.RandomGrayscale(0.3), ops.GaussianBlur(5, sigma=(0.1, 2.0)),
        ops.RandomInvert(0.2), ops.RandomSolarize(128, p=0.2), ops.RandomPosterize(4, p=0.2),
        ops.RandomAutocontrast(0.3), ops.RandomEqualize(0.3), ops.RandomAdjustSharpness(2.0, p=0.3),
        ops.RandomRotation(15, interpolation="bilinear"), ops.RandomAffine(10, translate=(0.1, 0.1), shear=5),
        ops.RandomApply([ops.AutoAugment()], p=0.5), ops.RandomChoice([ops.RandAugment(), ops.TrivialAugmentWide()]),
        ops.RandomOrder([ops.AugMix(severity=2, mixture_width=2), ops.TimmRandAugment("rand-m9-mstd0.5-inc1")]),
        ops.Normalize(mean=MEAN, std=STD),
        ops.RandomErasing(p=0.3, value="random"), ops.TimmRandomErasing(probability=0.3, mode="pixel", max_count=2),
    ]


def hashes(photos, threads=2, **kwargs):
    kwargs = dict(dict(batch_size=8, seed=11, pipeline=every_operator(), threads=threads), **kwargs)
    loader = nostall.Loader(photos, **kwargs)
    return [hashlib.sha256(x.numpy().tobytes()).hexdigest() for x, _ in loader]


def test_every_operator_gives_the_same_batches_for_any_thread_count(photos):
    one = hashes(photos, threads=1)
    assert len(set(one)) == len(one) == 4
    assert hashes(photos, threads=2) == one
    assert hashes(photos, threads=4) == one


def test_every_operator_resumes_mid_epoch_to_the_same_batches(photos):
    kwargs = dict(batch_size=8, seed=11, pipeline=every_operator(), threads=2)
    whole = hashes(photos)
    loader = nostall.Loader(photos, **kwargs)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    del loader, it
    resumed = nostall.Loader(photos, **kwargs)
    resumed.load_state_dict(state)
    assert [hashlib.sha256(x.numpy().tobytes()).hexdigest() for x, _ in resumed] == whole[1:]


def test_a_repeat_is_the_same_bytes_on_one_rank_or_two(photos):
    """Two repeats, one rank: each drawn sample twice in a row, repeats 0 and 1. Two ranks:
    repeat 0 on rank 0 and repeat 1 on rank 1, at the same places."""
    def samples(**kwargs):
        loader = nostall.Loader(photos, batch_size=8, seed=11, pipeline=every_operator(), threads=2,
                                aug_repeats=2, **kwargs)
        return torch.cat([x.clone() for x, _ in loader])

    one = samples()
    rank0, rank1 = samples(rank=0, world_size=2), samples(rank=1, world_size=2)
    assert len(one) == 32 and len(rank0) == len(rank1) == 16
    assert torch.equal(rank0, one[0::2])
    assert torch.equal(rank1, one[1::2])
    assert not torch.equal(rank0, rank1)
