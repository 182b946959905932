"""VideoMAE's fine-tuning transforms (`kinetics.py`, `VideoClsDataset._aug_frame`) as a
nostall pipeline, against VideoMAE's own functions on real camera footage (nostall-video's
tests/footage, as test_video.py reads it).

VideoMAE is not on PyPI: the functions it runs are transcribed below from
github.com/MCG-NJU/VideoMAE at commit 14ef8d856287c94ef1f985fe30f958eb4ec2c55d
(`rand_augment.py`, `video_transforms.py`, `random_erasing.py`, `kinetics.py`), as written
but for what the recipe does not reach (the weighted op choice, the boxes, the other
branches of `spatial_sampling`).

What is compared. RandAugment: on whole frames before the crop, each clip's augmentation
found among VideoMAE's (every op of its set, both signs) applied to every frame, byte for
byte; its draws (which op, how many, the arguments) against VideoMAE's over 10 000 clips.
The crop: with a window that draws nothing, VideoMAE's `random_resized_crop` of the
normalised frames (torch's bilinear interpolation, no antialias) and its flip of the
whole clip; its windows against VideoMAE's `_get_param_spatial_crop` over 5 000 draws.
The erasing: VideoMAE's cube (one box a clip, every frame erased there, each frame's
noise its own) and timm's batch mode (each frame its own erasing, p = 0.25), against the
reference's boxes and probabilities. And the same bytes for 1, 2 and 4 threads.
"""

import math
import random
import re
from unittest import mock

import numpy as np
import pytest
import torch
from PIL import Image, ImageEnhance, ImageOps

import nostall
from nostall import _nostall, ops, video
from parity import assert_homogeneous, assert_same_distribution
from conftest import SMALL_VIDEOS as SMALL

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
# VideoMAE's fine-tuning settings (run_class_finetuning.py's defaults).
CONFIG = "rand-m7-n4-mstd0.5-inc1"
SCALE, RATIO = (0.08, 1.0), (0.75, 1.3333)
FRAME = (240, 320)  # the footage's frames, height × width

# --- VideoMAE's rand_augment.py (commit 14ef8d8), as written ----------------------------

_FILL = (128, 128, 128)
_MAX_LEVEL = 10.0
_HPARAMS_DEFAULT = {"translate_const": 250, "img_mean": _FILL}
_RANDOM_INTERPOLATION = (Image.BILINEAR, Image.BICUBIC)


def _interpolation(kwargs):
    interpolation = kwargs.pop("resample", Image.BILINEAR)
    if isinstance(interpolation, (list, tuple)):
        return random.choice(interpolation)
    return interpolation


def _check_args_tf(kwargs):
    kwargs["resample"] = _interpolation(kwargs)


def shear_x(img, factor, **kwargs):
    _check_args_tf(kwargs)
    return img.transform(img.size, Image.AFFINE, (1, factor, 0, 0, 1, 0), **kwargs)


def shear_y(img, factor, **kwargs):
    _check_args_tf(kwargs)
    return img.transform(img.size, Image.AFFINE, (1, 0, 0, factor, 1, 0), **kwargs)


def translate_x_rel(img, pct, **kwargs):
    pixels = pct * img.size[0]
    _check_args_tf(kwargs)
    return img.transform(img.size, Image.AFFINE, (1, 0, pixels, 0, 1, 0), **kwargs)


def translate_y_rel(img, pct, **kwargs):
    pixels = pct * img.size[1]
    _check_args_tf(kwargs)
    return img.transform(img.size, Image.AFFINE, (1, 0, 0, 0, 1, pixels), **kwargs)


def rotate(img, degrees, **kwargs):
    _check_args_tf(kwargs)
    return img.rotate(degrees, **kwargs)  # Pillow >= 5.2


def auto_contrast(img, **__):
    return ImageOps.autocontrast(img)


def invert(img, **__):
    return ImageOps.invert(img)


def equalize(img, **__):
    return ImageOps.equalize(img)


def solarize(img, thresh, **__):
    return ImageOps.solarize(img, thresh)


