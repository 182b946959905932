"""A real, local, multi-node Ray cluster for tests and benches.

Why: nostall's Ray integration has to be tested against what users run, several raylets
talking to one GCS, with actors placed on some nodes and the driver (the "trainer") on
another, and nodes that die. ``ray.init()`` gives one node; ``ray.cluster_utils.Cluster``
starts its nodes from inside the test process, so they share its environment and cannot be
SIGKILLed like a lost machine. This helper starts every node as its own ``ray start --block``
process, in a session of its own, so that

* each node has its own ``--num-cpus``, custom resources and labels (worker nodes carry
  ``worker_resources``, by default ``{"nostall_prep": 1}``, so that actors can be placed on
  them and never on the head, which stands for the trainer and has 0 CPUs);
* each node can be given its own environment variables (e.g. a different
  ``NOSTALL_PEER_SECRET`` on one node): Ray's workers on a node inherit the environment of
  that node's raylet;
* each worker node can be held to a fraction of a core (``cpu_quota=0.6``) by a real CPU
  cgroup (v1 ``cpu.cfs_quota_us`` or v2 ``cpu.max``), when the cgroup file system is
  writable (on the test VM, as root, it is, also inside ``unshare -rn``);
* the head can run Ray's autoscaler with its fake node provider (``autoscaling=``: node
  types it may launch), which starts and stops worker nodes as the demand asks, as
  processes of the head's monitor (so in the head's session, stopped with it);
* a node can be killed at once, as a lost machine (``kill_worker_node``), or frozen
  (``signal_worker_node(i, SIGSTOP)``), and everything started is stopped by pid (every
  process of each node's session) on exit: never ``ray stop``, which would also stop
  other users' Ray. Should the process that started the cluster die without stopping it
  (a crash, a test runner's SIGKILL), a small watchdog process kills the nodes' sessions
  and removes the cgroups and temp folder (Ray's fate sharing alone would leave each
  node's dashboard and runtime-env agents running).

Ray listens on all interfaces and works out "its" address from the machine's, so this
helper refuses to start outside a network namespace of its own in which only the loopback
interface exists. Run tests as

    unshare -rn sh -c 'ip link set lo up && .venv-test/bin/python -m pytest ...'

Usage::

    from ray_cluster import RayCluster, in_own_netns
    pytestmark = pytest.mark.skipif(not in_own_netns(), reason="needs `unshare -rn`")

    with RayCluster(workers=2, worker_cpus=1, cpu_quota=0.6) as cluster:
        ray.init(**cluster.init_kwargs())   # address=127.0.0.1:<port>, on the head node
        ...                                 # cluster.worker_node_ids, kill_worker_node(0)
    # leaving shuts this process's driver down, then kills the nodes

On the 2-core test VM a head and 2 worker nodes start in 7-10 s (about 13 Python processes
importing Ray on 2 cores: start a cluster per module rather than per test where possible)
and stop in 0.1 s (SIGKILL; 2 s with ``graceful_stop``); each node holds about 0.5 GB of
memory before any work. ``python ray_cluster.py`` (in the namespace) checks it all and
prints the timings.

Settings made for every node (`BASE_ENV`): ``RAY_AUTH_MODE=disabled`` (otherwise a node
turns token authentication on if ``~/.ray/auth_token`` exists when it starts, which any
plain ``ray.init()`` writes, and nodes that decided differently cannot talk), no drain on
SIGTERM, no usage stats. A Ray temp dir per node (nodes sharing one race for the same Unix
socket names when started together, and one dies); explicit ports in 20000-32000, away from
the kernel's ephemeral ports and Ray's worker ports.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

__all__ = [
    "RayCluster", "NodeProcess", "CpuCgroup", "in_own_netns", "loopback_works", "require_own_netns",
    "cpu_cgroup_support", "free_ports",
]

LOOPBACK = "127.0.0.1"

#: What `ray start --block` prints once its node is up, before it waits for signals.
_BLOCKING = "This command will now block forever"

#: Environment for every node: no usage report (it would try the network), no colour codes
#: in the logs, and no dedup of worker log lines (easier to read test failures).
BASE_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_DEDUP_LOGS": "0",
    "RAY_LOG_TO_DRIVER": "1",
    # SIGTERM to `ray start --block` otherwise marks the node draining and waits up to
    # 30 s for its workers to leave before stopping it.
    "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
    # Explicit, so that all nodes agree: with RAY_AUTH_MODE unset, each `ray start` turns
    # token authentication on if ~/.ray/auth_token exists when it starts (a plain
    # `ray.init()` starting a local cluster writes one), and a node that decided otherwise
    # cannot join. The cluster is reachable from its network namespace only.
    "RAY_AUTH_MODE": "disabled",
}

#: With ``fast_failure_detection``: the GCS declares a killed node dead after about 3 s
#: instead of about 15 s (health checks every 3 s, 5 failures); still lenient enough for a
#: node held to a fraction of a core.
FAST_FAILURE_ENV = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "3000",
    "RAY_health_check_failure_threshold": "3",
}


# --------------------------------------------------------------------------- network namespace


def in_own_netns() -> bool:
    """True when this process runs in a network namespace where the only interface is
    loopback (``unshare -rn``): then nothing Ray binds can be reached from outside, and
    nothing it sends can leave the machine."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return False
    return names == ["lo"]


