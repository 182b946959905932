"""Resizing filters against torchvision.transforms.v2 on real photographs."""

import pathlib

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import InterpolationMode, v2

import nostall
from nostall import ops

COUNT = 16


@pytest.fixture(scope="module")
def pngs(photos, tmp_path_factory):
    """The demo photographs, 160 × 120 (a bilinear shrink by PIL), as lossless PNGs."""
    out = tmp_path_factory.mktemp("pngs")
    (out / "all").mkdir()
    for i, path in enumerate(sorted(pathlib.Path(photos).rglob("*.jpg"))[:COUNT]):
        with Image.open(path) as image:
            image.convert("RGB").resize((160, 120), Image.BILINEAR).save(out / "all" / f"{i:02d}.png")
    return out


def nostall_resized(pngs, size, interpolation, antialias=True):
    loader = nostall.Loader(str(pngs), batch_size=COUNT, shuffle=False, dtype="uint8", output="numpy",
                            pipeline=[ops.Resize(size, interpolation=interpolation, antialias=antialias)])
    images, _ = next(iter(loader))
    return torch.from_numpy(np.array(images))


def torchvision_resized(pngs, size, interpolation, antialias=True):
    resize = v2.Resize(size, interpolation=InterpolationMode(interpolation), antialias=antialias)
    paths = sorted((pngs / "all").glob("*.png"))
    return torch.stack([resize(torch.from_numpy(np.array(Image.open(p).convert("RGB"))).permute(2, 0, 1))
                        for p in paths])


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic", "nearest"])
@pytest.mark.parametrize("size", [(48, 64), (90, 70), (200, 256)], ids=str)
def test_each_filter_matches_torchvision_v2(pngs, interpolation, size):
    got = nostall_resized(pngs, size, interpolation)
    want = torchvision_resized(pngs, size, interpolation)
    diff = (got.int() - want.int()).abs()
    within, mean = (diff <= 1).float().mean().item(), diff.float().mean().item()
    assert within >= 0.99 and mean <= 0.5, f"{within:.4%} within 1 level, mean {mean:.3f}"
    if interpolation == "nearest":
        assert torch.equal(got, want)


@pytest.mark.parametrize("size", [(48, 64), (30, 37), (90, 70), (200, 256)], ids=str)
def test_bilinear_without_antialiasing_matches_torchvision_v2(pngs, size):
    """torch's two-pixel interpolation at every scale (the video classification recipe's
    `Resize(..., antialias=False)`), on uint8 tensors and on floats as that recipe has them."""
    got = nostall_resized(pngs, size, "bilinear", antialias=False)
    for floats in (False, True):
        want = torchvision_resized(pngs, size, "bilinear", antialias=False) if not floats else torch.stack([
            v2.Resize(size, antialias=False)(v2.ToDtype(torch.float32, scale=True)(
                torch.from_numpy(np.array(Image.open(p).convert("RGB"))).permute(2, 0, 1))) * 255
            for p in sorted((pngs / "all").glob("*.png"))]).round()
        diff = (got.int() - want.int()).abs()
        within, mean = (diff <= 1).float().mean().item(), diff.float().mean().item()
        assert within >= 0.99 and mean <= 0.5, f"{within:.4%} within 1 level, mean {mean:.3f}"
    # Shrinking a quarter without antialiasing skips pixels: far from the antialiased.
    aliased = nostall_resized(pngs, (30, 40), "bilinear", antialias=False)
    smooth = nostall_resized(pngs, (30, 40), "bilinear")
    assert (aliased.int() - smooth.int()).abs().float().mean() > 2


def _random_resized(pngs, op, threads=2, seed=0):
    loader = nostall.Loader(str(pngs), batch_size=COUNT, shuffle=False, dtype="uint8", output="numpy",
                            threads=threads, seed=seed, pipeline=[op, ops.CenterCrop(60)])
    images, _ = next(iter(loader))
    return torch.from_numpy(np.array(images))


def test_random_resize_is_v2s_resize_at_its_draw_and_the_same_for_any_thread_count(pngs):
    # One length to draw: v2's RandomResize(90, 91) is Resize(90).
    got = _random_resized(pngs, ops.RandomResize(90, 91, interpolation="bicubic"))
    want = v2.CenterCrop(60)(torchvision_resized(pngs, 90, "bicubic"))
    diff = (got.int() - want.int()).abs()
    within, mean = (diff <= 1).float().mean().item(), diff.float().mean().item()
    assert within >= 0.99 and mean <= 0.5, f"{within:.4%} within 1 level, mean {mean:.3f}"
    assert ops.from_torchvision(v2.RandomResize(60, 200)) == [ops.RandomResize(60, 200)]
    # Drawn per sample: the same bytes for 1, 2 and 4 threads, others for another seed.
    op = ops.RandomResize(60, 200)
    one = _random_resized(pngs, op, threads=1)
    for threads in (2, 4):
        assert torch.equal(_random_resized(pngs, op, threads=threads), one)
    assert not torch.equal(_random_resized(pngs, op, seed=1), one)
    with pytest.raises(nostall.ConfigError, match="max_size"):
        ops.RandomResize(60, 60)


def test_interpolation_is_checked_and_kept():
    assert ops.Resize(32, interpolation="bicubic").interpolation == "bicubic"
    assert ops.RandomResizedCrop(32).interpolation == "bilinear"
    assert ops.RandomResizedCrop(32).antialias is True
    with pytest.raises(nostall.ConfigError, match="interpolation takes one of"):
        ops.Resize(32, interpolation="lanczos")
    assert ops.RandomResizedCrop(32, antialias=False).antialias is False
    assert ops.Resize(32, antialias=False).antialias is False
    with pytest.raises(nostall.ConfigError, match="antialias False is not supported with 'bicubic'"):
        ops.RandomResizedCrop(32, interpolation="bicubic", antialias=False)
