"""A cache partitioned across nodes: processes as the ranks of two torchrun nodes on loopback.

The nodes meet in ``torch.distributed``'s store: the default process group's once
``init_process_group`` ran, else the store torchrun's agent serves (real ``torchrun``
launches here). Nostall's own rendezvous port (``MASTER_PORT + 1``) stays unused: the
tests hold it. With ``share="auto"`` each node's agent (a real process per node) joins for
the node's ranks at nostall's rendezvous instead, and the ranks read its batches through
shared memory. Each node's local rank 0 caches the node's part of the dataset and serves
it, over real sockets, to the other node and to its own node's other ranks.
"""

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import nostall
import nostall.agent

CHILD = r"""
import json, os, sys, urllib.request
import torch.distributed as dist
import nostall

if sys.argv[3] == "init":
    dist.init_process_group("gloo")
loader = nostall.Loader(sys.argv[1], batch_size=4, image_size=32, cache="60%",
                        cache_policy="partitioned", seed=3, metrics_addr="127.0.0.1:0",
                        share=sys.argv[2])
epochs = []
for epoch in range(2):
    loader.set_epoch(epoch)
    ids = []
    for images, labels in loader:
        assert images.shape[1:] == (3, 32, 32)
        ids += loader.last_ids
    epochs.append(ids)
if not dist.is_initialized():  # the loader met the others in torchrun's agent's store
    dist.init_process_group("gloo")
dist.barrier()  # the other node may still read this node's part
served = urllib.request.urlopen(f"http://{loader.metrics_addr}/metrics").read().decode()
# A file per rank: torchrun passes its ranks' stdout through one pipe, where two long
# lines can interleave.
with open(os.path.join(sys.argv[4], f"{loader.rank}.json"), "w") as out:
    json.dump({"rank": loader.rank, "world": loader.world_size, "epochs": epochs,
               "counts": loader.metrics["partitioned"], "served": served}, out)
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_pair():
    """A port p with p and p + 1 free now (torchrun's store, and nostall's peer service)."""
    for _ in range(50):
        port = free_port()
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    raise RuntimeError("no two consecutive free ports")


def node_env(rank, port, ranks_per_node=1, listen=None, **extra):
    """Rank `rank` of a two-node job whose rendezvous is at `port`. Both "nodes" share one
    address here, so node 1's service listens on a port of its own, `listen`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOSTALL_")}
    env.update(RANK=str(rank), LOCAL_RANK=str(rank % ranks_per_node),
               WORLD_SIZE=str(2 * ranks_per_node), LOCAL_WORLD_SIZE=str(ranks_per_node),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               NOSTALL_PEER_SECRET="the secret of the test job", NOSTALL_PEER_JOIN_TIMEOUT_S="60")
    if rank >= ranks_per_node:
        env["NOSTALL_PEER_LISTEN"] = f"127.0.0.1:{listen}"
    env.update(extra)
    return env


