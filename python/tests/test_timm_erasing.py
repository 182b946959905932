"""TimmRandomErasing: timm's RandomErasing (timm.data.random_erasing), on the delivered
(normalised) sample.

Python's ``random`` and nostall's generator differ, so the draws are compared by their
distributions (two-sample Kolmogorov–Smirnov statistics against timm's own ``_erase``, seeded)
and the pinned cases by timm's exact arithmetic."""

import math
import random

import numpy as np
import pytest

import nostall
from nostall import ops
from parity import KS_001, ks_statistic

# Not square, so that a height taken for a width shows.
HEIGHT, WIDTH = 48, 64
IMAGENET = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))


def loader(photos, *tail, threads=2, dtype="float32", layout="CHW", seed=0):
    return nostall.Loader(photos, batch_size=32, shuffle=False, seed=seed, threads=threads, dtype=dtype,
                          layout=layout, output="numpy",
                          pipeline=[ops.Resize(WIDTH), ops.CenterCrop((HEIGHT, WIDTH)), *tail])


def batch(photos, *tail, **kwargs):
    images, _ = next(iter(loader(photos, *tail, **kwargs)))
    return np.array(images)


def epochs(photos, erasing, count, seed=3):
    """Pairs (normalised sample, the same erased) over `count` epochs of the 32 photographs."""
    plain = batch(photos, ops.Normalize(**IMAGENET))
    erased = loader(photos, ops.Normalize(**IMAGENET), erasing, seed=seed)
    for epoch in range(count):
        erased.set_epoch(epoch)
        for images, _ in erased:
            yield from zip(plain, np.array(images))


def box(changed):
    """(top, left, height, width) of the True cells of a 2-D mask, or None."""
    cells = np.argwhere(changed)
    if len(cells) == 0:
        return None
    (top, left), (bottom, right) = cells.min(axis=0), cells.max(axis=0)
    return int(top), int(left), int(bottom - top + 1), int(right - left + 1)




def timm_erasing(seed, **kwargs):
    """timm's RandomErasing on the CPU, Python's and torch's generators seeded."""
    import torch
    from timm.data.random_erasing import RandomErasing

    random.seed(seed)
    torch.manual_seed(seed)
    return RandomErasing(device="cpu", **kwargs)


def test_pinned_draws_give_timms_rectangle_and_the_modes_values(photos):
    plain = batch(photos, ops.Normalize(**IMAGENET))
    # min_area == max_area and max_aspect == min_aspect: the size timm computes,
    # h = int(round(sqrt(target_area * aspect))), w = int(round(sqrt(target_area / aspect))).
    target_area = random.Random(0).uniform(0.1, 0.1) * HEIGHT * WIDTH / 1
    aspect = math.exp(random.Random(0).uniform(math.log(0.5), math.log(0.5)))
    h, w = int(round(math.sqrt(target_area * aspect))), int(round(math.sqrt(target_area / aspect)))
    assert (h, w) == (12, 25)
    colours = []
    for mode in ("const", "rand", "pixel"):
        erasing = ops.TimmRandomErasing(probability=1.0, min_area=0.1, max_area=0.1, min_aspect=0.5,
                                        max_aspect=0.5, mode=mode)
        erased = batch(photos, ops.Normalize(**IMAGENET), erasing)
        tops = []
        for before, after in zip(plain, erased):
            top, left, bh, bw = box((before != after).any(axis=0))
            assert (bh, bw) == (h, w), mode
            region = after[:, top:top + h, left:left + w]
            if mode == "const":
                assert (region == 0).all()
            elif mode == "rand":
                # One value per channel over the rectangle.
                assert (region == region[:, :1, :1]).all()
                colours.extend(region[:, 0, 0])
            else:
                assert len(np.unique(region)) == region.size
            outside = np.ones((HEIGHT, WIDTH), bool)
            outside[top:top + h, left:left + w] = False
            np.testing.assert_array_equal(after[:, outside], before[:, outside])
            tops.append(top)
        # Placed per sample, over the range.
        assert len(set(tops)) > 10
        if mode == "pixel":
            noise = (erased[erased != plain]).astype(np.float64)
            assert noise.size == 32 * 3 * h * w
            assert abs(noise.mean()) < 0.03 and abs(noise.std() - 1) < 0.03
            # Standard normal: the statistic against its CDF under the 0.1% critical value.
            ordered = np.sort(noise)
            cdf = 0.5 * (1 + np.vectorize(math.erf)(ordered / math.sqrt(2)))
            n = len(ordered)
            statistic = max((np.arange(1, n + 1) / n - cdf).max(), (cdf - np.arange(n) / n).max())
            assert statistic < KS_001 / math.sqrt(n), statistic
    # 'rand': the 96 channel values differ and look standard normal.
    assert len(set(colours)) == 96 and abs(np.mean(colours)) < 0.5 and 0.6 < np.std(colours) < 1.4


