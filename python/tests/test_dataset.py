"""The user's own Python code: ``nostall.Loader(dataset)`` and ``nostall.DataLoader`` over
map-style datasets (torchvision's ImageFolder on the demo's real photographs, with a
transform that holds a class of the user's), in worker processes and in threads."""

from __future__ import annotations

import hashlib
import os
import select
import signal
import threading
import time

import numpy as np
import pytest
import torch
import torchvision
from torchvision import transforms as T

import nostall


class Flip:
    """A few NumPy lines on the PIL image: what nostall cannot translate."""

    def __call__(self, image):
        return np.ascontiguousarray(np.asarray(image, dtype=np.uint8)[:, ::-1])


def image_folder(photos, transform=None):
    transform = transform or T.Compose([T.RandomResizedCrop(32), Flip(), T.ToTensor(),
                                        T.Normalize([0.5] * 3, [0.25] * 3)])
    return torchvision.datasets.ImageFolder(photos, transform=transform)


def hashes(loader):
    """Each batch's digest, with the sample ids it holds."""
    out = []
    for batch in loader:
        h = hashlib.sha256()
        for leaf in (batch if isinstance(batch, (tuple, list)) else [batch]):
            h.update(np.ascontiguousarray(leaf.numpy()).tobytes())
        out.append((tuple(loader.last_ids), h.hexdigest()[:16]))
    return out


KW = dict(batch_size=8, seed=7)


def test_worker_processes_give_the_same_batches_for_any_count_and_after_a_resume(photos):
    dataset = image_folder(photos)
    runs = {}
    for n in (1, 2, 4):
        loader = nostall.Loader(dataset, threads=n, workers="processes", **KW)
        assert loader.metrics["workers"]["mode"] == "processes"
        assert len(loader.metrics["workers"]["pids"]) == n
        runs[n] = hashes(loader)
        del loader
    assert runs[1] == runs[2] == runs[4]
    assert sorted(i for ids, _ in runs[1] for i in ids) == list(range(len(dataset)))
    loader = nostall.Loader(dataset, threads=2, workers="processes", **KW)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    resumed = nostall.Loader(dataset, threads=3, workers="processes", **KW)
    resumed.load_state_dict(state)
    assert hashes(resumed) == runs[1][1:]
    # Making a loader reads dataset[0] with the sample's seed, and puts the global
    # generators back as they were.
    torch.manual_seed(11)
    state = torch.get_rng_state()
    nostall.Loader(dataset, threads=1, workers="processes", **KW)
    assert torch.equal(torch.get_rng_state(), state)


class Drawing(torch.utils.data.Dataset):
    """Samples drawn from nostall's generator of the sample."""

    def __len__(self):
        return 40

    def __getitem__(self, i):
        g = nostall.sample_generator()
        noise = torch.rand(3, 8, 8, generator=g)
        rng = nostall.sample_generator("numpy")
        return noise + i, int(rng.integers(0, 1000))


def test_threads_give_the_same_batches_for_any_count_with_the_samples_generator():
    # The training loop's generators are its own: threads making samples do not seed them.
    torch.manual_seed(11)
    state = torch.get_rng_state()
    runs = [hashes(nostall.Loader(Drawing(), threads=n, workers="threads", **KW)) for n in (1, 2, 4)]
    assert torch.equal(torch.get_rng_state(), state)
    assert runs[0] == runs[1] == runs[2]
    processes = hashes(nostall.Loader(Drawing(), threads=2, workers="processes", **KW))
    assert processes == runs[0]
    with pytest.raises(RuntimeError, match="__getitem__"):
        nostall.sample_generator()


class Failing(torch.utils.data.Dataset):
    def __init__(self, bad, hang=()):
        self.bad, self.hang = set(bad), set(hang)

    def __len__(self):
        return 24

    def __getitem__(self, i):
        if i in self.hang:
            time.sleep(3600)
        if i in self.bad:
            raise ValueError(f"no sample {i} today")
        return torch.full((4,), float(i)), i


