"""Loader([a, b], weights=...): several datasets mixed by weight, on the demo's real
photographs (two folders: the demo's 32, and a copy of 16 of them)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import nostall


@pytest.fixture(scope="module")
def two(photos, tmp_path_factory):
    big = Path(photos)
    small = tmp_path_factory.mktemp("small")
    for path in sorted(big.rglob("*.jpg"))[::2]:
        (small / path.parent.name).mkdir(exist_ok=True)
        shutil.copy(path, small / path.parent.name / path.name)
    return str(big), str(small)


KW = dict(batch_size=8, pipeline="val", image_size=16, seed=9)


def test_shares_follow_the_weights_and_a_sources_passes_stay_whole(two):
    big, small = two
    loader = nostall.Loader([big, small], weights=[0.25, 0.75], **KW)
    lens = [s["samples"] for s in loader.metrics["sources"]]
    assert lens == [32, 16]
    streams = {0: [], 1: []}
    totals = [0, 0]
    for epoch in range(20):
        for _ in loader:
            for sample in loader.last_ids:
                source = 0 if sample < lens[0] else 1
                streams[source].append(sample)
        delivered = [s["delivered"] for s in loader.metrics["sources"]]
        assert delivered == [12, 36], f"epoch {epoch}: {delivered}"
        totals = [t + d for t, d in zip(totals, delivered)]
    assert [t / sum(totals) for t in totals] == [0.25, 0.75]
    # The small source repeats (36 of its 16 samples an epoch), the big one is sampled
    # (12 of 32): in both, each pass over the source is a permutation of it.
    for source, stream in streams.items():
        n = lens[source]
        for start in range(0, len(stream) - n + 1, n):
            assert len(set(stream[start:start + n])) == n


def test_a_mixture_resumes_exactly_and_is_the_same_for_any_thread_count(two):
    big, small = two

    def run(threads, state=None):
        loader = nostall.Loader([big, small], weights=[0.4, 0.6], threads=threads, **KW)
        loader.set_epoch(2)
        if state is not None:
            loader.load_state_dict(state)
        out = []
        for images, labels in loader:
            out.append((tuple(loader.last_ids), float(images.sum())))
        return out, loader

    whole, _ = run(1)
    assert whole == run(2)[0]
    loader = nostall.Loader([big, small], weights=[0.4, 0.6], threads=2, **KW)
    loader.set_epoch(2)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    rest, _ = run(1, state)
    assert rest == whole[3:]
    other = nostall.Loader([big, small], weights=[0.5, 0.5], **KW)
    with pytest.raises(nostall.ConfigError):
        other.load_state_dict(state)


def test_a_mixture_by_default_weighs_by_size_and_mistakes_are_config_errors(two, tmp_path):
    big, small = two
    loader = nostall.Loader([big, small], **KW)
    assert [s["weight"] for s in loader.metrics["sources"]] == [32.0, 16.0]
    assert sum(len(labels) for _, labels in loader) == 48
    assert loader.classes == nostall.Loader(big, **KW).classes
    with pytest.raises(nostall.ConfigError, match="one weight each"):
        nostall.Loader([big, small], weights=[1.0], **KW)
    with pytest.raises(nostall.ConfigError, match="list"):
        nostall.Loader(big, weights=[1.0], **KW)
    with pytest.raises(nostall.ConfigError, match="weight"):
        nostall.Loader([big, small], weights=[1.0, 0.0], **KW)
    with pytest.raises(nostall.ConfigError, match="source="):
        nostall.Loader([], **KW)
    with pytest.raises(nostall.ConfigError, match="aug_repeats"):
        nostall.Loader([big, small], aug_repeats=2, **KW)
    flat = tmp_path / "flat"
    flat.mkdir()
    shutil.copy(next(Path(big).rglob("*.jpg")), flat / "x.jpg")
    with pytest.raises(nostall.ConfigError, match="labeled"):
        nostall.Loader([big, str(flat)], **KW)


def test_an_epoch_begun_on_two_ranks_ends_on_three_with_each_occurrence_as_it_was(two):
    """2 -> 3 ranks mid-epoch: the samples delivered before and after together are the
    epoch's, each occurrence of a repeated sample with the augmentation it had."""
    big, small = two
    kw = dict(KW, pipeline="train")
    weights = [0.25, 0.75]

    def delivered(loader, batches=None):
        out = []
        for n, (images, _) in enumerate(loader, 1):
            out += [(s, round(float(images[i].sum()), 3)) for i, s in enumerate(loader.last_ids)]
            if n == batches:
                break
        return out

    whole = nostall.Loader([big, small], weights=weights, **kw)
    whole.set_epoch(1)
    everything = sorted(delivered(whole))
    before, states = [], []
    for rank in range(2):
        loader = nostall.Loader([big, small], weights=weights, rank=rank, world_size=2, **kw)
        loader.set_epoch(1)
        before += delivered(loader, batches=1)
        states.append(loader.state_dict())
    after = []
    for rank in range(3):
        loader = nostall.Loader([big, small], weights=weights, rank=rank, world_size=3, **kw)
        loader.load_state_dict(states)
        after += delivered(loader)
    # Padding to a multiple of 3 repeats the rest's head: the padded places come twice.
    got = sorted(before + after)
    for item in everything:
        got.remove(item)
    assert len(got) == (-(48 - 16) % 3)


def test_a_parquet_dataset_in_a_mixture_is_read_a_group_at_a_time(two, tmp_path):
    """Its passes keep few row groups open (here one, the memory for groups a quarter of
    the file): each row group's rows come together, once a pass."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    big, small = two
    files = sorted(Path(big).rglob("*.jpg"))
    classes = sorted({p.parent.name for p in files})
    table = pa.table({"image": [{"bytes": p.read_bytes(), "path": p.name} for p in files],
                      "label": [classes.index(p.parent.name) for p in files]})
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=4)
    loader = nostall.Loader([str(path), small], weights=[2, 1], group_memory=path.stat().st_size // 4, **KW)
    for _ in range(3):
        rows = [s for _ in loader for s in loader.last_ids if s < 32]
        assert sorted(rows) == list(range(32))  # weights 2:1 over 48 places: 32 rows
        for start in range(0, 32, 4):
            assert len({row // 4 for row in rows[start:start + 4]}) == 1, rows
