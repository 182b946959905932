"""Loader(fields=...): samples read as WebDataset records (the demo's real photographs
with real English captions, their metadata and their class), each batch a dictionary.

The captions are sentences of the Python documentation that ships with the interpreter
(``pydoc_data``); the photographs are the demo's.
"""

from __future__ import annotations

import gc
import io
import json
import re
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

import nostall


def captions(count):
    from pydoc_data.topics import topics

    text = " ".join(topics[k] for k in sorted(topics))
    found = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if 20 <= len(s.strip()) <= 200]
    return [" ".join(s.split()) for s in found[:count]]


def write_shard(path, members):
    """A tar shard of ``(name, bytes)`` members, in order."""
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def records(photos, tmp_path_factory):
    """Two shards of the demo's photographs, each with a caption (``txt``), metadata
    (``json``) and its class (``cls``); returns the folder and each key's caption."""
    files = sorted(p for p in Path(photos).rglob("*.jpg"))
    classes = sorted({p.parent.name for p in files})
    texts = captions(len(files))
    root = tmp_path_factory.mktemp("records")
    by_key = {}
    members = []
    for i, (path, caption) in enumerate(zip(files, texts)):
        key = f"{i:06d}"
        by_key[key] = caption
        meta = {"key": key, "file": path.name, "class": path.parent.name, "tags": [i, {"even": i % 2 == 0}]}
        members.append([
            (f"{key}.jpg", path.read_bytes()),
            (f"{key}.txt", caption.encode()),
            (f"{key}.json", json.dumps(meta).encode()),
            (f"{key}.cls", str(classes.index(path.parent.name)).encode()),
        ])
    half = len(members) // 2
    write_shard(root / "train-000000.tar", [m for sample in members[:half] for m in sample])
    write_shard(root / "train-000001.tar", [m for sample in members[half:] for m in sample])
    return root, by_key


FIELDS = {"image": "jpg;png", "caption": "txt", "meta": "json", "label": "cls"}


def test_each_field_by_name_and_the_image_that_of_a_loader_without_fields(records):
    root, by_key = records
    kwargs = dict(batch_size=8, pipeline="train", image_size=64, seed=3, threads=2)
    with_fields = nostall.Loader(str(root), fields=FIELDS, **kwargs)
    plain = nostall.Loader(str(root), **kwargs)
    seen = []
    for batch, (images, labels) in zip(with_fields, plain, strict=True):
        assert list(batch) == ["image", "caption", "meta", "label"]
        assert torch.equal(batch["image"], images)
        assert torch.equal(batch["label"], labels)
        assert batch["image"].dtype == torch.float32 and batch["image"].shape[1:] == (3, 64, 64)
        for caption, meta in zip(batch["caption"], batch["meta"], strict=True):
            assert by_key[meta["key"]] == caption
            assert meta["tags"][1]["even"] == (int(meta["key"]) % 2 == 0)
            seen.append(meta["key"])
    assert sorted(seen) == sorted(by_key)


def test_a_python_operator_runs_on_the_image_field_as_without_fields(records):
    from nostall import ops

    root, _ = records
    pipeline = [ops.RandomResizedCrop(32), ops.Python(lambda x: 255 - x), ops.Normalize([0.5] * 3, [0.25] * 3)]
    kwargs = dict(batch_size=8, pipeline=pipeline, seed=3, threads=2)
    plain = nostall.Loader(str(root), **kwargs)
    for batch, (images, _) in zip(nostall.Loader(str(root), fields=FIELDS, **kwargs), plain, strict=True):
        assert torch.equal(batch["image"], images)


def test_captions_tokenized_in_the_engine_equal_the_tokenizer_called_on_them(records):
    open_clip = pytest.importorskip("open_clip")
    root, _ = records
    simple = open_clip.get_tokenizer("ViT-B-32")
    tokenizer = nostall.Tokenizer(simple, length=77)
    loader = nostall.Loader(
        str(root),
        batch_size=16,
        pipeline="val",
        image_size=32,
        fields={"image": "jpg", "text": nostall.Field("txt", tokenizer=tokenizer), "caption": "txt"},
    )
    for batch in loader:
        ids, mask = batch["text"]
        want_ids, want_mask = tokenizer(batch["caption"])
        assert torch.equal(ids, want_ids) and torch.equal(mask, want_mask)
        assert torch.equal(ids, simple(batch["caption"]))
        assert ids.dtype == torch.int64 and ids.shape == (16, 77)


