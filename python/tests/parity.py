"""What the parity tests of the image operators share: lossless PNGs of the demo
photographs (so that nostall and the reference start from the same pixels), nostall's
output for operators over them, the reference's for a transform, the measure of how far
apart the two are, and the tests of random draws against the reference's (fixed seeds on
both sides, so that they cannot flake)."""

import collections
import math
import pathlib

import numpy as np
import torch
from PIL import Image
from torchvision.transforms import v2

import nostall
from nostall import ops

COUNT = 32


def write_square_pngs(photos, out, size, count=COUNT):
    """The centre of each of the first `count` demo photographs at `size` × `size`, as PNGs
    in one class folder of `out`; returns `out`."""
    (out / "all").mkdir()
    for i, path in enumerate(sorted(pathlib.Path(photos).rglob("*.jpg"))[:count]):
        with Image.open(path) as image:
            image = image.convert("RGB")
            w, h = image.size
            s = min(w, h)
            box = ((w - s) // 2, (h - s) // 2, (w - s) // 2 + s, (h - s) // 2 + s)
            image.crop(box).resize((size, size), Image.BILINEAR).save(out / "all" / f"{i:02d}.png")
    return out


def _paths(pngs):
    return sorted((pngs / "all").glob("*.png"))


def _whole(pngs):
    """The PNGs' (height, width)."""
    with Image.open(_paths(pngs)[0]) as image:
        return image.height, image.width


def nostall_images(pngs, *pixel_ops, threads=2, seed=0, crop=None):
    """nostall's uint8 CHW batch of every PNG, in file order: `CenterCrop(crop)` (the whole
    image by default), then `pixel_ops`."""
    crop = crop or _whole(pngs)
    loader = nostall.Loader(str(pngs), batch_size=len(_paths(pngs)), shuffle=False, seed=seed,
                            threads=threads, pipeline=[ops.CenterCrop(crop), *pixel_ops], dtype="uint8",
                            output="numpy")
    images, _ = next(iter(loader))
    return torch.from_numpy(np.array(images))


def reference_images(pngs, transform=None, crop=None):
    """The same PNGs as uint8 CHW tensors, centre-cropped to `crop` if given, through
    `transform` (a torchvision one) if given."""
    images = [torch.from_numpy(np.array(Image.open(p).convert("RGB"))).permute(2, 0, 1) for p in _paths(pngs)]
    if crop is not None:
        size = [crop, crop] if isinstance(crop, int) else list(crop)
        images = [v2.functional.center_crop(x, size) for x in images]
    return torch.stack([transform(x) if transform else x for x in images])


def parity(got, want):
    """(share of values within 1 level, mean absolute difference, largest difference)."""
    diff = (got.int() - want.int()).abs()
    return (diff <= 1).float().mean().item(), diff.float().mean().item(), diff.max().item()


def assert_parity(got, want, what):
    """≥ 99% of values within 1 level and a mean absolute difference ≤ 0.5 level."""
    within, mean, most = parity(got, want)
    assert within >= 0.99 and mean <= 0.5, f"{what}: {within:.4%} within 1, mean {mean:.3f}, max {most}"


def assert_the_same_for_any_thread_count(pngs, op, crop=None):
    """`op` changes the images, gives the same bytes on 1, 2 and 4 threads, and other bytes
    with another seed."""
    one = nostall_images(pngs, op, threads=1, crop=crop)
    assert not torch.equal(one, nostall_images(pngs, crop=crop)), f"{op!r} changes the images"
    for threads in (2, 4):
        assert torch.equal(nostall_images(pngs, op, threads=threads, crop=crop), one), (op, threads)
    assert not torch.equal(nostall_images(pngs, op, threads=2, seed=1, crop=crop), one), f"{op!r}: another seed"


#: The two-sample Kolmogorov–Smirnov critical value's coefficient at alpha = 0.001:
#: sqrt(-ln(alpha / 2) / 2).
KS_001 = math.sqrt(-math.log(0.001 / 2) / 2)


def ks_statistic(a, b):
    """The two-sample Kolmogorov–Smirnov statistic: the largest gap between the two
    empirical distribution functions."""
    a, b = np.sort(np.asarray(a, dtype=float)), np.sort(np.asarray(b, dtype=float))
    grid = np.union1d(a, b)
    return np.abs(np.searchsorted(a, grid, "right") / len(a) - np.searchsorted(b, grid, "right") / len(b)).max()


def assert_same_distribution(ours, theirs, what, alpha=0.001):
    """Two-sample Kolmogorov–Smirnov test, its asymptotic critical value at `alpha`
    (conservative where values repeat, as bins and thresholds do)."""
    d = ks_statistic(ours, theirs)
    n, m = len(ours), len(theirs)
    critical = math.sqrt(-math.log(alpha / 2) / 2) * math.sqrt((n + m) / (n * m))
    print(f"{what}: KS {d:.4f} over {n} and {m} (critical {critical:.4f})")
    assert d < critical, what


def chi_square_critical(df, z=3.09):
    """The chi-square distribution's upper 0.1% point (Wilson–Hilferty)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def assert_homogeneous(ours, theirs, what):
    """Chi-square test that two samples of categories come from one distribution."""
    a, b = collections.Counter(ours), collections.Counter(theirs)
    assert set(a) == set(b), f"{what}: {sorted(set(a) ^ set(b), key=str)} drawn by one side only"
    if len(a) == 1:
        return  # one category on both sides: the same distribution
    n, m = sum(a.values()), sum(b.values())
    stat = 0.0
    for k in a:
        total = a[k] + b[k]
        ea, eb = total * n / (n + m), total * m / (n + m)
        stat += (a[k] - ea) ** 2 / ea + (b[k] - eb) ** 2 / eb
    df = len(a) - 1
    critical = chi_square_critical(df)
    print(f"{what}: chi-square {stat:.1f} on {df} degrees of freedom (critical {critical:.1f})")
    assert stat < critical, what
