"""MixUp and CutMix on batches of video clips (real camera footage): a clip mixes as a
whole, blended by one λ or given one box of its partner on every frame and channel, in
either layout; the labels as timm's; the same for any thread count."""

import numpy as np
import pytest
import torch

import nostall
from nostall import ops, video


CLASSES = 3  # the class folders: one a container


def batch(root, seed, mix=None, layout="TCHW", threads=2, dtype="float32"):
    loader = nostall.Loader(str(root), batch_size=8, shuffle=True, seed=seed, threads=threads, dtype=dtype,
                            output="numpy", mix=mix, pipeline=[video.Clip(4, sampler="spread", layout=layout),
                                                               ops.Resize(40), ops.CenterCrop(32)])
    x, y = next(iter(loader))
    return np.array(x), np.array(y)


def timm_target(labels, lam, smoothing):
    from timm.data.mixup import mixup_target

    return mixup_target(torch.from_numpy(labels), CLASSES, lam=lam, smoothing=smoothing).numpy()


@pytest.mark.parametrize("layout", ["TCHW", "CTHW"])
def test_mixup_blends_each_clip_whole_with_its_partner(videos, layout):
    mix = nostall.Mixup(mixup_alpha=0.8, label_smoothing=0.1, num_classes=CLASSES)
    for seed in range(3):
        x, y = batch(videos, seed, layout=layout)
        xm, ym = batch(videos, seed, mix, layout=layout)
        flipped = x[::-1]
        d = x[0] - flipped[0]
        lam = float(((xm[0] - flipped[0]) * d).sum() / (d ** 2).sum())
        assert 0 < lam < 1
        np.testing.assert_allclose(xm, x * lam + flipped * (1 - lam), atol=2e-5)
        np.testing.assert_allclose(ym, timm_target(y, lam, 0.1), atol=2e-5)


@pytest.mark.parametrize("layout", ["TCHW", "CTHW"])
def test_cutmix_pastes_one_box_on_every_frame_and_its_area_is_the_weight(videos, layout):
    mix = nostall.Mixup(mixup_alpha=0.0, cutmix_alpha=1.0, label_smoothing=0.0, num_classes=CLASSES)
    pasted_any = False
    for seed in range(4):
        x, y = batch(videos, seed, layout=layout, dtype="uint8")
        xm, ym = batch(videos, seed, mix, layout=layout, dtype="uint8")
        if layout == "CTHW":  # frames first, to look at each frame
            x, xm = x.transpose(0, 2, 1, 3, 4), xm.transpose(0, 2, 1, 3, 4)
        flipped = x[::-1]
        for i in range(len(y)):
            # The pixels any frame took from the partner: one rectangle, the same on every frame.
            box = ((xm[i] != x[i]).any(axis=(0, 1)))
            rows, cols = np.flatnonzero(box.any(axis=1)), np.flatnonzero(box.any(axis=0))
            if rows.size:
                pasted_any = True
                rect = np.zeros_like(box)
                rect[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1] = True
                assert box.sum() >= 0.95 * rect.sum()
                assert (xm[i][..., rect] == flipped[i][..., rect]).all(), (seed, i)
                assert (xm[i][..., ~rect] == x[i][..., ~rect]).all(), (seed, i)
                if y[i] != y[len(y) - 1 - i]:
                    assert abs(ym[i, y[i]] - (1 - rect.mean())) < 1e-6
            else:
                assert (xm[i] == x[i]).all()
    assert pasted_any


def test_mixed_clips_are_the_same_for_any_thread_count(videos):
    mix = nostall.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=CLASSES)
    one = [batch(videos, seed, mix, threads=1) for seed in range(3)]
    two = [batch(videos, seed, mix, threads=2) for seed in range(3)]
    for (a, la), (b, lb) in zip(one, two):
        assert np.array_equal(a, b) and np.array_equal(la, lb)


def test_mixup_on_clips_needs_float32_and_no_device(videos):
    with pytest.raises(nostall.ConfigError, match="float32"):
        batch(videos, 0, nostall.Mixup(mixup_alpha=0.8, num_classes=CLASSES), dtype="uint8")
