"""Remote prep on a real Ray cluster: the scenarios of test_remote.py, run in one process
inside a network namespace of its own (Ray binds the machine's addresses otherwise).

Run by test_remote.py as

    unshare -rn sh -c 'ip link set lo up && python python/tests/ray_scenarios.py OUT'

It starts a head node and three worker nodes (``ray_cluster.RayCluster``): two that hold
the job's secret and the resource the actors ask for, and one with another secret and a
resource of its own. Each scenario writes what it saw to the JSON file OUT; the test
checks it. Nothing here decides a verdict by timing: an actor is killed after a given
number of batches, and every wait is for an event, bounded only to fail rather than hang.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from ray_cluster import RayCluster  # noqa: E402

SECRET = "a" * 32
os.environ["NOSTALL_PEER_SECRET"] = SECRET

import ray  # noqa: E402

import nostall  # noqa: E402
from nostall import ops  # noqa: E402

RESOURCES = {"nostall_prep": 1}


def recipe() -> dict[str, Any]:
    """A timm-like recipe (its draws, erasing, MixUp in the engine), small and quick."""
    return dict(
        pipeline=[ops.RandomResizedCrop(64), ops.RandomHorizontalFlip(),
                  ops.RandAugment(num_ops=2, magnitude=9), ops.Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
                  ops.RandomErasing(p=0.25)],
        mix=nostall.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=4),
        batch_size=4, seed=5, threads=1,
    )


def digest(batches: Any) -> list[tuple[list[float], str]]:
    """Per batch: its (soft) labels and a hash of its pixels."""
    return [(labels.flatten().tolist(), hashlib.sha1(images.numpy().tobytes()).hexdigest())
            for images, labels in batches]


def remote(**kw: Any) -> nostall.Remote:
    settings: dict[str, Any] = dict(actors=2, num_cpus=0.5, resources=RESOURCES, part_batches=2,
                                    stall_limit=20.0, start_timeout=120.0)
    settings.update(kw)
    return nostall.Remote(**settings)


class Drawing:
    """A map-style Dataset whose samples are drawn from nostall's generator of the sample."""

    def __len__(self) -> int:
        return 24

    def __getitem__(self, i: int) -> Any:
        import torch

        noise = torch.rand(3, 8, 8, generator=nostall.sample_generator())
        return noise + i, int(nostall.sample_generator("numpy").integers(0, 1000))


def darkened(image: Any) -> Any:
    """The user's function on each image (``ops.Python``)."""
    return image // 2


def hashes(loader: Any) -> list[str]:
    """Each batch's digest: every tensor of it, and what else it holds (captions)."""
    def leaves(value: Any) -> Any:
        if isinstance(value, dict):
            return [(k, leaves(v)) for k, v in value.items()]
        if isinstance(value, (tuple, list)):
            return [leaves(v) for v in value]
        if hasattr(value, "numpy"):
            return hashlib.sha1(value.numpy().tobytes()).hexdigest()
        return value

    return [hashlib.sha1(repr(leaves(batch)).encode()).hexdigest() for batch in loader]


