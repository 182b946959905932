"""The user's own code, per sample: a map-style ``Dataset``'s ``__getitem__`` run for the
engine, in its threads (``Runner.fill``) or in worker processes (``Zygote``), which also
run ``ops.Python`` under the GIL (``_python_ops.OpsJob``).

A sample is whatever ``__getitem__`` returns: a tensor, an array, a number, or a tuple,
list or dict of them. ``Spec`` finds its structure from the first sample: each leaf's
shape and element type, one after another in the sample's slot of the engine's batch
buffer (each at a multiple of 8 bytes), so that every leaf of a batch is a view of that
buffer, as ``torch.utils.data.default_collate`` would stack it.

Before each sample, Python's, NumPy's and torch's generators are seeded with the sample's
own seed (the engine draws it from the sample's generator): what a sample is does not
depend on the thread or worker that made it, nor on how many there are.

Worker processes are forked from a *zygote*: a process forked from this one when the
loader is made, before the loader starts its threads, that holds the dataset as the
user made it (no pickling: lambdas and open files in a transform work as with the
DataLoader's fork). The engine asks the zygote for worker ``k`` with a line on a pipe;
the zygote forks it, and the worker connects to the engine's socket, maps its memory
file, and answers requests (``nostall::user_code::pool``).
"""

from __future__ import annotations

import ctypes
import gc
import mmap
import os
import random
import select
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from typing import Any, Callable

import numpy as np

from ._nostall import _worker_wire

#: Element types a leaf may have, by NumPy's name.
DTYPES = ("float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8", "bool")

#: The engine's wire to its workers (``nostall::user_code::pool::wire``): the magic, the
#: ``struct`` formats of the hello, a request and an answer, and the longest failure.
MAX_MESSAGE: int = _worker_wire["max_message"]
_HELLO = struct.Struct(_worker_wire["hello"])
_REQUEST = struct.Struct(_worker_wire["request"])
_ANSWER = struct.Struct(_worker_wire["answer"])


def _as_array(leaf: Any) -> np.ndarray:
    """A leaf as a NumPy array (a view where it can be)."""
    module = type(leaf).__module__
    if module.startswith("torch"):
        return leaf.detach().cpu().numpy()
    if isinstance(leaf, np.ndarray):
        return leaf
    if isinstance(leaf, (bool, np.bool_)):
        return np.asarray(leaf, dtype=np.bool_)
    if isinstance(leaf, (int, np.integer)):
        return np.asarray(leaf, dtype=np.int64)
    if isinstance(leaf, (float, np.floating)):
        return np.asarray(leaf, dtype=np.float64)
    raise TypeError(
        f"a sample holds a {type(leaf).__name__}: nostall batches tensors, arrays and numbers "
        "(return a tensor, e.g. end the transform with ToTensor, or give collate_fn)")