@pytest.mark.parametrize("workers", ["processes", "threads"])
def test_an_exception_in_getitem_names_the_sample_and_follows_on_error(workers):
    loader = nostall.Loader(Failing({5}), threads=2, workers=workers, shuffle=False, batch_size=4)
    with pytest.raises(nostall.SampleError) as raised:
        list(loader)
    e = raised.value
    assert e.cause == "user-code" and e.sample_id == 5 and "Failing[5]" in str(e)
    assert "ValueError: no sample 5 today" in str(e) and "Traceback" in str(e)
    skipping = nostall.Loader(Failing({5, 17}), threads=2, workers=workers, shuffle=False,
                              batch_size=4, on_error="skip")
    got = [int(v) for _, labels in skipping for v in labels]
    assert got == [i for i in range(24) if i not in (5, 17)]
    assert skipping.metrics["skipped"] == {"user-code": 2}


def test_a_getitem_that_hangs_is_reported_after_the_bound_and_its_worker_replaced():
    # One epoch only (none begun ahead, which would meet the sample again).
    loader = nostall.Loader(Failing((), hang={6}), threads=2, workers="processes", shuffle=False,
                            batch_size=4, on_error="skip", timeout=3.0, overlap_epochs=False)
    got = [int(v) for _, labels in loader for v in labels]
    assert got == [i for i in range(24) if i != 6]
    assert loader.metrics["skipped"] == {"user-code": 1}
    assert loader.metrics["workers"]["restarts"] == 1


def test_workers_killed_mid_epoch_are_started_again_and_every_sample_comes_once(photos):
    dataset = image_folder(photos)
    expected = hashes(nostall.Loader(dataset, threads=2, workers="processes", **KW))
    # Nothing is made before the iteration (no epoch prepared ahead): the first samples
    # asked meet the killed workers.
    loader = nostall.Loader(dataset, threads=2, workers="processes", overlap_epochs=False, **KW)
    for pid in loader.metrics["workers"]["pids"]:
        os.kill(pid, signal.SIGKILL)
    assert hashes(loader) == expected
    workers = loader.metrics["workers"]
    assert workers["restarts"] >= 1 and workers["retried"] >= 1
    assert all(pid > 0 for pid in workers["pids"])


