"""TimmRandAugment against timm's own RandAugment on real photographs.

Three things are compared. The kernels: every augmentation of timm's sets, at several
magnitudes with both signs, with bilinear and bicubic resampling and timm's fill, run by
nostall (through a hook that applies one step) and by timm's own function of
`NAME_TO_OP` (on Pillow) on lossless PNGs of the demo photographs, with the argument
timm's `LEVEL_TO_ARG` gives. The draws: which augmentations a sample gets, how many, and
their arguments, over 10 000 samples, against timm's draws recorded from a real
`rand_augment_transform(...)` whose functions are replaced by a recorder (chi-square tests
of homogeneity, and two-sample Kolmogorov–Smirnov tests of each augmentation's
arguments). And through the Loader: the same batches for any number of threads, and bad
config strings and arguments refused naming the part.
"""

import collections
import random

import numpy as np
import pytest
import torch
from PIL import Image
from timm.data import auto_augment as aa
from timm.data import create_transform
from timm.data.auto_augment import LEVEL_TO_ARG, NAME_TO_OP, rand_augment_transform
from timm.data.constants import IMAGENET_DEFAULT_MEAN

import nostall
from nostall import _nostall, ops
from parity import (assert_homogeneous, assert_parity, assert_same_distribution,
                    assert_the_same_for_any_thread_count, parity, reference_images)

SIZE = 96
# A crop that is not square: translations and shears take the width and height apart.
CROP = (64, 96)
# timm's `img_mean` hparam as create_transform computes it.
FILL = tuple(min(255, round(255 * x)) for x in IMAGENET_DEFAULT_MEAN)
RESAMPLE = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC}
GEOMETRIC = {"Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel"}
# timm's RandAugment sets and a config of nostall's whose set holds each.
SETS = {
    "rand-m9": aa._RAND_TRANSFORMS,
    "rand-m9-inc1": aa._RAND_INCREASING_TRANSFORMS,
    "rand-m9-t3a": aa._RAND_3A,
    "rand-m9-t3aw": list(aa._RAND_WEIGHTED_3A),
    "rand-m9-tweights": list(aa._RAND_WEIGHTED_0),
}
NAMES = sorted({name for names in SETS.values() for name in names})
LEVELS = (0, 2.5, 5.5, 9, 10)


def _config_holding(name):
    return next(config for config, names in SETS.items() if name in names)


@pytest.fixture(scope="module")
def pngs(square_pngs):
    return square_pngs(SIZE)


@pytest.fixture(scope="module")
def photographs(pngs):
    """The PNGs as uint8 CHW tensors: the squares, and their centres at 64 x 96."""
    return {"square": reference_images(pngs), "wide": reference_images(pngs, crop=CROP)}


def _step(op, name, value, image):
    """nostall's one step on a uint8 CHW tensor."""
    c, h, w = image.shape
    out = _nostall._augment(op, name, float(value), image.contiguous().numpy().tobytes(), w, h)
    return torch.from_numpy(np.frombuffer(bytes(out), dtype=np.uint8).reshape(c, h, w).copy())


def _timm(name, args, image, interpolation, fill=FILL):
    """timm's function for `name` on the image as a PIL image, with the keyword arguments
    its `AugmentOp` passes (`fillcolor`, `resample`)."""
    pil = Image.fromarray(image.permute(1, 2, 0).numpy())
    out = NAME_TO_OP[name](pil, *args, fillcolor=fill, resample=RESAMPLE[interpolation])
    return torch.from_numpy(np.array(out)).permute(2, 0, 1)


def _arguments(name, hparams, monkeypatch):
    """timm's `LEVEL_TO_ARG[name]` at each of LEVELS, with each sign where it draws one."""
    level_fn = LEVEL_TO_ARG[name]
    if level_fn is None:
        return [()]
    found = []
    for sign in (1, -1):
        monkeypatch.setattr(aa, "_randomly_negate", lambda v, sign=sign: sign * v)
        found += [level_fn(level, hparams) for level in LEVELS]
    monkeypatch.undo()
    return sorted(set(found))


# Resampling only changes the geometric augmentations.
KERNELS = [(name, "bilinear") for name in NAMES] + [(name, "bicubic") for name in NAMES if name in GEOMETRIC]