def _leaves(sample: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    """The leaves of `sample` with their paths, in order (dict keys as given)."""
    if isinstance(sample, (tuple, list)):
        return [leaf for i, item in enumerate(sample) for leaf in _leaves(item, path + (i,))]
    if isinstance(sample, dict):
        return [leaf for k, item in sample.items() for leaf in _leaves(item, path + (k,))]
    return [(path, sample)]


def _structure(sample: Any) -> Any:
    """The sample's shape of containers, its leaves as ``None``."""
    if isinstance(sample, (tuple, list)):
        return type(sample), [_structure(item) for item in sample]
    if isinstance(sample, dict):
        return dict, [(k, _structure(item)) for k, item in sample.items()]
    return None


class Spec:
    """Where each leaf of a sample lies in its slot: ``(path, offset, shape, dtype)``, and
    the slot's bytes."""

    def __init__(self, sample: Any, torch_leaves: bool):
        self.structure = _structure(sample)
        self.leaves: list[tuple[tuple, int, tuple[int, ...], str]] = []
        offset = 0
        for path, leaf in _leaves(sample):
            array = _as_array(leaf)
            if array.dtype.name not in DTYPES:
                raise TypeError(f"a sample's leaf {list(path)} is {array.dtype.name}: nostall "
                                f"batches {', '.join(DTYPES)}")
            self.leaves.append((path, offset, tuple(array.shape), array.dtype.name))
            offset += -(-array.nbytes // 8) * 8
        self.bytes = max(offset, 8)
        #: Whether the leaves were torch tensors (the batch's are then torch's).
        self.torch = torch_leaves

    def describe(self) -> str:
        """The leaves in words, for the fingerprint and messages."""
        return ", ".join(f"{list(path)}: {dtype}{list(shape)}" for path, _, shape, dtype in self.leaves)

    def write(self, sample: Any, out: np.ndarray) -> None:
        """Writes `sample`'s leaves into `out` (the slot's bytes, uint8)."""
        leaves = _leaves(sample)
        if len(leaves) != len(self.leaves):
            raise ValueError(f"this sample has {len(leaves)} leaves, the first had "
                             f"{len(self.leaves)} ({self.describe()}): every sample must "
                             "have the same structure")
        for (path, leaf), (_, offset, shape, dtype) in zip(leaves, self.leaves):
            array = _as_array(leaf)
            if tuple(array.shape) != shape or array.dtype.name != dtype:
                raise ValueError(
                    f"this sample's leaf {list(path)} is {array.dtype.name}{list(array.shape)}, "
                    f"the first sample's {dtype}{list(shape)}: every sample must have the same "
                    "shapes (crop or resize to one size)")
            out[offset:offset + array.nbytes].view(dtype)[:] = array.reshape(-1)

    def batch(self, record: Any, n: int) -> Any:
        """The batch's structure from ``record`` (``[n, slot]`` uint8, torch or NumPy):
        each leaf a view ``[n, *shape]``, as default_collate stacks them."""
        views = []
        for _, offset, shape, dtype in self.leaves:
            size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            views.append(_view(record, offset, size, dtype).reshape((n, *shape)))
        it = iter(views)
        return _rebuild(self.structure, it)


def _rebuild(structure: Any, leaves: Any) -> Any:
    if structure is None:
        return next(leaves)
    kind, items = structure
    if kind is dict:
        return {k: _rebuild(s, leaves) for k, s in items}
    built = [_rebuild(s, leaves) for s in items]
    return kind(built) if kind in (tuple, list) else built


def _index(batch: Any, i: int) -> Any:
    if isinstance(batch, (tuple, list)):
        return type(batch)(_index(item, i) for item in batch)
    if isinstance(batch, dict):
        return {k: _index(item, i) for k, item in batch.items()}
    return batch[i]


def _view(record: Any, offset: int, size: int, dtype: str) -> Any:
    """Bytes ``offset:offset + size`` of each row of ``record`` seen as ``dtype``."""
    part = record[:, offset:offset + size]
    if type(record).__module__.startswith("torch"):
        import torch

        return part.view(getattr(torch, dtype))
    return part.view(np.dtype(dtype))


#: The sample being made on this thread: its seed, and its generators once asked for.
_current = threading.local()


def sample_generator(kind: str = "torch") -> Any:
    """The generator of the sample being made, for a ``Dataset``'s ``__getitem__`` run by
    nostall: a ``torch.Generator`` (``kind="torch"``) or a ``numpy.random.Generator``
    (``"numpy"``), seeded by the sample's own seed when its making began, the same object
    for every call while it is made. Its draws do not depend on the thread or worker
    that makes the sample. In worker processes nostall also seeds the global generators
    (``random``, ``numpy.random``, ``torch``'s CPU generator) before each sample; with
    ``workers="threads"`` it leaves them alone (they are the training loop's, and shared
    by the threads making samples at once), and only this one keeps the batches the same
    for any number of threads."""
    seed = getattr(_current, "seed", None)
    if seed is None:
        raise RuntimeError("nostall.sample_generator() is for a Dataset's __getitem__ while "
                           "nostall makes a sample")
    made = _current.generators
    if kind not in made:
        if kind == "torch":
            import torch

            made[kind] = torch.Generator().manual_seed(seed & 0x7FFF_FFFF_FFFF_FFFF)
        elif kind == "numpy":
            made[kind] = np.random.default_rng(seed)
        else:
            raise ValueError(f"kind={kind!r}: use \"torch\" or \"numpy\"")
    return made[kind]


def seed_sample(seed: int) -> None:
    """Makes `seed` the sample's own (``sample_generator``) on this thread."""
    _current.seed = seed
    _current.generators = {}


def seed_all(seed: int) -> None:
    """Seeds Python's, NumPy's and (when imported) torch's generators with `seed`, and the
    sample's own (``sample_generator``): what a worker process does before each sample."""
    seed_sample(seed)
    random.seed(seed)
    np.random.seed(seed & 0xFFFF_FFFF)
    torch = sys.modules.get("torch")
    if torch is not None:
        # The CPU generator only: ``torch.manual_seed`` also queues a CUDA seeding with its
        # stack trace while CUDA is not started (always, in a forked worker), 0.2 ms a
        # sample, a tenth of a small photograph's making.
        torch.default_generator.manual_seed(seed & 0x7FFF_FFFF_FFFF_FFFF)


class Runner:
    """Makes samples in this process: what the engine's threads call (``fill``)."""

    def __init__(self, dataset: Any, spec: Spec):
        self.dataset = dataset
        self.spec = spec

    def fill(self, index: int, seed: int, out: memoryview) -> None:
        """Makes sample `index` with `seed` into `out` (its slot). The global generators are
        left alone: in this process they are the training loop's (its dropout, say), and
        threads making samples at once would share them; ``sample_generator`` is the
        sample's."""
        seed_sample(seed)
        try:
            self.spec.write(self.dataset[index], np.frombuffer(out, dtype=np.uint8))
        finally:
            _current.seed = None


def probe(dataset: Any, seed: int, in_child: bool, timeout: float) -> Spec:
    """The spec of `dataset`'s samples, from its first (made with `seed`), the global
    generators left as they were. `in_child`: made in a process forked for it, so that
    nothing ``__getitem__`` opens lazily (an h5py or LMDB handle, which must not be
    shared across a fork) is held here when the zygote forks; that process is given
    `timeout` seconds, and is killed and reaped however the wait ends."""
    if in_child:
        return _probe_in_child(dataset, seed, timeout)
    torch = sys.modules.get("torch")
    states = (random.getstate(), np.random.get_state(), torch.get_rng_state() if torch else None)
    try:
        return _spec_of_first(dataset, seed)
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        if torch is not None:
            torch.set_rng_state(states[2])


def _spec_of_first(dataset: Any, seed: int) -> Spec:
    seed_all(seed)
    try:
        sample = dataset[0]
    finally:
        _current.seed = None
    leaves = _leaves(sample)
    torch_leaves = any(type(leaf).__module__.startswith("torch") for _, leaf in leaves)
    return Spec(sample, torch_leaves)


def _fork() -> int:
    """``os.fork()`` for a child that runs the user's code (the zygote, the probe), this
    process's output flushed first. Everything made so far is frozen for the child: its
    garbage collections (and its workers') never walk it, for an extension's object can be
    unsafe to touch after a fork (workers crashed collecting such objects), and its pages
    stay shared with this process instead of being written by the collector."""
    sys.stdout.flush()
    sys.stderr.flush()
    gc.freeze()
    try:
        pid = os.fork()
    except BaseException:
        gc.unfreeze()
        raise
    if pid != 0:
        gc.unfreeze()
    return pid


def _probe_in_child(dataset: Any, seed: int, timeout: float) -> Spec:
    """`_spec_of_first` in a forked process, its spec (or exception) sent back pickled."""
    import pickle

    parent = os.getpid()
    read, write = os.pipe()
    try:
        pid = _fork()
    except BaseException:
        os.close(read)
        os.close(write)
        raise
    if pid == 0:
        code = 0
        try:
            os.close(read)
            # The thread that forked it waits for it, so the parent-death signal (bound
            # to that thread) lasts as long as the probe.
            _die_with_parent(parent)
            try:
                made: Any = ("spec", _spec_of_first(dataset, seed))
            except Exception as e:
                made = ("raised", e, traceback.format_exc())
            try:
                data = pickle.dumps(made)
            except Exception:
                data = pickle.dumps(("raised", RuntimeError(made[-1] if made[0] == "raised" else
                                                            "the first sample's spec cannot be sent"), ""))
            with os.fdopen(write, "wb") as out:
                out.write(data)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    try:
        answer = _read_within(read, timeout)
    finally:
        os.close(read)
        _end(pid)
    if answer is None:
        raise RuntimeError(f"the Dataset's first sample (dataset[0], read to learn its shape) took longer "
                           f"than {timeout:g} s: its __getitem__ hangs, or give timeout= more")
    if not answer:
        raise RuntimeError("the process reading the Dataset's first sample ended without an answer "
                           "(it crashed: see its output above)")
    made = pickle.loads(answer)
    if made[0] == "raised":
        raise made[1]
    return made[1]


#: How often a wait of the main thread lets Python run a signal's handler, in seconds
#: (`interrupt.rs`'s `SIGNAL_CHECK`).
SIGNAL_CHECK = 0.1


def _read_within(fd: int, timeout: float) -> bytes | None:
    """Everything written to `fd` until its writer closes it, or None after `timeout`
    seconds. A signal's handler (Ctrl-C's KeyboardInterrupt) raises out of the wait: within
    `SIGNAL_CHECK` seconds, since a signal the kernel hands to another of the process's
    threads (any that does not block it) does not interrupt this thread's `select`, and
    Python runs the handler only once this thread's wait ends (the Rust side's waits check
    as often)."""
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        if not select.select([fd], [], [], min(left, SIGNAL_CHECK))[0]:
            continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _end(pid: int) -> None:
    """Kills the child `pid` if it still runs, and reaps it: no orphan, no zombie."""
    try:
        if os.waitpid(pid, os.WNOHANG) != (0, 0):
            return
        os.kill(pid, signal.SIGKILL)
    except ChildProcessError:
        return
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)


_PR_SET_PDEATHSIG = 1


def _prctl() -> Callable[..., int] | None:
    """libc's `prctl`, looked up in the parent: a child forked from a process with other
    threads must not look it up itself (`dlopen` takes the dynamic linker's lock, which
    another thread may have held at the fork, and the child would wait for ever)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()


def _die_with_parent(parent: int) -> None:
    """This process is killed when `parent`, the process that forked it, ends (Linux); it
    ends now if `parent` already has."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(0)


#: What a worker runs for each request: ``job(index, seed, memory)``, ``memory`` its
#: memory file's bytes (uint8).
Job = Callable[[int, int, np.ndarray], None]


def dataset_job(dataset: Any, spec: Spec) -> Job:
    """The job that makes `dataset`'s sample ``index`` with ``seed`` into the memory."""

    def make(index: int, seed: int, out: np.ndarray) -> None:
        seed_all(seed)
        spec.write(dataset[index], out)

    return make


class Zygote:
    """A process forked now, holding `job` (and so the user's code it calls), that forks
    the workers the engine asks for: ``spawn(number, socket, memory, token) -> pid`` (what
    the engine's ``Spawn`` calls, through ``fds``). Each worker maps ``memory_bytes`` of
    its memory file."""

    def __init__(self, job: Job, memory_bytes: int, worker_init_fn: Callable[[int], None] | None):
        requests_r, requests_w = os.pipe()
        answers_r, answers_w = os.pipe()
        pid = _fork()
        if pid == 0:  # the zygote
            try:
                os.close(requests_w)
                os.close(answers_r)
                # No parent-death signal here: it is bound to the thread that forked, which
                # may end long before the loader (one made in a thread pool). The zygote ends
                # when its request pipe does, with the process that holds the other end.
                _zygote(requests_r, answers_w, job, memory_bytes, worker_init_fn)
            finally:
                os._exit(0)
        os.close(requests_r)
        os.close(answers_w)
        self.pid = pid
        #: The pipe the engine writes requests to, and the one it reads pids from.
        self.fds = (requests_w, answers_r)

    def engine_fds(self) -> tuple[int, int]:
        """Copies of the request and answer pipes for the engine, which owns them."""
        return os.dup(self.fds[0]), os.dup(self.fds[1])

    def close(self) -> None:
        """Ends the zygote (its workers end with their connections)."""
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        # Killed, not asked: a zygote holds no state worth a goodbye, and its workers,
        # killed with it (their parent-death signal), may be stuck in the user's code.
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def _zygote(requests: int, answers: int, job: Job, memory_bytes: int,
            worker_init_fn: Callable[[int], None] | None) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # workers are reaped by the kernel
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the training script's
    reader = os.fdopen(requests, "r")
    writer = os.fdopen(answers, "w")
    for line in reader:
        try:
            number, socket_path, memory_path, token = line.split()
            me = os.getpid()
            pid = os.fork()
        except (ValueError, OSError) as e:
            writer.write(f"error {e}\n")
            writer.flush()
            continue
        if pid == 0:
            code = 0
            try:
                reader.close()
                writer.close()
                _die_with_parent(me)
                _work(int(number), socket_path, memory_path, int(token), job, memory_bytes,
                      worker_init_fn)
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        writer.write(f"{pid}\n")
        writer.flush()


def _work(number: int, socket_path: str, memory_path: str, token: int, job: Job,
          memory_bytes: int, worker_init_fn: Callable[[int], None] | None) -> None:
    """A worker: connects, then runs `job` for each request over its memory."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(socket_path)
    with open(memory_path, "r+b") as f:
        memory = mmap.mmap(f.fileno(), memory_bytes)
    out = np.frombuffer(memory, dtype=np.uint8)
    torch = sys.modules.get("torch")
    if torch is not None:
        # One thread of torch's own per worker, as the DataLoader's workers: the workers
        # are the parallelism.
        torch.set_num_threads(1)
    # Connected first, then ready: a worker_init_fn that raises is the start's failure,
    # with its traceback, and its time counts against the start's bound, not a sample's.
    connection.sendall(_HELLO.pack(_worker_wire["magic"], number, token))
    try:
        if worker_init_fn is not None:
            worker_init_fn(number)
    except Exception:
        _answer(connection, traceback.format_exc())
        return
    _answer(connection, None)
    while True:
        request = _receive(connection, _REQUEST.size)
        if request is None:
            return
        index, seed = _REQUEST.unpack(request)
        try:
            job(index, seed, out)
        except Exception:
            _answer(connection, traceback.format_exc())
        else:
            _answer(connection, None)


def _answer(connection: socket.socket, failure: str | None) -> None:
    """Done (``failure`` None), or failed with ``failure`` (its last ``MAX_MESSAGE`` bytes)."""
    if failure is None:
        connection.sendall(_ANSWER.pack(0, 0))
        return
    words = failure.encode("utf-8", "replace")[-MAX_MESSAGE:]
    connection.sendall(_ANSWER.pack(1, len(words)) + words)


def _receive(connection: socket.socket, n: int) -> bytes | None:
    """`n` bytes, or None once the engine closed the connection."""
    data = b""
    while len(data) < n:
        chunk = connection.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data