def solarize_add(img, add, thresh=128, **__):
    lut = []
    for i in range(256):
        if i < thresh:
            lut.append(min(255, i + add))
        else:
            lut.append(i)
    if img.mode in ("L", "RGB"):
        if img.mode == "RGB" and len(lut) == 256:
            lut = lut + lut + lut
        return img.point(lut)
    return img


def posterize(img, bits_to_keep, **__):
    if bits_to_keep >= 8:
        return img
    if bits_to_keep == 0:
        # Pillow before 13 gave black; 13 raises (nostall keeps black, TimmRandAugment's doc).
        return Image.new(img.mode, img.size)
    return ImageOps.posterize(img, bits_to_keep)


def contrast(img, factor, **__):
    return ImageEnhance.Contrast(img).enhance(factor)


def color(img, factor, **__):
    return ImageEnhance.Color(img).enhance(factor)


def brightness(img, factor, **__):
    return ImageEnhance.Brightness(img).enhance(factor)


def sharpness(img, factor, **__):
    return ImageEnhance.Sharpness(img).enhance(factor)


def _randomly_negate(v):
    return -v if random.random() > 0.5 else v


def _rotate_level_to_arg(level, _hparams):
    return (_randomly_negate((level / _MAX_LEVEL) * 30.0),)


def _enhance_level_to_arg(level, _hparams):
    return ((level / _MAX_LEVEL) * 1.8 + 0.1,)


def _enhance_increasing_level_to_arg(level, _hparams):
    level = (level / _MAX_LEVEL) * 0.9
    return (1.0 + _randomly_negate(level),)


def _shear_level_to_arg(level, _hparams):
    return (_randomly_negate((level / _MAX_LEVEL) * 0.3),)


def _translate_rel_level_to_arg(level, hparams):
    translate_pct = hparams.get("translate_pct", 0.45)
    return (_randomly_negate((level / _MAX_LEVEL) * translate_pct),)


def _posterize_level_to_arg(level, _hparams):
    return (int((level / _MAX_LEVEL) * 4),)


def _posterize_increasing_level_to_arg(level, hparams):
    return (4 - _posterize_level_to_arg(level, hparams)[0],)


def _solarize_level_to_arg(level, _hparams):
    return (int((level / _MAX_LEVEL) * 256),)


def _solarize_increasing_level_to_arg(level, _hparams):
    return (256 - _solarize_level_to_arg(level, _hparams)[0],)


def _solarize_add_level_to_arg(level, _hparams):
    return (int((level / _MAX_LEVEL) * 110),)


LEVEL_TO_ARG = {
    "AutoContrast": None, "Equalize": None, "Invert": None,
    "Rotate": _rotate_level_to_arg,
    "Posterize": _posterize_level_to_arg,
    "PosterizeIncreasing": _posterize_increasing_level_to_arg,
    "Solarize": _solarize_level_to_arg,
    "SolarizeIncreasing": _solarize_increasing_level_to_arg,
    "SolarizeAdd": _solarize_add_level_to_arg,
    "Color": _enhance_level_to_arg, "ColorIncreasing": _enhance_increasing_level_to_arg,
    "Contrast": _enhance_level_to_arg, "ContrastIncreasing": _enhance_increasing_level_to_arg,
    "Brightness": _enhance_level_to_arg, "BrightnessIncreasing": _enhance_increasing_level_to_arg,
    "Sharpness": _enhance_level_to_arg, "SharpnessIncreasing": _enhance_increasing_level_to_arg,
    "ShearX": _shear_level_to_arg, "ShearY": _shear_level_to_arg,
    "TranslateXRel": _translate_rel_level_to_arg, "TranslateYRel": _translate_rel_level_to_arg,
}

NAME_TO_OP = {
    "AutoContrast": auto_contrast, "Equalize": equalize, "Invert": invert, "Rotate": rotate,
    "Posterize": posterize, "PosterizeIncreasing": posterize,
    "Solarize": solarize, "SolarizeIncreasing": solarize, "SolarizeAdd": solarize_add,
    "Color": color, "ColorIncreasing": color, "Contrast": contrast, "ContrastIncreasing": contrast,
    "Brightness": brightness, "BrightnessIncreasing": brightness,
    "Sharpness": sharpness, "SharpnessIncreasing": sharpness,
    "ShearX": shear_x, "ShearY": shear_y,
    "TranslateXRel": translate_x_rel, "TranslateYRel": translate_y_rel,
}