def modalities(photos: str) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Loaders of other kinds, by name: their source and settings (files made here)."""
    import shutil

    import open_clip
    from test_audio import clip_files
    from test_fields import captions, write_shard

    root = Path(photos).parent
    files = sorted(Path(photos).rglob("*.jpg"))[:12]
    records = root / "records"
    records.mkdir(exist_ok=True)
    write_shard(records / "train-000000.tar", [
        member for i, (path, caption) in enumerate(zip(files, captions(len(files))))
        for member in ((f"{i:06d}.jpg", path.read_bytes()), (f"{i:06d}.txt", caption.encode()),
                       (f"{i:06d}.cls", str(i % 3).encode()))])
    tokenizer = nostall.Tokenizer(open_clip.get_tokenizer("ViT-B-32"), length=77)
    fields = {"image": "jpg", "text": nostall.Field("txt", tokenizer=tokenizer), "caption": "txt",
              "label": "cls"}
    clips = root / "clips"
    for clip in clip_files():
        (clips / clip.suffix[1:]).mkdir(parents=True, exist_ok=True)
        shutil.copy(clip, clips / clip.suffix[1:] / clip.name)
    half = root / "half"
    for path in files[:8]:
        (half / path.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, half / path.parent.name / path.name)
    small = dict(batch_size=4, seed=9, threads=1)
    return {
        "fields": (str(records), dict(small, fields=fields, pipeline="train", image_size=32)),
        "audio": (str(clips), dict(small, pipeline="melspec")),
        "mixture": ([photos, str(half)], dict(small, weights=[0.3, 0.7], image_size=32)),
    }


def refused(make: Any) -> str:
    """The ConfigError ``make`` raises (or what it did instead)."""
    try:
        make()
    except nostall.ConfigError as e:
        return "ConfigError: " + str(e)
    except Exception as e:  # noqa: BLE001 - reported, and the test fails on it
        return f"{type(e).__name__}: {e}"
    return "no error"


def actor_pid(actor: Any) -> int:
    return ray.get(actor.__ray_call__.remote(lambda self: os.getpid()))


def main(out: Path) -> None:
    seen: dict[str, Any] = {}
    photos = nostall.demo_photos(str(out.parent / "photos"))
    mark(seen, "start")
    seen["no_cluster"] = refused(lambda: nostall.Loader(
        photos, remote=remote(address="127.0.0.1:9"), **recipe()))
    mark(seen, "no_cluster")
    with RayCluster(workers=2, worker_cpus=1, worker_resources=RESOURCES) as cluster:
        # A third node holds another secret, and is the only one with `other`.
        cluster.add_worker_node(env={"NOSTALL_PEER_SECRET": "b" * 32}, resources={"other": 1})
        ray.init(**cluster.init_kwargs(), logging_level="ERROR", log_to_driver=False)
        seen["nodes"] = len([n for n in ray.nodes() if n["Alive"]])
        scenarios(seen, photos, cluster)
        ray.shutdown()
    out.write_text(json.dumps(seen))


def mark(seen: dict[str, Any], what: str) -> None:
    """Seconds since the last mark, by scenario (for the test's report, not its verdict)."""
    now = time.monotonic()
    times = seen.setdefault("seconds", {})
    times[what] = round(now - seen.get("_last", now), 1)
    seen["_last"] = now


def scenarios(seen: dict[str, Any], photos: str, cluster: RayCluster) -> None:
    mark(seen, "cluster")
    local = digest(nostall.Loader(photos, **recipe()))
    seen["batches"] = len(local)

    # The same bytes, with and without the trainer's own loader among the preparers; the
    # second epoch from the run the actors started during the first.
    second = nostall.Loader(photos, **recipe())
    second.set_epoch(1)
    local_second = digest(second)
    for with_local in (True, False):
        loader = nostall.Loader(photos, remote=remote(local=with_local, ahead=True), **recipe())
        seen[f"equal_local_{with_local}"] = digest(loader) == local
        seen[f"stats_local_{with_local}"] = loader.metrics["remote"]
        seen[f"equal_second_epoch_{with_local}"] = digest(loader) == local_second
        seen[f"runs_ahead_{with_local}"] = loader.metrics["remote_runs_ahead"]
        del loader
        mark(seen, f"equal_local_{with_local}")

    # An actor SIGKILLed after two batches: every batch once, in order; Ray restarts it
    # and the trainer follows it to its new address.
    loader = nostall.Loader(photos, remote=remote(local=False), **recipe())
    pool = loader._remote_pool
    before = set(loader._remote_client.addresses)
    got = []
    for i, batch in enumerate(loader):
        got.extend(digest([batch]))
        if i == 1:
            os.kill(actor_pid(pool.actors[0]), signal.SIGKILL)
    seen["equal_after_kill"] = got == local
    # Bounded only to fail rather than hang: the pool says when it followed a move.
    pool.moved.wait(timeout=120)
    seen["followed_restart"] = set(loader._remote_client.addresses) != before
    next_epoch = nostall.Loader(photos, **recipe())
    next_epoch.set_epoch(1)
    seen["equal_after_restart"] = digest(loader) == digest(next_epoch)
    del loader, pool
    mark(seen, "kill")

    # Stopped after three batches and resumed from state_dict: by another trainer with
    # remote prep, and by a trainer without it.
    loader = nostall.Loader(photos, remote=remote(), **recipe())
    it = iter(loader)
    head = digest(next(it) for _ in range(3))
    state = loader.state_dict()
    del it, loader
    for name, kw in (("remote", dict(remote=remote())), ("local", {})):
        resumed = nostall.Loader(photos, **kw, **recipe())
        resumed.load_state_dict(state)
        seen[f"resume_{name}"] = head + digest(resumed) == local
        mark(seen, f"resume_{name}")

    # A job of two ranks stopped after two batches, resumed on one rank with remote prep:
    # the same as the local loader's resume of the same states.
    states = []
    for rank in (0, 1):
        two = nostall.Loader(photos, rank=rank, world_size=2, **recipe())
        it = iter(two)
        for _ in range(2):
            next(it)
        states.append(two.state_dict())
        del it, two
    expected = nostall.Loader(photos, **recipe())
    expected.load_state_dict(states)
    elastic = nostall.Loader(photos, remote=remote(), **recipe())
    elastic.load_state_dict(states)
    seen["elastic"] = digest(elastic) == digest(expected)
    del elastic, expected
    mark(seen, "elastic")

    # The user's own code in the actors alone: a Dataset object drawing from the sample's
    # generator (in the actors' worker processes), and ops.Python on each image.
    dataset = dict(batch_size=4, seed=7, threads=1)
    seen["dataset"] = (hashes(nostall.Loader(Drawing(), remote=remote(local=False), **dataset))
                       == hashes(nostall.Loader(Drawing(), **dataset)))
    python_ops = dict(recipe(), pipeline=[ops.RandomResizedCrop(32), ops.Python(darkened)])
    seen["python_op"] = (digest(nostall.Loader(photos, remote=remote(local=False), **python_ops))
                         == digest(nostall.Loader(photos, **python_ops)))
    mark(seen, "user_code")

    # Everything else made by the actors alone: captions tokenized in the engine (the
    # tokenizer shipped to the actors), audio clips, and a mixture of two datasets.
    for name, (source, kw) in modalities(photos).items():
        made = nostall.Loader(source, remote=remote(local=False), **kw)
        seen[name] = hashes(made) == hashes(nostall.Loader(source, **kw))
        del made
        mark(seen, name)

    # Refused before the first epoch, by name.
    seen["no_label"] = refused(lambda: nostall.Loader(
        photos, remote=remote(labels={"pool": "gpu-less"}), **recipe()))
    mark(seen, "no_label")
    seen["wrong_secret"] = refused(lambda: nostall.Loader(
        photos, remote=remote(actors=1, resources={"other": 1}), **recipe()))
    mark(seen, "wrong_secret")
    seen["other_settings"] = refused(lambda: _other_settings(photos))
    mark(seen, "other_settings")
    seen.pop("_last")


def _other_settings(photos: str) -> None:
    """A trainer whose actors would prepare for another seed (a front that lost a setting)."""
    from nostall import _remote

    real = _remote._actor_settings
    _remote._actor_settings = lambda *a: {**real(*a), "seed": 6}
    try:
        nostall.Loader(photos, remote=remote(actors=1), **recipe())
    finally:
        _remote._actor_settings = real


if __name__ == "__main__":
    target = Path(sys.argv[1])
    try:
        main(target)
    except BaseException:
        target.with_suffix(".error").write_text(traceback.format_exc())
        raise
