"""``remote=``: a loader's batches prepared by Ray actors on other machines as well.

The engine does the work: each actor runs a ``nostall.Loader`` with the trainer's
dataset and settings and serves its batches by number (``Loader._serve_remote``); the
trainer's client asks each for parts of every epoch, delivers them in plan order, each
batch once, over TLS with the job's secret (``NOSTALL_PEER_SECRET``, on both ends: it is
never sent, not even through Ray). This module is what Ray does: it places the actors
(by CPUs, custom resources or node labels), restarts them, follows their addresses as
they move, and scales their number by the measured stall (``Scaling``).

Ray's object store carries nothing but the actors' arguments (the loader's source and
settings, pickled as Ray pickles functions) and their addresses.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from ._errors import ConfigError

__all__ = ["Remote", "Scaling"]

#: Settings an actor's loader never takes from the trainer's: they concern the trainer's
#: own process (its device, metrics endpoint, node agent) or what the actor decides.
_TRAINER_ONLY = ("remote", "device", "metrics_addr", "share", "batch_transform", "output",
                 "decode", "gpu_decode_min_pixels")


@dataclass(frozen=True)
class Remote:
    """Where and how Ray actors prepare a loader's batches (``Loader(..., remote=Remote())``).

    Each actor runs nostall's engine with the loader's dataset and settings and makes
    whole batches by number; the trainer's own loader prepares too (``local``), and the
    actors make up what its cores cannot. The dataset must be reachable from the actors
    under the same location (object storage, or a shared file system).

    The job's secret (``NOSTALL_PEER_SECRET``, at least 16 bytes) must be set for the
    trainer and in the environment of every Ray node the actors run on (for example
    ``NOSTALL_PEER_SECRET=... ray start ...``): both ends prove it to each other.
    """

    #: Actors started with the loader.
    actors: int = 2
    #: CPUs Ray reserves for each actor (its prep threads: this, rounded up).
    num_cpus: float = 1.0
    #: Custom Ray resources each actor needs, e.g. ``{"prep": 1}``: they place the actors on
    #: the nodes that declare them.
    resources: dict[str, float] = field(default_factory=dict)
    #: Ray node labels the actors' nodes must carry, e.g. ``{"pool": "cpu"}``.
    labels: dict[str, str] = field(default_factory=dict)
    #: The Ray cluster: ``None`` for the one this process is connected to, else
    #: ``RAY_ADDRESS``, else ``"auto"``.
    address: str | None = None
    #: Whether the trainer's own cores prepare parts too (first).
    local: bool = True
    #: Whether the actors start the next epoch once every part of this one is given out
    #: (the trainer's own loader joins it when the epoch is iterated from its start, and
    #: makes fewer of its parts): worth it where the trainer's cores are better spent
    #: receiving (docs/remote.md, "Epochs back to back"). None: on for float32 image
    #: batches, off for uint8 ones.
    ahead: bool | None = None
    #: The share of the trainer process's CPU budget (its cgroup quota, else its cores)
    #: above which its own loader takes no new part while an actor is connected: receiving
    #: the actors' batches comes first. 1 or more (None): never held back.
    local_cpu: float | None = None
    #: Batches in one request to an actor.
    part_batches: int = 4
    #: Requests out to one actor at once.
    parts_per_actor: int = 2
    #: Seconds an actor may stay silent in the middle of a part before its parts go to
    #: others.
    stall_limit: float = 60.0
    #: Seconds to wait for the actors to start (placement, the dataset's index).
    start_timeout: float = 300.0
    #: How the number of actors follows the stall (``None``: fixed at ``actors``).
    scaling: Scaling | None = None

    def __post_init__(self) -> None:
        if self.actors < 0 or (self.actors == 0 and not self.local):
            raise ConfigError(f"remote=Remote(actors={self.actors}): give at least one actor, "
                              "or let the trainer's own cores prepare (local=True)")
        if not (math.isfinite(self.num_cpus) and self.num_cpus > 0):
            raise ConfigError(f"remote=Remote(num_cpus={self.num_cpus}): give CPUs above 0")
        if self.local_cpu is not None and not (math.isfinite(self.local_cpu) and self.local_cpu > 0):
            raise ConfigError(f"remote=Remote(local_cpu={self.local_cpu}): give a share of the trainer's CPU "
                              "above 0 (1 or more: its loader never held back)")
        for name in ("part_batches", "parts_per_actor"):
            if getattr(self, name) < 1:
                raise ConfigError(f"remote=Remote({name}={getattr(self, name)}): give 1 or more")


@dataclass(frozen=True)
class Scaling:
    """The number of actors follows the stall, in the spirit of Cachew (ATC'22).

    Every ``interval`` seconds the rule reads the share of time the training loop waited
    for batches. While it waited more than ``stall``, an actor is added, and kept only
    if the time per batch then improved by more than ``gain`` (else it is given back and
    no more are added until the stall grows again). After ``idle`` intervals without a
    wait, one actor is given back, and taken again if the time per batch worsened by more
    than ``loss``. Each addition asks Ray's autoscaler for the actor's resources first.
    """

    min_actors: int = 0
    max_actors: int = 8
    interval: float = 10.0
    stall: float = 0.05
    gain: float = 0.07
    loss: float = 0.03
    idle: int = 3


class _Rule:
    """``Scaling``'s decisions from interval figures: +1, -1 or 0 actors (no Ray here)."""

    def __init__(self, scaling: Scaling) -> None:
        self.scaling = scaling
        #: The time per batch before the last change, and the change (+1 or -1).
        self.trial: tuple[float, int] | None = None
        #: Whether adding stopped paying off (until the stall grows past its level then).
        self.plateau: float | None = None
        self.quiet = 0

    def decide(self, actors: int, stall_share: float, seconds_per_batch: float) -> int:
        s = self.scaling
        if self.trial is not None:
            before, change = self.trial
            self.trial = None
            if change > 0 and seconds_per_batch > before * (1 - s.gain):
                self.plateau = stall_share
                return -1  # the actor did not pay: give it back
            if change < 0 and seconds_per_batch > before * (1 + s.loss):
                return +1  # the loss was too large: take it again
            return 0
        self.quiet = self.quiet + 1 if stall_share == 0 else 0
        grew = self.plateau is None or stall_share > 2 * self.plateau
        if stall_share > s.stall and actors < s.max_actors and grew:
            self.plateau = None
            self.trial = (seconds_per_batch, +1)
            return +1
        if self.quiet >= s.idle and actors > s.min_actors:
            self.quiet = 0
            self.trial = (seconds_per_batch, -1)
            return -1
        return 0


class _Preparer:
    """A Ray actor: a loader of the trainer's dataset and settings, serving its batches."""

    def __init__(self, source: Any, settings: dict[str, Any]) -> None:
        import ray

        from ._loader import Loader

        self.loader = Loader(source, **settings)
        host = ray.util.get_node_ip_address()
        self.where = self.loader._serve_remote(host, 0)

    def address(self) -> str:
        return self.where


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError("remote= needs Ray: pip install 'ray'") from None
    return ray


def _connect(ray: Any, address: str | None) -> None:
    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS") or "auto"
    host, _, port = address.rpartition(":")
    if host and port.isdigit():
        # Ray retries an address where nothing listens for a minute: a refused connection
        # is known at once.
        try:
            socket.create_connection((host, int(port)), timeout=10).close()
        except OSError as e:
            raise ConfigError(f"remote=: no Ray cluster reachable at {address!r} ({e}); start one "
                              "(ray start --head) or give Remote(address=...)") from None
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise ConfigError(f"remote=: no Ray cluster reachable at {address!r} ({e}); start one "
                          "(ray start --head) or give Remote(address=...)") from None


def _check_nodes(ray: Any, remote: Remote) -> None:
    """Refuses a cluster where no node can take an actor (names what is missing)."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    wanted = {"CPU": remote.num_cpus, **remote.resources}
    fits = [n for n in nodes
            if all(n.get("Resources", {}).get(k, 0) >= v for k, v in wanted.items())
            and all(n.get("Labels", {}).get(k) == v for k, v in remote.labels.items())]
    if not fits:
        asked = ", ".join([*(f"{k}={v:g}" for k, v in wanted.items()),
                           *(f"label {k}={v}" for k, v in remote.labels.items())])
        raise ConfigError(f"remote=: no node of the Ray cluster has {asked}: start nodes that "
                          "declare them (ray start --resources / --labels)")


def _actor_settings(loader: Any, settings: dict[str, Any], remote: Remote) -> dict[str, Any]:
    """The settings an actor's loader takes: the trainer's, as its rank, with the actor's
    own threads and nothing started ahead."""
    given = {k: v for k, v in settings.items() if k not in _TRAINER_ONLY}
    given.update(rank=loader.rank, world_size=loader.world_size, overlap_epochs=False,
                 threads=max(1, math.ceil(remote.num_cpus)))
    return given


class _Pool:
    """The actors of one loader: started, followed as Ray restarts them, scaled, stopped."""

    def __init__(self, ray: Any, remote: Remote, source: Any, settings: dict[str, Any]) -> None:
        self.ray = ray
        self.remote = remote
        options: dict[str, Any] = {"num_cpus": remote.num_cpus, "max_restarts": -1}
        if remote.resources:
            options["resources"] = dict(remote.resources)
        if remote.labels:
            options["label_selector"] = dict(remote.labels)
        self.cls = ray.remote(_Preparer).options(**options)
        self.source = source
        self.settings = settings
        self.actors: list[Any] = []
        self.addresses: dict[int, str] = {}
        self.client: Any = None
        self.stopped = threading.Event()
        #: Set each time an actor is found at a new address (Ray restarted it).
        self.moved = threading.Event()
        self.thread: threading.Thread | None = None
        self.rule = _Rule(remote.scaling) if remote.scaling else None

    def start(self, count: int) -> list[str]:
        """Starts ``count`` actors and returns their addresses, or refuses by name."""
        try:
            new = [self.cls.remote(self.source, self.settings) for _ in range(count)]
        except TypeError as e:
            raise ConfigError("remote=: the loader's source and settings cannot be sent to the "
                              f"actors ({_cause(e)}): Ray sends them pickled, so each must "
                              "pickle (a Dataset object, its transforms, your functions)") from None
        refs = [a.address.remote() for a in new]
        try:
            got = self.ray.get(refs, timeout=self.remote.start_timeout)
        except self.ray.exceptions.GetTimeoutError:
            for actor in new:
                self.ray.kill(actor)
            raise ConfigError(f"remote=: the actors did not start within {self.remote.start_timeout:g} s "
                              "(no node free to take them, or the dataset takes long to index)") from None
        except self.ray.exceptions.RayError as e:
            for actor in new:
                self.ray.kill(actor)
            raise ConfigError(f"remote=: an actor could not start its loader: {_cause(e)}") from None
        for actor, address in zip(new, got):
            self.addresses[id(actor)] = address
            self.actors.append(actor)
        return list(got)

    def follow(self, client: Any) -> None:
        """Follows the actors from a thread: new addresses after a restart, scaling."""
        self.client = client
        self.thread = threading.Thread(target=self._run, name="nostall-remote-actors", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        interval = self.remote.scaling.interval if self.remote.scaling else 2.0
        last = self.client.delivered()
        began = time.monotonic()
        while not self.stopped.wait(min(interval, 2.0)):
            self._refresh()
            if self.rule is None or time.monotonic() - began < interval:
                continue
            now = self.client.delivered()
            wall = time.monotonic() - began
            batches = now[0] - last[0]
            if batches > 0:
                change = self.rule.decide(len(self.actors), (now[2] - last[2]) / wall, wall / batches)
                self._scale(change)
            last, began = now, time.monotonic()

    def _refresh(self) -> None:
        """Asks every actor where it listens; an actor Ray restarted answers anew."""
        refs = {a.address.remote(): a for a in self.actors}
        ready, _ = self.ray.wait(list(refs), num_returns=len(refs), timeout=5.0)
        changed = False
        for ref in ready:
            try:
                address = self.ray.get(ref)
            except self.ray.exceptions.RayError:
                continue  # down: Ray restarts it, and it answers at a later round
            actor = refs[ref]
            if self.addresses.get(id(actor)) != address:
                self.addresses[id(actor)] = address
                changed = True
        if changed:
            self.client.set_addresses(self._live())
            self.moved.set()

    def _live(self) -> list[str]:
        return [self.addresses[id(a)] for a in self.actors if id(a) in self.addresses]

    def _scale(self, change: int) -> None:
        if change > 0:
            self._request(len(self.actors) + 1)
            try:
                self.start(1)
            except ConfigError:
                self._request(len(self.actors))
                return  # no room: the rule tries again when the stall persists
            self.client.set_addresses(self._live())
        elif change < 0 and self.actors:
            actor = self.actors.pop()
            self.addresses.pop(id(actor), None)
            self.client.set_addresses(self._live())
            self.ray.kill(actor)
            self._request(len(self.actors))

    def _request(self, actors: int) -> None:
        """Asks Ray's autoscaler for room for ``actors`` actors: a request stands until the
        next replaces it, so a pool that shrinks asks again for less, or the autoscaler
        would keep the nodes it gave back."""
        try:
            from ray.autoscaler.sdk import request_resources

            bundle = {"CPU": self.remote.num_cpus, **self.remote.resources}
            request_resources(bundles=[bundle] * actors)
        except Exception:  # noqa: BLE001 - a cluster without an autoscaler
            pass

    def stop(self) -> None:
        self.stopped.set()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout=10)
        for actor in self.actors:
            try:
                self.ray.kill(actor)
            except Exception:  # noqa: BLE001 - Ray already shut down
                pass
        self.actors.clear()
        if self.rule is not None:
            self._request(0)  # the nodes asked for while scaling are the autoscaler's again


def _cause(error: Exception) -> str:
    """The first line of what an actor raised, without Ray's wrapping."""
    cause = getattr(error, "cause", None) or error
    text = str(cause).strip().splitlines()
    return text[-1] if text else type(cause).__name__


def attach(loader: Any, remote: Remote, source: Any, settings: dict[str, Any]) -> None:
    """Starts ``remote``'s actors for ``loader`` (made from ``source`` and ``settings``)
    and makes the loader's epochs with them; refuses, before any epoch, what cannot work."""
    if not isinstance(remote, Remote):
        raise ConfigError(f"remote= takes a nostall.Remote, not {type(remote).__name__}")
    if not os.environ.get("NOSTALL_PEER_SECRET"):
        raise ConfigError("remote= needs the job's secret in NOSTALL_PEER_SECRET (at least 16 "
                          "bytes, e.g. `openssl rand -hex 32`), here and on every Ray node the "
                          "actors run on: the trainer and the actors prove it to each other")
    ray = _ray()
    _connect(ray, remote.address)
    pool = _Pool(ray, remote, source, _actor_settings(loader, settings, remote))
    if remote.actors and remote.scaling is None:
        _check_nodes(ray, remote)
    elif remote.actors:
        # Scaled by the stall, the actors' nodes may all be given back between jobs: ask
        # the autoscaler for them (the start waits up to start_timeout for their places).
        pool._request(remote.actors)
    addresses = pool.start(remote.actors) if remote.actors else []
    try:
        client = loader._connect_remote(addresses, {
            "part_batches": remote.part_batches,
            "parts_per_preparer": remote.parts_per_actor,
            "local": remote.local,
            "ahead": remote.ahead,
            "local_cpu": remote.local_cpu,
            "stall_limit": remote.stall_limit,
            "connect_limit": 30.0,
        })
    except BaseException:
        pool.stop()
        raise
    pool.follow(client)
    loader._remote_client = client
    loader._remote_pool = pool
    weakref.finalize(loader, pool.stop)
