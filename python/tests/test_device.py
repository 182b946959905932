"""Batches on a CUDA device (``device=``), as far as a machine without one can check them:
the errors, and the stager's decode and conversion run on the CPU against nostall's own
CPU pipeline. bench/gpu_train.py checks the rest on a GPU (docs/gpu.md)."""

import os
import warnings
import shutil

import pytest
import torch
from PIL import Image
from torchvision.io import decode_jpeg

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
        nostall.Loader(photos, device="cuda", decode="gpu", share="auto")


def one_image_folder(path, tmp_path):
    folder = tmp_path / os.path.basename(path)
    (folder / "c").mkdir(parents=True)
    shutil.copy(path, folder / "c" / "x.jpg")
    return str(folder)


class Queue:
    """Stands for the engine's queue of samples left to the device: hands out what it was
    given, a group at a time."""

    def __init__(self, queued):
        self.queued = list(queued)

    def take(self, most, timeout):
        taken, self.queued = self.queued[:most], self.queued[most:]
        return taken


def test_a_jpeg_decoded_by_the_stager_matches_the_cpu_pipeline(photos, tmp_path):
    """The stager's decode, crop, resize and flip of a deferred JPEG (here with the CPU's
    decoder) against nostall's CPU output for the same geometry: the whole image, resized
    to 96 x 128 and mirrored. Different decoders and resamplers: the same picture within a
    few levels."""
    files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(photos) for f in fs)[:8]
    queued = []
    for sample, path in enumerate(files):
        width, height = Image.open(path).size
        queued.append((3, sample, bytearray(open(path, "rb").read()),
                       (0.0, 0.0, float(width), float(height)), (128, 96), True))
    stager = _device.Stager("cpu", None, Queue(queued))
    # Batches taken in another order than the decoder's.
    for sample, path in reversed(list(enumerate(files))):
        pipeline = [ops.Resize((96, 128)), ops.RandomHorizontalFlip(1.0)]
        loader = nostall.Loader(one_image_folder(path, tmp_path), batch_size=1, shuffle=False,
                                pipeline=pipeline, dtype="uint8", layout="HWC")
        expected, labels = next(iter(loader))
        got, got_labels = stager.stage(torch.zeros_like(expected), labels,
                                       [(0, 3, sample, path)])
        diff = (got.int() - expected.int()).abs().float()
        assert got.shape == expected.shape and torch.equal(got_labels, labels)
        assert diff.mean() < 1.5, (path, diff.mean())
        assert diff.flatten().quantile(0.99) <= 6, path
    assert stager.metrics()["decoded_on_device"] == len(files)
    assert not stager.decoder.ready, "each decoded sample taken once"


def test_deferred_samples_land_in_their_slots_beside_the_cpu_s(photos):
    """A batch of four whose slots 1 and 3 were left to the device: those two are the
    decoder's, the others the engine's pixels as they came."""
    files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(photos) for f in fs)[:2]
    queued = [(0, 10 + i, bytearray(open(path, "rb").read()), (0.0, 0.0, 32.0, 32.0),
               (16, 16), False) for i, path in enumerate(files)]
    stager = _device.Stager("cpu", None, Queue(queued))
    host = torch.full((4, 16, 16, 3), 9, dtype=torch.uint8)
    got, _ = stager.stage(host, torch.zeros(4), [(3, 0, 11, files[1]), (1, 0, 10, files[0])])
    assert torch.equal(got[0], host[0]) and torch.equal(got[2], host[2])
    for slot, path in [(1, files[0]), (3, files[1])]:
        image = decode_jpeg(torch.frombuffer(bytearray(open(path, "rb").read()),
                                             dtype=torch.uint8))
        alone = _device._crop_resize_all([image], [((0.0, 0.0, 32.0, 32.0), (16, 16), False)])
        assert torch.equal(got[slot], alone[0])


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
    queued = [(0, 5, bytearray(bad.read_bytes()), (0.0, 0.0, 8.0, 8.0), (4, 4), False)]
    stager = _device.Stager("cpu", None, Queue(queued))
    with pytest.raises(nostall.SampleError, match="bad.jpg") as raised:
        stager.stage(torch.zeros(1, 4, 4, 3, dtype=torch.uint8), torch.zeros(1),
                     [(0, 0, 5, str(bad))])
    assert raised.value.sample_id == 5 and raised.value.cause == "corrupt"