@pytest.mark.parametrize("name,interpolation", KERNELS)
def test_every_augmentation_matches_timms_function(photographs, monkeypatch, name, interpolation):
    op = ops.TimmRandAugment(_config_holding(name), interpolation=interpolation)
    hparams = {"translate_pct": 0.45}
    arguments = _arguments(name, hparams, monkeypatch)
    got, want = [], []
    for shape, images in photographs.items():
        for i, args in enumerate(arguments):
            # Eight photographs at each argument, all 32 at the last.
            chosen = images if i == len(arguments) - 1 else images[i % 4::4]
            value = args[0] if args else 0.0
            ours = torch.stack([_step(op, name, value, x) for x in chosen])
            try:
                theirs = torch.stack([_timm(name, args, x, interpolation) for x in chosen])
            except ValueError:
                # Pillow 13 refuses to posterize to 0 bits (or fewer); Pillow before it kept
                # no bit, which nostall does.
                assert name.startswith("Posterize") and value <= 0, (name, args)
                theirs = torch.zeros_like(ours)
            what = f"{name}{args} {interpolation} on {shape} images"
            assert ours.shape == theirs.shape, what
            assert_parity(ours, theirs, what)
            got.append(ours.flatten())
            want.append(theirs.flatten())
    within, mean, most = parity(torch.cat(got), torch.cat(want))
    print(f"{name} {interpolation}: {within:.4%} within 1 level, mean {mean:.6f}, max {most}")
    # Exact: every kernel repeats Pillow's arithmetic.
    assert torch.equal(torch.cat(got), torch.cat(want)), name


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
@pytest.mark.parametrize("degrees", [90, 180, 270, -90, 360, 45.5, -12.25])
def test_rotations_take_pils_turns_and_matrix(photographs, degrees, interpolation):
    """Quarter turns are exact transposes in PIL on square images, sampled on others."""
    op = ops.TimmRandAugment("rand-m9", interpolation=interpolation, fill=(10, 20, 30))
    for images in photographs.values():
        ours = torch.stack([_step(op, "Rotate", degrees, x) for x in images])
        theirs = torch.stack([_timm("Rotate", (degrees,), x, interpolation, fill=(10, 20, 30)) for x in images])
        assert torch.equal(ours, theirs), (degrees, interpolation, images.shape)


def test_random_interpolation_draws_both_filters(photographs):
    """'random' resamples each geometric step bilinearly or bicubically, by the seed."""
    op = ops.TimmRandAugment("rand-m9", interpolation="random")
    image = photographs["wide"][0]
    both = {
        resample: _timm("ShearX", (0.27,), image, resample) for resample in ("bilinear", "bicubic")
    }
    seen = collections.Counter()
    for seed in range(40):
        ours = _nostall._augment(op, "ShearX", 0.27, image.contiguous().numpy().tobytes(), CROP[1], CROP[0], seed)
        ours = torch.from_numpy(np.frombuffer(bytes(ours), dtype=np.uint8).reshape(image.shape).copy())
        match = [r for r, theirs in both.items() if torch.equal(ours, theirs)]
        assert len(match) == 1, seed
        seen[match[0]] += 1
    assert set(seen) == {"bilinear", "bicubic"}, seen


def test_defaults_are_create_transforms_hparams():
    """The fill and interpolation are what timm's create_transform gives its RandAugment."""
    op = ops.TimmRandAugment()
    assert op.fill == FILL == (124, 116, 104)
    assert (op.config, op.interpolation, op.translate_pct) == ("rand-m9-mstd0.5-inc1", "bilinear", 0.45)
    assert (op.magnitude_std, op.magnitude_max) == (None, None)
    transform = create_transform(224, is_training=True, auto_augment="rand-m9-mstd0.5-inc1")
    timm_ra = next(t for t in transform.transforms if type(t).__name__ == "RandAugment")
    kwargs = timm_ra.ops[0].kwargs
    assert kwargs["fillcolor"] == FILL
    assert kwargs["resample"] == Image.Resampling.BILINEAR


# ---- the draws ----

DRAWS = 10_000








def _timm_draws(config, hparams, draws=DRAWS, seed=0):
    """timm's own draws: a real `rand_augment_transform(config, hparams)` run `draws`
    times, each augmentation's function replaced by a recorder of its arguments."""
    transform = rand_augment_transform(config, dict(hparams))
    steps = []

    def recorder(name):
        def record(image, *args, **_):
            steps[-1].append((name, float(args[0]) if args else 0.0))
            return image
        return record

    for op in transform.ops:
        op.aug_fn = recorder(op.name)
    random.seed(seed)
    np.random.seed(seed)
    image = Image.new("RGB", (8, 8))
    for _ in range(draws):
        steps.append([])
        transform(image)
    return steps


# (config, nostall's keyword arguments, timm's hparams beyond create_transform's).
DISTRIBUTIONS = [
    ("rand-m9-mstd0.5-inc1", {}, {}),
    ("rand-m7-n3-p0.8-mstd101", {}, {}),
    ("rand-m10-n4-mstd1-mmax15-inc1", {}, {}),
    ("rand-m9-n3-tweights", {}, {}),
    ("rand-m8-n2-mstd0.5-t3aw", {}, {}),
    ("rand-m6-n2-p1-mstd0.5-t3a", {}, {}),
    ("rand-m9-mstd0.5-mmax12", {"translate_pct": 0.3, "magnitude_std": 2.0, "magnitude_max": 11.0},
     {"translate_pct": 0.3, "magnitude_std": 2.0, "magnitude_max": 11.0}),
]


