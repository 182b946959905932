"""Where the nodes of a partitioned cache meet under torchrun: ``torch.distributed``'s
key-value store, which the job already runs, instead of a rendezvous of nostall's own on
``MASTER_PORT + 1`` (docs/distributed.md, "Meeting in torchrun's store").

The engine signs each node's entry with the job's secret and checks every entry it reads,
and every connection between nodes still proves the secret: the store carries addresses,
it vouches for nothing.
"""

from __future__ import annotations

import itertools
import os
from datetime import timedelta
from typing import Any

# The partitioned loaders this process made: every rank makes its loaders in the same
# order, so the k-th loader of each rank meets the others' k-th under keys of its own.
_loaders = itertools.count()

#: How long connecting to torchrun's store may take, seconds (it is up before any rank starts).
CONNECT_TIMEOUT_S = 60.0


class TorchStore:
    """A job's key space in a ``torch.distributed`` store, as the engine's nodes call it."""

    def __init__(self, store: Any, prefix: str) -> None:
        self._store = store
        self.prefix = prefix

    def set(self, key: str, value: bytes) -> None:
        self._store.set(key, value)

    def get(self, key: str, timeout_s: float) -> bytes | None:
        """The value of ``key``, waiting up to ``timeout_s`` for it; None after that."""
        import torch.distributed as dist

        try:
            self._store.wait([key], timedelta(seconds=timeout_s))
        except dist.DistStoreError as e:
            if "timeout" not in str(e):
                raise
            return None
        value: bytes = self._store.get(key)
        return value

    def add(self, key: str, amount: int) -> int:
        total: int = self._store.add(key, amount)
        return total


def job_store() -> TorchStore | None:
    """The store of the ``torch.distributed`` job this process is a rank of: the default
    process group's once ``init_process_group`` ran, else the one torchrun's agent serves
    at ``MASTER_ADDR:MASTER_PORT``; None outside such a job, or with an explicit peer list
    (``NOSTALL_PEERS``), where nostall's own rendezvous (or none) is used."""
    if os.environ.get("NOSTALL_PEERS"):
        return None
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if not dist.is_available():
        return None
    if dist.is_initialized():
        store = dist.distributed_c10d._get_default_store()
    elif os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and os.environ.get("MASTER_ADDR"):
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ.get("MASTER_PORT", "0")),
                              is_master=False, timeout=timedelta(seconds=CONNECT_TIMEOUT_S),
                              wait_for_workers=False)
    else:
        return None
    # A restarted job (torchrun's next attempt) or another job on the same store never
    # reads these keys: each attempt and each loader has a key space of its own.
    run = os.environ.get("TORCHELASTIC_RUN_ID", "job")
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return TorchStore(store, f"nostall/{run}/{attempt}/{next(_loaders)}/")
