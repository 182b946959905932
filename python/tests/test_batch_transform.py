"""``Loader(batch_transform=fn)``: the user's function on each batch before it is handed
over; its generator keyed by (seed, rank, epoch, batch), so its draws are the same for any
thread count and after a resume; on the device, in the stager's stream."""

import warnings

import pytest
import torch

import nostall
from nostall import _device

SETTINGS = dict(batch_size=8, seed=3, pipeline=nostall.imagenet_train(32))


def noisy(images, labels, generator):
    """A transform with draws: noise from the generator it is given."""
    return images + torch.randn(images.shape, generator=generator, device=images.device), labels


def epoch(loader):
    return [(images.clone(), labels.clone()) for images, labels in loader]


def test_the_transform_gets_each_batch_and_its_result_is_handed_over(photos):
    plain = epoch(nostall.Loader(photos, threads=2, **SETTINGS))
    seen = []

    def double(images, labels):
        seen.append(len(labels))
        return images * 2, labels + 100

    transformed = epoch(nostall.Loader(photos, threads=2, batch_transform=double, **SETTINGS))
    assert seen == [len(labels) for _, labels in plain]
    for (a, la), (b, lb) in zip(plain, transformed, strict=True):
        assert torch.equal(a * 2, b) and torch.equal(la + 100, lb)


def test_its_draws_are_the_same_for_any_thread_count_and_after_a_resume(photos):
    one = epoch(nostall.Loader(photos, threads=1, batch_transform=noisy, **SETTINGS))
    two = epoch(nostall.Loader(photos, threads=2, batch_transform=noisy, **SETTINGS))
    for (a, _), (b, _) in zip(one, two, strict=True):
        assert torch.equal(a, b)
    # Each batch its own draw.
    plain = epoch(nostall.Loader(photos, threads=1, **SETTINGS))
    assert not torch.allclose(one[0][0] - plain[0][0], one[1][0] - plain[1][0])
    # Stop after two batches, resume in a new loader: the rest as in one run.
    first = nostall.Loader(photos, threads=2, batch_transform=noisy, **SETTINGS)
    it = iter(first)
    next(it), next(it)
    state = first.state_dict()
    resumed = nostall.Loader(photos, threads=2, batch_transform=noisy, **SETTINGS)
    resumed.load_state_dict(state)
    rest = epoch(resumed)
    assert len(rest) == len(one) - 2
    for (a, _), (b, _) in zip(one[2:], rest, strict=True):
        assert torch.equal(a, b)


def test_the_generator_follows_the_output(photos):
    kinds = []

    def draw(images, labels, generator):
        kinds.append(type(generator).__module__.split(".")[0])
        return images, labels

    for output in ("torch", "numpy"):
        loader = nostall.Loader(photos, threads=1, output=output, batch_transform=draw, **SETTINGS)
        next(iter(loader))
    assert kinds == ["torch", "numpy"]


def test_views_come_as_their_tuple(photos):
    from nostall import ops

    views = [[ops.RandomResizedCrop(32), ops.Normalize(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))], [ops.RandomResizedCrop(16), ops.Normalize(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))]]
    shapes = []

    def look(images, labels):
        shapes.append(tuple(tuple(v.shape[1:]) for v in images))
        return images, labels

    next(iter(nostall.Loader(photos, batch_size=4, pipeline=views, batch_transform=look)))
    assert shapes == [((3, 32, 32), (3, 16, 16))]


def test_a_bad_transform_is_refused_naming_it(photos):
    with pytest.raises(TypeError, match="not int"):
        nostall.Loader(photos, batch_transform=3, **SETTINGS)

    def forgets_labels(images, labels):
        return images

    loader = nostall.Loader(photos, batch_transform=forgets_labels, **SETTINGS)
    with pytest.raises(TypeError, match="forgets_labels returned Tensor: return \\(images, labels\\)"):
        next(iter(loader))


def test_on_the_device_it_runs_in_the_stagers_stream_after_the_conversion(photos, monkeypatch):
    """The device path with the CPU standing in for the GPU (as test_device.py does): the
    transform sees the converted batch where the stager put it, and its draws are the
    CPU path's."""
    stager = _device.Stager
    monkeypatch.setattr(_device, "resolve", lambda device: 0)
    monkeypatch.setattr(_device, "Stager", lambda index, finish, queue=None: stager("cpu", finish, queue))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no CUDA runtime here to page-lock the buffers
        on_device = nostall.Loader(photos, threads=2, device="cuda", decode="cpu", batch_transform=noisy,
                                   **SETTINGS)
        on_cpu = nostall.Loader(photos, threads=2, device="cuda", decode="cpu", **SETTINGS)
    host = epoch(nostall.Loader(photos, threads=2, batch_transform=noisy, **SETTINGS))
    plain = epoch(nostall.Loader(photos, threads=2, **SETTINGS))
    for (a, _), (b, _), (c, _), (d, _) in zip(epoch(on_device), epoch(on_cpu), host, plain, strict=True):
        # The same draws as on the host path, added after the stager's conversion.
        torch.testing.assert_close(a - b, c - d, atol=1e-4, rtol=0)
        assert 0.5 < (a - b).std().item() < 1.5