def test_numpy_output_gives_arrays_and_the_same_values(records):
    root, _ = records
    kwargs = dict(batch_size=8, pipeline="val", image_size=32, fields=FIELDS)
    tensors = next(iter(nostall.Loader(str(root), **kwargs)))
    arrays = next(iter(nostall.Loader(str(root), output="numpy", **kwargs)))
    assert isinstance(arrays["image"], np.ndarray)
    np.testing.assert_array_equal(arrays["image"], tensors["image"].numpy())
    np.testing.assert_array_equal(arrays["label"], tensors["label"].numpy())
    assert arrays["caption"] == tensors["caption"]


def test_the_same_batches_for_any_thread_count_and_after_a_resume(records):
    root, _ = records
    kwargs = dict(batch_size=4, pipeline="train", image_size=48, seed=11, fields=FIELDS)

    def digest(batch):
        return (batch["image"].sum().item(), tuple(batch["caption"]), tuple(batch["label"].tolist()))

    one = [digest(b) for b in nostall.Loader(str(root), threads=1, **kwargs)]
    two = [digest(b) for b in nostall.Loader(str(root), threads=2, **kwargs)]
    assert one == two
    loader = nostall.Loader(str(root), threads=2, **kwargs)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    resumed = nostall.Loader(str(root), threads=1, **kwargs)
    resumed.load_state_dict(state)
    assert [digest(b) for b in resumed] == one[3:]


def hostile_shard(root, photo):
    """Good samples among ones whose other fields are hostile."""
    deep = "[" * 5_000 + "]" * 5_000  # under max_bytes, over the nesting bound
    write_shard(
        root / "hostile.tar",
        [
            ("good1.jpg", photo), ("good1.txt", b"a photograph"), ("good1.json", b"{}"),
            ("latin1.jpg", photo), ("latin1.txt", b"caf\xe9 au lait"), ("latin1.json", b"{}"),
            ("huge.jpg", photo), ("huge.txt", b"word " * (2 << 20)), ("huge.json", b"{}"),
            ("deep.jpg", photo), ("deep.txt", b"nested"), ("deep.json", deep.encode()),
            ("broken.jpg", photo), ("broken.txt", b"cut"), ("broken.json", b'{"a": [1, 2'),
            ("nocaption.jpg", photo), ("nocaption.json", b"{}"),
            ("good2.jpg", photo), ("good2.txt", b"another photograph"), ("good2.json", b"[1]"),
        ],
    )


def test_hostile_captions_and_metadata_are_skipped_by_cause_naming_sample_and_field(photos, tmp_path):
    photo = next(Path(photos).rglob("*.jpg")).read_bytes()
    hostile_shard(tmp_path, photo)
    fields = {"image": "jpg", "caption": "txt", "meta": "json"}
    loader = nostall.Loader(str(tmp_path), batch_size=2, pipeline="val", image_size=32, fields=fields,
                            on_error="skip", shuffle=False)
    delivered = [c for batch in loader for c in batch["caption"]]
    assert sorted(delivered) == ["a photograph", "another photograph"]
    causes = {s["location"].rsplit(":", 1)[-1]: s["cause"] for s in loader.skipped()}
    assert causes == {
        "latin1": "bad-text", "huge": "bad-text", "deep": "bad-json", "broken": "bad-json",
        "nocaption": "missing-field",
    }
    details = {s["location"].rsplit(":", 1)[-1]: s["detail"] for s in loader.skipped()}
    assert '"caption"' in details["latin1"] and "UTF-8" in details["latin1"]
    assert "max_bytes=16384" in details["huge"]
    assert '"meta"' in details["deep"] and "recursion" in details["deep"]
    assert "txt" in details["nocaption"]

    strict = nostall.Loader(str(tmp_path), batch_size=2, pipeline="val", image_size=32, fields=fields,
                            shuffle=False)
    with pytest.raises(nostall.SampleError, match=r"hostile\.tar:latin1.*caption"):
        for _ in strict:
            pass