def test_worker_nice_is_checked(photos):
    with pytest.raises(nostall.ConfigError, match="worker_nice=20"):
        nostall.Loader(photos, worker_nice=20)


def test_the_device_path_end_to_end_with_the_cpu_standing_in(photos, monkeypatch):
    """``Loader(device=...)`` through the engine's queue, the decoder's thread and the
    stager, the CPU standing in for the GPU: ``decode="gpu"`` leaves every JPEG to the
    decoder and gives the samples, labels and augmentation of ``decode="cpu"``, the pixels
    apart by the decoders' and resamplers' rounding, over two epochs."""
    stager = _device.Stager
    monkeypatch.setattr(_device, "resolve", lambda device: 0)
    monkeypatch.setattr(_device, "Stager",
                        lambda index, finish, queue=None: stager("cpu", finish, queue))
    settings = dict(batch_size=8, seed=5, threads=2, pipeline=nostall.imagenet_train(64),
                    device="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no CUDA runtime here to page-lock the buffers
        on_cpu = nostall.Loader(photos, decode="cpu", **settings)
        on_device = nostall.Loader(photos, decode="gpu", **settings)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    samples = 0
    for epoch in range(2):
        for (a, labels_a), (b, labels_b) in zip(on_cpu, on_device, strict=True):
            assert on_cpu.last_ids == on_device.last_ids and torch.equal(labels_a, labels_b)
            levels = (a - b).abs() * std * 255
            assert levels.mean() < 2.0, (epoch, levels.mean())
            samples += len(labels_a)
    device = on_device.metrics["device"]
    assert device["gpu_decoded"] >= samples  # with the next epoch's, begun ahead
    assert device["decoded_on_device"] >= samples
    assert on_cpu.metrics["device"]["decoded_on_device"] == 0


@pytest.mark.parametrize("erasing", [ops.RandomErasing(1.0), ops.TimmRandomErasing(1.0, mode="pixel"),
                                     ops.TimmRandomErasing(1.0, mode="const")])
def test_an_operator_on_the_delivered_sample_is_refused_with_a_device(photos, monkeypatch, erasing):
    """An erasing works on the normalised sample, which the device makes after the engine:
    refused naming it (it made the loader's constructor panic, or erased 8-bit values)."""
    monkeypatch.setattr(_device, "resolve", lambda device: 0)
    pipeline = [ops.RandomResizedCrop(64), ops.Normalize((0.5, 0.5, 0.5), (0.2, 0.2, 0.2)), erasing]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no CUDA runtime here to page-lock the buffers
        with pytest.raises(nostall.ConfigError, match=rf"{type(erasing).__name__}.*with a device"):
            nostall.Loader(photos, batch_size=8, pipeline=pipeline, device="cuda", decode="cpu")


def test_crops_resized_together_equal_each_alone(photos):
    """The decoder's crops are resized one by one and finished together by output size
    and mirroring: mixed sizes, mirrorings and a failed sample come out in order, each as
    it would alone."""
    files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(photos) for f in fs)[:4]
    images = [decode_jpeg(torch.frombuffer(bytearray(open(p, "rb").read()), dtype=torch.uint8))
              for p in files]
    failed = _device.Failed("device", "cpu")
    geometry = [((10.0, 20.0, 200.0, 150.0), (64, 48), True),
                ((0.0, 0.0, 300.0, 300.0), (32, 32), False),
                ((5.5, 7.25, 120.0, 90.0), (64, 48), False),
                ((0.0, 0.0, 50.0, 40.0), (64, 48), True),
                ((30.0, 30.0, 100.0, 100.0), (32, 32), True)]
    together = _device._crop_resize_all(images[:2] + [failed] + images[2:4],
                                        geometry[:2] + [geometry[4]] + geometry[2:4])
    assert together[2] is failed
    # A region outside the decoded image (one the header misstated) is one pixel of it.
    outside = _device._crop_resize_all([images[0]], [((1e6, 1e6, 10.0, 10.0), (8, 8), False)])
    assert outside[0].shape == (8, 8, 3)
    got = [together[i] for i in (0, 1, 3, 4)]
    for image, g, sample in zip(images, geometry[:4], got):
        alone = _device._crop_resize_all([image], [g])[0]
        width, height = g[1]
        assert sample.shape == (height, width, 3) and torch.equal(sample, alone)