class AugmentOp:
    """Apply for video."""

    def __init__(self, name, prob=0.5, magnitude=10, hparams=None):
        hparams = hparams or _HPARAMS_DEFAULT
        self.name = name
        self.aug_fn = NAME_TO_OP[name]
        self.level_fn = LEVEL_TO_ARG[name]
        self.prob = prob
        self.magnitude = magnitude
        self.hparams = hparams.copy()
        self.kwargs = {
            "fillcolor": hparams["img_mean"] if "img_mean" in hparams else _FILL,
            "resample": hparams["interpolation"] if "interpolation" in hparams else _RANDOM_INTERPOLATION,
        }
        self.magnitude_std = self.hparams.get("magnitude_std", 0)

    def __call__(self, img_list):
        if self.prob < 1.0 and random.random() > self.prob:
            return img_list
        magnitude = self.magnitude
        if self.magnitude_std and self.magnitude_std > 0:
            magnitude = random.gauss(magnitude, self.magnitude_std)
        magnitude = min(_MAX_LEVEL, max(0, magnitude))
        level_args = self.level_fn(magnitude, self.hparams) if self.level_fn is not None else ()
        if isinstance(img_list, list):
            return [self.aug_fn(img, *level_args, **self.kwargs) for img in img_list]
        return self.aug_fn(img_list, *level_args, **self.kwargs)


_RAND_TRANSFORMS = [
    "AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "SolarizeAdd",
    "Color", "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateXRel",
    "TranslateYRel",
]
_RAND_INCREASING_TRANSFORMS = [
    "AutoContrast", "Equalize", "Invert", "Rotate", "PosterizeIncreasing", "SolarizeIncreasing",
    "SolarizeAdd", "ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing",
    "SharpnessIncreasing", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel",
]


class RandAugment:
    def __init__(self, ops, num_layers=2, choice_weights=None):
        self.ops = ops
        self.num_layers = num_layers
        self.choice_weights = choice_weights

    def __call__(self, img):
        ops = np.random.choice(self.ops, self.num_layers, replace=self.choice_weights is None,
                               p=self.choice_weights)
        for op in ops:
            img = op(img)
        return img


def rand_augment_transform(config_str, hparams):
    magnitude, num_layers, transforms = _MAX_LEVEL, 2, _RAND_TRANSFORMS
    config = config_str.split("-")
    assert config[0] == "rand"
    for c in config[1:]:
        cs = re.split(r"(\d.*)", c)
        if len(cs) < 2:
            continue
        key, val = cs[:2]
        if key == "mstd":
            hparams.setdefault("magnitude_std", float(val))
        elif key == "inc":
            if bool(val):
                transforms = _RAND_INCREASING_TRANSFORMS
        elif key == "m":
            magnitude = int(val)
        elif key == "n":
            num_layers = int(val)
    ra_ops = [AugmentOp(name, prob=0.5, magnitude=magnitude, hparams=hparams) for name in transforms]
    return RandAugment(ra_ops, num_layers)


# --- VideoMAE's video_transforms.py (commit 14ef8d8) -----------------------------------

def create_random_augment(input_size, auto_augment=None, interpolation="bilinear"):
    img_size = input_size[-2:] if isinstance(input_size, tuple) else input_size
    img_size_min = min(img_size) if isinstance(img_size, tuple) else img_size
    aa_params = {"translate_const": int(img_size_min * 0.45)}
    if interpolation and interpolation != "random":
        aa_params["interpolation"] = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}[interpolation]
    assert auto_augment.startswith("rand")
    return rand_augment_transform(auto_augment, aa_params)