def loopback_works() -> bool:
    """True when 127.0.0.1 accepts connections (``ip link set lo up`` has been run: a fresh
    namespace has its loopback interface down)."""
    try:
        with socket.socket() as server:
            server.bind((LOOPBACK, 0))
            server.listen(1)
            with socket.create_connection(server.getsockname(), timeout=2):
                pass
        return True
    except OSError:
        return False


def require_own_netns(what: str = "a Ray cluster") -> None:
    """Raise `RuntimeError` with the command to use unless in a loopback-only namespace."""
    if not in_own_netns():
        raise RuntimeError(
            f"refusing to start {what} outside a network namespace of its own: Ray binds all "
            "interfaces and rewrites 127.0.0.1 to the machine's address. Run inside "
            "`unshare -rn sh -c 'ip link set lo up && <command>'`."
        )
    if not loopback_works():
        raise RuntimeError("loopback is down in this network namespace: run `ip link set lo up` first")


#: Ports this helper hands out: below the kernel's ephemeral range (32768-60999), where
#: Ray's own port-0 binds and outgoing connections take theirs, and above Ray's worker
#: ports (10002-19999), so a port chosen here cannot be taken by Ray before the node binds it.
PORT_RANGE = (20000, 32000)
_handed_out: set[int] = set()


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((LOOPBACK, port))
            return True
        except OSError:
            return False


def free_ports(n: int) -> list[int]:
    """`n` distinct ports free on 127.0.0.1 now, from `PORT_RANGE`, none handed out before
    by this process (a cluster stopped a moment ago may still hold its ports)."""
    import random

    lo, hi = PORT_RANGE
    if len(_handed_out) > (hi - lo) // 2:
        _handed_out.clear()
    out: list[int] = []
    for _ in range(100 * n):
        port = random.randrange(lo, hi)
        if port in _handed_out or not _port_free(port):
            continue
        _handed_out.add(port)
        out.append(port)
        if len(out) == n:
            return out
    raise OSError(f"no {n} free ports in {PORT_RANGE}")


def free_port() -> int:
    """One port, as `free_ports`."""
    return free_ports(1)[0]


# --------------------------------------------------------------------------- CPU cgroups


@dataclass
class _CgroupRoot:
    version: int  # 1 or 2
    path: Path  # the cgroup this process is in, for the cpu controller


def _own_cpu_cgroup() -> Optional[_CgroupRoot]:
    """The cgroup directory (v1 ``cpu`` hierarchy, else v2 with the cpu controller) that
    this process is in, or None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    v2_rel = None
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        if "cpu" in controllers.split(","):
            for mount in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"):
                base = Path(mount + rel)
                if (base / "cpu.cfs_quota_us").exists():
                    return _CgroupRoot(1, base)
        if controllers == "":
            v2_rel = rel
    if v2_rel is not None:
        for mount in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
            base = Path(mount + v2_rel)
            try:
                if "cpu" in (base / "cgroup.controllers").read_text().split():
                    return _CgroupRoot(2, base)
            except OSError:
                continue
    return None


class CpuCgroup:
    """A child CPU cgroup holding processes to `cores` cores (e.g. 0.6) by CFS bandwidth
    control: at most ``cores * period`` of CPU time in each period, then throttled."""

    def __init__(self, name: str, cores: float, period_us: int = 20_000) -> None:
        root = _own_cpu_cgroup()
        if root is None:
            raise OSError("no CPU cgroup controller found (neither v1 `cpu` nor v2 `cpu`)")
        self.version = root.version
        self.path = root.path / name
        self.path.mkdir()
        try:
            quota = max(1000, int(cores * period_us))
            if self.version == 1:
                (self.path / "cpu.cfs_period_us").write_text(str(period_us))
                (self.path / "cpu.cfs_quota_us").write_text(str(quota))
            else:
                if not (self.path / "cpu.max").exists():
                    (root.path / "cgroup.subtree_control").write_text("+cpu")
                (self.path / "cpu.max").write_text(f"{quota} {period_us}")
        except OSError:
            self.remove()
            raise

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in self.procs_file.read_text().split()]
        except OSError:
            return []

    def stat(self) -> dict[str, int]:
        """``cpu.stat``: periods, throttled periods and time (v1 ``throttled_time`` in ns,
        v2 ``throttled_usec`` and ``usage_usec``)."""
        out = {}
        for line in (self.path / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            out[key] = int(value)
        return out

    def remove(self, timeout: float = 5.0) -> None:
        """Remove the cgroup once its processes are gone (waits up to `timeout`)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.05)


