"""Remote prep on a real Ray autoscaler: the nodes come when the pool grows and go when
it shrinks or stops (what ``_Pool._request`` asks of ``request_resources``, and the
actors' own demand).

Run by test_remote_autoscaling.py as

    unshare -rn sh -c 'ip link set lo up && python python/tests/ray_autoscaling.py OUT'

It starts a head node (the trainer: 0 CPUs) running Ray's autoscaler with its fake node
provider (``ray_cluster.RayCluster(autoscaling=...)``), which may launch up to two "prep"
nodes (1 CPU and ``nostall_prep`` each) and gives a node back once it has been idle a
few seconds. No prep node runs at first: the loader's first actor is asked of the
autoscaler. Then the scenario drives the loader's pool by hand (``_Pool._scale``; the
scaling rule's interval is too long for it to fire): 1 → 2 actors, the start making the
autoscaler launch a node, then 2 → 1 → stopped, each making it give one back. What it saw goes to the JSON file OUT; the test checks it.
Nothing here decides a verdict by timing: every wait is for an event (the actor's start,
a node leaving the GCS's list), bounded only to fail rather than hang.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).parent))

from ray_cluster import RayCluster  # noqa: E402

os.environ["NOSTALL_PEER_SECRET"] = "a" * 32  # the trainer's, and (inherited) every node's

import ray  # noqa: E402

import nostall  # noqa: E402
from ray_scenarios import digest, mark, recipe  # noqa: E402

PREP: dict[str, float] = {"nostall_prep": 1}
#: The node type the autoscaler may launch: room for one actor each.
NODE_TYPES = {"prep": {"resources": {"CPU": 1, **PREP}, "min_workers": 0, "max_workers": 2}}
#: Bounds on the waits, only so that a broken run fails rather than hangs (a node starts
#: in a few seconds, and is given back after `IDLE_S` idle).
LIMIT_S = 180.0
IDLE_S = 5.0


def prep_nodes() -> list[str]:
    """Ids of the alive nodes that can take an actor (the head cannot)."""
    return sorted(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("nostall_prep"))


def wait_for(what: str, done: Callable[[], bool]) -> bool:
    """Polls `done` until true (an event: the GCS's node list changed); False only after
    `LIMIT_S`, so that the test fails with what it saw rather than hangs."""
    deadline = time.monotonic() + LIMIT_S
    while not done():
        if time.monotonic() > deadline:
            print(f"ray_autoscaling: gave up waiting for {what}", file=sys.stderr)
            return False
        time.sleep(0.2)
    return True


def actor_node(actor: Any) -> str:
    return ray.get(actor.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()))


Process = tuple[int, int, int, str]


def processes() -> dict[int, Process]:
    """Every live process: pid → (parent, session, start time, name). A pid with the same
    start time is the same process."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        name = stat[stat.find("(") + 1:stat.rfind(")")]
        fields = stat[stat.rfind(")") + 2:].split()
        if fields[0] != "Z":  # zombies wait for their reaper, and hold nothing
            found[int(entry.name)] = (int(fields[1]), int(fields[3]), int(fields[19]), name)
    return found


def family(root: int) -> dict[int, Process]:
    """`root` and its live descendants (the head's `ray start`: its GCS, raylet, monitor,
    and the nodes the monitor launched, with their raylets' workers)."""
    table = processes()
    found = {root: table[root]} if root in table else {}
    while True:
        new = {pid: p for pid, p in table.items() if p[0] in found and pid not in found}
        if not new:
            return found
        found.update(new)


def main(out: Path) -> None:
    seen: dict[str, Any] = {}
    photos = nostall.demo_photos(str(out.parent / "photos"))
    epochs = []
    for epoch in range(2):
        local = nostall.Loader(photos, **recipe())
        local.set_epoch(epoch)
        epochs.append(digest(local))
    mark(seen, "start")
    cluster = RayCluster(workers=0, autoscaling=NODE_TYPES, idle_timeout_s=IDLE_S)
    with cluster:
        ray.init(**cluster.init_kwargs(), logging_level=logging.ERROR, log_to_driver=False)
        mark(seen, "cluster")
        tree = scenario(seen, photos, epochs, cluster)
        ray.shutdown()
        head = cluster.head.pid if cluster.head else -1
    # Nothing of the cluster is left: none of the processes seen while it had two
    # launched nodes (the same pid and start time), nothing in the head's session.
    now = processes()
    seen["left_after_stop"] = sorted(
        {pid for pid, p in tree.items() if pid in now and now[pid][2] == p[2]}
        | {pid for pid, p in now.items() if p[1] == head})
    mark(seen, "stop")
    seen.pop("_last")
    out.write_text(json.dumps(seen))


def scenario(seen: dict[str, Any], photos: str, epochs: list[Any], cluster: RayCluster) -> dict[int, Process]:
    """The pool grown to two actors and back to none; returns the cluster's processes
    while it had two launched nodes."""
    seen["nodes_at_start"] = len(prep_nodes())
    # No node can take an actor yet: with scaling, the loader asks the autoscaler for its
    # first actor's room instead of refusing, and its start waits for the node.
    remote = nostall.Remote(actors=1, local=True, num_cpus=1, resources=PREP, start_timeout=LIMIT_S,
                            scaling=nostall.Scaling(min_actors=0, max_actors=2, interval=3600))
    # 0 → 1: the request and the actor's demand make the autoscaler launch a node.
    loader = nostall.Loader(photos, remote=remote, **recipe())
    pool = loader._remote_pool  # type: ignore[attr-defined]
    client = loader._remote_client  # type: ignore[attr-defined]
    seen["grow1_nodes"] = len(prep_nodes())
    seen["grow1_addresses"] = len(client.addresses)
    seen["equal_one_actor"] = digest(loader) == epochs[0]
    seen["one_actor_stats"] = loader.metrics["remote"]
    mark(seen, "grow1")

    # 1 → 2: a second node, the second actor on it.
    pool._scale(+1)
    nodes = prep_nodes()
    seen["grow2_nodes"] = len(nodes)
    seen["grow2_addresses"] = len(client.addresses)
    on = [actor_node(a) for a in pool.actors]
    seen["grow2_actors_on_distinct_prep_nodes"] = len(set(on)) == 2 and set(on) == set(nodes)
    loader.set_epoch(1)
    seen["equal_two_actors"] = digest(loader) == epochs[1]
    # Every process of the cluster, the launched nodes' too (the monitor's children), is
    # in the head's session: what `RayCluster.stop` kills, by pid.
    head = cluster.head.pid if cluster.head else -1
    tree = family(head)
    seen["raylets_while_two"] = sum(p[3] == "raylet" for p in tree.values())
    seen["outside_head_session"] = sorted(pid for pid, p in tree.items() if p[1] != head)
    mark(seen, "grow2")

    # 2 → 1: the request drops to one bundle and the second actor is killed: its node,
    # idle, is given back; the first actor's stays.
    kept = on[0]
    pool._scale(-1)
    seen["shrink_addresses"] = len(client.addresses)
    seen["shrink_gone"] = wait_for("the idle node to go", lambda: len(prep_nodes()) < 2)
    seen["shrink_nodes"] = prep_nodes() == [kept]
    mark(seen, "shrink")

    # Stopped with the loader: the request is withdrawn, the last node given back.
    del loader, client
    gc.collect()
    seen["stopped_with_loader"] = pool.stopped.is_set()
    pool.stop()  # idempotent: what the loader's finalizer did (or, failing that, does)
    seen["stop_gone"] = wait_for("the last node to go", lambda: not prep_nodes())
    seen["stop_nodes"] = len(prep_nodes())
    mark(seen, "release")
    return tree


if __name__ == "__main__":
    target = Path(sys.argv[1])
    try:
        main(target)
    except BaseException:
        target.with_suffix(".error").write_text(traceback.format_exc())
        raise