def _get_param_spatial_crop(scale, ratio, height, width, num_repeat=10, log_scale=True, switch_hw=False):
    for _ in range(num_repeat):
        area = height * width
        target_area = random.uniform(*scale) * area
        if log_scale:
            log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
            aspect_ratio = math.exp(random.uniform(*log_ratio))
        else:
            aspect_ratio = random.uniform(*ratio)
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if np.random.uniform() < 0.5 and switch_hw:
            w, h = h, w
        if 0 < w <= width and 0 < h <= height:
            i = random.randint(0, height - h)
            j = random.randint(0, width - w)
            return i, j, h, w
    in_ratio = float(width) / float(height)
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w = width
        h = height
    i = (height - h) // 2
    j = (width - w) // 2
    return i, j, h, w


def random_resized_crop(images, target_height, target_width, scale=(0.8, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0)):
    height = images.shape[2]
    width = images.shape[3]
    i, j, h, w = _get_param_spatial_crop(scale, ratio, height, width)
    cropped = images[:, :, i: i + h, j: j + w]
    return torch.nn.functional.interpolate(cropped, size=(target_height, target_width), mode="bilinear",
                                           align_corners=False)


# --- VideoMAE's kinetics.py (commit 14ef8d8) -------------------------------------------

def tensor_normalize(tensor, mean, std):
    if tensor.dtype == torch.uint8:
        tensor = tensor.float()
        tensor = tensor / 255.0
    if type(mean) == list:
        mean = torch.tensor(mean)
    if type(std) == list:
        std = torch.tensor(std)
    tensor = tensor - mean
    tensor = tensor / std
    return tensor


# --- VideoMAE's random_erasing.py (commit 14ef8d8), `RandomErasing` -----------------------

def _get_pixels(per_pixel, rand_color, patch_size, dtype=torch.float32, device="cuda"):
    if per_pixel:
        return torch.empty(patch_size, dtype=dtype, device=device).normal_()
    elif rand_color:
        return torch.empty((patch_size[0], 1, 1), dtype=dtype, device=device).normal_()
    return torch.zeros((patch_size[0], 1, 1), dtype=dtype, device=device)


class RandomErasing:
    def __init__(self, probability=0.5, min_area=0.02, max_area=1 / 3, min_aspect=0.3, max_aspect=None,
                 mode="const", min_count=1, max_count=None, num_splits=0, device="cuda", cube=True):
        self.probability = probability
        self.min_area = min_area
        self.max_area = max_area
        max_aspect = max_aspect or 1 / min_aspect
        self.log_aspect_ratio = (math.log(min_aspect), math.log(max_aspect))
        self.min_count = min_count
        self.max_count = max_count or min_count
        self.num_splits = num_splits
        mode = mode.lower()
        self.rand_color = False
        self.per_pixel = False
        self.cube = cube
        if mode == "rand":
            self.rand_color = True
        elif mode == "pixel":
            self.per_pixel = True
        else:
            assert not mode or mode == "const"
        self.device = device

    def _erase(self, img, chan, img_h, img_w, dtype):
        if random.random() > self.probability:
            return
        area = img_h * img_w
        count = self.min_count if self.min_count == self.max_count else random.randint(self.min_count, self.max_count)
        for _ in range(count):
            for _ in range(10):
                target_area = random.uniform(self.min_area, self.max_area) * area / count
                aspect_ratio = math.exp(random.uniform(*self.log_aspect_ratio))
                h = int(round(math.sqrt(target_area * aspect_ratio)))
                w = int(round(math.sqrt(target_area / aspect_ratio)))
                if w < img_w and h < img_h:
                    top = random.randint(0, img_h - h)
                    left = random.randint(0, img_w - w)
                    img[:, top: top + h, left: left + w] = _get_pixels(
                        self.per_pixel, self.rand_color, (chan, h, w), dtype=dtype, device=self.device)
                    break

    def _erase_cube(self, img, batch_start, batch_size, chan, img_h, img_w, dtype):
        if random.random() > self.probability:
            return
        area = img_h * img_w
        count = self.min_count if self.min_count == self.max_count else random.randint(self.min_count, self.max_count)
        for _ in range(count):
            for _ in range(100):
                target_area = random.uniform(self.min_area, self.max_area) * area / count
                aspect_ratio = math.exp(random.uniform(*self.log_aspect_ratio))
                h = int(round(math.sqrt(target_area * aspect_ratio)))
                w = int(round(math.sqrt(target_area / aspect_ratio)))
                if w < img_w and h < img_h:
                    top = random.randint(0, img_h - h)
                    left = random.randint(0, img_w - w)
                    for i in range(batch_start, batch_size):
                        img_instance = img[i]
                        img_instance[:, top: top + h, left: left + w] = _get_pixels(
                            self.per_pixel, self.rand_color, (chan, h, w), dtype=dtype, device=self.device)
                    break

    def __call__(self, input):
        if len(input.size()) == 3:
            self._erase(input, *input.size(), input.dtype)
        else:
            batch_size, chan, img_h, img_w = input.size()
            batch_start = batch_size // self.num_splits if self.num_splits > 1 else 0
            if self.cube:
                self._erase_cube(input, batch_start, batch_size, chan, img_h, img_w, input.dtype)
            else:
                for i in range(batch_start, batch_size):
                    self._erase(input[i], chan, img_h, img_w, input.dtype)
        return input


