"""Views of videos (a list of video pipelines, each its own Clip: CVRL's and ρBYOL's pairs
of clips, VideoMAE's repeated sampling) and clips on a device (``device=``, the CPU
standing in for the GPU as in test_device.py), on real camera footage (nostall-video's
tests/footage)."""

import io
import json
import tarfile
import warnings

import pytest
import torch

import nostall
from nostall import _device, ops, video

from conftest import SMALL_VIDEOS as SMALL

MEAN, STD = (0.45, 0.4, 0.35), (0.225, 0.25, 0.2)



def cvrl(frames, size, layout="TCHW"):
    """A view: a random clip, its own crop, flip and jitter."""
    return [video.Clip(frames, stride=2, layout=layout), ops.Resize(48), ops.RandomCrop(size),
            ops.RandomHorizontalFlip(), ops.ColorJitter(brightness=0.4, contrast=0.4)]


def epoch(root, pipeline, **kwargs):
    """The epoch's batches, cloned (views as tuples)."""
    kwargs = dict(dict(batch_size=2, seed=7, threads=2, shuffle=False, dtype="uint8"), **kwargs)
    out = []
    for x, labels in nostall.Loader(str(root), pipeline=pipeline, **kwargs):
        x = tuple(v.clone() for v in x) if isinstance(x, tuple) else x.clone()
        out.append((x, labels.clone()))
    return out


def test_the_batch_is_a_tuple_of_one_clip_tensor_a_view_in_its_clips_layout(videos):
    views = [cvrl(8, 32), cvrl(4, 24, layout="CTHW"),
             [video.Clip(4, clips=2, sampler="uniform"), ops.Resize(40), ops.CenterCrop(16)]]
    batches = epoch(videos, views)
    assert sum(len(labels) for _, labels in batches) == len(SMALL)
    (x, labels), *_ = batches
    assert isinstance(x, tuple) and labels.shape == (2,)
    assert [tuple(v.shape) for v in x] == [(2, 8, 3, 32, 32), (2, 3, 4, 24, 24),
                                            (2, 2, 4, 3, 16, 16)]
    assert all(v.dtype == torch.uint8 for v in x)
    # Views of one buffer: no copy was made to split them.
    loader = nostall.Loader(str(videos), batch_size=2, pipeline=views, dtype="uint8")
    x, _ = next(iter(loader))
    assert x[1].data_ptr() - x[0].data_ptr() == 8 * 3 * 32 * 32
    # Two views of one recipe draw apart: their own clips and crops.
    pair = epoch(videos, [cvrl(8, 32), cvrl(8, 32)])
    for (a, b), _ in pair:
        assert all(not torch.equal(a[i], b[i]) for i in range(len(a)))


def test_each_view_draws_as_it_would_whatever_the_other_views_are(videos):
    """View k's draws are keyed by the sample and k alone: a view comes out the same beside
    other views, or alone in a list of one (the engine's tests check a view against its
    pipeline alone with the view's draws, byte for byte)."""
    a, b = cvrl(8, 32), cvrl(4, 24, layout="CTHW")
    both = epoch(videos, [a, b], threads=1)
    first = epoch(videos, [a], threads=4)
    other = [video.Clip(2, sampler="center"), ops.CenterCrop(8)]
    second = epoch(videos, [other, b], threads=2)
    for (views, labels), ((one,), _), ((_, two), _) in zip(both, first, second, strict=True):
        assert torch.equal(views[0], one) and torch.equal(views[1], two)


def test_views_without_draws_equal_their_pipelines_alone(videos):
    """Clips and crops that draw nothing: each view is byte for byte its pipeline's, run
    by a loader of its own."""
    views = [[video.Clip(6, sampler="spread"), ops.Resize(40), ops.CenterCrop(32)],
             [video.Clip(4, sampler="center", layout="CTHW"), ops.Resize(24), ops.CenterCrop(20),
              ops.Normalize(MEAN, STD)]]
    together = epoch(videos, views, dtype="float32")
    for k, view in enumerate(views):
        alone = epoch(videos, view, dtype="float32")
        for (x, labels), (want, want_labels) in zip(together, alone, strict=True):
            assert torch.equal(x[k], want) and torch.equal(labels, want_labels)


