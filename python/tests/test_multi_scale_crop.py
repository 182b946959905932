"""MultiScaleCrop against a transcription of TSN's and VideoMAE's `GroupMultiScaleCrop` on
real photographs: every output is the reference's crop and PIL bilinear resize at one of
the windows it can draw (a pair of scales at most `max_distort` apart, at one of the fixed
places), the windows drawn cover the pairs, the same bytes for any thread count, and one
window for every frame of a clip."""

import itertools
import pathlib

import numpy as np
import pytest
import torch
from PIL import Image

import nostall
from nostall import ops
from parity import assert_parity

SIZE = 64
SCALES = (1.0, 0.875, 0.75, 0.66)


@pytest.fixture(scope="module")
def pngs(photos, tmp_path_factory):
    """The demo photographs at 160 × 120, as lossless PNGs in one class folder."""
    out = tmp_path_factory.mktemp("msc")
    (out / "all").mkdir()
    for i, path in enumerate(sorted(pathlib.Path(photos).rglob("*.jpg"))[:24]):
        with Image.open(path) as image:
            image.convert("RGB").resize((160, 120), Image.BILINEAR).save(out / "all" / f"{i:02d}.png")
    return out


def windows(image_w, image_h, size=SIZE, scales=SCALES, max_distort=1, more_fix_crop=True):
    """Every (left, top, width, height) `GroupMultiScaleCrop._sample_crop_size` can give
    with `fix_crop` (its code, transcribed)."""
    base = min(image_w, image_h)
    sides = [int(base * x) for x in scales]
    crop_h = [size if abs(x - size) < 3 else x for x in sides]
    crop_w = [size if abs(x - size) < 3 else x for x in sides]
    pairs = [(w, h) for i, h in enumerate(crop_h) for j, w in enumerate(crop_w) if abs(i - j) <= max_distort]
    out = set()
    for w, h in pairs:
        ws, hs = (image_w - w) // 4, (image_h - h) // 4
        places = [(0, 0), (4 * ws, 0), (0, 4 * hs), (4 * ws, 4 * hs), (2 * ws, 2 * hs)]
        if more_fix_crop:
            places += [(0, 2 * hs), (4 * ws, 2 * hs), (2 * ws, 4 * hs), (2 * ws, 0),
                       (ws, hs), (3 * ws, hs), (ws, 3 * hs), (3 * ws, 3 * hs)]
        out |= {(x, y, w, h) for x, y in places}
    return sorted(out)


def reference(image, window, size=SIZE):
    """The reference's crop and resize of a PIL image, as a uint8 CHW tensor."""
    x, y, w, h = window
    out = image.crop((x, y, x + w, y + h)).resize((size, size), Image.BILINEAR)
    return torch.from_numpy(np.array(out)).permute(2, 0, 1)


def delivered(pngs, op, threads=2, seed=0, epochs=1):
    """nostall's uint8 batch of every PNG in file order, one an epoch."""
    loader = nostall.Loader(str(pngs), batch_size=24, shuffle=False, seed=seed, threads=threads,
                            pipeline=[op], dtype="uint8", output="numpy")
    # Each epoch run to its end: an epoch left unfinished starts again at the next iter().
    return [torch.from_numpy(np.array([images for images, _ in loader][0])) for _ in range(epochs)]


def nearest_window(got, image, candidates):
    """The candidate window whose reference is closest to `got`, and that reference."""
    best = min(candidates, key=lambda c: (got.int() - reference(image, c).int()).abs().sum().item())
    return best, reference(image, best)


def test_each_output_is_the_references_crop_at_a_window_it_can_draw(pngs):
    paths = sorted((pngs / "all").glob("*.png"))
    candidates = windows(160, 120)
    chosen = []
    for images in delivered(pngs, ops.MultiScaleCrop(SIZE), epochs=3):
        assert images.shape == (24, 3, SIZE, SIZE)
        for got, path in zip(images, paths):
            image = Image.open(path).convert("RGB")
            window, want = nearest_window(got, image, candidates)
            assert_parity(got, want, f"{path.name} at {window}")
            chosen.append(window)
    # 72 draws over 10 pairs at up to 13 places each.
    pairs = {(w, h) for _, _, w, h in chosen}
    assert len(pairs) >= 7 and len(set(chosen)) > 30, sorted(set(chosen))


def test_without_fixed_places_the_window_is_anywhere_it_fits(pngs):
    paths = sorted((pngs / "all").glob("*.png"))
    # One scale: a 120 × 120 window, its left edge drawn from 0 to 40.
    op = ops.MultiScaleCrop(SIZE, scales=(1.0,), fix_crop=False)
    candidates = [(x, 0, 120, 120) for x in range(41)]
    lefts = set()
    for got, path in zip(delivered(pngs, op)[0], paths):
        window, want = nearest_window(got, Image.open(path).convert("RGB"), candidates)
        assert_parity(got, want, f"{path.name} at {window}")
        lefts.add(window[0])
    assert len(lefts) > 10, lefts


def test_the_same_bytes_for_any_thread_count_and_other_bytes_for_another_seed(pngs):
    op = ops.MultiScaleCrop(SIZE)
    one = delivered(pngs, op, threads=1)[0]
    for threads in (2, 4):
        assert torch.equal(delivered(pngs, op, threads=threads)[0], one), threads
    assert not torch.equal(delivered(pngs, op, seed=1)[0], one)


def test_settings_out_of_range_are_refused_naming_them():
    for kwargs, name in [({"scales": ()}, "scales"), ({"scales": (1.5,)}, "scales"), ({"max_distort": 65}, "max_distort"),
                         ({"scales": (0.0, 1.0)}, "scales"), ({"max_distort": -1}, "max_distort"),
                         ({"scales": tuple(itertools.repeat(0.5, 65))}, "scales")]:
        with pytest.raises(Exception, match=name):
            ops.MultiScaleCrop(SIZE, **kwargs)
