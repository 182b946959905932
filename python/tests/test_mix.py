"""MixUp and CutMix in the engine, as timm's Mixup: images, soft labels, determinism."""

import numpy as np
import pytest

import nostall
from nostall import ops

BATCH = 8
CLASSES = 4  # the demo photographs' classes


def epoch(photos, mix=None, threads=2, dtype="float32", seed=0):
    loader = nostall.Loader(photos, batch_size=BATCH, shuffle=True, seed=seed, threads=threads, dtype=dtype,
                            output="numpy", mix=mix, pipeline=[ops.Resize(40), ops.CenterCrop(32)])
    return [(np.array(x), np.array(y)) for x, y in loader]


def timm_target(labels, lam, smoothing):
    """timm's own soft labels for a batch mixed with weight ``lam``."""
    import torch
    from timm.data.mixup import mixup_target

    return mixup_target(torch.from_numpy(labels), CLASSES, lam=lam, smoothing=smoothing).numpy()


def test_mixup_blends_with_the_reversed_batch_and_weights_the_labels(photos):
    plain = epoch(photos)
    mixed = epoch(photos, nostall.Mixup(mixup_alpha=0.8, label_smoothing=0.1, num_classes=CLASSES))
    lams = []
    for (x, y), (xm, ym) in zip(plain, mixed):
        assert ym.dtype == np.float32 and ym.shape == (len(y), CLASSES)
        # One λ a batch: recovered from the first image, checked on every one.
        flipped = x[::-1]
        lam = float(((xm[0] - flipped[0]) * (x[0] - flipped[0])).sum() / ((x[0] - flipped[0]) ** 2).sum())
        np.testing.assert_allclose(xm, x * lam + flipped * (1 - lam), atol=2e-5)
        np.testing.assert_allclose(ym, timm_target(y, lam, 0.1), atol=2e-5)
        lams.append(lam)
    assert len(set(np.round(lams, 6))) == len(lams)  # a draw a batch


def test_cutmix_pastes_the_partners_box_and_its_area_is_the_weight(photos):
    plain = epoch(photos, dtype="uint8")
    mixed = epoch(photos, nostall.Mixup(mixup_alpha=0.0, cutmix_alpha=1.0, label_smoothing=0.0,
                                        num_classes=CLASSES), dtype="uint8")
    for (x, y), (xm, ym) in zip(plain, mixed):
        flipped = x[::-1]
        for i in range(len(y)):
            from_partner = (xm[i] == flipped[i]).all(axis=0) & (xm[i] != x[i]).any(axis=0)
            assert ((xm[i] == x[i]) | (xm[i] == flipped[i])).all()
            if y[i] != y[len(y) - 1 - i]:
                # The label's weight is the area kept (the box's pixels that equal the
                # original anyway are few, so the bound is loose by them).
                kept = ym[i, y[i]]
                assert abs((1 - from_partner.mean()) - kept) < 0.05


def test_mixing_is_the_same_for_any_thread_count_and_checks_its_arguments(photos):
    mix = nostall.Mixup(mixup_alpha=0.2, cutmix_alpha=1.0, mode="elem", num_classes=CLASSES)
    one = epoch(photos, mix, threads=1)
    for threads in (2, 4):
        for (a, ya), (b, yb) in zip(one, epoch(photos, mix, threads=threads)):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(ya, yb)
    # Resumed after two batches: the rest mixed as in the whole epoch.
    def loader():
        return nostall.Loader(photos, batch_size=BATCH, seed=0, output="numpy", mix=mix,
                              pipeline=[ops.Resize(40), ops.CenterCrop(32)])
    first = loader()
    it = iter(first)
    next(it), next(it)
    state = first.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    for (x, y), (a, ya) in zip([(np.array(x), np.array(y)) for x, y in resumed], two := epoch(photos, mix)[2:]):
        np.testing.assert_array_equal(x, a)
        np.testing.assert_array_equal(y, ya)
    assert len(two) > 0
    with pytest.raises(nostall.ConfigError, match="needs dtype=.float32"):
        epoch(photos, nostall.Mixup(), dtype="uint8")
    with pytest.raises(nostall.ConfigError, match="num_classes=2 but the dataset"):
        epoch(photos, nostall.Mixup(num_classes=2))
    with pytest.raises(nostall.ConfigError, match="prob 2"):
        epoch(photos, nostall.Mixup(prob=2.0, num_classes=CLASSES))
    with pytest.raises(nostall.ConfigError, match="mode"):
        nostall.Mixup(mode="everything")
    assert "cutmix_alpha=1.0" in repr(mix) and "mode='elem'" in repr(mix)