def test_a_bigger_max_bytes_takes_a_long_caption_whole(photos, tmp_path):
    photo = next(Path(photos).rglob("*.jpg")).read_bytes()
    long = ("a caption that goes on " * 1000).encode()
    write_shard(tmp_path / "s.tar", [("k.jpg", photo), ("k.txt", long)])
    loader = nostall.Loader(str(tmp_path), batch_size=1, pipeline="val", image_size=32,
                            fields={"image": "jpg", "caption": nostall.Field("txt", max_bytes=len(long))})
    assert next(iter(loader))["caption"] == [long.decode()]
    raw = nostall.Loader(str(tmp_path), batch_size=1, pipeline="val", image_size=32,
                         fields={"image": "jpg", "caption": nostall.Field("txt", kind="bytes", max_bytes=1 << 20)})
    assert next(iter(raw))["caption"] == [long]


def test_settings_fields_do_not_take_yet_are_config_errors(records, photos):
    root, _ = records
    with pytest.raises(nostall.ConfigError, match="fields="):
        nostall.Loader(str(root), batch_size=4, pipeline="val", image_size=32, fields=FIELDS, output="dlpack")
    with pytest.raises(nostall.ConfigError, match="unknown kind"):
        nostall.Loader(str(root), fields={"image": "jpg", "c": nostall.Field("txt", kind="words")})
    with pytest.raises(TypeError, match="nostall.Field"):
        nostall.Loader(str(root), fields={"image": 3})
    assert repr(nostall.Field("txt", max_bytes=9)) == 'Field("txt", max_bytes=9)'


def test_a_label_field_needs_cls_members(photos, tmp_path):
    photo = next(Path(photos).rglob("*.jpg")).read_bytes()
    write_shard(tmp_path / "s.tar", [("k.jpg", photo), ("k.txt", b"no class")])
    with pytest.raises(nostall.ConfigError, match=".cls"):
        nostall.Loader(str(tmp_path), fields={"image": "jpg", "label": "cls"})


def test_records_through_the_cache_and_ranks_each_sample_once(records):
    root, by_key = records
    kwargs = dict(batch_size=4, pipeline="val", image_size=32, fields=FIELDS, seed=5)
    cached = nostall.Loader(str(root), cache="100%", **kwargs)
    first = [b["caption"] for b in cached]
    again = [b["caption"] for b in cached]  # the second epoch reads from the cache
    assert sorted(c for b in first for c in b) == sorted(by_key.values())
    assert sorted(c for b in again for c in b) == sorted(by_key.values())
    assert cached.metrics["cache"]["hit_rate"] == 1.0
    seen = []
    for rank in range(2):
        loader = nostall.Loader(str(root), rank=rank, world_size=2, **kwargs)
        seen += [m["key"] for b in loader for m in b["meta"]]
    assert sorted(seen) == sorted(by_key)


RECORDINGS = Path(__file__).resolve().parents[2] / "crates" / "nostall" / "tests" / "recordings"


