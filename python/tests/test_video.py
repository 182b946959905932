"""Video clips through nostall.Loader on real camera footage (nostall-video's
tests/footage): the Clip operator as a Python object, batches of clips in both layouts,
the image operators on each frame with torchvision.transforms.v2's semantics on a video
tensor (one draw per clip), and refusals that name what is wrong."""

import gc
import io
import json
import pickle
import shutil
import tarfile

import numpy as np
import pytest
import torch
from torchvision.transforms import v2

import nostall
from nostall import ops, video

from conftest import FOOTAGE, SMALL_VIDEOS as SMALL




def clips(root, *frame_ops, clip=None, **kwargs):
    loader = nostall.Loader(str(root), batch_size=64, shuffle=False, seed=4, output="torch",
                            pipeline=[clip or video.Clip(6, sampler="spread"), *frame_ops], **kwargs)
    batches = list(loader)
    return torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])


def test_clip_is_a_python_object_with_its_parameters():
    clip = video.Clip(16, stride=2, sampler="uniform", clips=3)
    assert (clip.frames, clip.stride, clip.fps, clip.sampler, clip.clips, clip.layout) == \
        (16, 2, None, "uniform", 3, "TCHW")
    assert repr(clip) == "Clip(frames=16, stride=2, fps=None, sampler='uniform', clips=3, layout='TCHW')"
    assert pickle.loads(pickle.dumps(clip)) == clip
    assert video.Clip(8, fps=4.0) != video.Clip(8)
    for bad, says in [(dict(frames=0), "frames"), (dict(frames=8, stride=2, fps=5.0), "stride"),
                      (dict(frames=8, sampler="nearby"), "sampler"), (dict(frames=8, clips=65), "clips")]:
        with pytest.raises(nostall.ConfigError, match=says):
            video.Clip(**bad)


def test_a_batch_is_frames_first_or_channels_first(videos):
    n = sum(1 for _ in videos.rglob("*.*"))
    x, labels = clips(videos, ops.Resize(40), ops.CenterCrop(32), dtype="uint8")
    assert x.shape == (n, 6, 3, 32, 32) and x.dtype == torch.uint8
    assert sorted(set(labels.tolist())) == list(range(len(list(videos.iterdir()))))
    y, _ = clips(videos, ops.Resize(40), ops.CenterCrop(32), dtype="uint8",
                 clip=video.Clip(6, sampler="spread", layout="CTHW"))
    assert y.shape == (n, 3, 6, 32, 32)
    assert torch.equal(y, x.permute(0, 2, 1, 3, 4))
    normalized, _ = clips(videos, ops.Resize(40), ops.CenterCrop(32),
                          ops.Normalize((0.45, 0.45, 0.45), (0.225, 0.225, 0.225)))
    assert normalized.dtype == torch.float32
    want = (x.float() / 255 - 0.45) / 0.225
    assert (normalized - want).abs().max() < 1e-4


def test_frame_operators_match_torchvision_v2_on_the_video_tensor(videos):
    frames, _ = clips(videos, ops.CenterCrop((240, 320)), dtype="uint8")
    got, _ = clips(videos, ops.Resize(72), ops.CenterCrop(64), dtype="uint8")
    want = torch.stack([v2.Compose([v2.Resize(72, antialias=True), v2.CenterCrop(64)])(clip)
                        for clip in frames])
    diff = (got.int() - want.int()).abs()
    assert (diff <= 1).float().mean() >= 0.99 and diff.float().mean() <= 0.5


def test_each_clip_is_flipped_whole_or_not_by_its_own_draw(videos):
    frames, _ = clips(videos, ops.CenterCrop((240, 320)), dtype="uint8")
    flipped, _ = clips(videos, ops.CenterCrop((240, 320)), ops.RandomHorizontalFlip(), dtype="uint8")
    decisions = []
    for original, got in zip(frames, flipped):
        per_frame = [torch.equal(g, o.flip(-1)) and not torch.equal(g, o) for o, g in zip(original, got)]
        assert all(per_frame) or (not any(per_frame) and torch.equal(got, original))
        decisions.append(per_frame[0])
    assert len(set(decisions)) == 2, decisions  # some flipped, some not