class Ragged(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return {"x": torch.zeros(3 if i == 4 else 2), "name": i}


def test_samples_of_another_shape_or_kind_are_clear_errors():
    loader = nostall.Loader(Ragged(), threads=1, workers="threads", shuffle=False, batch_size=4)
    with pytest.raises(nostall.SampleError, match=r"float32\[3\], the first sample's float32\[2\]"):
        list(loader)

    class Named(Ragged):
        def __getitem__(self, i):
            return torch.zeros(2), f"photo-{i}.jpg"

    with pytest.raises(TypeError, match="holds a str"):
        nostall.Loader(Named(), workers="threads")
    with pytest.raises(nostall.ConfigError, match="fields="):
        nostall.Loader(Ragged(), fields={"image": "jpg"})
    with pytest.raises(nostall.ConfigError, match="give source= a Dataset"):
        nostall.Loader(nostall.demo_photos(), workers="threads")


def test_a_dict_sample_comes_back_as_a_dict_of_stacked_leaves():
    loader = nostall.Loader(Ragged(), threads=1, workers="processes", shuffle=False, batch_size=2,
                            on_error="skip")
    batches = list(loader)
    assert [sorted(b) for b in batches] == [["name", "x"]] * 4  # 7 samples: sample 4 skipped
    assert [n for b in batches for n in b["name"].tolist()] == [0, 1, 2, 3, 5, 6, 7]
    assert batches[0]["name"].tolist() == [0, 1] and batches[0]["x"].shape == (2, 2)


def test_the_dataloader_runs_a_translatable_image_folder_natively(photos):
    v2 = pytest.importorskip("torchvision.transforms.v2")
    transform = v2.Compose([v2.RandomResizedCrop(32), v2.RandomHorizontalFlip(), v2.ToImage(),
                            v2.ToDtype(torch.float32, scale=True), v2.Normalize([0.5] * 3, [0.25] * 3)])
    loader = nostall.DataLoader(image_folder(photos, transform), batch_size=8, shuffle=True,
                                num_workers=2, seed=1)
    assert loader.metrics["path"] == {"path": "native",
                                      "why": "an ImageFolder whose transform nostall translates"}
    batches = list(loader)
    assert len(batches) == len(loader) == 4
    assert batches[0][0].shape == (8, 3, 32, 32) and batches[0][1].dtype == torch.int64


def test_the_dataloader_runs_the_users_code_and_says_why(photos):
    dataset = image_folder(photos)
    loader = nostall.DataLoader(dataset, batch_size=8, shuffle=True, num_workers=2, seed=7)
    path = loader.metrics["path"]
    assert path["path"] == "user code" and "Flip" in path["why"] and path["workers"] == "processes"
    direct = hashes(nostall.Loader(dataset, threads=2, workers="processes", **KW))
    assert hashes(loader.loader) == direct
    seen = []
    calls = loader.__class__(dataset, batch_size=8, num_workers=1, seed=7,
                             collate_fn=lambda samples: seen.append(len(samples)) or len(samples))
    assert list(calls) == [8, 8, 8, 8] and seen == [8, 8, 8, 8]
    sampler = torch.utils.data.DistributedSampler(dataset, num_replicas=2, rank=1, seed=5)
    ranked = nostall.DataLoader(dataset, batch_size=4, sampler=sampler, num_workers=1)
    assert (ranked.loader.rank, ranked.loader.world_size) == (1, 2) and len(ranked) == 4
    with pytest.raises(nostall.ConfigError, match="WeightedRandomSampler"):
        nostall.DataLoader(dataset, sampler=torch.utils.data.WeightedRandomSampler([1.0] * 32, 8))


def test_a_distributed_samplers_drop_last_evens_the_ranks_and_keeps_partial_batches(photos):
    """DistributedSampler(drop_last=True) leaves the tail of the permutation out; the
    DataLoader's own drop_last (False here) keeps each rank's partial batch, as torch's."""
    dataset = image_folder(photos)
    for drop_last in (False, True):
        ours, torchs = [], []
        for rank in range(3):
            sampler = torch.utils.data.DistributedSampler(dataset, num_replicas=3, rank=rank, seed=5,
                                                          drop_last=True)
            theirs = torch.utils.data.DataLoader(dataset, batch_size=4, sampler=sampler, drop_last=drop_last)
            ranked = nostall.DataLoader(dataset, batch_size=4, sampler=sampler, num_workers=1,
                                        drop_last=drop_last)
            torchs.append([len(labels) for _, labels in theirs])
            ours.append([len(labels) for _, labels in ranked])
            assert len(ranked) == len(theirs)
        assert ours == torchs, (drop_last, ours, torchs)
    assert torchs == [[4, 4]] * 3 and sum(map(sum, ours)) == 24  # drop_last=True: 8 of 10 a rank


class HangsFirst:
    """A Dataset whose first sample never comes: it writes its process id, interrupts its
    parent if asked (Ctrl-C at a known point), and waits for ever."""

    def __init__(self, pidfile, interrupt=False):
        self.pidfile, self.interrupt = pidfile, interrupt

    def __len__(self):
        return 8

    def __getitem__(self, index):
        self.pidfile.write_text(str(os.getpid()))
        if self.interrupt:
            os.kill(os.getppid(), signal.SIGINT)
        threading.Event().wait()


def gone(pid):
    """Whether process `pid` no longer exists (a zombie still does)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_the_first_samples_probe_is_bounded_and_its_process_reaped(tmp_path, sigint_raises):
    pidfile = tmp_path / "pid"
    kw = dict(batch_size=4, threads=1, workers="processes")
    with pytest.raises(RuntimeError, match=r"first sample \(dataset\[0\].*longer than 1 s"):
        nostall.Loader(HangsFirst(pidfile), timeout=1.0, **kw)
    if pidfile.exists():  # (a loaded machine may kill it before it writes)
        assert gone(int(pidfile.read_text()))
    pidfile.unlink(missing_ok=True)
    with pytest.raises(KeyboardInterrupt):
        nostall.Loader(HangsFirst(pidfile, interrupt=True), timeout=600.0, **kw)
    assert gone(int(pidfile.read_text())), "killed and reaped after Ctrl-C"
    # Ctrl-C handed by the kernel to another thread (this one blocks it, as happens when
    # it has a signal pending) still ends the wait, not the 600 s timeout.
    pidfile.unlink()
    done = threading.Event()
    other = threading.Thread(target=done.wait)
    other.start()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        with pytest.raises(KeyboardInterrupt):
            nostall.Loader(HangsFirst(pidfile, interrupt=True), timeout=600.0, **kw)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        done.set()
        other.join()
    assert gone(int(pidfile.read_text()))


def memory_dirs(pid):
    """The folders of the worker memory files process `pid` maps."""
    with open(f"/proc/{pid}/maps") as maps:
        return {os.path.dirname(line.split(maxsplit=5)[5]) for line in maps if "/memory-" in line}


def parent_of(pid):
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("PPid:"))


def test_a_later_loaders_processes_map_none_of_another_loaders_worker_memory(photos):
    dataset = image_folder(photos)
    first = nostall.Loader(dataset, threads=2, workers="processes", **KW)
    next(iter(first))
    theirs = set().union(*(memory_dirs(pid) for pid in first.metrics["workers"]["pids"]))
    assert theirs, "the first loader's workers map their memory"
    second = nostall.Loader(dataset, threads=2, workers="processes", **KW)
    pids = second.metrics["workers"]["pids"]
    for pid in [parent_of(pids[0]), *pids]:  # its zygote and its workers
        assert not memory_dirs(pid) & theirs, pid


def wait_until_ended(pid):
    """Returns once process `pid` has ended (a pidfd turns readable when it exits, reaped
    or not): no polling."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


def test_a_zygote_that_dies_is_forked_again_and_no_sample_is_lost(photos):
    dataset = image_folder(photos)
    kw = dict(threads=2, workers="processes", on_error="skip", overlap_epochs=False, **KW)
    reference = nostall.Loader(dataset, **kw)
    reference.set_epoch(1)
    expected = hashes(reference)
    loader = nostall.Loader(dataset, **kw)
    for _ in loader:  # epoch 0
        pass
    workers = loader.metrics["workers"]["pids"]
    zygote = parent_of(workers[0])
    os.kill(zygote, signal.SIGKILL)  # as the OOM killer would
    for pid in workers:  # they die with it: every sample needs a new one
        wait_until_ended(pid)
    assert hashes(loader) == expected  # epoch 1, whole and the same
    metrics = loader.metrics
    assert metrics["skipped_total"] == 0 and metrics["workers"]["zygote_restarts"] == 1


def noise(sample, generator):
    return sample + 0.1 * torch.randn(sample.shape, generator=generator)


def test_python_operators_follow_nostalls_with_the_samples_own_draws(photos):
    from nostall import ops

    native = [ops.RandomResizedCrop(32), ops.Normalize([0.5] * 3, [0.25] * 3)]
    runs = {(mode, n): hashes(nostall.Loader(photos, pipeline=native + [ops.Python(noise)], threads=n,
                                             workers=mode, **KW))
            for mode in ("threads", "processes") for n in (1, 2, 4)}
    assert len(set(map(tuple, runs.values()))) == 1, "the same for threads and processes, any count"
    processes = nostall.Loader(photos, pipeline=native + [ops.Python(noise)], threads=2, workers="processes",
                               **KW)
    assert processes.metrics["workers"]["mode"] == "processes"
    assert len(processes.metrics["workers"]["pids"]) == 2
    del processes
    threads = nostall.Loader(photos, pipeline=native + [ops.Python(noise)], threads=2, **KW)
    assert "workers" not in threads.metrics, "threads unless asked"
    del threads
    alone = hashes(nostall.Loader(photos, pipeline=native, threads=2, **KW))
    first = runs["threads", 1]
    assert [ids for ids, _ in alone] == [ids for ids, _ in first] and alone != first
    # A function that changes nothing leaves nostall's pixels as they were: the native
    # operators draw as without it.
    seen = []
    same = hashes(nostall.Loader(photos, pipeline=native + [ops.Python(lambda x: seen.append(type(x)))],
                                 threads=2, workers="threads", **KW))
    assert same == alone and set(seen) == {torch.Tensor}
    arrays = nostall.Loader(photos, pipeline=native + [ops.Python(lambda x: seen.append(type(x)))],
                            output="numpy", threads=1, workers="threads", **KW)
    next(iter(arrays))
    assert np.ndarray in seen
    del arrays


def brighten(pixels, generator):
    """torchvision's functional on the 8-bit planes, with a draw of its own."""
    from torchvision.transforms.v2 import functional as F

    factor = 0.5 + torch.rand((), generator=generator).item()
    return F.adjust_brightness(pixels, factor)


def invert(pixels):
    return 255 - pixels


def test_a_python_operator_between_nostalls_gets_the_pixels_in_its_place(photos):
    from nostall import ops

    norm = ops.Normalize([0.5] * 3, [0.25] * 3)
    crop = ops.RandomResizedCrop(32)
    seen = []

    def recorded(pixels):
        seen.append((tuple(pixels.shape), pixels.dtype))
        return 255 - pixels

    ours = hashes(nostall.Loader(photos, pipeline=[crop, ops.RandomInvert(1.0), norm], threads=2, **KW))
    for mode, fn in (("threads", recorded), ("processes", invert)):
        theirs = hashes(nostall.Loader(photos, pipeline=[crop, ops.Python(fn), norm], threads=2,
                                       workers=mode, **KW))
        assert theirs == ours, mode
    assert set(seen) == {((3, 32, 32), torch.uint8)}
    # Its draws and the native ones after it: the same batches for any thread count.
    mixed = [crop, ops.Python(brighten), ops.RandomGrayscale(0.5), ops.Python(invert), norm]
    runs = [hashes(nostall.Loader(photos, pipeline=mixed, threads=n, **KW)) for n in (1, 2, 4)]
    assert runs[0] == runs[1] == runs[2]
    # NumPy arrays with output="numpy"; a function in each view of a multi-crop.
    arrays = nostall.Loader(photos, pipeline=[crop, ops.Python(lambda x: seen.append(type(x))), norm],
                            output="numpy", threads=1, workers="threads", **KW)
    next(iter(arrays))
    assert np.ndarray in seen
    del arrays
    views = [[crop, ops.Python(invert), norm], [ops.RandomResizedCrop(16), ops.Python(invert), norm]]
    plain = [[crop, ops.RandomInvert(1.0), norm], [ops.RandomResizedCrop(16), ops.RandomInvert(1.0), norm]]
    def flat(loader):
        return [(ids, [v.clone() for v in batch[0]]) for batch, ids in
                ((b, tuple(loader.last_ids)) for b in loader)]
    a = flat(nostall.Loader(photos, pipeline=views, threads=2, workers="processes", **KW))
    b = flat(nostall.Loader(photos, pipeline=plain, threads=2, **KW))
    assert [ids for ids, _ in a] == [ids for ids, _ in b]
    assert all(torch.equal(x, y) for (_, xs), (_, ys) in zip(a, b) for x, y in zip(xs, ys))


def test_python_operator_workers_killed_are_started_again_and_every_sample_comes_once(photos):
    from nostall import ops

    pipeline = [ops.RandomResizedCrop(32), ops.Python(brighten), ops.Normalize([0.5] * 3, [0.25] * 3)]
    expected = hashes(nostall.Loader(photos, pipeline=pipeline, threads=2, workers="threads", **KW))
    # Nothing is made before the iteration (no epoch prepared ahead): the first samples
    # meet the killed workers.
    loader = nostall.Loader(photos, pipeline=pipeline, threads=2, overlap_epochs=False, workers="processes",
                            **KW)
    for pid in loader.metrics["workers"]["pids"]:
        os.kill(pid, signal.SIGKILL)
    assert hashes(loader) == expected
    assert loader.metrics["workers"]["restarts"] >= 1 and loader.metrics["workers"]["retried"] >= 1


@pytest.mark.parametrize("workers", ["threads", "processes"])
def test_a_python_operator_that_fails_names_itself_and_is_skipped_by_policy(photos, monkeypatch, workers):
    from nostall import _device
    from nostall import ops

    def crop(x):
        return x[:, :10]

    pipeline = [ops.RandomResizedCrop(32), ops.Python(crop)]
    loader = nostall.Loader(photos, pipeline=pipeline, threads=1, workers=workers, **KW)
    with pytest.raises(nostall.SampleError, match=r"ops.Python\(.*crop\) failed(.|\n)*returned float32\[3, 10, 32\]"):
        list(loader)
    skipping = nostall.Loader(photos, pipeline=pipeline, threads=1, on_error="skip", workers=workers, **KW)
    assert list(skipping) == [] and skipping.metrics["skipped"] == {"user-code": 32}
    with pytest.raises(nostall.ConfigError, match="write the geometric ones"):
        nostall.Loader(photos, pipeline=[ops.Python(noise), ops.RandomResizedCrop(32)])
    monkeypatch.setattr(_device, "resolve", lambda device: 0)  # the CPU standing in for a GPU
    with pytest.raises(nostall.ConfigError, match="with a device"):
        nostall.Loader(photos, pipeline=[ops.RandomResizedCrop(32), ops.Python(noise)], device="cuda")
    with pytest.raises(TypeError, match="function of the sample"):
        ops.Python(3)


EXIT_SCRIPT = """
import sys, torch, nostall
from nostall import ops

def noise(sample, generator):
    return sample + 0.1 * torch.randn(sample.shape, generator=generator)

loader = nostall.Loader(sys.argv[1], batch_size=8, threads=2, workers="threads",
                        pipeline=[ops.RandomResizedCrop(64), ops.Python(noise)])
for _ in loader:
    pass
# The loader stays a global: its next epoch, begun ahead, runs noise in its threads while
# the interpreter exits.
"""


def test_a_process_exiting_with_a_loader_in_the_users_code_ends_cleanly(photos):
    import subprocess
    import sys

    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", EXIT_SCRIPT, photos], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0 and "terminate" not in done.stderr, done.stderr[-2000:]


def test_analyze_measures_a_dataset_objects_getitem_as_prep(photos):
    report = nostall.analyze(image_folder(photos), step_ms=5, batch_size=8, budget=1, run_seconds=0.5,
                             max_threads=2)
    text = str(report)
    assert "ImageFolder.__getitem__ in 2 worker processes" in text
    assert "ImageFolder[" in text  # costliest samples named as the Dataset names them
    with pytest.raises(nostall.ConfigError, match="model_rate or step_ms"):
        nostall.analyze(image_folder(photos), model=lambda images, labels: None)
    with pytest.raises(nostall.ConfigError, match="pipeline="):
        nostall.analyze(image_folder(photos), pipeline="val", step_ms=5)


def test_an_epoch_of_a_dataset_begun_on_two_ranks_ends_on_three_with_each_sample_once(photos):
    dataset = image_folder(photos)
    kw = dict(batch_size=4, seed=7, threads=2, workers="processes", drop_last=False)

    def delivered(loader, batches=None):
        out = []
        for n, (images, _) in enumerate(loader, 1):
            out += [(s, hashlib.sha256(images[i].numpy().tobytes()).hexdigest()[:12])
                    for i, s in enumerate(loader.last_ids)]
            if n == batches:
                break
        return out

    everything = sorted(delivered(nostall.Loader(dataset, **kw)))
    before, states = [], []
    for rank in range(2):
        loader = nostall.Loader(dataset, rank=rank, world_size=2, **kw)
        before += delivered(loader, batches=1)
        states.append(loader.state_dict())
        del loader
    after = []
    for rank in range(3):
        loader = nostall.Loader(dataset, rank=rank, world_size=3, **kw)
        loader.load_state_dict(states)
        after += delivered(loader)
        del loader
    got = sorted(before + after)
    for item in everything:
        got.remove(item)  # each sample, with the augmentation it has alone
    assert len(got) == -(32 - 8) % 3, "only the padding to a multiple of 3 comes twice"


def test_worker_settings_are_checked_and_a_failing_worker_init_fn_is_named(photos):
    dataset = image_folder(photos)

    def broken(number):
        raise RuntimeError(f"no database for worker {number}")

    with pytest.raises(nostall.ConfigError, match=r"(?s)its start failed.*no database for worker 0"):
        nostall.Loader(dataset, threads=1, workers="processes", worker_init_fn=broken, **KW)
    for bad in (-1.0, 0.0, float("nan"), float("inf"), 1e12):
        with pytest.raises(nostall.ConfigError, match="timeout="):
            nostall.Loader(dataset, threads=1, workers="processes", timeout=bad, **KW)
    with pytest.raises(nostall.ConfigError, match="for worker processes"):
        nostall.Loader(dataset, threads=1, workers="threads", timeout=5.0, **KW)


def test_a_python_operator_may_keep_its_sample_and_draw_from_the_global_generators(photos):
    from nostall import ops

    kept = []

    def keep(sample):
        kept.append(sample)
        return sample * 2

    pipeline = [ops.RandomResizedCrop(32), ops.Python(keep)]
    loader = nostall.Loader(photos, pipeline=pipeline, threads=1, workers="threads", shuffle=False,
                            overlap_epochs=False, batch_size=8)
    first = next(iter(loader))[0].clone()
    del loader
    # What it kept is memory of its own (holding the sample it returned, written there
    # before the batch took it), not the freed batch buffer's.
    assert torch.equal(torch.stack(kept[:8]), first)

    def jitter(sample):  # torch's global generator, seeded per sample in a worker
        return sample + torch.rand(sample.shape)

    runs = [hashes(nostall.Loader(photos, pipeline=[ops.RandomResizedCrop(32), ops.Python(jitter)], threads=n,
                                  workers="processes", **KW)) for n in (1, 2)]
    assert runs[0] == runs[1]


class Lazy(torch.utils.data.Dataset):
    """Opens its "database" at its first __getitem__, as h5py and LMDB datasets do."""

    def __init__(self):
        self.handle = None

    def __len__(self):
        return 8

    def __getitem__(self, i):
        if self.handle is None:
            self.handle = os.getpid()
        return torch.full((2,), float(i)), self.handle


def test_worker_processes_open_what_getitem_opens_themselves():
    dataset = Lazy()
    loader = nostall.Loader(dataset, threads=2, workers="processes", batch_size=4, shuffle=False)
    # The first sample, read to learn the samples' shapes, was made in a process of its
    # own: nothing was opened here for the workers to share.
    assert dataset.handle is None
    openers = {int(pid) for _, pids in loader for pid in pids}
    assert os.getpid() not in openers and openers <= set(loader.metrics["workers"]["pids"])
