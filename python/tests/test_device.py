"""Batches on a CUDA device (``device=``), as far as a machine without one can check them:
the errors, and the stager's decode and conversion run on the CPU against nostall's own
CPU pipeline. bench/gpu_train.py checks the rest on a GPU (docs/gpu.md)."""

import os
import shutil

import pytest
import torch
from PIL import Image

import nostall
from nostall import _device, ops

needs_no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")


@needs_no_cuda
def test_asking_for_a_device_that_is_not_there_is_a_clear_error(photos):
    with pytest.raises(nostall.ConfigError, match="no CUDA device is available"):
        nostall.Loader(photos, device="cuda")
    with pytest.raises(nostall.ConfigError, match="no CUDA device is available"):
        nostall.Loader(photos, device="cuda:1")


def test_unknown_devices_and_decoders_are_refused(photos):
    with pytest.raises(nostall.ConfigError, match='use "cuda" or "cuda:N"'):
        nostall.Loader(photos, device="tpu")
    with pytest.raises(nostall.ConfigError, match='decode="bogus"'):
        nostall.Loader(photos, device="cuda", decode="bogus")
    with pytest.raises(nostall.ConfigError, match="torch tensors"):
        nostall.Loader(photos, device="cuda", output="numpy")
    with pytest.raises(nostall.ConfigError, match="share="):
        nostall.Loader(photos, device="cuda", share="auto")


def one_image_folder(path, tmp_path):
    folder = tmp_path / os.path.basename(path)
    (folder / "c").mkdir(parents=True)
    shutil.copy(path, folder / "c" / "x.jpg")
    return str(folder)


def test_a_jpeg_decoded_by_the_stager_matches_the_cpu_pipeline(photos, tmp_path):
    """The stager's decode, crop, resize and flip of a deferred JPEG (here with the CPU's
    decoder) against nostall's CPU output for the same geometry: the whole image, resized
    to 96 x 128 and mirrored. Different decoders and resamplers: the same picture within a
    few levels."""
    files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(photos) for f in fs)[:8]
    stager = _device.Stager("cpu", None)
    for path in files:
        pipeline = [ops.Resize((96, 128)), ops.RandomHorizontalFlip(1.0)]
        loader = nostall.Loader(one_image_folder(path, tmp_path), batch_size=1, shuffle=False,
                                pipeline=pipeline, dtype="uint8", layout="HWC")
        expected, labels = next(iter(loader))
        width, height = Image.open(path).size
        deferred = [(0, bytearray(open(path, "rb").read()),
                     (0.0, 0.0, float(width), float(height)), True, 0, path)]
        got, got_labels = stager.stage(torch.zeros_like(expected), labels, deferred)
        diff = (got.int() - expected.int()).abs().float()
        assert got.shape == expected.shape and torch.equal(got_labels, labels)
        assert diff.mean() < 1.5, (path, diff.mean())
        assert diff.flatten().quantile(0.99) <= 6, path
    assert stager.metrics()["decoded_on_device"] == len(files)


def test_the_stager_converts_and_normalises_as_the_cpu_pipeline(photos):
    """8-bit HWC pixels finished by the stager against the CPU's float32 CHW output of the
    same pipeline and seed: equal up to float rounding, NCHW in shape, channels-last in
    memory."""
    train = nostall.imagenet_train(64)
    geometry = [op for op in train if not isinstance(op, ops.Normalize)]
    as_u8 = nostall.Loader(photos, batch_size=8, seed=4, pipeline=geometry, dtype="uint8",
                           layout="HWC")
    as_f32 = nostall.Loader(photos, batch_size=8, seed=4, pipeline=train)
    finish = {"dtype": "float32", "layout": "CHW", "mean": [0.485, 0.456, 0.406],
              "std": [0.229, 0.224, 0.225]}
    stager = _device.Stager("cpu", finish)
    for (pixels, labels), (expected, _) in zip(as_u8, as_f32):
        got, _ = stager.stage(pixels, labels, [])
        assert got.shape == expected.shape
        assert got.is_contiguous(memory_format=torch.channels_last)
        assert (got - expected).abs().max() < 1e-4


def test_a_jpeg_no_decoder_can_read_is_an_error_naming_it(tmp_path):
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0" + b"\x00" * 64)
    stager = _device.Stager("cpu", None)
    deferred = [(0, bytearray(bad.read_bytes()), (0.0, 0.0, 8.0, 8.0), False, 5, str(bad))]
    with pytest.raises(nostall.SampleError, match="bad.jpg") as raised:
        stager.stage(torch.zeros(1, 4, 4, 3, dtype=torch.uint8), torch.zeros(1), deferred)
    assert raised.value.sample_id == 5 and raised.value.cause == "corrupt"