# --- the tests ----------------------------------------------------------------------------


# Four clips of four frames a video, at fixed places: each clip draws its own augmentation.
CLIPS = video.Clip(4, stride=3, sampler="uniform", clips=4)


def clips(root, *frame_ops, clip=CLIPS, seed=4, threads=2, **kwargs):
    """Every video's clips, [videos × clips, 4, 3, H, W] (frames first)."""
    loader = nostall.Loader(str(root), batch_size=64, shuffle=False, seed=seed, threads=threads,
                            output="torch", pipeline=[clip, *frame_ops], **kwargs)
    x = torch.cat([b[0] for b in loader])
    return x.reshape(-1, *x.shape[2:]) if clip.clips > 1 else x


@pytest.fixture(scope="module")
def frames(videos):
    """The clips' decoded frames, uint8."""
    return clips(videos, ops.CenterCrop(FRAME), dtype="uint8")


def _pil(frame):
    return Image.fromarray(frame.permute(1, 2, 0).numpy())


def _tensor(image):
    return torch.from_numpy(np.array(image)).permute(2, 0, 1)


def _candidates(magnitude):
    """Each augmentation VideoMAE's set can give a clip at `magnitude` without noise: its
    name and arguments, both signs where it draws one."""
    for name in _RAND_INCREASING_TRANSFORMS:
        level_fn = LEVEL_TO_ARG[name]
        if level_fn is None:
            yield name, ()
            continue
        args = set()
        for draw in (0.0, 1.0):  # _randomly_negate: random.random() > 0.5 negates
            with mock.patch.object(random, "random", return_value=draw):
                args.add(level_fn(magnitude, {}))
        for arg in sorted(args):
            yield name, arg


def test_randaugment_runs_on_whole_frames_one_draw_a_clip_as_videomaes(videos, frames):
    # One augmentation a clip, always applied, without magnitude noise: the clip's output
    # is one of the candidates, applied to every frame at the video's own size (before
    # any crop), byte for byte, with VideoMAE's fill (128: its hparams have no img_mean)
    # and bicubic resampling.
    op = ops.TimmRandAugment("rand-m7-n1-p1-mstd0-inc1", interpolation="bicubic", fill=128)
    got = clips(videos, op, ops.CenterCrop(FRAME), dtype="uint8")
    assert got.shape == frames.shape == (len(SMALL) * 4, 4, 3, *FRAME)
    kwargs = {"fillcolor": _FILL, "resample": Image.BICUBIC}
    candidates = list(_candidates(7))
    found = []
    for clip, augmented in zip(frames, got):
        pils = [_pil(f) for f in clip]
        matches = [name for name, args in candidates
                   if all(torch.equal(_tensor(NAME_TO_OP[name](p, *args, **kwargs)), a)
                          for p, a in zip(pils, augmented))]
        assert matches, "no augmentation of VideoMAE's set gives this clip"
        found.append(matches[0])
    assert len(set(found)) >= 5, found