def cpu_cgroup_support() -> Optional[str]:
    """None when `CpuCgroup` works here (a child cgroup can be made and given a quota),
    else why not."""
    try:
        CpuCgroup(f"nostall-probe-{os.getpid()}", 0.5).remove()
        return None
    except OSError as e:
        return str(e)


# --------------------------------------------------------------------------- processes

#: The watchdog, a separate process reading commands on stdin: ``sid N`` (a node's session),
#: ``rmdir PATH`` (a cgroup), ``rmtree PATH`` (the temp folder), ``done`` (the owner has
#: stopped the cluster itself: exit). Should stdin close without ``done``, the owner died:
#: SIGKILL every process of those sessions, by pid, until none is left (10 s at most), then
#: remove the cgroups and the folder.
_WATCHDOG = r"""
import os, shutil, signal, sys, time
sids, cgroups, trees = set(), [], []
for line in sys.stdin:
    what, _, arg = line.rstrip("\n").partition(" ")
    if what == "done":
        sys.exit(0)
    if what == "sid":
        sids.add(int(arg))
    elif what == "rmdir":
        cgroups.append(arg)
    elif what == "rmtree":
        trees.append(arg)
deadline = time.monotonic() + 10
while time.monotonic() < deadline:
    left = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = open(entry.path + "/stat").read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if int(fields[3]) in sids and fields[0] != "Z":
            left.append(int(entry.name))
    if not left:
        break
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.1)
for path in cgroups:
    for _ in range(50):
        try:
            os.rmdir(path)
            break
        except FileNotFoundError:
            break
        except OSError:
            time.sleep(0.1)
for path in trees:
    shutil.rmtree(path, ignore_errors=True)
"""


def _session_pids(sid: int) -> list[int]:
    """Pids of all processes in session `sid` (each node's ``ray start`` is made a session
    leader, and Ray's raylet, GCS, agents and workers stay in that session)."""
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp session ...; comm may contain spaces and parentheses
        fields = stat[stat.rfind(")") + 2:].split()
        if int(fields[3]) == sid and fields[0] != "Z":  # zombies wait for their reaper
            out.append(int(entry.name))
    return out


def _ray_command() -> list[str]:
    exe = Path(sys.executable).with_name("ray")
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-m", "ray.scripts.scripts"]


@dataclass
class NodeProcess:
    """One Ray node: its ``ray start --block`` process (a session leader), ports and log."""

    name: str
    head: bool
    proc: subprocess.Popen
    node_manager_port: int
    log_path: Path
    cgroup: Optional[CpuCgroup] = None
    node_id: Optional[str] = None  # hex, once registered with the GCS
    #: The leader is reaped and its session was seen empty: its pid may be reused now, so
    #: nothing is signalled by that number any more.
    gone: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def pids(self) -> list[int]:
        """All live processes of this node (its session), leader first."""
        if self.gone:
            return []
        rest = [p for p in _session_pids(self.proc.pid) if p != self.proc.pid]
        return ([self.proc.pid] if self.proc.poll() is None else []) + rest

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


