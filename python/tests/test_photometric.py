"""Operators on pixels against torchvision.transforms.v2 on real photographs.

Each operator runs in nostall on lossless PNGs of the demo photographs (so nostall and the
reference start from the same bytes) with its random choice forced (p=1), and torchvision's
v2 transform runs on the same image as a uint8 tensor. Then the draws: with p < 1, the share
of samples changed is the probability's, each sample decided by its own seed, the same for
any number of threads.
"""

import pytest
import torch
from torchvision.transforms import v2

from nostall import ops
from parity import COUNT, assert_parity, nostall_images, reference_images

SIZE = 96


@pytest.fixture(scope="module")
def pngs(square_pngs):
    return square_pngs(SIZE)


def test_without_operators_nostall_gives_the_decoded_pixels(pngs):
    assert torch.equal(nostall_images(pngs), reference_images(pngs))


@pytest.mark.parametrize(
    "ours, theirs",
    [
        (ops.RandomInvert(p=1.0), v2.RandomInvert(p=1.0)),
        (ops.RandomSolarize(threshold=128, p=1.0), v2.RandomSolarize(threshold=128, p=1.0)),
        (ops.RandomSolarize(threshold=77.5, p=1.0), v2.RandomSolarize(threshold=77.5, p=1.0)),
        (ops.RandomPosterize(bits=3, p=1.0), v2.RandomPosterize(bits=3, p=1.0)),
        (ops.RandomPosterize(bits=8, p=1.0), v2.RandomPosterize(bits=8, p=1.0)),
        (ops.RandomGrayscale(p=1.0), v2.RandomGrayscale(p=1.0)),
        (ops.RandomVerticalFlip(p=1.0), v2.RandomVerticalFlip(p=1.0)),
    ],
    ids=repr,
)
def test_each_operator_matches_torchvision_v2(pngs, ours, theirs):
    got = nostall_images(pngs, ours)
    want = reference_images(pngs, theirs)
    assert_parity(got, want, repr(ours))
    # These are exact: integer kernels, or torchvision's float luma truncated alike.
    assert torch.equal(got, want), repr(ours)


def test_operators_compose_in_the_order_written(pngs):
    pipeline = [ops.RandomGrayscale(p=1.0), ops.RandomSolarize(threshold=100, p=1.0),
                ops.RandomPosterize(bits=4, p=1.0), ops.RandomInvert(p=1.0)]
    reference = v2.Compose([v2.RandomGrayscale(p=1.0), v2.RandomSolarize(threshold=100, p=1.0),
                            v2.RandomPosterize(bits=4, p=1.0), v2.RandomInvert(p=1.0)])
    assert torch.equal(nostall_images(pngs, *pipeline), reference_images(pngs, reference))


def test_each_sample_draws_its_own_choice_the_same_for_any_thread_count(pngs):
    original = reference_images(pngs)
    inverted = nostall_images(pngs, ops.RandomInvert(p=0.5), threads=1)
    changed = [not torch.equal(a, b) for a, b in zip(inverted, original)]
    for i, flipped in enumerate(changed):
        assert torch.equal(inverted[i], 255 - original[i] if flipped else original[i])
    assert 0 < sum(changed) < COUNT  # 32 fair draws: all alike has odds of 2^-31
    for threads in (2, 4):
        assert torch.equal(nostall_images(pngs, ops.RandomInvert(p=0.5), threads=threads), inverted)
    # Another seed, other draws.
    assert not torch.equal(nostall_images(pngs, ops.RandomInvert(p=0.5), seed=1), inverted)
    # Two operators with the same probability draw apart: one's choice is not the other's.
    both = nostall_images(pngs, ops.RandomInvert(p=0.5), ops.RandomPosterize(bits=1, p=0.5), threads=1)
    posterized = [not torch.equal(b, a if not c else 255 - a) for a, b, c in zip(original, both, changed)]
    assert posterized != changed


def test_each_sample_is_flipped_upside_down_or_not_by_its_own_draw(pngs):
    original = reference_images(pngs)
    flipped = nostall_images(pngs, ops.RandomVerticalFlip(p=0.5), threads=1)
    changed = [not torch.equal(a, b) for a, b in zip(flipped, original)]
    for i, upside_down in enumerate(changed):
        assert torch.equal(flipped[i], original[i].flip(-2) if upside_down else original[i])
    assert 0 < sum(changed) < COUNT  # 32 fair draws: all alike has odds of 2^-31
    for threads in (2, 4):
        assert torch.equal(nostall_images(pngs, ops.RandomVerticalFlip(p=0.5), threads=threads), flipped)
    never = nostall_images(pngs, ops.RandomVerticalFlip(p=0.0), threads=2)
    assert torch.equal(never, original)