def _recorded_draws(config, draws, seed=0):
    """VideoMAE's own draws: `create_random_augment((224, 224), config, 'bicubic')` run
    `draws` times on a clip of two frames, each function replaced by a recorder; every
    frame of a clip gets the same arguments."""
    transform = create_random_augment((224, 224), config, "bicubic")
    steps = []
    for op in transform.ops:
        def record(image, *args, _name=op.name, **kwargs):
            assert kwargs == {"fillcolor": _FILL, "resample": Image.BICUBIC}
            steps[-1].append((_name, float(args[0]) if args else 0.0))
            return image
        op.aug_fn = record
    random.seed(seed)
    np.random.seed(seed)
    image = Image.new("RGB", (8, 8))
    out = []
    for _ in range(draws):
        steps.append([])
        transform([image, image])
        # Two frames, each step recorded once a frame with the same arguments.
        assert steps[-1][::2] == steps[-1][1::2]
        out.append(steps[-1][::2])
    return out


def test_randaugment_draws_follow_videomaes():
    draws = 10_000
    theirs = _recorded_draws(CONFIG, draws)
    op = ops.TimmRandAugment(CONFIG, interpolation="bicubic", fill=128)
    ours = _nostall._augment_draws(op, 7, draws, FRAME[1], FRAME[0])
    assert len(ours) == len(theirs) == draws
    assert_homogeneous([len(s) for s in ours], [len(s) for s in theirs], "steps a clip")
    assert_homogeneous([n for s in ours for n, _ in s], [n for s in theirs for n, _ in s], "augmentations")
    by_name = {}
    for side, drawn in enumerate((ours, theirs)):
        for steps in drawn:
            for name, value in steps:
                by_name.setdefault(name, ([], []))[side].append(value)
    for name, (a, b) in sorted(by_name.items()):
        if LEVEL_TO_ARG[name] is not None:
            assert_same_distribution(a, b, f"{name} arguments")


def _videomae_spatial(clip, flip):
    """`_aug_frame` from ToTensor to the flip, on a uint8 [T, C, H, W] clip: normalised,
    [C, T, H, W], VideoMAE's `random_resized_crop` at a window that draws nothing (the
    whole 4:3 frame), then flipped where `flip`; given back [T, C, H, W]."""
    buffer = tensor_normalize(clip.permute(0, 2, 3, 1), list(MEAN), list(STD))  # T H W C
    buffer = buffer.permute(3, 0, 1, 2)  # C T H W
    buffer = random_resized_crop(buffer, 224, 224, scale=(1.0, 1.0), ratio=(4 / 3, 4 / 3))
    if flip:
        buffer = buffer.flip(-1)
    return buffer.permute(1, 0, 2, 3)


def test_the_crop_interpolates_normalised_frames_without_antialias_as_videomaes(videos, frames):
    # nostall interpolates the 8-bit frames and normalises after (Normalize is folded into
    # the last pass); VideoMAE normalises, then interpolates floats: the same values up to
    # rounding (both are linear; nostall's 8-bit interpolation rounds its result), within
    # one level of 255.
    crop = ops.RandomResizedCrop(224, scale=(1.0, 1.0), ratio=(4 / 3, 4 / 3), interpolation="bilinear",
                                 antialias=False)
    got = clips(videos, ops.Normalize(MEAN, STD), crop, ops.RandomHorizontalFlip())
    level = torch.tensor(STD).view(1, 3, 1, 1) * 255
    flips = []
    for clip, ours in zip(frames, got):
        want = [_videomae_spatial(clip, flip) for flip in (False, True)]
        diffs = [((ours - w) * level).abs() for w in want]
        flip = int(diffs[1].max() < diffs[0].max())
        # One level, and the float rounding of the normalised values.
        assert diffs[flip].max() <= 1.001, diffs[flip].max()
        assert diffs[flip].mean() <= 0.3, diffs[flip].mean()
        flips.append(flip)
    assert 0 < sum(flips) < len(flips), flips  # each clip flipped whole by its own draw


