"""``Scaling`` on a real Ray autoscaler: the nodes are launched as the pool of actors grows
and given back as it shrinks and when the loader stops.

The scenario (``ray_autoscaling.py``: a head running Ray's autoscaler with its fake node
provider, which starts "nodes" as local processes) runs in one child process inside a
network namespace of its own (Ray binds the machine's addresses otherwise); this file
checks what it saw. The requests themselves are checked without Ray in test_remote.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if shutil.which("unshare") is None:
        pytest.fail("the Ray tests need unshare (util-linux) for a network namespace of their own")
    out = tmp_path_factory.mktemp("ray") / "seen.json"
    script = f"ip link set lo up && exec {sys.executable} {HERE / 'ray_autoscaling.py'} {out}"
    run = subprocess.run(["unshare", "-rn", "sh", "-c", script], capture_output=True, text=True,
                         timeout=600, env={**os.environ, "PYTHONPATH": str(HERE.parent)})
    error = out.with_suffix(".error")
    assert run.returncode == 0 and out.exists(), (
        (error.read_text() if error.exists() else "") + run.stdout[-3000:] + run.stderr[-3000:])
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def test_a_node_is_launched_for_each_actor_the_pool_adds(seen):
    assert seen["nodes_at_start"] == 0
    assert (seen["grow1_nodes"], seen["grow1_addresses"]) == (1, 1)
    assert (seen["grow2_nodes"], seen["grow2_addresses"]) == (2, 2)
    assert seen["grow2_actors_on_distinct_prep_nodes"]


def test_the_batches_are_the_local_loaders_as_the_pool_grows(seen):
    assert seen["equal_one_actor"], "one actor on a launched node: other batches"
    assert seen["equal_two_actors"], "two actors on launched nodes: other batches"
    assert len([s for s in seen["one_actor_stats"] if s["name"] != "local"]) == 1


def test_the_idle_node_is_given_back_when_the_pool_shrinks_and_the_last_when_it_stops(seen):
    assert seen["shrink_addresses"] == 1
    assert seen["shrink_gone"] and seen["shrink_nodes"], "the node of the actor kept went, or none"
    assert seen["stopped_with_loader"], "the loader's finalizer did not stop its pool"
    assert seen["stop_gone"] and seen["stop_nodes"] == 0


def test_the_launched_nodes_stop_with_the_cluster(seen):
    assert seen["raylets_while_two"] == 3, "the launched nodes' raylets are not the head's children"
    assert seen["outside_head_session"] == []
    assert seen["left_after_stop"] == []