def test_a_video_pipeline_refuses_what_does_not_fit(videos):
    with pytest.raises(TypeError, match="Clip comes first"):
        nostall.Loader(str(videos), pipeline=[ops.Resize(32), video.Clip(4)])
    with pytest.raises(nostall.ConfigError, match="output size varies"):
        nostall.Loader(str(videos), pipeline=[video.Clip(4), ops.Resize(32)])
    with pytest.raises(nostall.ConfigError, match="no videos"):
        nostall.Loader(nostall.demo_photos(), pipeline=[video.Clip(4), ops.CenterCrop(32)])


def test_frame_index_cache_keeps_the_indexes_beside_the_datasets_index(videos, tmp_path, monkeypatch):
    """Each video's frame index kept in a file beside the dataset's own index, which the
    next loader (a new process) reads back; 0 keeps none. The clips are the same."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("NOSTALL_CACHE_DIR", str(cache))

    def run(bound):
        got, _ = clips(videos, ops.Resize(40), ops.CenterCrop(32), dtype="uint8", frame_index_cache=bound)
        gc.collect()  # the loader gone, its indexes written
        return got

    off = run(0)
    assert [p.name.split(".", 1)[1] for p in cache.iterdir()] == ["video.idx"], "0 keeps none"
    assert torch.equal(run("1MiB"), off)
    (catalog,), (kept,) = cache.glob("*.video.idx"), cache.glob("*.video-frames.idx")
    assert kept.name[:16] == catalog.name[:16], "named by the dataset, as its index"
    assert 0 < kept.stat().st_size <= 1 << 20
    assert torch.equal(run(1 << 20), off), "read back"
    with pytest.raises(nostall.ConfigError, match="frame_index_cache"):
        run("35%")


def test_webdataset_shards_with_video_members_give_the_folders_clips(videos, tmp_path):
    files = sorted(p for p in videos.rglob("*") if p.is_file())
    shards = tmp_path / "shards"
    shards.mkdir()
    with tarfile.open(shards / "shard-000000.tar", "w") as tar:
        for i, path in enumerate(files):
            for name, payload in [(f"s{i:04d}{path.suffix}", path.read_bytes()),
                                  (f"s{i:04d}.cls", str(i % 3).encode())]:
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    ops_ = (ops.Resize(40), ops.CenterCrop(32))
    from_shards, labels = clips(shards, *ops_, dtype="uint8")
    assert labels.tolist() == [i % 3 for i in range(len(files))]
    # 'spread' takes the same frames of a video wherever it is stored.
    by_file = {p.name: x for p, x in zip(sorted(files, key=lambda p: (p.parent.name, p.name)),
                                         clips(videos, *ops_, dtype="uint8")[0])}
    for path, got in zip(files, from_shards):
        assert torch.equal(got, by_file[path.name]), path.name


def sentences(count):
    """English sentences (Python's own help topics), as captions."""
    import re

    from pydoc_data.topics import topics

    text = " ".join(topics[k] for k in sorted(topics))
    found = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if 20 <= len(s.strip()) <= 200]
    return [" ".join(s.split()) for s in found[:count]]


def test_a_manifests_video_segments_come_with_their_captions_tokenized(tmp_path):
    """JSON lines of (video, start, end, caption, label): each clip is drawn within its
    segment, its caption tokenized beside it, and the clips are those of the manifest read
    without fields."""
    open_clip = pytest.importorskip("open_clip")
    names = ["h264_bframes.mp4", "vp9.webm"]
    for name in names:
        shutil.copy(FOOTAGE / name, tmp_path / name)
    texts = sentences(4)
    rows = [{"video": name, "start": start, "end": start + 1.0, "caption": texts[2 * i + j],
             "label": ["walk", "run"][j]}
            for i, name in enumerate(names) for j, start in enumerate((0.0, 1.5))]
    manifest = tmp_path / "clips.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tokenizer = nostall.Tokenizer(open_clip.get_tokenizer("ViT-B-32"), length=32)
    kwargs = dict(pipeline=[video.Clip(4, sampler="spread"), ops.Resize(40), ops.CenterCrop(32)],
                  batch_size=2, shuffle=False, seed=3, dtype="uint8", output="torch")
    fields = {"video": "video", "tokens": nostall.Field("text", tokenizer=tokenizer), "caption": "text"}
    with_text = list(nostall.Loader(str(manifest), fields=fields, **kwargs))
    plain = list(nostall.Loader(str(manifest), **kwargs))
    ids_of = dict(zip(texts, tokenizer(texts)[0]))
    assert [c for b in with_text for c in b["caption"]] == texts
    for batch, (clips_, labels) in zip(with_text, plain):
        assert batch["video"].shape == (2, 4, 3, 32, 32)
        assert torch.equal(batch["video"], clips_)
        for row, caption in enumerate(batch["caption"]):
            assert torch.equal(batch["tokens"][0][row], ids_of[caption])
        assert labels.tolist() == [1, 0]  # the class names in sorted order: run, walk
    # The segments differ, so their clips do.
    assert not torch.equal(plain[0][0][0], plain[0][0][1])