def test_a_manifest_with_transcripts_gives_spectrograms_with_their_token_ids(tmp_path):
    """NeMo's JSON lines with `text`: (log-mel, token ids) batches, the spectrograms those of
    the manifest read without text. The recording is real music (the test set has no
    speech); the transcripts are English sentences."""
    open_clip = pytest.importorskip("open_clip")
    for recording in RECORDINGS.glob("battle.*"):
        (tmp_path / recording.name).write_bytes(recording.read_bytes())
    texts = captions(8)
    rows = [{"audio_filepath": f"battle.{ext}", "offset": start, "duration": 1.5, "text": texts[i]}
            for i, (ext, start) in enumerate((e, s) for e in ("flac", "opus") for s in (0.5, 2.0, 4.0, 6.5))]
    rows[-1].pop("text")  # one segment without a transcript
    manifest = tmp_path / "train.json"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tokenizer = nostall.Tokenizer(open_clip.get_tokenizer("ViT-B-32"), length=32)
    fields = {"audio": "audio", "text": nostall.Field("text", tokenizer=tokenizer), "transcript": "text"}
    kwargs = dict(pipeline="melspec", batch_size=4, seed=4, on_error="skip")
    with_text = nostall.Loader(str(manifest), fields=fields, **kwargs)
    plain = nostall.Loader(str(manifest), **kwargs)
    delivered = []
    plain_batches = [audio.clone() for audio, _ in plain]
    ids_of = dict(zip(texts, tokenizer(texts)[0]))
    got = []
    for batch in with_text:
        got.append(batch["audio"].clone())
        ids, mask = batch["text"]
        for row, transcript in enumerate(batch["transcript"]):
            assert torch.equal(ids[row], ids_of[transcript])
            delivered.append(transcript)
        assert batch["audio"].shape[1:] == (64, 401)
    assert sorted(delivered) == sorted(texts[:7])
    assert [s["cause"] for s in with_text.skipped()] == ["missing-field"]
    assert "#t=6.5,8" in with_text.skipped()[0]["location"]
    # The same spectrograms, but for the one sample skipped: compare the batches' sets.
    flat_plain = {tuple(a.flatten()[:64].tolist()) for b in plain_batches for a in b}
    flat_text = {tuple(a.flatten()[:64].tolist()) for b in got for a in b}
    assert flat_text <= flat_plain and len(flat_text) == 7


