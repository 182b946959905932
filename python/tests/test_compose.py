"""RandomApply, RandomChoice and RandomOrder: lists of operators as arguments."""

import pytest
import torch
from torchvision.transforms import v2

import nostall
from nostall import ops
from parity import COUNT, nostall_images, reference_images

SIZE = 64


@pytest.fixture(scope="module")
def pngs(square_pngs):
    return square_pngs(SIZE)


def test_lists_of_operators_are_arguments_in_python_and_in_text():
    apply = ops.RandomApply([ops.RandomInvert(p=1.0), ops.RandomPosterize(bits=2, p=1.0)], p=0.3)
    assert apply.transforms == [ops.RandomInvert(p=1.0), ops.RandomPosterize(bits=2, p=1.0)]
    assert apply.p == 0.3
    assert eval(repr(apply), vars(ops)) == apply
    choice = ops.RandomChoice([ops.RandomInvert(), ops.RandomGrayscale()], p=[2, 1])
    assert choice.p == (2.0, 1.0) and ops.RandomChoice([ops.RandomInvert()]).p is None
    nested = ops.RandomOrder([ops.RandomApply([ops.RandomInvert(1.0)]), choice])
    assert eval(repr(nested), vars(ops)) == nested
    # Applied or not, the batch canvas would be there only sometimes (a size that
    # varies is taken: an operator after may fix it, test_detection_detr.py).
    with pytest.raises(nostall.ConfigError, match="RandomApply: transforms places the image on a canvas"):
        ops.RandomApply([ops.RandomShortestSize([8], max_size=16)])
    with pytest.raises(nostall.ConfigError, match="mixes geometric operators"):
        ops.RandomChoice([ops.RandomHorizontalFlip(), ops.RandomInvert()])
    with pytest.raises(nostall.ConfigError, match="RandomChoice: p has 1 weights for 2"):
        ops.RandomChoice([ops.RandomInvert(), ops.RandomGrayscale()], p=[1])
    with pytest.raises(nostall.ConfigError, match="RandomChoice: transforms is empty"):
        ops.RandomChoice([])


def test_certain_compositions_match_torchvision(pngs):
    always = ops.RandomApply([ops.RandomGrayscale(p=1.0), ops.RandomSolarize(threshold=90, p=1.0)], p=1.0)
    theirs = v2.RandomApply([v2.RandomGrayscale(p=1.0), v2.RandomSolarize(threshold=90, p=1.0)], p=1.0)
    assert torch.equal(nostall_images(pngs, always), reference_images(pngs, theirs))
    never = ops.RandomApply([ops.RandomInvert(p=1.0)], p=0.0)
    assert torch.equal(nostall_images(pngs, never), nostall_images(pngs))
    one = ops.RandomChoice([ops.RandomInvert(p=1.0), ops.RandomGrayscale(p=1.0)], p=[0, 1])
    assert torch.equal(nostall_images(pngs, one), reference_images(pngs, v2.RandomGrayscale(p=1.0)))


def test_each_sample_draws_which_and_in_what_order(pngs):
    original = nostall_images(pngs)
    inverted, gray = 255 - original, reference_images(pngs, v2.RandomGrayscale(p=1.0))
    chosen = nostall_images(pngs, ops.RandomChoice([ops.RandomInvert(p=1.0), ops.RandomGrayscale(p=1.0)]))
    which = []
    for got, inv, g in zip(chosen, inverted, gray):
        assert torch.equal(got, inv) or torch.equal(got, g)
        which.append(torch.equal(got, inv))
    assert 0 < sum(which) < COUNT
    # Solarize then invert differs from invert then solarize: each order shows up.
    pair = [ops.RandomSolarize(threshold=128, p=1.0), ops.RandomInvert(p=1.0)]
    ordered = nostall_images(pngs, ops.RandomOrder(pair), threads=1)
    first = reference_images(pngs, v2.Compose([v2.RandomSolarize(threshold=128, p=1.0), v2.RandomInvert(p=1.0)]))
    second = reference_images(pngs, v2.Compose([v2.RandomInvert(p=1.0), v2.RandomSolarize(threshold=128, p=1.0)]))
    orders = []
    for got, a, b in zip(ordered, first, second):
        assert torch.equal(got, a) or torch.equal(got, b)
        orders.append(torch.equal(got, a))
    assert 0 < sum(orders) < COUNT
    for threads in (2, 4):
        assert torch.equal(nostall_images(pngs, ops.RandomOrder(pair), threads=threads), ordered)
