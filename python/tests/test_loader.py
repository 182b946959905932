"""The Loader: iteration, shapes and dtypes, zero-copy, buffer lifetime, resume, errors."""

import copy
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import nostall

N = 32  # demo photographs


def test_iterates_one_epoch_of_float32_nchw_batches_and_int64_labels(photos):
    loader = nostall.Loader(photos, batch_size=8, image_size=64)
    assert len(loader) == 4
    seen = 0
    for images, labels in loader:
        assert isinstance(images, torch.Tensor) and isinstance(labels, torch.Tensor)
        assert images.shape == (8, 3, 64, 64) and images.dtype == torch.float32
        assert labels.shape == (8,) and labels.dtype == torch.int64
        assert images.is_contiguous()
        assert ((labels >= 0) & (labels < 4)).all()
        # Normalised with the ImageNet statistics: roughly zero-centred, not in [0, 255].
        assert -3.0 < images.min() < images.max() < 3.0
        seen += len(labels)
    assert seen == N
    m = loader.metrics
    assert m["samples"] == N and m["batches"] == 4 and m["skipped_total"] == 0
    assert m["images_per_s"] > 0 and m["stall_s"] >= 0
    assert m["storage"]["requests"] == N


def test_last_batch_is_partial_or_dropped(photos):
    loader = nostall.Loader(photos, batch_size=10, image_size=32)
    assert len(loader) == 4
    assert [len(labels) for _, labels in loader] == [10, 10, 10, 2]
    loader = nostall.Loader(photos, batch_size=10, image_size=32, drop_last=True)
    assert len(loader) == 3
    assert [len(labels) for _, labels in loader] == [10, 10, 10]


def test_numpy_output_and_val_pipeline_is_deterministic(photos):
    a = nostall.Loader(photos, batch_size=16, image_size=48, pipeline="val", shuffle=False, output="numpy")
    b = nostall.Loader(photos, batch_size=16, image_size=48, pipeline="val", shuffle=False, output="numpy", threads=1)
    for (xa, ya), (xb, yb) in zip(a, b):
        assert isinstance(xa, np.ndarray) and xa.dtype == np.float32 and xa.shape == (16, 3, 48, 48)
        assert ya.dtype == np.int64
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
    # Unshuffled: labels in catalog (class) order.
    labels = np.concatenate([y for _, y in a])
    assert (np.diff(labels) >= 0).all()


def test_epochs_reshuffle_and_set_epoch_repeats_an_epoch(photos):
    loader = nostall.Loader(photos, batch_size=N, image_size=32, seed=7)
    first = [y.clone() for _, y in loader]
    second = [y.clone() for _, y in loader]  # the next epoch: a new order
    assert loader.epoch == 2
    assert not torch.equal(first[0], second[0])
    loader.set_epoch(0)
    assert torch.equal([y for _, y in loader][0], first[0])


def test_overlapping_epochs_give_the_same_batches_as_separate_ones(photos):
    def epochs(overlap, order):
        loader = nostall.Loader(photos, batch_size=4, image_size=32, seed=3, overlap_epochs=overlap)
        out = []
        for epoch in order:
            if epoch is not None:
                loader.set_epoch(epoch)  # another epoch than the one started ahead
            out.append([(x.clone(), y.clone()) for x, y in loader])
            ahead = loader.metrics["prepared_ahead"]
            assert 0 <= ahead <= 4 * 4, ahead  # at most its window: prefetch 4 batches of 4
        return out

    order = [None, None, 5, None, 1]  # epochs 0, 1, 5, 6, 1
    separate, overlapping = epochs(False, order), epochs(True, order)
    for a, b in zip(separate, overlapping):
        assert len(a) == len(b)
        for (xa, ya), (xb, yb) in zip(a, b):
            assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_tensors_share_the_loader_buffer_no_copy(photos):
    loader = nostall.Loader(photos, batch_size=8, image_size=32, output="dlpack")
    images, labels = next(batches := iter(loader))
    assert isinstance(images, nostall.BatchTensor)
    assert images.shape == [8, 3, 32, 32] and images.dtype == "float32"
    assert labels.shape == [8] and labels.dtype == "int64"
    address = images.data_ptr
    t = torch.from_dlpack(images)
    assert t.data_ptr() == address  # torch's tensor is the loader's buffer
    with pytest.raises(BufferError):
        torch.from_dlpack(images)  # ownership went to the first consumer
    # NumPy, too.
    images2, _ = next(batches)
    address2 = images2.data_ptr
    assert np.from_dlpack(images2).ctypes.data == address2