def test_the_rectangles_are_drawn_as_timm_draws_them(photos):
    """Area, aspect ratio, height, width and place of the rectangles over 10 016 draws
    (32 photographs, 313 epochs) against timm's ``_erase`` over as many: two-sample
    Kolmogorov–Smirnov statistics under the 0.1% critical value."""
    import torch

    ours = []
    for before, after in epochs(photos, ops.TimmRandomErasing(probability=1.0), 313):
        ours.append(box((before != after).any(axis=0)))
    # timm's, on ones: its const mode erases to zeros, which shows the rectangle.
    reference = timm_erasing(0, probability=1.0)
    theirs = []
    for _ in range(len(ours)):
        image = torch.ones(3, HEIGHT, WIDTH)
        reference(image)
        theirs.append(box((image == 0).all(dim=0).numpy()))
    n = len(ours)
    assert n >= 10_000
    # Where no try fits, nothing is erased: as often in both.
    assert abs(sum(b is None for b in ours) - sum(b is None for b in theirs)) < 0.01 * n
    ours, theirs = [b for b in ours if b], [b for b in theirs if b]
    critical = KS_001 * math.sqrt((len(ours) + len(theirs)) / (len(ours) * len(theirs)))
    measures = {
        "top": lambda b: b[0],
        "left": lambda b: b[1],
        "height": lambda b: b[2],
        "width": lambda b: b[3],
        "area": lambda b: b[2] * b[3],
        "aspect": lambda b: b[2] / b[3],
    }
    statistics = {name: ks_statistic([f(b) for b in ours], [f(b) for b in theirs]) for name, f in measures.items()}
    print(f"KS statistics (critical {critical:.4f}):", {k: round(float(v), 4) for k, v in statistics.items()})
    for name, statistic in statistics.items():
        assert statistic < critical, (name, statistic, critical)


def test_the_count_is_drawn_as_timm_draws_it(photos):
    """min_count=1, max_count=3 (timm's re_count=3): the rectangles seen, each of its own colour
    in 'rand' mode (one may hide another), over 10 016 samples against timm's."""
    import torch

    erasing = ops.TimmRandomErasing(probability=1.0, mode="rand", min_count=1, max_count=3)
    ours = []
    for before, after in epochs(photos, erasing, 313, seed=5):
        changed = (before != after).any(axis=0)
        ours.append(len(np.unique(after[:, changed].T, axis=0)))
    reference = timm_erasing(1, probability=1.0, mode="rand", min_count=1, max_count=3)
    theirs = []
    for _ in range(len(ours)):
        image = torch.zeros(3, HEIGHT, WIDTH)
        reference(image)
        changed = (image != 0).any(dim=0)
        theirs.append(len(torch.unique(image[:, changed].T, dim=0)))
    n = len(ours)
    statistic = ks_statistic(ours, theirs)
    print(f"count KS statistic {statistic:.4f} (critical {KS_001 * math.sqrt(2 / n):.4f}),",
          "ours", np.bincount(ours), "timm's", np.bincount(theirs))
    assert statistic < KS_001 * math.sqrt(2 / n)
    # Uniform over 1..3, up to the few hidden or that fit nowhere.
    shares = np.bincount(ours, minlength=4) / n
    assert shares[0] < 0.02 and all(0.25 < s < 0.4 for s in shares[1:]), shares


def test_the_same_for_any_thread_count_and_layout(photos):
    erasing = ops.TimmRandomErasing(probability=1.0, mode="pixel", max_count=3)
    one = batch(photos, ops.Normalize(**IMAGENET), erasing, threads=1)
    for threads in (2, 4):
        assert np.array_equal(one, batch(photos, ops.Normalize(**IMAGENET), erasing, threads=threads))
    hwc = batch(photos, ops.Normalize(**IMAGENET), erasing, layout="HWC")
    assert np.array_equal(hwc, one.transpose(0, 2, 3, 1))
    assert not np.array_equal(one, batch(photos, ops.Normalize(**IMAGENET), erasing, seed=1))


def test_the_probability_and_uint8(photos):
    plain = batch(photos, dtype="uint8")
    erased = [not np.array_equal(a, b)
              for epoch in range(10)
              for a, b in zip(plain, batch(photos, ops.TimmRandomErasing(), dtype="uint8", seed=epoch))]
    assert 0.4 < np.mean(erased) < 0.6
    # 'const' erases to zeros, in uint8 too.
    always = batch(photos, ops.TimmRandomErasing(probability=1.0), dtype="uint8")
    for a, b in zip(plain, always):
        assert set(np.unique(b[a != b])) == {0}


def test_arguments_are_timms_and_checked(photos):
    erasing = ops.TimmRandomErasing()
    assert (erasing.probability, erasing.min_area, erasing.max_area, erasing.min_aspect) == (0.5, 0.02, 1 / 3, 0.3)
    assert (erasing.max_aspect, erasing.mode, erasing.min_count, erasing.max_count) == (None, "const", 1, None)
    assert erasing.num_splits == 0
    given = ops.TimmRandomErasing(0.25, mode="Pixel", max_count=3, num_splits=1)
    assert given.mode == "pixel" and eval(repr(given), vars(ops)) == given
    with pytest.raises(nostall.ConfigError, match="Normalize follows TimmRandomErasing"):
        batch(photos, ops.TimmRandomErasing(), ops.Normalize(**IMAGENET))
    with pytest.raises(nostall.ConfigError, match="needs float32"):
        batch(photos, ops.TimmRandomErasing(mode="rand"), dtype="uint8")
    with pytest.raises(nostall.ConfigError, match="TimmRandomErasing: num_splits 2 .*AugMix"):
        ops.TimmRandomErasing(num_splits=2)
    for keywords, name in [
        (dict(probability=1.5), "probability"),
        (dict(min_area=0.0), "min_area"),
        (dict(max_area=1.5), "max_area"),
        (dict(min_area=0.5, max_area=0.25), "max_area"),
        (dict(min_aspect=-0.3), "min_aspect"),
        (dict(max_aspect=0.0), "max_aspect"),
        (dict(mode="noise"), "mode"),
        (dict(min_count=3, max_count=2), "max_count"),
        (dict(max_count=2.5), "max_count"),
    ]:
        with pytest.raises(nostall.ConfigError, match=f"TimmRandomErasing: {name}"):
            ops.TimmRandomErasing(**keywords)