class RayCluster:
    """A head node and `workers` worker nodes, each a ``ray start --block`` subprocess on
    127.0.0.1 (see the module docstring). A context manager; ``start()``/``stop()`` too.

    Args:
        workers: number of worker nodes.
        worker_cpus: ``--num-cpus`` of each worker node (the scheduler's count, an integer).
        head_cpus: ``--num-cpus`` of the head (0: no tasks or actors there unless asked).
        worker_resources: custom resources of every worker node (``--resources``).
        head_resources: custom resources of the head.
        worker_labels / head_labels: Ray node labels (``--labels k=v,...``).
        env: extra environment variables for every node (head and workers).
        worker_env: per worker node index, extra environment variables for that node only
            (over `env`), e.g. ``{1: {"NOSTALL_PEER_SECRET": "other"}}``.
        cpu_quota: cores (e.g. 0.6) that each worker node (raylet, agents and its Ray
            workers together) may use, enforced by a CPU cgroup; None for no limit.
            Raises `OSError` when CPU cgroups cannot be made here (see `cpu_cgroup_support`).
        head_cpu_quota: the same for the head node.
        object_store_bytes: object store size of each node (``--object-store-memory``).
            Ray's default is 30 % of RAM per node, which several nodes on one machine with a
            /dev/shm of the RAM's size would overcommit.
        start_timeout: seconds to wait for all nodes to register with the GCS.
        temp_root: folder for Ray's temp dir (short: Unix socket paths hold 107 bytes).
        keep_logs: leave the temp folder (nodes' logs, Ray's session logs) after `stop`;
            also when the environment variable ``NOSTALL_KEEP_RAY_LOGS`` is set.
        require_netns: refuse to start outside a loopback-only network namespace.
        log_monitor: run Ray's log monitor on each node, which forwards the output of
            tasks and actors to the driver; False saves one Python process a node.
        fast_failure_detection: the GCS health-checks nodes every second and declares one
            dead after 3 failed checks (`FAST_FAILURE_ENV`), so that a killed node is seen
            dead in about 3 s instead of about 15 s.
        graceful_stop: the default of `stop`'s `graceful` (SIGTERM first, about 2 s, rather
            than SIGKILL at once, about 0.1 s).
        autoscaling: worker node types Ray's autoscaler may launch, by name, e.g.
            ``{"prep": {"resources": {"CPU": 1, "nostall_prep": 1}, "min_workers": 0,
            "max_workers": 2}}``: the head then runs the autoscaler with Ray's fake node
            provider (``RAY_FAKE_CLUSTER=1``), which starts each node it launches as a
            ``ray._private.node.Node`` in the head's monitor process (in the head's
            session, so stopped with the head, by pid like the rest) and kills it when it
            has been idle `idle_timeout_s`. None: no autoscaler.
        idle_timeout_s: with `autoscaling`, the seconds a launched node stays idle before the
            autoscaler gives it back.
    """

    def __init__(
        self,
        workers: int = 2,
        worker_cpus: int = 1,
        head_cpus: int = 0,
        worker_resources: Optional[Mapping[str, float]] = None,
        head_resources: Optional[Mapping[str, float]] = None,
        worker_labels: Optional[Mapping[str, str]] = None,
        head_labels: Optional[Mapping[str, str]] = None,
        env: Optional[Mapping[str, str]] = None,
        worker_env: Optional[Mapping[int, Mapping[str, str]]] = None,
        cpu_quota: Optional[float] = None,
        head_cpu_quota: Optional[float] = None,
        object_store_bytes: int = 512 * 1024**2,
        start_timeout: float = 60.0,
        temp_root: Optional[str] = None,
        require_netns: bool = True,
        keep_logs: bool = False,
        log_monitor: bool = True,
        fast_failure_detection: bool = True,
        graceful_stop: bool = False,
        autoscaling: Optional[Mapping[str, Mapping[str, Any]]] = None,
        idle_timeout_s: float = 6.0,
    ) -> None:
        self.workers = workers
        self.worker_cpus = worker_cpus
        self.head_cpus = head_cpus
        self.worker_resources = dict({"nostall_prep": 1} if worker_resources is None else worker_resources)
        self.head_resources = dict(head_resources or {})
        self.worker_labels = dict(worker_labels or {})
        self.head_labels = dict(head_labels or {})
        self.env = dict(env or {})
        self.worker_env = {int(k): dict(v) for k, v in (worker_env or {}).items()}
        self.cpu_quota = cpu_quota
        self.head_cpu_quota = head_cpu_quota
        self.object_store_bytes = object_store_bytes
        self.start_timeout = start_timeout
        self.temp_root = temp_root or ("/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir())
        self.require_netns = require_netns
        self.log_monitor = log_monitor
        self.fast_failure_detection = fast_failure_detection
        self.graceful_stop = graceful_stop
        self.autoscaling = None if autoscaling is None else {k: dict(v) for k, v in autoscaling.items()}
        self.idle_timeout_s = idle_timeout_s
        self.keep_logs = keep_logs or bool(os.environ.get("NOSTALL_KEEP_RAY_LOGS"))
        self.head: Optional[NodeProcess] = None
        self.worker_nodes: list[NodeProcess] = []
        self.address = ""  # "127.0.0.1:<gcs port>" once started
        self.gcs_port = 0
        self.tmp = ""  # the cluster's own temp folder: nodes' logs, Ray temp dirs h-1, w0-2, ...
        self.startup_s = 0.0
        self._gcs_client: Any = None
        self._seq = 0
        self._watchdog: Optional[subprocess.Popen] = None

    # ----------------------------------------------------------------- lifecycle

    def __enter__(self) -> "RayCluster":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> "RayCluster":
        """Start the head, then all worker nodes together; return once all are alive in
        the GCS. On failure, stops what was started and raises with the node's log."""
        if self.require_netns:
            require_own_netns()
        t0 = time.perf_counter()
        self.tmp = tempfile.mkdtemp(prefix="rc", dir=self.temp_root)
        self._watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG], stdin=subprocess.PIPE, text=True, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        if not self.keep_logs:
            self._tell_watchdog("rmtree", self.tmp)
        try:
            self.gcs_port = free_port()
            self.address = f"{LOOPBACK}:{self.gcs_port}"
            # All at once: a worker node's `ray start` retries until the GCS is up.
            self.head = self._launch(head=True)
            for i in range(self.workers):
                self.worker_nodes.append(self._launch(head=False, index=i))
            self._wait_registered([self.head] + self.worker_nodes)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - t0
        return self

    def add_worker_node(
        self,
        env: Optional[Mapping[str, str]] = None,
        resources: Optional[Mapping[str, float]] = None,
        cpus: Optional[int] = None,
        cpu_quota: Optional[float] = None,
        wait: bool = True,
    ) -> NodeProcess:
        """Start one more worker node (index ``len(worker_nodes)``), e.g. to replace a
        killed one; `env` is added over the cluster's `env`."""
        index = len(self.worker_nodes)
        if env:
            self.worker_env[index] = dict(env)
        node = self._launch(head=False, index=index, resources=resources, cpus=cpus, cpu_quota=cpu_quota)
        self.worker_nodes.append(node)
        if wait:
            self._wait_registered([node])
        return node

    def kill_worker_node(self, i: int, wait_dead: bool = False) -> None:
        """Kill worker node `i` at once, as a lost machine: SIGKILL to every process of its
        session, by pid, until none is left; with `wait_dead`, wait until the GCS has
        declared the node dead too (about 3 s with `fast_failure_detection`)."""
        node = self.worker_nodes[i]
        self._kill_session(node, timeout=10.0)
        if node.cgroup is not None:
            node.cgroup.remove()
            node.cgroup = None
        if wait_dead and node.node_id is not None:
            deadline = time.monotonic() + 60.0
            while node.node_id in self.alive_node_ids():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the GCS still holds {node.name} alive 60 s after its kill")
                time.sleep(0.1)

    def signal_worker_node(self, i: int, sig: int) -> None:
        """`sig` to every process of worker node `i`, by pid, without waiting: SIGSTOP
        freezes the node (a hung machine: its connections stay open), SIGCONT thaws it."""
        self._signal_node(self.worker_nodes[i], sig)

    def stop(self, timeout: float = 10.0, graceful: Optional[bool] = None) -> None:
        """Stop every process this cluster started, by pid. By default (`graceful_stop`
        False) SIGKILL to every process of each node's session at once (about 0.1 s; the
        processes linger as zombies until init reaps them); with `graceful`, SIGTERM to
        each node's ``ray start`` first, which stops its raylet, agents and workers (about
        2 s), and SIGKILL to whatever is left after `timeout`. Then remove the cgroups and
        the temp folder. Idempotent. A driver of this process still connected to the
        cluster is shut down first."""
        if graceful is None:
            graceful = self.graceful_stop
        self._shutdown_driver()
        nodes = [n for n in self.worker_nodes + ([self.head] if self.head else [])]
        for node in nodes:
            self._signal_node(node, signal.SIGCONT)  # thaw nodes frozen by SIGSTOP
        if graceful:
            for node in nodes:
                if node.proc.poll() is None:
                    node.proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout
            for node in nodes:
                try:
                    node.proc.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        errors = []
        for node in nodes:
            try:
                self._kill_session(node, timeout=5.0)
            except TimeoutError as e:
                errors.append(str(e))
            if node.cgroup is not None:
                node.cgroup.remove()
                node.cgroup = None
        self._gcs_client = None
        if self.tmp and self.keep_logs:
            print(f"ray_cluster: logs kept in {self.tmp}", file=sys.stderr)
        elif self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp = ""
        if self._watchdog is not None:
            self._tell_watchdog("done")
            try:
                self._watchdog.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                self._watchdog.kill()
                self._watchdog.wait()
            self._watchdog = None
        if errors:
            raise RuntimeError("; ".join(errors))

    def _shutdown_driver(self) -> None:
        """``ray.shutdown()`` if this process is a driver of this cluster (a driver left
        connected to a stopped cluster spins, logging reconnection errors)."""
        ray = sys.modules.get("ray")
        if ray is None or not self.address or not ray.is_initialized():
            return
        try:
            connected = ray.get_runtime_context().gcs_address
        except Exception:
            return
        if connected == self.address:
            ray.shutdown()

    # ----------------------------------------------------------------- inspection

    @property
    def head_node_id(self) -> Optional[str]:
        return self.head.node_id if self.head else None

    @property
    def worker_node_ids(self) -> list[Optional[str]]:
        return [n.node_id for n in self.worker_nodes]

    def alive_node_ids(self) -> set[str]:
        """Node ids (hex) the GCS holds alive now."""
        return {info.node_id.hex() for info in self._node_infos() if info.state == 0}

    def cpu_seconds(self, which: str = "all") -> float:
        """User+system CPU seconds used so far by the live processes of the nodes, with the
        children they have reaped: `which` is ``"all"``, ``"head"`` or ``"workers"``. The
        difference over a window is the CPU those nodes used in it (a process that dies
        within the window takes its share with it). A driver is not part of any node."""
        head = [self.head] if self.head else []
        nodes = {"all": head + self.worker_nodes, "head": head, "workers": self.worker_nodes}[which]
        ticks = 0
        for node in nodes:
            for pid in node.pids():
                try:
                    stat = Path(f"/proc/{pid}/stat").read_text()
                except OSError:
                    continue
                fields = stat[stat.rfind(")") + 2:].split()
                ticks += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        return ticks / os.sysconf("SC_CLK_TCK")

    def init_kwargs(self) -> dict[str, Any]:
        """Arguments for ``ray.init(**kwargs)`` that attach the driver to the head node."""
        return {"address": self.address, "_node_ip_address": LOOPBACK}

    # ----------------------------------------------------------------- internals

    def _launch(
        self,
        head: bool,
        index: int = -1,
        resources: Optional[Mapping[str, float]] = None,
        cpus: Optional[int] = None,
        cpu_quota: Optional[float] = None,
    ) -> NodeProcess:
        name = "head" if head else f"worker{index}"
        self._seq += 1
        nm_port, om_port, agent_grpc, agent_http, rt_env, metrics = free_ports(6)
        res: Mapping[str, float]
        if head:
            res, labels, ncpu, quota = self.head_resources, self.head_labels, self.head_cpus, self.head_cpu_quota
        else:
            res = self.worker_resources if resources is None else resources
            labels, ncpu = self.worker_labels, self.worker_cpus if cpus is None else cpus
            quota = self.cpu_quota if cpu_quota is None else cpu_quota
        cmd = _ray_command() + [
            "start", "--block",
            f"--node-ip-address={LOOPBACK}",
            f"--num-cpus={ncpu}", "--num-gpus=0",
            f"--object-store-memory={self.object_store_bytes}",
            f"--node-manager-port={nm_port}", f"--object-manager-port={om_port}",
            f"--dashboard-agent-grpc-port={agent_grpc}", f"--dashboard-agent-listen-port={agent_http}",
            f"--runtime-env-agent-port={rt_env}", f"--metrics-export-port={metrics}",
            "--disable-usage-stats", "--log-style=record", "--log-color=false",
            f"--include-log-monitor={str(self.log_monitor).lower()}",
        ]  # fmt: skip
        if res:
            cmd.append("--resources=" + json.dumps(dict(res)))
        if labels:
            cmd.append("--labels=" + ",".join(f"{k}={v}" for k, v in labels.items()))
        if head:
            cmd += [
                "--head", f"--port={self.gcs_port}", "--include-dashboard=false",
                f"--dashboard-port={free_port()}",
            ]  # fmt: skip
            if self.autoscaling is not None:
                cmd.append(f"--autoscaling-config={self._autoscaling_config()}")
        else:
            cmd.append(f"--address={self.address}")
        # A temp dir per node: nodes sharing one race for the Unix socket names
        # (sockets/raylet, sockets/plasma_store) when started together, and one loses.
        cmd.append(f"--temp-dir={self.tmp}/{'h' if head else f'w{index}'}-{self._seq}")
        env = dict(os.environ)
        env.update(BASE_ENV)
        if self.fast_failure_detection:
            env.update(FAST_FAILURE_ENV)
        env.update(self.env)
        if not head:
            env.update(self.worker_env.get(index, {}))
        elif self.autoscaling is not None:
            # The fake provider refuses to run without RAY_FAKE_CLUSTER (which also gives
            # the head the fixed id the provider knows it by); the autoscaler looks at the
            # demand every second rather than every 5.
            env.update(RAY_FAKE_CLUSTER="1", AUTOSCALER_UPDATE_INTERVAL_S="1")
        cgroup = None
        if quota is not None:
            cgroup = CpuCgroup(f"nostall-rc{os.getpid()}-{self._seq}-{name}", quota)
            # Join the cgroup before exec, so that every process of the node is in it.
            cmd = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(cgroup.procs_file)] + cmd
        log_path = Path(self.tmp) / f"{name}-{self._seq}.log"
        with open(log_path, "wb") as log:
            try:
                proc = subprocess.Popen(
                    cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True, cwd=self.tmp,
                )  # fmt: skip
            except BaseException:
                if cgroup is not None:
                    cgroup.remove()
                raise
        self._tell_watchdog("sid", str(proc.pid))
        if cgroup is not None:
            self._tell_watchdog("rmdir", str(cgroup.path))
        return NodeProcess(name, head, proc, nm_port, log_path, cgroup)

    def _autoscaling_config(self) -> str:
        """Writes the autoscaler's cluster config for `autoscaling` (Ray's fake multi-node
        example, with this cluster's GCS address) to the cluster's temp folder; its path.
        Each launched node's object store is held to `object_store_bytes` unless its type
        says otherwise (Ray's default, 30 % of RAM per node, would overcommit /dev/shm)."""
        types: dict[str, Any] = {
            "ray.head.default": {  # the name the fake provider gives the head
                "resources": {"CPU": self.head_cpus, "GPU": 0, **self.head_resources},
                "node_config": {}, "max_workers": 0,
            },
        }  # fmt: skip
        for name, spec in (self.autoscaling or {}).items():
            node_type = {"node_config": {}, "min_workers": 0, "max_workers": 1, **spec}
            node_type["resources"] = {"object_store_memory": self.object_store_bytes,
                                      **node_type.get("resources", {})}
            types[name] = node_type
        config = {
            "cluster_name": "nostall-fake",
            "max_workers": sum(int(t.get("max_workers", 0)) for t in types.values()),
            "provider": {
                "type": "fake_multinode", "gcs_address": self.address, "use_node_id_as_ip": True,
                "disable_node_updaters": True, "disable_launch_config_check": True,
            },
            "available_node_types": types,
            "head_node_type": "ray.head.default",
            "upscaling_speed": 1.0,
            "idle_timeout_minutes": self.idle_timeout_s / 60,
            "auth": {}, "docker": {}, "file_mounts": {}, "file_mounts_sync_continuously": False,
            "initialization_commands": [], "setup_commands": [], "head_setup_commands": [],
            "worker_setup_commands": [], "head_start_ray_commands": [],
            "worker_start_ray_commands": [], "cluster_synced_files": [], "rsync_exclude": [],
            "rsync_filter": [],
        }  # fmt: skip
        path = Path(self.tmp) / "autoscaling.json"  # JSON is YAML, which Ray reads
        path.write_text(json.dumps(config, indent=1))
        return str(path)

    def _tell_watchdog(self, what: str, arg: str = "") -> None:
        if self._watchdog is not None and self._watchdog.stdin is not None:
            try:
                self._watchdog.stdin.write(f"{what} {arg}\n")
                self._watchdog.stdin.flush()
            except (BrokenPipeError, OSError):
                pass

    def _client(self) -> Any:
        if self._gcs_client is None:
            from ray._raylet import GcsClient  # type: ignore[attr-defined]

            self._gcs_client = GcsClient(address=self.address)
        return self._gcs_client

    def _node_infos(self) -> list[Any]:
        return list(self._client().get_all_node_info(timeout=5).values())

    def _wait_registered(self, nodes: Sequence[NodeProcess]) -> None:
        """Wait until each node's raylet is ALIVE in the GCS (matched by its node manager
        port; its node id is recorded) and its ``ray start`` has finished starting (it
        waits for the GCS to list the node, and handles SIGTERM only afterwards); raise
        with the node's log if its process exits first."""
        deadline = time.monotonic() + self.start_timeout
        pending = list(nodes)
        while pending:
            for node in pending:
                if node.proc.poll() is not None:
                    raise RuntimeError(
                        f"Ray {node.name} node exited with {node.proc.returncode} while starting; "
                        f"log:\n{node.log_tail()}"
                    )
            infos = []
            if self._gcs_up():
                try:
                    infos = self._node_infos()
                except Exception:  # GCS not up yet
                    infos = []
            by_port = {i.node_manager_port: i for i in infos if i.state == 0}
            for node in list(pending):
                info = by_port.get(node.node_manager_port)
                if info is not None:
                    node.node_id = info.node_id.hex()
                # `ray start` is done (and handles SIGTERM promptly) once it blocks.
                if node.node_id is not None and _BLOCKING in node.log_tail(4000):
                    pending.remove(node)
            if not pending:
                return
            if time.monotonic() > deadline:
                names = ", ".join(n.name for n in pending)
                raise TimeoutError(
                    f"Ray nodes not alive after {self.start_timeout} s: {names}; log of "
                    f"{pending[0].name}:\n{pending[0].log_tail()}"
                )
            time.sleep(0.1)

    def _gcs_up(self) -> bool:
        try:
            with socket.create_connection((LOOPBACK, self.gcs_port), timeout=0.5):
                return True
        except OSError:
            return False

    @staticmethod
    def _signal_node(node: NodeProcess, sig: int) -> None:
        """`sig` to every process of the node's session, by pid (the leader is never reaped
        before this, so its pid, the session id, cannot have been reused)."""
        for pid in node.pids():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    @staticmethod
    def _kill_session(node: NodeProcess, timeout: float) -> None:
        """SIGKILL every process of the node's session, by pid, again until none is left
        (a process may fork while it is being killed); reap the leader."""
        deadline = time.monotonic() + timeout
        while not node.gone:
            pids = node.pids()
            if not pids and node.proc.poll() is not None:
                node.gone = True
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"Ray {node.name} node: processes {pids} outlive SIGKILL")
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                node.proc.wait(0.05)
            except subprocess.TimeoutExpired:
                pass