def test_buffers_are_reused_across_epochs(photos):
    loader = nostall.Loader(photos, batch_size=4, image_size=32, prefetch=2)
    # At most: the prefetch windows of this epoch and of the next one started ahead, the
    # batch the loop variable still holds, and the one being handed over. Whatever the
    # timing, never more, whatever the number of epochs.
    bound = 2 + 2 + 1 + 1
    addresses = set()
    for _ in range(6):
        addresses |= {images.data_ptr() for images, _ in loader}
        assert loader.buffers_allocated <= bound, loader.buffers_allocated
    # 48 batches came out of a handful of buffers: the tensors are the pool's buffers.
    assert len(addresses) <= bound, addresses


def test_a_kept_batch_stays_valid_after_the_loader_moves_on(photos):
    loader = nostall.Loader(photos, batch_size=4, image_size=32, prefetch=2)
    it = iter(loader)
    kept, kept_labels = next(it)
    snapshot, snapshot_labels = kept.clone(), kept_labels.clone()
    for _ in range(3):  # this epoch's remaining batches and two more epochs
        for _ in it:
            pass
        it = iter(loader)
    assert torch.equal(kept, snapshot) and torch.equal(kept_labels, snapshot_labels)
    # The kept buffer is out of the pool, so the loader allocated one more, not more.
    assert loader.buffers_allocated <= 2 + 2 + 1 + 1 + 1
    address = kept.data_ptr()
    del kept
    seen = {images.data_ptr() for images, _ in loader}
    assert address in seen  # freed by Python, the buffer went back to the pool


def test_state_dict_resumes_exactly_mid_epoch(photos):
    kwargs = dict(batch_size=4, image_size=32, seed=3)
    reference = nostall.Loader(photos, **kwargs)
    reference.set_epoch(2)
    expected = [(x.clone(), y.clone()) for x, y in reference]

    loader = nostall.Loader(photos, **kwargs)
    loader.set_epoch(2)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    assert {k: state[k] for k in ("epoch", "batch", "sample")} == {
        "epoch": 2,
        "batch": 3,
        "sample": 12,
    }
    del loader, it

    resumed = nostall.Loader(photos, **kwargs)
    resumed.load_state_dict(state)
    rest = [(x.clone(), y.clone()) for x, y in resumed]
    assert len(rest) == len(expected) - 3
    for (x, y), (ex, ey) in zip(rest, expected[3:]):
        assert torch.equal(x, ex) and torch.equal(y, ey)
    assert resumed.state_dict() == dict(state, epoch=3, batch=0, sample=0)


def test_a_resume_survives_any_iteration_pattern(photos):
    """`iter()` makes a fresh iterator: a for loop over it, enumerate and islice go on
    where it stands, so a state saved on two ranks resumes on one each sample once."""
    import itertools

    kw = dict(batch_size=4, image_size=32, seed=5, drop_last=False)
    states, before = [], []
    for rank in range(2):
        loader = nostall.Loader(photos, rank=rank, world_size=2, **kw)
        it = iter(loader)
        for _ in range(2):
            next(it)
            before += loader.last_ids
        states.append(loader.state_dict())
        del it, loader

    def rest(pattern):
        loader = nostall.Loader(photos, **kw)
        loader.load_state_dict(states)
        ids = []
        if pattern == "next, then for over the iterator":
            it = iter(loader)
            next(it)
            ids += loader.last_ids
            for _ in it:
                ids += loader.last_ids
        elif pattern == "enumerate(iter(loader))":
            for _ in enumerate(iter(loader)):
                ids += loader.last_ids
        else:
            for _ in itertools.islice(loader, 100):
                ids += loader.last_ids
        # The state is consumed: a later iter() runs the whole epoch in this loader's order.
        again = []
        for _ in loader:
            again += loader.last_ids
        assert sorted(again) == list(range(N)), pattern
        return ids

    for pattern in ("next, then for over the iterator", "enumerate(iter(loader))", "islice"):
        assert sorted(before + rest(pattern)) == list(range(N)), pattern


def test_an_iterator_replaced_by_a_later_iter_raises_and_an_ended_one_stays_ended(photos):
    loader = nostall.Loader(photos, batch_size=8, image_size=32)
    first = iter(loader)
    next(first)
    second = iter(loader)
    with pytest.raises(RuntimeError, match="replaced by a later iter"):
        next(first)
    assert len(list(second)) == N // 8
    with pytest.raises(StopIteration):
        next(second)
    assert iter(second) is second


