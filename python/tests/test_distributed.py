"""Rank sharding: two processes with RANK / WORLD_SIZE in the environment, as torchrun sets."""

import glob
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


ELASTIC = r"""
import hashlib, json, os, sys
import nostall
photos, out, stage, take = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
loader = nostall.Loader(photos, batch_size=2, image_size=32, pipeline="train", seed=7)
if len(sys.argv) > 5:  # the states to resume: one file, or several
    states = [json.load(open(path)) for path in sys.argv[5:]]
    loader.load_state_dict(states[0] if len(states) == 1 else states)
delivered = []
for batch, (images, labels) in enumerate(loader):
    delivered += [[i, hashlib.sha1(img.numpy().tobytes()).hexdigest()]
                  for i, img in zip(loader.last_ids, images)]
    if batch + 1 == take:
        break
rank = loader.rank
with open(os.path.join(out, f"{stage}-state-{rank}.json"), "w") as f:
    json.dump(loader.state_dict(), f)
with open(os.path.join(out, f"{stage}-ids-{rank}.json"), "w") as f:
    json.dump({"world": loader.world_size, "delivered": delivered}, f)
"""


def torchrun(tmp_path, photos, ranks, stage, take, states=()):
    """Runs ELASTIC under torchrun with `ranks` processes; returns each rank's record."""
    script = tmp_path / "elastic.py"
    script.write_text(ELASTIC)
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    run = subprocess.run([torchrun, "--standalone", f"--nproc_per_node={ranks}", str(script),
                          photos, str(tmp_path), stage, str(take),
                          *[str(tmp_path / s) for s in states]],
                         timeout=300, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    records = [json.loads((tmp_path / f"{stage}-ids-{r}.json").read_text())
               for r in range(ranks)]
    assert all(r["world"] == ranks for r in records)
    return [r["delivered"] for r in records]


def test_torchrun_resumes_an_epoch_on_three_ranks_then_one(photos, tmp_path):
    """2 ranks stop mid-epoch; 3 ranks resume from rank 0's state and stop again; 1 rank
    finishes from every rank's state. Each of the 32 photographs comes exactly once, each
    prepared as in an uninterrupted run (random crops and flips compared byte for byte)."""
    whole = dict(map(tuple, torchrun(tmp_path, photos, 1, "whole", 0)[0]))
    assert len(whole) == 32
    two = torchrun(tmp_path, photos, 2, "two", 2)
    assert [len(d) for d in two] == [4, 4]  # 2 batches of 2 each
    three = torchrun(tmp_path, photos, 3, "three", 1, ["two-state-0.json"])
    assert [len(d) for d in three] == [2, 2, 2]
    one = torchrun(tmp_path, photos, 1, "one", 0,
                   [f"three-state-{r}.json" for r in range(3)])
    assert [len(d) for d in one] == [32 - 8 - 6]
    delivered = [s for stage in (two, three, one) for rank in stage for s in rank]
    assert sorted(i for i, _ in delivered) == list(range(32))  # each exactly once
    assert all(whole[i] == digest for i, digest in delivered)
    # The rest of the 2-rank epoch over 3 ranks: the same number of batches on each
    # (24 photographs, padded to 8 per rank: 4 batches).
    rest = torchrun(tmp_path, photos, 3, "rest", 0, ["two-state-1.json"])
    assert [len(d) for d in rest] == [8, 8, 8]
    ids = [i for rank in rest for i, _ in rank]
    assert len(set(ids)) == 24 and not set(ids) & {i for rank in two for i, _ in rank}


BALANCED = r"""
import glob, hashlib, json, os, sys
import nostall
photos, out = sys.argv[1], sys.argv[2]
tables = lambda: sorted(glob.glob(f"/dev/shm/nostall-{os.geteuid()}-*.ranks"))
record = {}
for balance in (True, False):
    loader = nostall.Loader(photos, batch_size=4, image_size=32, pipeline="train", seed=3,
                            balance_ranks=balance)
    digests = []
    for images, labels in loader:
        digests += [hashlib.sha1(img.numpy().tobytes()).hexdigest() for img in images]
        if balance:
            record["tables"] = {t: os.stat(t).st_mode & 0o777 for t in tables()}
    record[str(balance)] = {"digests": digests, "threads": loader.metrics["prep"]["threads"]}
    del loader
rank = int(os.environ["LOCAL_RANK"])
with open(os.path.join(out, f"balanced-{rank}.json"), "w") as f:
    json.dump(record, f)
"""


def test_torchrun_ranks_share_the_nodes_threads_without_changing_a_sample(photos, tmp_path):
    """Two local ranks balance their prep threads through a table in /dev/shm that only
    this user may open; what they deliver is what they deliver unbalanced, byte for
    byte."""
    script = tmp_path / "balanced.py"
    script.write_text(BALANCED)
    before = set(glob.glob(f"/dev/shm/nostall-{os.geteuid()}-*.ranks"))
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    run = subprocess.run([torchrun, "--standalone", "--nproc_per_node=2", str(script),
                          photos, str(tmp_path)], timeout=300, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"balanced-{r}.json").read_text()) for r in range(2)]
    for rank in ranks:
        assert rank["True"]["digests"] == rank["False"]["digests"]
        assert len(rank["True"]["digests"]) == 16
        # Each rank's share: at least the cores (to take them all while the other is
        # ahead), at most the node's budget (the cores for each rank).
        cores = len(os.sched_getaffinity(0))
        assert cores <= rank["True"]["threads"] <= 2 * cores
        assert rank["False"]["threads"] == max(cores // 2, 1)
    # Both ranks found the same table, only this user's; the last rank to leave removed
    # it.
    (table,) = set(ranks[0]["tables"]) - before
    assert table in ranks[1]["tables"]
    assert ranks[0]["tables"][table] == 0o600
    assert not os.path.exists(table)