@pytest.mark.parametrize("size", [(320, 240), (60, 400), (400, 50)])
def test_the_crop_windows_follow_videomaes(size):
    # nostall's RandomResizedCrop against VideoMAE's `_get_param_spatial_crop` (whose tries,
    # roundings and fallback are torchvision's, drawn from Python's `random`): the
    # windows' coordinates over 5 000 draws, on frames where the fallback is rare and where
    # it is frequent.
    width, height = size
    draws = 5000
    op = ops.RandomResizedCrop(224, scale=SCALE, ratio=RATIO, interpolation="bilinear", antialias=False)
    ours = _nostall._crop_draws(op, 11, draws, width, height)
    random.seed(3)
    theirs = [_get_param_spatial_crop(SCALE, RATIO, height, width) for _ in range(draws)]
    theirs = [(j, i, w, h) for i, j, h, w in theirs]
    for k, what in enumerate(("left", "top", "width", "height")):
        assert_same_distribution([d[k] for d in ours], [d[k] for d in theirs], f"{size} {what}")
    # How often the window is the fallback's (the centre at the nearest ratio, or the whole).
    fallback = _get_param_spatial_crop(SCALE, RATIO, height, width, num_repeat=0)
    fallback = (fallback[1], fallback[0], fallback[3], fallback[2])
    assert_homogeneous([tuple(d) == fallback for d in ours], [d == fallback for d in theirs],
                       f"{size} fallback")


def _box(frame, background):
    """The bounding box (top, left, h, w) of a [C, H, W] frame's values that differ from
    `background`, or None."""
    changed = (frame != background).any(0).nonzero()
    if len(changed) == 0:
        return None
    (top, left), (bottom, right) = changed.min(0).values.tolist(), changed.max(0).values.tolist()
    return top, left, bottom - top + 1, right - left + 1


def test_videomaes_cube_erases_one_box_a_clip_with_each_frames_noise(videos, frames):
    # Erased always: the box is the clip's, in every frame, the noise each frame's own.
    erase = ops.VideoMAERandomErasing(1.0, mode="pixel")
    plain = clips(videos, ops.CenterCrop(FRAME), ops.Normalize(MEAN, STD))
    got = clips(videos, ops.CenterCrop(FRAME), ops.Normalize(MEAN, STD), erase)
    noise = []
    for clean, erased in zip(plain, got):
        boxes = {_box(e, c) for e, c in zip(erased, clean)}
        assert len(boxes) == 1 and None not in boxes, boxes
        top, left, h, w = boxes.pop()
        inside = erased[:, :, top:top + h, left:left + w]
        assert not torch.equal(inside[0], inside[1])
        noise.append(inside.flatten())
    noise = torch.cat(noise)
    assert abs(noise.mean()) < 0.01 and abs(noise.std() - 1) < 0.01


def _zeros(frame):
    """The box of a normalised [C, H, W] frame's erased cells ('const': 0.0 in every
    channel, which no 8-bit value normalises to with ImageNet's mean), or None."""
    return _box((frame == 0).all(0, keepdim=True).float(), 0.0)


def _erased_boxes(root, erase, seeds):
    """The box of each frame of each clip ([clip][frame]), None where not erased."""
    boxes = []
    for seed in seeds:
        x = clips(root, ops.CenterCrop((48, 64)), ops.Normalize(MEAN, STD), erase, seed=seed,
                  clip=video.Clip(2, sampler="uniform", clips=32))
        boxes += [[_zeros(f) for f in clip] for clip in x]
    return boxes


def test_videomaes_cube_boxes_and_probability_follow_the_reference(videos):
    # Whether a clip is erased, and where, against VideoMAE's `_erase_cube` on a
    # [T, C, H, W] clip, as `_aug_frame` makes it (max_count 1, num_splits 1).
    ours = _erased_boxes(videos, ops.VideoMAERandomErasing(0.25), range(10))
    assert all(clip[0] == clip[1] for clip in ours)
    ours = [clip[0] for clip in ours]
    reference = RandomErasing(0.25, mode="const", max_count=1, num_splits=1, device="cpu")
    random.seed(5)
    theirs = []
    for _ in range(len(ours)):
        clip = torch.ones(2, 3, 48, 64)
        reference(clip)
        assert _zeros(clip[0]) == _zeros(clip[1])
        theirs.append(_zeros(clip[0]))
    n = len(ours)
    erased = sum(b is not None for b in ours)
    # Binomial(n, 0.25): within 5 standard deviations (a seeded test: it cannot flake).
    assert abs(erased - n / 4) < 5 * math.sqrt(n * 0.25 * 0.75), (erased, n)
    assert_homogeneous([b is not None for b in ours], [b is not None for b in theirs], "erased clips")
    for k, what in enumerate(("top", "left", "height", "width")):
        assert_same_distribution([b[k] for b in ours if b], [b[k] for b in theirs if b], f"box {what}")


