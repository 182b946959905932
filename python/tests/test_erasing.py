"""RandomErasing: torchvision.transforms.v2's, on the delivered (normalised) sample."""

import math

import numpy as np
import pytest

import nostall
from nostall import ops
from parity import ks_statistic

SIZE = 64
IMAGENET = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))


def batch(photos, *tail, threads=2, dtype="float32", layout="CHW", seed=0):
    loader = nostall.Loader(photos, batch_size=32, shuffle=False, seed=seed, threads=threads, dtype=dtype,
                            layout=layout, output="numpy",
                            pipeline=[ops.Resize(SIZE), ops.CenterCrop(SIZE), *tail])
    images, _ = next(iter(loader))
    return np.array(images)


def test_the_rectangle_has_torchvisions_size_and_the_value(photos):
    plain = batch(photos, ops.Normalize(**IMAGENET))
    # Pinned area and ratio: torchvision's h = round(sqrt(area * ratio)), w = round(sqrt(area / ratio)).
    erasing = ops.RandomErasing(p=1.0, scale=(0.1, 0.1), ratio=(0.5, 0.5), value=(1.5, -2.0, 3.0))
    erased = batch(photos, ops.Normalize(**IMAGENET), erasing)
    h = round(math.sqrt(SIZE * SIZE * 0.1 * 0.5))
    w = round(math.sqrt(SIZE * SIZE * 0.1 / 0.5))
    tops, lefts = [], []
    for before, after in zip(plain, erased):
        changed = np.argwhere((before != after).any(axis=0))
        (top, left), (bottom, right) = changed.min(axis=0), changed.max(axis=0)
        assert (bottom - top + 1, right - left + 1) == (h, w)
        region = after[:, top:top + h, left:left + w]
        for c, v in enumerate((1.5, -2.0, 3.0)):
            assert (region[c] == np.float32(v)).all()
        outside = np.ones((SIZE, SIZE), bool)
        outside[top:top + h, left:left + w] = False
        np.testing.assert_array_equal(after[:, outside], before[:, outside])
        tops.append(top)
        lefts.append(left)
    # Places drawn per sample, over the whole range.
    assert len(set(zip(tops, lefts))) > 20 and max(tops) > (SIZE - h) // 2 and min(tops) < (SIZE - h) // 2


def test_noise_the_same_for_any_thread_count_and_layout(photos):
    erasing = ops.RandomErasing(p=1.0, scale=(0.2, 0.2), ratio=(1.0, 1.0), value="random")
    one = batch(photos, ops.Normalize(**IMAGENET), erasing, threads=1)
    for threads in (2, 4):
        assert np.array_equal(one, batch(photos, ops.Normalize(**IMAGENET), erasing, threads=threads))
    hwc = batch(photos, ops.Normalize(**IMAGENET), erasing, layout="HWC")
    assert np.array_equal(hwc, one.transpose(0, 2, 3, 1))
    plain = batch(photos, ops.Normalize(**IMAGENET))
    noise = one[one != plain]
    side = round(math.sqrt(SIZE * SIZE * 0.2))
    assert noise.size == 32 * 3 * side * side
    assert abs(noise.mean()) < 0.02 and abs(noise.std() - 1) < 0.02  # standard normal


def test_the_probability_and_uint8(photos):
    plain = batch(photos, dtype="uint8")
    half = batch(photos, ops.RandomErasing(p=0.5, value=7), dtype="uint8")
    erased = [not np.array_equal(a, b) for a, b in zip(plain, half)]
    assert 0 < sum(erased) < 32
    for a, b, e in zip(plain, half, erased):
        if e:
            assert set(np.unique(b[a != b])) == {7}


def test_erasing_goes_last_and_checks_its_arguments(photos):
    with pytest.raises(nostall.ConfigError, match="Normalize follows RandomErasing"):
        batch(photos, ops.RandomErasing(), ops.Normalize(**IMAGENET))
    with pytest.raises(nostall.ConfigError, match="needs float32"):
        batch(photos, ops.RandomErasing(value="random"), dtype="uint8")
    with pytest.raises(nostall.ConfigError, match="RandomErasing: scale"):
        ops.RandomErasing(scale=(0.5, 1.5))
    with pytest.raises(nostall.ConfigError, match="RandomErasing: value"):
        ops.RandomErasing(value="pixels")
    assert ops.RandomErasing(value=[0.5]).value == 0.5
    assert ops.RandomErasing(value="random").value == "random"
    assert eval(repr(ops.RandomErasing(value=(1, 2, 3))), vars(ops)) == ops.RandomErasing(value=(1, 2, 3))


def test_the_rectangles_are_drawn_as_torchvision_draws_them(photos):
    """The erased rectangles' heights and widths over 10 016 draws (32 photographs, 313
    epochs) against torchvision's ``make_params`` over as many: two-sample
    Kolmogorov–Smirnov statistics under the 0.1% critical value."""
    import torch
    from torchvision.transforms import v2

    plain = batch(photos, dtype="uint8")
    loader = nostall.Loader(photos, batch_size=32, shuffle=False, seed=3, dtype="uint8", output="numpy",
                            pipeline=[ops.Resize(SIZE), ops.CenterCrop(SIZE),
                                      ops.RandomErasing(p=1.0, value=(1, 2, 3))])
    ours = []
    for epoch in range(313):
        loader.set_epoch(epoch)
        for images, _ in loader:
            for before, image in zip(plain, np.array(images)):
                # The rectangle: what changed (a dark photograph may hold (1, 2, 3) itself).
                changed = np.argwhere((image != before).any(axis=0))
                if len(changed) == 0:
                    ours.append((0, 0))
                    continue
                (top, left), (bottom, right) = changed.min(axis=0), changed.max(axis=0)
                ours.append((bottom - top + 1, right - left + 1))
    torch.manual_seed(0)
    reference = v2.RandomErasing(p=1.0, value=0)
    image = torch.zeros(3, SIZE, SIZE, dtype=torch.uint8)
    theirs = []
    for _ in range(len(ours)):
        params = reference.make_params([image])
        theirs.append((params["h"], params["w"]) if params["v"] is not None else (0, 0))

    n = len(ours)
    critical = 1.95 * math.sqrt(2 / n)
    for axis in (0, 1):
        statistic = ks_statistic([o[axis] for o in ours], [t[axis] for t in theirs])
        assert statistic < critical, (axis, statistic, critical)