def test_views_of_one_shape_stack_view_major(videos):
    views = [cvrl(4, 24), cvrl(4, 24), cvrl(8, 32)]
    one_by_one = epoch(videos, views)
    stacked = epoch(videos, views, stack_views=True)
    for (x, labels), (groups, _) in zip(one_by_one, stacked, strict=True):
        n = len(labels)
        assert [tuple(g.shape) for g in groups] == [(2, n, 4, 3, 24, 24), (1, n, 8, 3, 32, 32)]
        assert torch.equal(groups[0][1], x[1]) and torch.equal(groups[1][0], x[2])


def test_the_views_travel_as_text(videos):
    text = "[[Clip(4), Resize(40), CenterCrop(32)], [Clip(2, layout='CTHW'), RandomCrop(16)]]"
    (x, _), *_ = epoch(videos, text)
    assert [tuple(v.shape) for v in x] == [(2, 4, 3, 32, 32), (2, 3, 2, 16, 16)]


def test_a_records_video_field_is_a_tuple_over_the_views(videos, tmp_path):
    """WebDataset shards read with fields=: the video field holds one tensor a view, as the
    loader hands views over without fields, beside the sample's other fields."""
    files = sorted(p for p in videos.rglob("*") if p.is_file())
    shards = tmp_path / "shards"
    shards.mkdir()
    with tarfile.open(shards / "shard-000000.tar", "w") as tar:
        for i, path in enumerate(files):
            for name, payload in [(f"s{i:04d}{path.suffix}", path.read_bytes()),
                                  (f"s{i:04d}.json", json.dumps({"n": i}).encode()),
                                  (f"s{i:04d}.cls", str(i % 3).encode())]:
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    views = [cvrl(4, 24), cvrl(2, 16, layout="CTHW")]
    kwargs = dict(pipeline=views, batch_size=64, shuffle=False, seed=3, dtype="uint8")
    fields = {"video": "mp4;mkv;webm", "meta": "json", "label": "cls"}
    (batch,) = list(nostall.Loader(str(shards), fields=fields, **kwargs))
    ((plain, labels),) = list(nostall.Loader(str(shards), **kwargs))
    assert isinstance(batch["video"], tuple) and len(batch["video"]) == 2
    assert all(torch.equal(a, b) for a, b in zip(batch["video"], plain, strict=True))
    assert [m["n"] for m in batch["meta"]] == list(range(len(files)))
    assert batch["label"].tolist() == labels.tolist() == [i % 3 for i in range(len(files))]
    audio = dict(fields, audio=nostall.Field("mp4;mkv;webm", kind="audio", sample_rate=16000,
                                               length=800))
    with pytest.raises(nostall.ConfigError, match="each view has clips of its own"):
        nostall.Loader(str(shards), fields=audio, **kwargs)


@pytest.mark.parametrize("pipeline,kwargs,says", [
    ([[video.Clip(4), ops.CenterCrop(16)], [ops.CenterCrop(16)]], {}, "all of images or all of videos"),
    ([[ops.CenterCrop(16)], [video.Clip(4), ops.CenterCrop(16)]], {}, "all of images or all of videos"),
    ("[[Clip(4), CenterCrop(16)], [CenterCrop(16)]]", {}, "view 1 does not start with a Clip"),
    ([cvrl(4, 24), cvrl(4, 24)], dict(mix=nostall.Mixup(num_classes=3)), "Mixup"),
    ([cvrl(4, 24), cvrl(4, 24)], dict(image_size=64), "image_size"),
    ([cvrl(4, 24), cvrl(4, 24)], dict(output="dlpack"), "output"),
    ([cvrl(4, 24), cvrl(4, 24)], dict(layout="HWC"), None),
], ids=["video-then-image", "image-then-video", "text", "mixup", "image_size", "dlpack", "hwc"])
def test_what_views_of_videos_do_not_take_is_a_config_error(videos, pipeline, kwargs, says):
    if says is None:
        # Frames first in HWC: each view [T, H, W, C], as a video pipeline alone.
        (x, _), *_ = epoch(videos, pipeline, **kwargs)
        assert [tuple(v.shape) for v in x] == [(2, 4, 24, 24, 3)] * 2
        return
    with pytest.raises(nostall.ConfigError, match=says):
        nostall.Loader(str(videos), batch_size=2, pipeline=pipeline, **kwargs)


