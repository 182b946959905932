"""Rank sharding: two processes with RANK / WORLD_SIZE in the environment, as torchrun sets."""

import json
import os
import subprocess
import sys

import nostall

CHILD = r"""
import hashlib, json, sys
import nostall
loader = nostall.Loader(sys.argv[1], batch_size=5, image_size=32, pipeline="val", seed=1)
digests, batches = [], 0
for images, labels in loader:
    batches += 1
    digests += [hashlib.sha1(img.numpy().tobytes()).hexdigest() for img in images]
print(json.dumps({"rank": loader.rank, "world": loader.world_size, "len": len(loader),
                  "batches": batches, "digests": digests}))
"""


def run_rank(photos, rank, world):
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    out = subprocess.run([sys.executable, "-c", CHILD, photos], env=env, capture_output=True,
                         text=True, check=True, timeout=120)
    return json.loads(out.stdout)


def test_two_ranks_get_disjoint_shards_with_equal_batch_counts(photos):
    everything = run_rank(photos, 0, 1)
    assert everything["world"] == 1 and len(everything["digests"]) == 32
    assert len(set(everything["digests"])) == 32  # the photographs are all different
    procs = [run_rank(photos, r, 2) for r in (0, 1)]
    assert [p["rank"] for p in procs] == [0, 1] and all(p["world"] == 2 for p in procs)
    a, b = (set(p["digests"]) for p in procs)
    assert not a & b  # disjoint
    assert a | b == set(everything["digests"])  # together, the whole dataset
    assert procs[0]["batches"] == procs[1]["batches"] == procs[0]["len"] == 4  # 16 each, batch 5


def test_explicit_arguments_override_the_environment(photos, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert nostall.Loader(photos).rank == 1
    loader = nostall.Loader(photos, rank=0, world_size=4)
    assert (loader.rank, loader.world_size, len(loader)) == (0, 4, 1)