def test_webdataset_videos_come_with_their_caption_json_and_label(videos, tmp_path):
    files = sorted(p for p in videos.rglob("*") if p.is_file())
    texts = sentences(len(files))
    shards = tmp_path / "shards"
    shards.mkdir()
    with tarfile.open(shards / "shard-000000.tar", "w") as tar:
        for i, path in enumerate(files):
            for name, payload in [(f"s{i:04d}{path.suffix}", path.read_bytes()),
                                  (f"s{i:04d}.txt", texts[i].encode()),
                                  (f"s{i:04d}.json", json.dumps({"n": i}).encode()),
                                  (f"s{i:04d}.cls", str(i % 3).encode())]:
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    fields = {"video": "mp4;mkv;webm", "caption": "txt", "meta": "json", "label": "cls"}
    kwargs = dict(pipeline=[video.Clip(4, sampler="spread"), ops.Resize(40), ops.CenterCrop(32)],
                  batch_size=64, shuffle=False, seed=3, dtype="uint8", output="torch")
    (batch,) = list(nostall.Loader(str(shards), fields=fields, **kwargs))
    (plain, labels), = list(nostall.Loader(str(shards), **kwargs))
    assert torch.equal(batch["video"], plain)
    assert batch["caption"] == texts
    assert [m["n"] for m in batch["meta"]] == list(range(len(files)))
    assert batch["label"].tolist() == labels.tolist() == [i % 3 for i in range(len(files))]


KINETICS = dict(mean=(0.43216, 0.394666, 0.37645), std=(0.22803, 0.22145, 0.216989))


def reference_presets(resize, crop):
    """torchvision's video classification reference (references/video_classification/
    presets.py) as written, less its own ``ConvertBCHWtoCBHW`` (``Clip(layout='CTHW')``)."""
    import torchvision.transforms as T

    train = T.Compose([T.ConvertImageDtype(torch.float32), T.Resize(resize, antialias=False),
                       T.RandomHorizontalFlip(0.5), T.Normalize(**KINETICS), T.RandomCrop(crop)])
    evaluation = T.Compose([T.ConvertImageDtype(torch.float32), T.Resize(resize, antialias=False),
                            T.Normalize(**KINETICS), T.CenterCrop(crop)])
    return train, evaluation


def test_torchvisions_video_classification_recipe_is_taken_as_written(videos):
    train, evaluation = reference_presets((60, 80), (48, 48))
    assert ops.from_torchvision(train) == [
        ops.Resize((60, 80), antialias=False), ops.RandomHorizontalFlip(0.5), ops.Normalize(**KINETICS),
        ops.RandomCrop((48, 48))]
    clip = video.Clip(6, sampler="spread", layout="CTHW")
    # The evaluation preset draws nothing: its values are the reference's on each clip.
    frames, _ = clips(videos, ops.CenterCrop((240, 320)), dtype="uint8")
    got, _ = clips(videos, evaluation, clip=clip)
    want = torch.stack([evaluation(c).permute(1, 0, 2, 3) for c in frames])
    assert got.shape == want.shape == (len(frames), 3, 6, 48, 48) and got.dtype == torch.float32
    # One level of 255 is 1 / (255 · std) after the normalisation.
    diff = ((got - want) * torch.tensor(KINETICS["std"]).view(1, 3, 1, 1, 1) * 255).abs()
    assert (diff <= 1.01).float().mean() >= 0.99 and diff.mean() <= 0.5, diff.max()
    trained, _ = clips(videos, train, clip=clip)
    assert trained.shape == got.shape and trained.dtype == torch.float32