def test_a_parquet_dataset_gives_its_image_and_caption_columns_as_fields(photos, tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    files = sorted(Path(photos).rglob("*.jpg"))
    texts = captions(len(files))
    classes = sorted({p.parent.name for p in files})
    table = pa.table({
        "image": [{"bytes": p.read_bytes(), "path": p.name} for p in files],
        "caption": texts[:-1] + [None],  # the last row's caption is null
        "label": [classes.index(p.parent.name) for p in files],
    })
    pq.write_table(table, tmp_path / "train.parquet", row_group_size=10)
    # A field reads the first of its members the file has as a column.
    fields = {"image": "jpg;image", "caption": "txt;caption", "label": "label"}
    kwargs = dict(batch_size=5, pipeline="val", image_size=32, seed=1, on_error="skip")
    loader = nostall.Loader(str(tmp_path / "train.parquet"), fields=fields, **kwargs)
    plain = nostall.Loader(str(tmp_path / "train.parquet"), **kwargs)
    got = {}
    for batch in loader:
        for image, caption, label in zip(batch["image"], batch["caption"], batch["label"], strict=True):
            got[caption] = (image.clone(), int(label))
    want = {}
    for images, labels in plain:
        for i, sample in enumerate(plain.last_ids):
            want[texts[sample]] = (images[i].clone(), int(labels[i]))
    assert set(got) == set(texts[:-1])
    for caption, (image, label) in got.items():
        assert torch.equal(image, want[caption][0]) and label == want[caption][1]
    assert [s["cause"] for s in loader.skipped()] == ["missing-field"]
    with pytest.raises(nostall.ConfigError, match='no column "words"'):
        nostall.Loader(str(tmp_path / "train.parquet"), fields={"image": "image", "w": "words"})


def test_a_class_folder_gives_its_sidecar_files_as_fields(photos, tmp_path):
    """`a.jpg` with `a.txt` and `a.json` beside it, in class folders."""
    files = sorted(Path(photos).rglob("*.jpg"))
    texts = captions(len(files))
    for i, (path, text) in enumerate(zip(files, texts)):
        folder = tmp_path / path.parent.name
        folder.mkdir(exist_ok=True)
        (folder / path.name).write_bytes(path.read_bytes())
        if i != 5:  # one photograph without its caption
            (folder / path.name).with_suffix(".txt").write_text(text)
        (folder / path.name).with_suffix(".json").write_text(json.dumps({"i": i}))
    fields = {"image": "jpg", "caption": "txt", "meta": "json", "label": "cls"}
    kwargs = dict(batch_size=4, pipeline="val", image_size=32, seed=2, on_error="skip")
    loader = nostall.Loader(str(tmp_path), fields=fields, **kwargs)
    plain = nostall.Loader(str(tmp_path), **kwargs)
    got, seen = {}, []
    for batch in loader:
        rows = zip(loader.last_ids, batch["image"], batch["caption"], batch["meta"], batch["label"])
        for sample, image, caption, meta, label in rows:
            assert caption == texts[meta["i"]]
            got[sample] = (image.clone(), int(label))
            seen.append(meta["i"])
    assert sorted(seen) == [i for i in range(len(files)) if i != 5]
    assert [s["cause"] for s in loader.skipped()] == ["missing-field"]
    assert loader.classes == plain.classes
    want = {}
    for images, labels in plain:
        for sample, image, label in zip(plain.last_ids, images, labels):
            want[sample] = (image.clone(), int(label))
    assert len(got) == len(files) - 1
    for sample, (image, label) in got.items():
        assert torch.equal(image, want[sample][0]) and label == want[sample][1]


def test_records_on_a_device_with_the_cpu_standing_in(records, monkeypatch):
    """``device=`` with fields: the batch's one buffer copied, split on the device, the
    image decoded there (``decode="gpu"``) or on the CPU and finished there; the other
    fields as without a device."""
    import warnings

    from nostall import _device

    root, _ = records
    stager = _device.Stager
    monkeypatch.setattr(_device, "resolve", lambda device: 0)
    monkeypatch.setattr(_device, "Stager", lambda index, finish, queue=None: stager("cpu", finish, queue))
    kwargs = dict(batch_size=8, seed=5, threads=2, pipeline=nostall.imagenet_train(48), fields=FIELDS)
    host = nostall.Loader(str(root), **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no CUDA runtime here to page-lock the buffers
        cpu_decoded = nostall.Loader(str(root), device="cuda", decode="cpu", **kwargs)
        gpu_decoded = nostall.Loader(str(root), device="cuda", decode="gpu", **kwargs)
        transformed = nostall.Loader(str(root), device="cuda", decode="cpu",
                                     batch_transform=lambda batch: {**batch, "on": batch["image"].device.type},
                                     **kwargs)
    assert next(iter(transformed))["on"] == "cpu"  # the stand-in's device
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    for a, b, c in zip(host, cpu_decoded, gpu_decoded, strict=True):
        assert a["caption"] == b["caption"] == c["caption"] and a["meta"] == b["meta"] == c["meta"]
        assert torch.equal(a["label"], b["label"]) and torch.equal(a["label"], c["label"])
        for staged in (b, c):
            assert staged["image"].shape == a["image"].shape and staged["image"].dtype == torch.float32
            levels = (a["image"] - staged["image"]).abs() * std * 255
            assert levels.mean() < 2.0
    assert gpu_decoded.metrics["device"]["decoded_on_device"] > 0
    # The stand-in decoder's thread runs torch's CPU decode: it must be stopped before
    # the interpreter exits, not left to a collection at exit (torch's thread pool aborts).
    del a, b, c, host, cpu_decoded, gpu_decoded, transformed
    gc.collect()


def test_a_batch_transform_takes_and_gives_the_batchs_dictionary(records):
    root, _ = records

    def noisy(batch, generator):
        batch["image"] = batch["image"] + torch.rand(batch["image"].shape, generator=generator)
        batch["n"] = len(batch["caption"])
        return batch

    kwargs = dict(batch_size=8, pipeline="val", image_size=32, seed=3, fields=FIELDS, batch_transform=noisy)
    one = [(b["image"].sum().item(), b["n"]) for b in nostall.Loader(str(root), threads=1, **kwargs)]
    two = [(b["image"].sum().item(), b["n"]) for b in nostall.Loader(str(root), threads=2, **kwargs)]
    assert one == two and all(n == 8 for _, n in one)
    plain = [b["image"].sum().item() for b in nostall.Loader(str(root), batch_size=8, pipeline="val",
                                                            image_size=32, seed=3, fields=FIELDS)]
    assert all(a != b for (a, _), b in zip(one, plain))
    bad = nostall.Loader(str(root), batch_size=8, pipeline="val", image_size=32, fields=FIELDS,
                         batch_transform=lambda batch: (batch["image"], batch["label"]))
    with pytest.raises(TypeError, match="dictionary"):
        next(iter(bad))


def test_mixup_and_cutmix_mix_the_image_field_as_without_fields(records):
    root, by_key = records
    mix = nostall.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=4, mode="elem")
    kwargs = dict(batch_size=8, pipeline="train", image_size=32, seed=7, mix=mix)
    mixed = nostall.Loader(str(root), fields=FIELDS, **kwargs)
    plain = nostall.Loader(str(root), **kwargs)
    for batch, (images, labels) in zip(mixed, plain, strict=True):
        assert torch.equal(batch["image"], images)
        assert torch.equal(batch["label"], labels) and labels.shape == (8, 4)
        # The other fields are each sample's own: mixing touched the images only.
        assert batch["caption"] == [by_key[m["key"]] for m in batch["meta"]]


def test_analyze_measures_a_loader_with_fields(records):
    root, by_key = records
    tokenizer = nostall.Tokenizer(pytest.importorskip("open_clip").get_tokenizer("ViT-B-32"), length=77)
    fields = {"image": "jpg", "text": nostall.Field("txt", tokenizer=tokenizer), "meta": "json"}
    report = nostall.analyze(str(root), batch_size=8, image_size=32, threads=2, max_threads=2, step_ms=5.0,
                             budget=1.0, run_seconds=0.3, warm=True, fields=fields)
    assert report["rates"]["samples"] == len(by_key)
    assert all(p["samples_per_s"] > 0 for p in report["measurements"]["prep"])
    assert "fields image, text, meta" in report["configuration"]["pipeline"]
    assert report.measured_images_per_s > 0
    with pytest.raises(nostall.ConfigError, match="model_rate or step_ms"):
        nostall.analyze(str(root), model=lambda images, labels: None, fields=fields)


def test_chosen_json_keys_come_as_columns_and_a_record_without_one_is_skipped(photos, tmp_path):
    photo = next(Path(photos).rglob("*.jpg")).read_bytes()
    write_shard(tmp_path / "s.tar", [
        ("a.jpg", photo), ("a.json", b'{"w": 1, "h": 2, "extra": [1]}'),
        ("b.jpg", photo), ("b.json", b'{"w": 3}'),
        ("c.jpg", photo), ("c.json", b'{"w": 5, "h": 6}'),
    ])
    meta = nostall.Field("json", keys=["w", "h"])
    loader = nostall.Loader(str(tmp_path), batch_size=2, pipeline="val", image_size=32, shuffle=False,
                            on_error="skip", fields={"image": "jpg", "meta": meta})
    batch = next(iter(loader))
    assert batch["meta"] == {"w": [1, 5], "h": [2, 6]}
    assert [(s["location"].rsplit(":", 1)[-1], s["cause"]) for s in loader.skipped()] == [("b", "bad-json")]
    assert 'no key "h"' in loader.skipped()[0]["detail"]
    with pytest.raises(nostall.ConfigError, match="keys="):
        nostall.Loader(str(tmp_path), fields={"image": "jpg", "t": nostall.Field("json", kind="text", keys=["w"])})


def test_padded_text_comes_as_bytes_and_lengths(photos, tmp_path):
    photo = next(Path(photos).rglob("*.jpg")).read_bytes()
    write_shard(tmp_path / "s.tar", [("a.jpg", photo), ("a.txt", "héllo".encode()), ("b.jpg", photo), ("b.txt", b"")])
    for output in ("torch", "numpy"):
        loader = nostall.Loader(str(tmp_path), batch_size=2, pipeline="val", image_size=32, shuffle=False, output=output,
                                fields={"image": "jpg", "text": nostall.Field("txt", max_bytes=16, padded=True)})
        data, lengths = next(iter(loader))["text"]
        assert data.shape == (2, 16) and list(lengths) == [6, 0]
        assert bytes(data[0][:6].tolist()) == "héllo".encode() and not any(data[0][6:].tolist())
    with pytest.raises(nostall.ConfigError, match="padded"):
        nostall.Loader(str(tmp_path), fields={"image": "jpg", "m": nostall.Field("txt", kind="json", padded=True)})


def test_two_images_of_a_sample_are_two_fields_each_with_its_own_draws(photos, tmp_path):
    files = sorted(Path(photos).rglob("*.jpg"))
    members = []
    for i, path in enumerate(files):
        members += [(f"{i:06d}.jpg", path.read_bytes()), (f"{i:06d}.other.jpg", path.read_bytes())]
    write_shard(tmp_path / "train-000000.tar", members)
    kw = dict(batch_size=8, pipeline="train", image_size=32, seed=3, threads=2)
    fields = {"image": "jpg", "other": nostall.Field("other.jpg", kind="sample")}
    two = [dict(b) for b in nostall.Loader(str(tmp_path), fields=fields, **kw)]
    again = [dict(b) for b in nostall.Loader(str(tmp_path), fields=fields, **dict(kw, threads=1))]
    plain = [images for images, _ in nostall.Loader(str(tmp_path), **kw)]
    for batch, other, images in zip(two, again, plain, strict=True):
        assert torch.equal(batch["image"], images)  # the first as without fields
        assert batch["other"].shape == images.shape
        assert not torch.equal(batch["other"], batch["image"])  # its own crop of the same photo
        assert torch.equal(other["other"], batch["other"])  # for any thread count
    with pytest.raises(nostall.ConfigError, match="two fields of the pipeline's modality"):
        nostall.Loader(str(tmp_path), fields=fields, mix=nostall.Mixup(mixup_alpha=0.2, num_classes=4), **kw)


def test_a_vector_field_reads_npy_arrays_and_json_lists_as_float32(photos, tmp_path):
    files = sorted(Path(photos).rglob("*.jpg"))[:12]
    members, wanted = [], {}
    for i, path in enumerate(files):
        vector = np.arange(8, dtype=np.float64) * (i + 1) / 7
        wanted[f"{i:06d}"] = vector.astype(np.float32)
        npy = io.BytesIO()
        np.save(npy, vector if i % 3 else vector.astype(np.float16).astype(np.float16))
        members += [(f"{i:06d}.jpg", path.read_bytes()), (f"{i:06d}.npy", npy.getvalue()),
                    (f"{i:06d}.json", json.dumps({"key": f"{i:06d}"}).encode()),
                    (f"{i:06d}.emb.json", json.dumps(vector.tolist()).encode())]
    # A sample whose embedding has 9 numbers, and one whose array is cut short.
    bad = io.BytesIO()
    np.save(bad, np.zeros(9, dtype=np.float32))
    members += [("bad000.jpg", files[0].read_bytes()), ("bad000.npy", bad.getvalue()),
                ("bad000.json", b'{"key": "bad000"}'), ("bad000.emb.json", b"[1, 2]"),
                ("cut000.jpg", files[0].read_bytes()), ("cut000.npy", bad.getvalue()[:100]),
                ("cut000.json", b'{"key": "cut000"}'), ("cut000.emb.json", b"[]")]
    write_shard(tmp_path / "train-000000.tar", members)
    fields = {"image": "jpg", "meta": "json",
              "npy": nostall.Field("npy", kind="vector", length=8),
              "emb": nostall.Field("emb.json", kind="vector", length=8)}
    loader = nostall.Loader(str(tmp_path), fields=fields, batch_size=4, pipeline="val", image_size=16,
                            on_error="skip", shuffle=False)
    seen = 0
    for batch in loader:
        assert batch["npy"].dtype == torch.float32 and batch["npy"].shape[1:] == (8,)
        for meta, npy, emb in zip(batch["meta"], batch["npy"], batch["emb"], strict=True):
            want = torch.from_numpy(wanted[meta["key"]])
            assert torch.allclose(npy, want, atol=2e-2)  # float16 ones within half precision
            assert torch.equal(emb, want)
            seen += 1
    assert seen == 12 and loader.metrics["skipped"] == {"bad-vector": 2}
    with pytest.raises(nostall.ConfigError, match="length="):
        nostall.Loader(str(tmp_path), fields={"image": "jpg", "v": nostall.Field("npy", kind="vector")})


def test_an_npz_field_gives_each_declared_array_as_numpy_loads_it(photos, tmp_path):
    """Real photographs, each with an ``.npz`` archive that ``numpy.savez`` or
    ``savez_compressed`` wrote, of arrays of several types; and archives a loader must
    refuse: an array missing, an array of another size, one cut short, a zip bomb."""
    files = sorted(Path(photos).rglob("*.jpg"))[:12]
    rng = np.random.default_rng(5)
    members, archives = [], {}
    for i, path in enumerate(files):
        key = f"{i:06d}"
        arrays = {
            "embedding": rng.standard_normal(16).astype((np.float32, np.float16, np.float64)[i % 3]),
            "mask": rng.random((4, 4)) > 0.5,
            "ids": rng.integers(-1000, 1000, (2, 3)).astype((np.int32, np.int64, np.uint8)[i % 3]),
            "unread": np.zeros(1000),  # not declared: not read
        }
        npz = io.BytesIO()
        (np.savez_compressed if i % 2 else np.savez)(npz, **arrays)
        archives[key] = npz.getvalue()
        members += [(f"{key}.jpg", path.read_bytes()), (f"{key}.npz", npz.getvalue()),
                    (f"{key}.json", json.dumps({"key": key}).encode())]

    def archive(write=np.savez, **arrays):
        npz = io.BytesIO()
        write(npz, **arrays)
        return npz.getvalue()

    good = {"embedding": np.ones(16, np.float32), "mask": np.eye(4, dtype=bool), "ids": np.ones((2, 3))}
    hostile = {
        "noids": archive(embedding=good["embedding"], mask=good["mask"]),
        "shape": archive(**dict(good, ids=np.ones((3, 3)))),
        "cut": archive(**good)[:-40],
        # 8 MiB that deflate to 8 KiB, where the field's embedding takes 16 numbers.
        "bomb": archive(np.savez_compressed, **dict(good, embedding=np.zeros(8 << 20, np.uint8))),
        "text": b"not an archive at all",
    }
    for key, data in hostile.items():
        members += [(f"{key}.jpg", files[0].read_bytes()), (f"{key}.npz", data),
                    (f"{key}.json", json.dumps({"key": key}).encode())]
    write_shard(tmp_path / "train-000000.tar", members)
    feat = nostall.Field("npz", arrays={"embedding": 16, "mask": (4, 4), "ids": (2, 3)})
    assert repr(feat) == 'Field("npz", arrays={"embedding": 16, "mask": (4, 4), "ids": (2, 3)})'
    fields = {"image": "jpg", "meta": "json", "feat": feat}
    for output in ("torch", "numpy"):
        loader = nostall.Loader(str(tmp_path), fields=fields, batch_size=4, pipeline="val", image_size=16,
                                on_error="skip", shuffle=False, output=output)
        seen = []
        for batch in loader:
            assert list(batch) == ["image", "meta", "feat"] and list(batch["feat"]) == ["embedding", "mask", "ids"]
            got = {name: np.asarray(array) for name, array in batch["feat"].items()}
            assert got["mask"].shape[1:] == (4, 4) and got["ids"].shape[1:] == (2, 3)
            assert all(array.dtype == np.float32 for array in got.values())
            for row, meta in enumerate(batch["meta"]):
                want = np.load(io.BytesIO(archives[meta["key"]]))
                for name, array in got.items():
                    np.testing.assert_array_equal(array[row], want[name].astype(np.float32))
                seen.append(meta["key"])
        assert sorted(seen) == sorted(archives)
        causes = {s["location"].rsplit(":", 1)[-1]: s["cause"] for s in loader.skipped()}
        assert causes == dict.fromkeys(hostile, "bad-vector")
        details = {s["location"].rsplit(":", 1)[-1]: s["detail"] for s in loader.skipped()}
        assert all('"feat"' in detail for detail in details.values())
        assert 'no array "ids"' in details["noids"]
        assert "its shape [2, 3] holds 6" in details["shape"]
        assert "declares 8388736 bytes, more than its array takes" in details["bomb"]
    with pytest.raises(nostall.ConfigError, match="arrays="):
        nostall.Loader(str(tmp_path), fields={"image": "jpg", "feat": "npz"})
    with pytest.raises(nostall.ConfigError, match=r"length= is not a setting of kind \"npz\""):
        nostall.Loader(str(tmp_path), fields={"image": "jpg", "feat": nostall.Field("npz", length=3)})
    with pytest.raises(TypeError, match="arrays="):
        nostall.Field("npz", arrays={"embedding": "16"})