def test_a_saved_state_is_data_every_field_out_of_bounds_is_a_config_error(photos):
    """Each field of a saved state at 0, -1, 2**40, 2**63, 2**64, beyond the epoch, or
    of the wrong type: a ConfigError naming the field (or a state that resumes), never a
    crash, an abort or another exception."""
    kwargs = dict(batch_size=4, image_size=32, seed=3)
    loader = nostall.Loader(photos, **kwargs)
    it = iter(loader)
    next(it)
    saved = loader.state_dict()
    del it
    paths = [("epoch",), ("batch",), ("sample",), ("rank",),
             *(("identity", name) for name in saved["identity"]), ("skipped", "corrupt")]
    values = [0, -1, 2**40, 2**63, 2**64, 9, 1.5, "7", None, [1]]

    def resumes_or_refuses(state, where):
        resumed = nostall.Loader(photos, **kwargs)
        try:
            resumed.load_state_dict(state)
            sum(1 for _ in resumed)
        except nostall.ConfigError as e:
            assert "skipped samples" not in str(e), (where, str(e))

    for path in paths:
        for value in values:
            state = copy.deepcopy(saved)
            node = state
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
            resumes_or_refuses(state, (path, value))
    for stretch in ({"world": 2**40, "batches": 1, "consumed": None},
                    {"world": 2, "batches": 2**63, "consumed": None},
                    {"world": 2, "batches": 1, "consumed": [2**64 - 1, 0]},
                    {"world": 2, "batches": 1, "consumed": [-1, 0]},
                    {"world": 2, "batches": 1, "consumed": [1]},
                    "not a stretch"):
        resumes_or_refuses(dict(copy.deepcopy(saved), history=[stretch]), stretch)
    with pytest.raises(nostall.ConfigError, match="identity.world_size is 1099511627776"):
        nostall.Loader(photos, **kwargs).load_state_dict(
            dict(saved, identity=dict(saved["identity"], world_size=2**40)))
    with pytest.raises(nostall.ConfigError, match="epoch is -1"):
        nostall.Loader(photos, **kwargs).load_state_dict(dict(saved, epoch=-1))


def test_a_state_resumes_only_the_run_it_was_saved_from(photos, photos_copy):
    loader = nostall.Loader(photos, batch_size=4, image_size=32, seed=3)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    with pytest.raises(nostall.ConfigError, match="batch_size was 4, is 8"):
        nostall.Loader(photos, batch_size=8, image_size=32, seed=3).load_state_dict(state)
    with pytest.raises(nostall.ConfigError, match="seed was 3, is 4"):
        nostall.Loader(photos, batch_size=4, image_size=32, seed=4).load_state_dict(state)
    (photos_copy / "grass" / "extra.jpg").write_bytes(
        next((photos_copy / "flowers").glob("*.jpg")).read_bytes())
    with pytest.raises(nostall.ConfigError, match="the dataset changed"):
        nostall.Loader(str(photos_copy), batch_size=4, image_size=32, seed=3).load_state_dict(
            state)
    with pytest.raises(nostall.ConfigError, match="identity"):
        nostall.Loader(photos, batch_size=4, image_size=32, seed=3).load_state_dict(
            {"epoch": 0, "batch": 1, "sample": 4})


def test_skip_counts_stay_exact_across_a_resume(photos_copy):
    for n in range(3):
        (photos_copy / "grass" / f"bad{n}.jpg").write_bytes(b"not an image")
    kwargs = dict(batch_size=4, image_size=32, on_error="skip", seed=1)
    whole = nostall.Loader(str(photos_copy), **kwargs)
    for _ in whole:
        pass
    assert whole.metrics["skipped"] == {"unknown-format": 3}
    first = nostall.Loader(str(photos_copy), **kwargs)
    it = iter(first)
    for _ in range(4):
        next(it)
    state = first.state_dict()
    rest = nostall.Loader(str(photos_copy), **kwargs)
    rest.load_state_dict(state)
    for _ in rest:
        pass
    assert rest.metrics["skipped"] == {"unknown-format": 3}
    with pytest.raises(nostall.ConfigError, match="unknown cause"):
        rest.load_state_dict(dict(state, skipped={"gremlins": 1}))


def test_state_dict_after_a_sample_error_points_after_the_delivered_batches(photos_copy):
    names = sorted((photos_copy / "flowers").glob("*.jpg"))
    names[-1].write_bytes(names[-1].read_bytes()[:100])  # truncated
    loader = nostall.Loader(str(photos_copy), batch_size=2, image_size=32, shuffle=False)
    delivered = 0
    with pytest.raises(nostall.SampleError):
        for _ in loader:
            delivered += 1
    assert delivered > 0
    state = loader.state_dict()
    assert state["batch"] == delivered and state["sample"] == 2 * delivered


