"""A webdataset pipeline through ``nostall.DataLoader``: one that decodes images with PIL,
picks an image and its ``.cls`` label and maps a torchvision transform runs natively over
the same shards (the samples and labels webdataset gives, in its order without shuffle);
any other stage is named in a ``ConfigError``."""

from __future__ import annotations

import io
import tarfile

import pytest
import torch
import torchvision
from torchvision import transforms as T

import nostall

# Imported at collection, before test_dataset.py's worker processes fork: its objects
# were what those workers' garbage collections crashed on before the zygote froze them.
wds = pytest.importorskip("webdataset")

TRANSFORM = T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()])


@pytest.fixture(scope="module")
def shards(photos, tmp_path_factory):
    """The demo photographs in two WebDataset shards, each a jpg and its cls."""
    root = tmp_path_factory.mktemp("shards")
    samples = torchvision.datasets.ImageFolder(photos).samples
    for s, part in enumerate((samples[:16], samples[16:])):
        with tarfile.open(root / f"shard-{s:06d}.tar", "w") as tar:
            for i, (path, label) in enumerate(part):
                for ext, data in (("jpg", open(path, "rb").read()), ("cls", str(label).encode())):
                    info = tarfile.TarInfo(f"{s:02d}{i:04d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return str(root / "shard-{000000..000001}.tar")


def theirs(urls, shuffle=False):
    ds = wds.WebDataset(urls, shardshuffle=False)
    if shuffle:
        ds = ds.shuffle(100)
    return ds.decode("pil").to_tuple("jpg", "cls").map_tuple(TRANSFORM, None)


def test_a_translatable_pipeline_runs_natively_with_webdatasets_samples(shards):
    loader = nostall.DataLoader(theirs(shards), batch_size=8, num_workers=2)
    assert loader.metrics["path"]["path"] == "native"
    ours = [(x.clone(), y.clone()) for x, y in loader]
    reference = torch.utils.data.DataLoader(theirs(shards), batch_size=8)
    pairs = list(zip(ours, reference, strict=True))
    assert len(pairs) == 4
    for (x, y), (rx, ry) in pairs:
        assert torch.equal(y, ry)
        assert x.shape == rx.shape and (x - rx).abs().mean() < 0.02
    batched = theirs(shards).batched(16, partial=False)
    whole = nostall.DataLoader(batched, batch_size=None)
    assert [len(y) for _, y in whole] == [16, 16]
    shuffled = nostall.DataLoader(theirs(shards, shuffle=True), batch_size=8, seed=3)
    labels = sorted(torch.cat([y for _, y in shuffled]).tolist())
    assert labels == sorted(torch.cat([y for _, y in ours]).tolist())


def test_stages_nostall_cannot_read_are_named(shards):
    cases = [
        (theirs(shards).map(lambda sample: sample), "stage"),
        (wds.WebDataset(shards, shardshuffle=False).decode("torchrgb").to_tuple("jpg", "cls")
         .map_tuple(TRANSFORM, None), "decode"),
        (wds.WebDataset(shards, shardshuffle=False).decode("pil").to_tuple("jpg", "cls")
         .map_tuple(TRANSFORM, lambda y: y + 1), "label"),
        (wds.WebDataset(shards.replace("000001", "000000"), shardshuffle=False).decode("pil")
         .to_tuple("jpg", "cls").map_tuple(TRANSFORM, None), "not all of them"),
        (wds.WebDataset(shards, shardshuffle=False).decode("pil").to_tuple("jpg", "cls"), "PIL images"),
    ]
    for pipeline, says in cases:
        with pytest.raises(nostall.ConfigError, match=says):
            nostall.DataLoader(pipeline, batch_size=8)
    with pytest.raises(nostall.ConfigError, match="batched once"):
        nostall.DataLoader(theirs(shards).batched(4), batch_size=8)
    with pytest.raises(nostall.ConfigError, match="shuffle"):
        nostall.DataLoader(theirs(shards), batch_size=8, shuffle=True)