def test_without_cube_each_frame_draws_its_own_erasing(videos):
    # timm's batch mode on the clip's frames (cube=False): each frame erased with p = 0.25
    # on its own, at its own box.
    ours = _erased_boxes(videos, ops.VideoMAERandomErasing(0.25, cube=False), range(4))
    per_frame = [b is not None for clip in ours for b in clip]
    n = len(per_frame)
    assert abs(sum(per_frame) - n / 4) < 5 * math.sqrt(n * 0.25 * 0.75), (sum(per_frame), n)
    # Independent within a clip: both frames erased about 1/16 of clips, one of them 6/16.
    pairs = [(clip[0] is not None, clip[1] is not None) for clip in ours]
    both = sum(a and b for a, b in pairs)
    assert abs(both - len(pairs) / 16) < 5 * math.sqrt(len(pairs) / 16 * 15 / 16), both
    assert any(a and b and clip[0] != clip[1] for (a, b), clip in zip(pairs, ours))
    reference = RandomErasing(0.25, mode="const", max_count=1, num_splits=1, device="cpu", cube=False)
    random.seed(6)
    theirs = []
    for _ in range(len(ours)):
        clip = torch.ones(2, 3, 48, 64)
        reference(clip)
        theirs += [_zeros(f) for f in clip]
    ours = [b for clip in ours for b in clip]
    for k, what in enumerate(("top", "left", "height", "width")):
        assert_same_distribution([b[k] for b in ours if b], [b[k] for b in theirs if b], f"box {what}")


def recipe(size=224):
    """VideoMAE's fine-tuning recipe, as docs/video.md writes it."""
    return [
        video.Clip(16, stride=4, layout="CTHW"),
        ops.TimmRandAugment(CONFIG, interpolation="bicubic", fill=128),
        ops.Normalize(MEAN, STD),
        ops.RandomResizedCrop(size, scale=SCALE, ratio=RATIO, interpolation="bilinear", antialias=False),
        ops.RandomHorizontalFlip(),
        ops.VideoMAERandomErasing(0.25, mode="pixel"),
    ]


def test_the_recipe_gives_the_same_bytes_for_any_number_of_threads(videos):
    clip, *frame_ops = recipe(64)
    clip = video.Clip(6, stride=2, clips=3, layout="CTHW")
    one = clips(videos, *frame_ops, clip=clip, threads=1)
    assert one.shape == (len(SMALL) * 3, 3, 6, 64, 64)
    for threads in (2, 4):
        assert torch.equal(clips(videos, *frame_ops, clip=clip, threads=threads), one), threads
    assert not torch.equal(clips(videos, *frame_ops, clip=clip, threads=2, seed=5), one)
    # The full recipe builds as written.
    x = next(iter(nostall.Loader(str(videos), batch_size=2, pipeline=recipe(), output="torch")))[0]
    assert x.shape == (2, 3, 16, 224, 224)


@pytest.mark.parametrize("kwargs,param", [
    (dict(probability=1.5), "probability"), (dict(min_area=0.0), "min_area"),
    (dict(max_area=1.5), "max_area"), (dict(min_aspect=-1.0), "min_aspect"),
    (dict(max_aspect=0.0), "max_aspect"), (dict(mode="noise"), "mode"),
    (dict(max_count=65), "max_count"), (dict(min_count=3, max_count=2), "max_count"),
    (dict(cube=2), "cube"),
])
def test_erasing_arguments_are_bounded(kwargs, param):
    with pytest.raises((nostall.ConfigError, TypeError), match=param):
        ops.VideoMAERandomErasing(**kwargs)


def test_noise_needs_float_output(videos):
    with pytest.raises(nostall.ConfigError, match="float32"):
        nostall.Loader(str(videos), pipeline=[video.Clip(2), ops.CenterCrop(32),
                                              ops.VideoMAERandomErasing(mode="pixel")], dtype="uint8")