GIL_PROBE = """
import sys, threading
import nostall
from nostall import ops

gate, go = threading.Event(), threading.Event()

def gated(sample):  # runs on the engine's thread, with the GIL
    gate.wait()
    return sample

def opener():
    go.wait()
    gate.set()

threading.Thread(target=opener, daemon=True).start()
loader = nostall.Loader(sys.argv[1], pipeline=[ops.RandomResizedCrop(32), ops.Python(gated)],
                        batch_size=4, threads=1, workers="threads")
batches = iter(loader)
# No forced switch from here on: the opener can take the GIL only when this thread gives
# it up, and the first place it can is next() waiting for the batch the gate holds back.
sys.setswitchinterval(60.0)
go.set()
print("delivered", len(next(batches)[0]))
"""


def test_the_gil_is_released_while_waiting_for_a_batch(photos):
    # The batch waits for a Python thread that can only run once next() gives up the GIL:
    # had next() held it, the process would hang, so it runs in a child that is killed.
    try:
        done = subprocess.run([sys.executable, "-c", GIL_PROBE, photos], capture_output=True,
                              text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("next() held the GIL while it waited: the batch never came")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "delivered 4"


def test_a_corrupt_file_raises_sample_error_naming_it(photos_copy):
    bad = photos_copy / "flowers" / "zz_broken.jpg"
    good = next((photos_copy / "flowers").glob("*.jpg")).read_bytes()
    bad.write_bytes(good[: len(good) // 3])  # truncated JPEG
    loader = nostall.Loader(str(photos_copy), batch_size=4, image_size=32)
    with pytest.raises(nostall.SampleError) as info:
        for _ in loader:
            pass
    err = info.value
    assert "zz_broken.jpg" in err.location and "zz_broken.jpg" in str(err)
    assert err.cause == "corrupt" and err.detail
    assert isinstance(err, nostall.NostallError)


def test_skip_counts_bad_files_by_cause(photos_copy):
    (photos_copy / "grass" / "empty.jpg").write_bytes(b"")
    (photos_copy / "grass" / "notes.jpg").write_bytes(b"not an image at all")
    loader = nostall.Loader(str(photos_copy), batch_size=8, image_size=32, on_error="skip")
    total = sum(len(labels) for _, labels in loader)
    assert total == N  # 34 files, 2 skipped
    m = loader.metrics
    assert m["skipped"] == {"empty": 1, "unknown-format": 1} and m["skipped_total"] == 2
    skipped = sorted(s["location"].rsplit("/", 1)[-1] for s in loader.skipped())
    assert skipped == ["empty.jpg", "notes.jpg"]


def test_skipped_samples_go_to_the_quarantine_file(photos_copy, tmp_path):
    import json

    (photos_copy / "grass" / "empty.jpg").write_bytes(b"")
    (photos_copy / "grass" / "notes.jpg").write_bytes(b"not an image at all")
    quarantine = tmp_path / "quarantine.jsonl"
    loader = nostall.Loader(str(photos_copy), batch_size=8, image_size=32, on_error="skip",
                            quarantine=quarantine)
    for _ in range(2):
        assert sum(len(labels) for _, labels in loader) == N
    lines = [json.loads(line) for line in quarantine.read_text().splitlines()]
    assert sorted((r["epoch"], r["location"].rsplit("/", 1)[-1], r["cause"]) for r in lines) == [
        (0, "empty.jpg", "empty"), (0, "notes.jpg", "unknown-format"),
        (1, "empty.jpg", "empty"), (1, "notes.jpg", "unknown-format")]
    with pytest.raises(nostall.ConfigError, match="skip"):
        nostall.Loader(str(photos_copy), quarantine=quarantine)


def test_configuration_and_storage_errors(photos, tmp_path):
    with pytest.raises(nostall.ConfigError, match="pipeline"):
        nostall.Loader(photos, pipeline="nope")
    with pytest.raises(ValueError, match="batch size"):
        nostall.Loader(photos, batch_size=0)
    with pytest.raises(nostall.ConfigError, match="rank 2"):
        nostall.Loader(photos, rank=2, world_size=2)
    with pytest.raises(nostall.ConfigError, match="cache size"):
        nostall.Loader(photos, cache="lots")
    with pytest.raises(nostall.ConfigError, match="cache_epochs"):
        nostall.Loader(photos, cache="50%", cache_policy="frequency")
    with pytest.raises(nostall.ConfigError, match="a group's name"):
        nostall.Loader(photos, share="")
    with pytest.raises(nostall.ConfigError, match="the lru cache policy does not have"):
        nostall.Loader(photos, cache="50%", cache_policy="lru", cache_fill="before")
    with pytest.raises(nostall.ConfigError, match="cache_fill"):
        nostall.Loader(photos, cache="50%", cache_policy="frequency", cache_epochs=2, cache_fill="now")
    with pytest.raises(OSError) as info:
        nostall.Loader(str(tmp_path / "missing"))
    assert isinstance(info.value, nostall.StorageError)
    assert info.value.location.endswith("missing")


def test_future_aware_cache_policies_run_and_hit(photos):
    for policy, extra in [("lookahead", {}), ("frequency", {"cache_epochs": 3})]:
        loader = nostall.Loader(photos, batch_size=8, image_size=32, cache="100%", cache_policy=policy, **extra)
        for _ in range(3):
            assert sum(len(y) for _, y in loader) == N
        # The whole dataset fits: the last epoch reads nothing from storage.
        assert loader.metrics["cache"]["hits"] == N, policy


def test_a_frequency_cache_filled_before_hits_from_the_first_batch(photos):
    loader = nostall.Loader(photos, batch_size=8, image_size=32, cache="100%", cache_policy="frequency",
                            cache_epochs=2, cache_fill="before")
    # The placement (the whole dataset) was read as the loader was made.
    assert sum(len(y) for _, y in loader) == N
    assert (loader.metrics["cache"]["hits"], loader.metrics["cache"]["misses"]) == (N, 0)
    # The read-ahead timed reads from memory only, and counts none from storage to come.
    tiers = loader.metrics["readahead"]["tiers"]
    assert tiers["memory"]["read_time_s"] is not None
    assert tiers["storage"]["read_time_s"] is None and tiers["storage"]["upcoming"] == 0


def test_a_memory_budget_splits_between_pipeline_and_cache(photos):
    batch = 8 * 3 * 32 * 32 * 4
    loader = nostall.Loader(photos, batch_size=8, image_size=32, cache="100%", memory=6 * batch + (1 << 20))
    plan = loader.memory_plan
    assert plan["batch_buffers"] + plan["readahead"] + plan["cache"] <= plan["budget"]
    assert plan["prefetch"] < 4  # shrunk from the default to fit
    for _ in range(2):
        assert sum(len(y) for _, y in loader) == N
    assert loader.buffers_allocated * batch <= plan["batch_buffers"]
    assert nostall.Loader(photos, image_size=32).memory_plan is None
    with pytest.raises(nostall.ConfigError, match="at least"):
        nostall.Loader(photos, batch_size=8, image_size=32, memory="100KiB")


def test_cache_counts_hits_in_later_epochs(photos):
    loader = nostall.Loader(photos, batch_size=8, image_size=32, cache="100%")
    for _ in loader:
        pass
    assert loader.metrics["cache"]["hits"] == 0
    for _ in loader:
        pass
    m = loader.metrics
    assert m["cache"]["hits"] == N and m["storage"]["bytes"] == 0


def test_threads_auto_takes_the_cores_this_process_may_use(photos, monkeypatch):
    import os
    import re

    def prep_threads(loader):
        return int(re.search(r"(\d+) prep threads", repr(loader)).group(1))

    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    loader = nostall.Loader(photos, batch_size=8, threads="auto")
    threads = prep_threads(loader)
    # The engine also honours a cgroup CPU quota, which can only lower the count.
    assert 1 <= threads <= len(os.sched_getaffinity(0))
    assert sum(len(labels) for _, labels in loader) == loader.dataset_len
    # The default is the same; the ranks of a node split the cores evenly.
    assert prep_threads(nostall.Loader(photos, batch_size=8)) == threads
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert prep_threads(nostall.Loader(photos, batch_size=8)) == max(1, threads // 2)
    with pytest.raises(nostall.ConfigError, match="threads"):
        nostall.Loader(photos, threads="many")


def test_metrics_name_the_slowest_samples(photos):
    loader = nostall.Loader(photos, batch_size=8, image_size=32)
    for _ in loader:
        pass
    slowest = loader.metrics["slowest"]
    assert len(slowest) == 10
    totals = [s["fetch_s"] + s["prep_s"] for s in slowest]
    assert totals == sorted(totals, reverse=True)
    assert all(os.path.isfile(s["location"]) and s["prep_s"] > 0 for s in slowest)
    assert len({s["id"] for s in slowest}) == 10
    assert loader.metrics["slowest_shards"] == []  # a folder of files: no shards