@pytest.fixture
def cpu_for_cuda(monkeypatch):
    """``device="cuda"`` with the CPU standing in: the stager finishes the batches on it."""
    stager = _device.Stager
    made = []

    def on_cpu(index, finish, queue=None):
        made.append((finish, queue))
        return stager("cpu", finish, queue)

    monkeypatch.setattr(_device, "resolve", lambda device: 0)
    monkeypatch.setattr(_device, "Stager", on_cpu)
    return made


def run(root, pipeline, epoch_=0, **kwargs):
    """Epoch ``epoch_``'s batches, cloned."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no CUDA runtime here to page-lock the buffers
        loader = nostall.Loader(str(root), pipeline=pipeline, **kwargs)
    loader.set_epoch(epoch_)
    return [(x.clone(), labels.clone()) for x, labels in loader]


@pytest.mark.parametrize("clip,layout", [
    (video.Clip(6, stride=2), "CHW"),
    (video.Clip(6, stride=2, layout="CTHW"), "CHW"),
    (video.Clip(4, clips=2, sampler="uniform"), "CHW"),
    (video.Clip(6, stride=2), "HWC"),
], ids=["TCHW", "CTHW", "clips", "THWC"])
def test_clips_finished_on_the_device_equal_the_cpus(videos, cpu_for_cuda, clip, layout):
    """The engine prepares 8-bit frames (frames first, channels last), the stager converts,
    normalises and lays them out as the Clip and the loader ask: the CPU pipeline's float
    output within float rounding, over two epochs, with the same labels."""
    pipeline = [clip, ops.Resize(48), ops.RandomCrop(32), ops.RandomHorizontalFlip(),
                ops.ColorJitter(brightness=0.4), ops.Normalize(MEAN, STD)]
    kwargs = dict(batch_size=2, seed=9, threads=2, layout=layout)
    for epoch_ in range(2):
        want = run(videos, pipeline, epoch_, **kwargs)
        got = run(videos, pipeline, epoch_, device="cuda", **kwargs)
        assert len(got) == len(want) == 3
        for (x, labels), (y, want_labels) in zip(got, want, strict=True):
            assert x.shape == y.shape and x.dtype == torch.float32, (x.shape, y.shape)
            assert torch.equal(labels, want_labels)
            assert (x - y).abs().max() < 1e-4
    finish, queue = cpu_for_cuda[-1]
    assert finish["clip"] == clip.layout and finish["layout"] == layout, finish
    assert queue is None, "no JPEG decoder for clips"


def test_uint8_clips_on_the_device_are_the_cpus_bytes(videos, cpu_for_cuda):
    pipeline = [video.Clip(4, layout="CTHW"), ops.Resize(40), ops.RandomCrop(32)]
    kwargs = dict(batch_size=2, seed=2, threads=2, dtype="uint8")
    got = run(videos, pipeline, device="cuda", **kwargs)
    want = run(videos, pipeline, **kwargs)
    for (x, _), (y, _) in zip(got, want, strict=True):
        assert x.shape == y.shape == (len(x), 3, 4, 32, 32) and torch.equal(x, y)


@pytest.mark.parametrize("pipeline,kwargs,says", [
    ([video.Clip(4), ops.CenterCrop(16), ops.Python(lambda clip: clip)], {}, "with a device"),
    ([video.Clip(4), ops.CenterCrop(16)], dict(decode="gpu"), "videos are decoded on the CPU"),
    ([[video.Clip(4), ops.CenterCrop(16)]] * 2, {}, "views are prepared on the CPU"),
    ([video.Clip(4), ops.CenterCrop(16)], dict(mix=nostall.Mixup(num_classes=3)), "Mixup"),
], ids=["python", "decode-gpu", "views", "mixup"])
def test_what_clips_on_a_device_cannot_take_is_a_config_error(videos, cpu_for_cuda, pipeline,
                                                              kwargs, says):
    with pytest.raises(nostall.ConfigError, match=says):
        run(videos, pipeline, batch_size=2, device="cuda", **kwargs)