def run_job(photos, out_dir, ranks_per_node, share="off", agents=(), launch="processes"):
    """Runs the two-node job; `agents` are the nodes' agent sockets, with `share`.

    `launch`: "processes" starts each rank as torchrun would (its variables set) and it
    calls ``init_process_group``; "torchrun" starts each node with torchrun itself, and the
    ranks leave torch.distributed uninitialised (the store is torchrun's agent's)."""
    port, listen = free_port_pair(), free_port()
    world = 2 * ranks_per_node
    extra = [dict(NOSTALL_AGENT_SOCKET=str(a)) for a in agents] or [{}, {}]
    with contextlib.ExitStack() as held:
        if share == "off":
            # The nodes meet in torch's store: nostall's rendezvous port is not theirs.
            rendezvous = held.enter_context(socket.socket())
            rendezvous.bind(("127.0.0.1", port + 1))
            rendezvous.listen()
        if launch == "torchrun":
            torchrun = str(Path(sys.executable).with_name("torchrun"))
            procs = [subprocess.Popen(
                [torchrun, "--nnodes=2", f"--node_rank={node}", f"--nproc_per_node={ranks_per_node}",
                 "--master_addr=127.0.0.1", f"--master_port={port}",
                 "--no-python", sys.executable, "-c", CHILD, photos, share, "torchrun", out_dir],
                env={k: v for k, v in node_env(node * ranks_per_node, port, ranks_per_node,
                                                   listen).items()
                     if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")},
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for node in range(2)]
        else:
            procs = [subprocess.Popen([sys.executable, "-c", CHILD, photos, share, "init", out_dir],
                                      env=node_env(rank, port, ranks_per_node, listen,
                                                   **extra[rank // ranks_per_node]),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for rank in range(world)]
        for p in procs:
            _, err = p.communicate(timeout=180)
            assert p.returncode == 0, err
    results = [json.loads(f.read_text()) for f in Path(out_dir).glob("*.json")]
    results.sort(key=lambda r: r["rank"])
    assert [(r["rank"], r["world"]) for r in results] == [(rank, world) for rank in range(world)]
    n = nostall.Loader(photos).dataset_len
    for epoch in range(2):
        ids = [i for r in results for i in r["epochs"][epoch]]
        assert sorted(ids) == list(range(n)), f"epoch {epoch}: each sample once"
    return results


@pytest.mark.parametrize("ranks_per_node,launch", [(1, "processes"), (2, "torchrun")])
def test_two_nodes_share_one_cache_and_each_epoch_covers_the_dataset_once(photos, tmp_path,
                                                                         ranks_per_node, launch):
    results = run_job(photos, str(tmp_path), ranks_per_node, launch=launch)
    counts = [r["counts"] for r in results]
    # Together the nodes hold 120% of the dataset, so storage served each sample once in
    # the whole job (to the node holding it); every sample a rank delivered came from its
    # node's part or from a peer's (a node's other local ranks ask its service, as a peer
    # does), never from storage instead; every byte received was served.
    dataset_bytes = sum(f.stat().st_size for f in Path(photos).rglob("*.jpg"))
    assert sum(c["storage_bytes"] for c in counts) == dataset_bytes
    for c, r in zip(counts, results):
        assert c["local_samples"] + c["peer_samples"] == sum(map(len, r["epochs"]))
        assert c["fallbacks"] == 0 and c["peer_downs"] == 0
    for rank, c in enumerate(counts):
        if rank % ranks_per_node:  # reads its node's part through the node's service
            assert c["local_samples"] == 0 and c["served_bytes"] == 0
        else:  # runs the node's cache and service
            assert c["local_samples"] > 0 and c["served_bytes"] > 0
            # Over TCP to its own node's other ranks, when it has any.
            assert (c["served_local_bytes"] > 0) == (ranks_per_node > 1)
    assert sum(c["served_bytes"] for c in counts) == sum(c["peer_bytes"] for c in counts)
    # The live metrics endpoint serves the peers' figures, as the loader counts them, and
    # every metric the Grafana dashboard in docs/ plots.
    for c, r in zip(counts, results):
        assert f'nostall_peer_bytes_total{{loader="0",rank="{r["rank"]}"}} {c["peer_bytes"]}' \
            in r["served"]
    served = {line.split()[2] for line in results[0]["served"].splitlines()
              if line.startswith("# TYPE ")}
    assert dashboard_metrics() <= served, dashboard_metrics() - served


def test_the_local_ranks_of_each_node_read_through_its_agent(photos, tmp_path):
    """share="auto": each node's agent joins the job for the node; its local ranks read
    the node's part from the agent's memory (no byte over TCP to the node's own ranks)."""
    sockets = [tmp_path / f"node{n}" / "agent.sock" for n in range(2)]
    results_dir = tmp_path / "results"
    results_dir.mkdir()
    agents = [nostall.agent.start(s, idle=600) for s in sockets]
    try:
        results = run_job(photos, str(results_dir), 2, share="auto", agents=sockets)
    finally:
        for a in agents:
            a.terminate()
            a.wait(timeout=60)
    for r in results:
        c = r["counts"]  # the node's counters, for both its local ranks
        assert c["served_local_bytes"] == 0, c
        assert c["local_samples"] > 0, c
        assert f'nostall_peer_bytes_total{{loader="0",rank="{r["rank"]}"}} {c["peer_bytes"]}' \
            in r["served"]
    # Samples crossed between the nodes (locality leaves a few), counted by the node's
    # counters as its later rank saw them at its last batch (both ranks' reads in them).
    nodes = [max((r["counts"] for r in results[2 * n:2 * n + 2]),
                 key=lambda c: c["local_samples"] + c["peer_samples"]) for n in range(2)]
    assert sum(c["peer_samples"] for c in nodes) > 0, nodes


def dashboard_metrics():
    """The metric families docs/grafana/nostall-dashboard.json queries."""
    dashboard = Path(__file__).parents[2] / "docs" / "grafana" / "nostall-dashboard.json"
    exprs = [t["expr"] for p in json.loads(dashboard.read_text())["panels"]
             for t in p["targets"]]
    names = {n for e in exprs for n in re.findall(r"nostall_\w+", e)}
    return {re.sub(r"_(total|bucket|sum|count)$", "", n) for n in names}


def test_bad_partitioned_settings_are_config_errors(photos, monkeypatch):
    for name in [k for k in os.environ if k.startswith(("NOSTALL_", "MASTER_"))]:
        monkeypatch.delenv(name)
    with pytest.raises(nostall.ConfigError, match="needs the size"):
        nostall.Loader(photos, cache_policy="partitioned")
    with pytest.raises(nostall.ConfigError, match="NOSTALL_PEER_SECRET"):
        nostall.Loader(photos, cache="50%", cache_policy="partitioned")
    monkeypatch.setenv("NOSTALL_PEER_SECRET", "the secret of the test job")
    with pytest.raises(nostall.ConfigError, match="MASTER_ADDR"):
        nostall.Loader(photos, cache="50%", cache_policy="partitioned")
    with pytest.raises(nostall.ConfigError, match="analyze measures one node"):
        nostall.analyze(photos, cache="50%", cache_policy="partitioned", model_rate=100)


def test_a_node_whose_peer_never_comes_is_a_peer_error(photos, monkeypatch):
    for name in [k for k in os.environ if k.startswith(("NOSTALL_", "MASTER_"))]:
        monkeypatch.delenv(name)
    port = free_port_pair()
    env = node_env(0, port, NOSTALL_PEERS=f"127.0.0.1:{port},127.0.0.1:{port + 1}",
                   NOSTALL_PEER_JOIN_TIMEOUT_S="2")
    child = ("import nostall, sys\n"
             "try:\n"
             "    nostall.Loader(sys.argv[1], cache='50%', cache_policy='partitioned')\n"
             "except nostall.PeerError as e:\n"
             "    print('PeerError', e)\n")
    out = subprocess.run([sys.executable, "-c", child, photos], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.startswith("PeerError"), out.stdout + out.stderr
    assert f"127.0.0.1:{port + 1}" in out.stdout