def _rss_mb(pids: Sequence[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def _self_check() -> None:
    """Start a cluster (2 worker nodes, held to 0.6 core each when cgroups allow), place
    one actor on each worker node, print the timings and the cluster's memory."""
    import ray

    require_own_netns()
    why_not = cpu_cgroup_support()
    t0 = time.perf_counter()
    with RayCluster(workers=2, worker_cpus=1, cpu_quota=None if why_not else 0.6) as c:
        started = time.perf_counter() - t0
        ray.init(**c.init_kwargs(), log_to_driver=False)
        assert ray.get_runtime_context().get_node_id() == c.head_node_id

        @ray.remote(num_cpus=1, resources={"nostall_prep": 1})
        class Where:
            def node(self) -> str:
                return ray.get_runtime_context().get_node_id()

        actors = [Where.remote() for _ in range(2)]  # type: ignore[attr-defined]
        nodes = sorted(ray.get([a.node.remote() for a in actors]))
        assert nodes == sorted(n for n in c.worker_node_ids if n), (nodes, c.worker_node_ids)
        rss = {n.name: round(_rss_mb(n.pids())) for n in [c.head, *c.worker_nodes] if n}
        ray.shutdown()
        t1 = time.perf_counter()
    stopped = time.perf_counter() - t1
    print(json.dumps({
        "start_s": round(started, 2), "stop_s": round(stopped, 2), "rss_mb": rss,
        "cpu_quota": "0.6 core a worker node" if not why_not else f"none: {why_not}",
    }))  # fmt: skip


if __name__ == "__main__":
    _self_check()