@pytest.mark.parametrize("config,kwargs,hparams", DISTRIBUTIONS, ids=[d[0] for d in DISTRIBUTIONS])
def test_draws_follow_timms(config, kwargs, hparams):
    theirs = _timm_draws(config, {"img_mean": FILL, "interpolation": Image.Resampling.BILINEAR, **hparams})
    ours = _nostall._augment_draws(ops.TimmRandAugment(config, **kwargs), 7, DRAWS, CROP[1], CROP[0])
    assert len(ours) == len(theirs) == DRAWS
    assert_homogeneous([len(s) for s in ours], [len(s) for s in theirs], f"{config} steps a sample")
    assert_homogeneous([name for s in ours for name, _ in s], [name for s in theirs for name, _ in s],
                 f"{config} augmentations")
    if {"tweights", "t3aw"} & set(config.split("-")):
        # Weighted, without replacement: what comes first, second, ... and never twice.
        assert all(len({n for n, _ in s}) == len(s) for s in ours)
        ours_all = _nostall._augment_draws(ops.TimmRandAugment(config + "-p1", **kwargs), 8, DRAWS, 8, 8)
        theirs_all = _timm_draws(config + "-p1", {"img_mean": FILL, **hparams}, seed=1)
        assert_homogeneous([(i, n) for s in ours_all for i, (n, _) in enumerate(s)],
                     [(i, n) for s in theirs_all for i, (n, _) in enumerate(s)], f"{config} by position")
    by_name = collections.defaultdict(lambda: ([], []))
    for side, drawn in enumerate((ours, theirs)):
        for steps in drawn:
            for name, value in steps:
                by_name[name][side].append(value)
    for name, (a, b) in sorted(by_name.items()):
        if LEVEL_TO_ARG[name] is not None:
            assert_same_distribution(a, b, f"{config} {name} arguments")


def test_draws_are_the_seeds():
    op = ops.TimmRandAugment("rand-m9-mstd0.5-inc1")
    one = _nostall._augment_draws(op, 3, 500, 32, 32)
    assert _nostall._augment_draws(op, 3, 500, 32, 32) == one
    assert _nostall._augment_draws(op, 4, 500, 32, 32) != one


# ---- through the Loader ----

ALL = [
    ops.TimmRandAugment(),
    ops.TimmRandAugment("rand-m9-n3-mstd101", interpolation="random", fill=(10, 20, 30)),
    ops.TimmRandAugment("rand-m8-n2-mstd0.5-t3aw", interpolation="bicubic"),
]


@pytest.mark.parametrize("op", ALL, ids=repr)
def test_the_same_batches_for_any_number_of_threads(pngs, op):
    assert_the_same_for_any_thread_count(pngs, op, crop=CROP)


# ---- what is refused ----

@pytest.mark.parametrize("config,part,timm_says", [
    ("rand-m9-x3", '"x3"', AssertionError),          # timm: 'Unknown RandAugment config section'
    ("rnd-m9", '"rnd"', AssertionError),             # timm: assert config[0] == 'rand'
    ("rand-m9.5", '"9.5"', ValueError),              # timm: int('9.5')
    ("rand-mmax1.5", '"1.5"', ValueError),
    ("rand-n16-tweights", "n16", ValueError),        # timm: np.random.choice, at its first call
    ("rand-m9-mstd", '"mstd"', None),                # timm ignores a section with no number
    ("rand-m9-", '""', None),
    ("rand-m9-tfoo", '"foo"', None),                 # timm takes an unknown set as the default
])
def test_bad_config_strings_are_config_errors_naming_the_part(config, part, timm_says):
    with pytest.raises(nostall.ConfigError, match=f"TimmRandAugment: config .*{part}"):
        ops.TimmRandAugment(config)
    if timm_says is not None:
        with pytest.raises(timm_says):
            rand_augment_transform(config, {"img_mean": FILL})(Image.new("RGB", (8, 8)))


@pytest.mark.parametrize("kwargs,param", [
    ({"interpolation": "nearest"}, "interpolation"),
    ({"fill": (1, 2)}, "fill"),
    ({"fill": 256}, "fill"),
    ({"fill": (1.5, 2, 3)}, "fill"),
    ({"translate_pct": -0.1}, "translate_pct"),
    ({"magnitude_std": -1.0}, "magnitude_std"),
    ({"magnitude_max": float("inf")}, "magnitude_max"),
    ({"config": None}, "config"),
])
def test_bad_arguments_are_config_errors_naming_them(kwargs, param):
    with pytest.raises(nostall.ConfigError, match=f"TimmRandAugment: {param}"):
        ops.TimmRandAugment(**kwargs)


def test_a_step_outside_the_set_is_refused():
    with pytest.raises(nostall.ConfigError, match='no augmentation "Posterize"'):
        _nostall._augment(ops.TimmRandAugment("rand-inc1"), "Posterize", 2.0, bytes(3 * 4), 2, 2)
