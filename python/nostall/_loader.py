"""``nostall.Loader``: the front. It resolves what the user handed over and hands the
engine one spec.

The engine declares its settings once (``_nostall._loader_settings``: name, kind, default,
what each takes, its doc). This module declares the front's own settings the same way
(``FRONT``). The constructor's signature, its conversion of each value to the setting's
text form, the docstring, the stub (``_loader.pyi``) and the docs' table all come from
these declarations; ``python/write_loader_stub.py`` writes the last two, and a test fails
when they are stale.

The front decides what ``source`` is (a location, a list of them, a Dataset object, a
``datasets.Dataset`` read natively). It refuses combinations that cannot work, and writes
the engine's settings as text. The extension reads each text by its declaration: one
conversion, shared with configuration files, the command line and the node agent.
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from . import _batch, _hf, _remote, _store, _translate
from ._errors import ConfigError
from ._nostall import Loader as _Engine
from ._nostall import _loader_settings


__all__ = ["Loader", "is_path", "texts"]


class Setting(NamedTuple):
    """One setting's declaration, as the signature, the stub and the docs read it."""

    name: str
    #: The engine's kind (``count``, ``bool``, ``choice``, ...), or ``front``.
    kind: str
    #: The Python annotation, as the stub writes it.
    annotation: str
    #: The default, as Python writes it.
    default: Any
    #: What the default means where it depends on something else.
    default_means: str | None
    doc: str


#: The longest ``timeout=`` taken, in seconds (a week).
MAX_TIMEOUT = 7 * 24 * 3600.0

#: The engine's settings whose default the front decides, with what ``None`` then means.
_DEPENDS = {
    "rank": "`RANK` from the environment (torchrun sets it), else 0",
    "world_size": "`WORLD_SIZE` from the environment, else 1",
    "worker_nice": "0, or 10 with `device=`",
    "cache": "no cache",
    "cache_policy": '`"minio"` when `cache=` is given',
    "balance_ranks": 'on with `threads="auto"`',
    "image_size": "224",
}

#: Choices the front adds to an engine setting's: a cache partitioned across the job's
#: nodes is the peers' (the node's), not the loader's.
_MORE_CHOICES = {"cache_policy": ("partitioned",)}

#: Engine settings the front takes under other names: the column of samples is named
#: for its modality.
_RENAMED = {"sample_column": ("image_column", "audio_column")}

_ANNOTATIONS = {
    "count": "int",
    "bool": "bool",
    "bytes": "int | str",
    "size": "int | float | str",
    "path": "str | PathLike[str]",
    "text": "str",
    "threads": 'int | Literal["auto"]',
    "pipeline": "str | Sequence[Any] | Any",
}

#: The front's own settings: what the engine has no text form of (objects, the device,
#: the node agent's group).
FRONT = [
    Setting("output", "front", 'Literal["auto", "torch", "numpy", "dlpack"]', "auto", None,
            '`"torch"` tensors, `"numpy"` arrays, `"dlpack"` (`BatchTensor`s), or `"auto"` (torch when '
            "importable, else numpy)."),
    Setting("metrics_addr", "front", "str | None", None, "`NOSTALL_METRICS_ADDR`, else off",
            "Serve live metrics for Prometheus at this `host:port` (`GET /metrics`): the stall per "
            "batch, each stage's busy time, threads per role, cache hits, read-ahead, skips by cause, "
            "peers. Loaders of one process share an address, labelled `loader` and `rank`."),
    Setting("share", "front", "str | None", None, "off",
            '`"auto"` reads through the node agent (started when none runs), in the group of every job '
            "of this user on this node that reads the same stream: each batch is fetched and prepared "
            "once for all of them, and reaches each in shared memory. A name makes a group of the jobs "
            'giving that name. `"off"` reads with this process\'s own threads. docs/sharing.md has more.'),
    Setting("remote", "front", "Remote | None", None, "off",
            "Ray actors on other machines prepare batches too (`nostall.Remote`: how many, their "
            "CPUs, resources or labels, the cluster): each runs this loader's dataset and settings "
            "and makes whole batches by number, sent over TLS with the job's secret "
            "(`NOSTALL_PEER_SECRET`, on both ends); the same batches as without it, each once, "
            "whatever actors die or stall. docs/remote.md has more."),
    Setting("device", "front", "str | None", None, "CPU tensors",
            '`"cuda"` (the device of `LOCAL_RANK` under torchrun) or `"cuda:N"`: batches come as CUDA '
            "tensors, ready in the consumer's current stream, converted and normalised on the GPU. "
            "Needs PyTorch with CUDA."),
    Setting("decode", "front", 'Literal["auto", "gpu", "cpu"]', "auto", None,
            'With `device=`, where JPEGs are decoded: `"auto"` sends those of at least '
            '`gpu_decode_min_pixels` to the GPU\'s decoder while the consumer would wait for CPU prep; '
            '`"gpu"` all of them; `"cpu"` none. The crop and flip are drawn by the engine either way.'),
    Setting("gpu_decode_min_pixels", "front", "int", 1_000_000, None,
            'The smallest JPEG `decode="auto"` sends to the GPU, in pixels.'),
    Setting("image_column", "front", "str | None", None, "found from the files",
            "Parquet or a `datasets.Dataset`: the column of encoded images (binary, or the "
            "`{bytes, path}` struct `datasets` writes). Unset: the `Image` feature, else a column "
            "named `image`."),
    Setting("audio_column", "front", "str | None", None, "found from the files",
            "Parquet: the column of encoded recordings. Unset: the `Audio` feature, else a column "
            "named `audio`."),
    Setting("mix", "front", "Mixup | None", None, None,
            "A `nostall.Mixup`: MixUp and CutMix of each batch in the engine, as timm's `Mixup`; the "
            "labels are then soft, float32 `[batch, num_classes]`."),
    Setting("batch_transform", "front", "Callable[..., Any] | None", None, None,
            "A function `fn(images, labels) -> (images, labels)` run on each batch before it is "
            "handed over (with `device=`, on the device). A `generator` keyword, where `fn` takes "
            "one, gets a generator seeded by (seed, rank, epoch, batch). With `fields=` it is "
            "`fn(batch) -> batch` on the dictionary."),
    Setting("stack_views", "front", "bool", False, None,
            "With a list of pipelines, consecutive views of one shape come as one tensor "
            "`[views, batch, *shape]` (DINO's global crops, its local ones)."),
    Setting("fields", "front", "Mapping[str, str | Field] | None", None, None,
            'Each sample as a record of named fields, each batch a dictionary: `{"image": "jpg;png", '
            '"caption": "txt", "label": "cls", "text": nostall.Field("txt", tokenizer=tok)}`. '
            "docs/fields.md has the kinds."),
    Setting("weights", "front", "Sequence[float] | None", None, "by size",
            "With a list of `source`s, each one's weight: every epoch holds as many samples as they "
            "do together, each its weight's share; each dataset is read in whole seeded passes."),
    Setting("workers", "front", 'Literal["auto", "threads", "processes"] | None', None,
            "processes under the GIL, threads on a free-threaded interpreter",
            "Where a Dataset object's `__getitem__` (or `ops.Python`) runs."),
    Setting("worker_init_fn", "front", "Callable[[int], None] | None", None, None,
            "A Dataset's workers: called in each worker process with its number as it starts."),
    Setting("timeout", "front", "float | None", None, "300 s",
            "The bound on one sample's `__getitem__` (or one `ops.Python` call) in worker processes, "
            "in seconds."),
]


#: The engine's declarations of its settings: name, kind, choices, default, takes, doc.
_DECLARED = _loader_settings()


def _engine_settings() -> list[Setting]:
    """The engine's settings as the front shows them."""
    settings = []
    for name, kind, words, default, _takes, doc in _DECLARED:
        if name in _RENAMED:
            continue
        if kind == "choice":
            choices = [*words, *_MORE_CHOICES.get(name, ())]
            annotation = f"Literal[{', '.join(repr(w).replace(chr(39), chr(34)) for w in choices)}]"
        else:
            annotation = _ANNOTATIONS[kind]
        means = _DEPENDS.get(name)
        if means is not None or default is None:
            value = None
            annotation += " | None"
        else:
            value = _python_value(kind, default)
        settings.append(Setting(name, kind, annotation, value, means, doc))
    return settings


def _python_value(kind: str, text: str) -> Any:
    """A default's text form as Python writes the value."""
    if kind in ("count", "bytes"):
        return int(text.removesuffix("B"))
    if kind == "bool":
        return text == "true"
    return text


#: Every setting: the engine's, in their order, then the front's.
SETTINGS: list[Setting] = [*_engine_settings(), *FRONT]
_ENGINE_KINDS = {row[0]: row[1] for row in _DECLARED}


def _text(name: str, kind: str, value: Any) -> str:
    """``value`` in the text form of setting ``name`` (which the engine reads and checks)."""
    def refuse(takes: str) -> TypeError:
        return TypeError(f"{name} takes {takes}, not {type(value).__name__}")

    if kind == "bool":
        if not isinstance(value, bool):
            raise refuse("True or False")
        return "true" if value else "false"
    if kind == "count":
        if isinstance(value, bool) or not isinstance(value, int):
            raise refuse("an int")
        return str(value)
    if kind in ("bytes", "size"):
        if isinstance(value, str):
            return value
        if isinstance(value, bool):
            raise refuse("a size")
        if isinstance(value, int):
            return f"{value}B"
        if kind == "size" and isinstance(value, float):
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"{name}={value}: a fraction of the dataset must lie in 0..1")
            return f"{value:.17f}" if "e" in repr(value) else repr(value)
        raise refuse('a size ("35%", "2GiB", 0.35 or a number of bytes)' if kind == "size" else "bytes")
    if kind == "threads":
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        if isinstance(value, str):
            return value
        raise refuse('a count or "auto"')
    if kind == "path":
        return os.fsdecode(value)
    if not isinstance(value, str):
        raise refuse("a str")
    return value


@dataclass
class Spec:
    """What the extension's ``Loader`` takes: the user's arguments, resolved."""

    location: str
    mixture: list[tuple[str, float | None]] = field(default_factory=list)
    settings: list[tuple[str, str]] = field(default_factory=list)
    pipeline: Any = None
    torch_ops: bool = False
    arrow: Any = None
    dataset: Any = None
    workers: str | None = None
    worker_init_fn: Any = None
    timeout: float | None = None
    node_cache: str | None = None
    node_store: Any = None
    output: str = "auto"
    device: str | None = None
    decode: str = "auto"
    gpu_decode_min_pixels: int = 1_000_000
    share: str | None = None
    mix: Any = None
    batch_transform: Any = None
    stack_views: bool = False
    fields: Any = None
    metrics_addr: str | None = None


def is_path(obj: Any) -> bool:
    """Whether ``obj`` is a location (a ``str``, ``bytes`` or path), not a Dataset."""
    return isinstance(obj, (str, bytes)) or hasattr(obj, "__fspath__")


def _source(spec: Spec, source: Any, weights: Sequence[float] | None) -> None:
    """Sets where ``spec`` reads: one location, a mixture of several, or a Dataset object."""
    if isinstance(source, (list, tuple)):
        if not all(is_path(s) for s in source):
            raise TypeError("source: a list holds the datasets' locations (str or path)")
        many = [os.fsdecode(s) for s in source]
        if not many:
            raise ConfigError("source=[]: give a dataset's location, or a list of them to mix")
        if weights is not None and len(weights) != len(many):
            raise ConfigError(f"{len(many)} datasets and {len(weights)} weights: give one weight each")
        given = [None] * len(many) if weights is None else [float(w) for w in weights]
        spec.location = " + ".join(many)
        spec.mixture = list(zip(many, given))
    elif not is_path(source) and hasattr(source, "__getitem__") and hasattr(source, "__len__"):
        if weights is not None:
            raise ConfigError("weights= mixes several datasets' locations, not Dataset objects")
        spec.location = type(source).__name__
        spec.dataset = source
    else:
        if weights is not None:
            raise ConfigError("weights= mixes several datasets: give source= a list of them")
        spec.location = os.fsdecode(source)


def _dataset(spec: Spec, given: dict[str, Any]) -> None:
    """A Dataset object: read natively when it is a ``datasets.Dataset`` the engine reads,
    else its ``__getitem__`` runs as the user's code, which takes none of the settings of
    the engine's preparation."""
    label = given.get("label_column")
    spec.arrow = _hf.native_columns(spec.dataset, given.get("image_column"), label)
    if spec.arrow is not None:
        spec.dataset = None
        given.pop("image_column", None)
        given.pop("label_column", None)
        return
    refused = [
        ("pipeline", "pipeline= (its transform is its own)"),
        ("image_size", "image_size="),
        ("fields", "fields="),
        ("share", "share="),
        ("mix", "mix="),
        ("device", "device="),
        ("batch_transform", "batch_transform="),
        ("dtype", "dtype= or layout="),
        ("layout", "dtype= or layout="),
    ]
    for name, what in refused:
        if name in given:
            raise ConfigError(f"a Dataset object with {what} is not supported: its samples are what "
                              "its __getitem__ returns")


def _resolve(source: Any, given: dict[str, Any]) -> Spec:
    """The spec of a loader of ``source`` with the settings ``given`` (None left out)."""
    spec = Spec(location="")
    _source(spec, source, given.pop("weights", None))
    if spec.dataset is not None:
        _dataset(spec, given)
    timeout = given.pop("timeout", None)
    if timeout is not None and not (math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT):
        raise ConfigError(f"timeout={timeout:g}: give seconds above 0, at most {MAX_TIMEOUT:g} (a week)")
    spec.timeout = None if timeout is None else float(timeout)
    spec.workers = given.pop("workers", None)
    if spec.workers not in (None, "auto", "threads", "processes"):
        raise ConfigError(f'workers="{spec.workers}": use "auto", "threads" or "processes"')
    spec.worker_init_fn = given.pop("worker_init_fn", None)
    spec.output = given.pop("output", "auto")
    spec.fields = given.pop("fields", None)
    if spec.fields is not None and spec.output == "dlpack":
        raise ConfigError('fields= with output="dlpack" is not supported yet')
    transform = given.pop("batch_transform", None)
    spec.batch_transform = None if transform is None else _batch.BatchTransform(transform)
    columns = [given.pop(name) for name in _RENAMED["sample_column"] if name in given]
    if len(columns) > 1:
        raise ConfigError("image_column= and audio_column= both name the column of samples: give one")
    if columns:
        given["sample_column"] = columns[0]
    spec.share = given.pop("share", None)
    sharing = spec.share not in (None, "off")
    if given.pop("remote", None) is not None and sharing:
        raise ConfigError("remote= with share=: batches are made by remote actors or by the node "
                          "agent's group, not both")
    if sharing and given.get("aug_repeats", 1) > 1:
        raise ConfigError("aug_repeats= with share=: the node agent's batches hold each sample once")
    spec.mix = given.pop("mix", None)
    if sharing and spec.mix is not None:
        raise ConfigError("mix= with share=: the node agent's batches are the group's, not mixed per job")
    spec.device = given.pop("device", None)
    spec.decode = given.pop("decode", "auto")
    if spec.mixture and spec.decode == "auto":
        # A mixture's epoch may hold a sample twice, each with its own crop: decoded on
        # the CPU (a device decode asked for is the engine's to refuse).
        spec.decode = "cpu"
    spec.gpu_decode_min_pixels = given.pop("gpu_decode_min_pixels", 1_000_000)
    if spec.device is not None and not sharing:
        # The training thread launches the GPU's work: it should not wait behind a
        # decoder for a core (docs/gpu.md has what it changed on an H100).
        given.setdefault("worker_nice", 10)
    spec.stack_views = given.pop("stack_views", False)
    spec.metrics_addr = given.pop("metrics_addr", None)
    _cache(spec, given)
    if "pipeline" in given:
        spec.fields = _boxes_in(spec.fields, _translate.box_format(given["pipeline"]))
        spec.pipeline, dtype = _translate.resolve(given.pop("pipeline"), given.get("dtype"))
        if dtype is not None:
            given["dtype"] = dtype
    spec.torch_ops = spec.output != "numpy" and _has_torch()
    spec.settings = texts(given)
    return spec


def _boxes_in(fields: Any, converted: str | None) -> Any:
    """``fields`` with each boxes field in the format the recipe's v2
    ``ConvertBoundingBoxFormat`` leaves boxes in (``converted``; None: the fields' own):
    set where the field leaves ``box_format`` out, ``ConfigError`` where it gives another."""
    if converted is None or not isinstance(fields, Mapping):
        return fields
    from ._nostall import Field

    out = dict(fields)
    for name, f in fields.items():
        if not isinstance(f, Field):
            continue
        members, settings = f.__getnewargs_ex__()
        if settings.get("kind") != "boxes":
            continue
        given = settings.get("box_format")
        if given is None:
            out[name] = Field(*members, **{**settings, "box_format": converted})
        elif given != converted:
            raise ConfigError(f'fields["{name}"] has box_format="{given}", but the recipe\'s ConvertBoundingBoxFormat '
                              f'gives "{converted}": torchvision would give "{converted}"; keep one of the two')
    return out


def texts(given: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The engine's settings ``given`` in their text forms, each converted by its kind."""
    return [(name, _text(name, _ENGINE_KINDS[name], value)) for name, value in given.items()]


def _cache(spec: Spec, given: dict[str, Any]) -> None:
    """``cache=`` turns the loader's cache on (``"minio"`` unless a policy is given); a
    partitioned cache is the node's, not the loader's."""
    policy = given.pop("cache_policy", None)
    if policy == "partitioned":
        size = given.pop("cache", None)
        if size is None:
            raise ConfigError('cache_policy="partitioned" needs the size of each node\'s part: cache="30%" '
                              '(a share of the dataset) or cache="32GiB"')
        spec.node_cache = _text("cache", "size", size)
    elif "cache" in given:
        given["cache_policy"] = policy or "minio"


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _signature() -> inspect.Signature:
    keyword = inspect.Parameter.KEYWORD_ONLY
    return inspect.Signature(
        [inspect.Parameter("cls", inspect.Parameter.POSITIONAL_OR_KEYWORD),
         inspect.Parameter("source", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [inspect.Parameter(s.name, keyword, default=s.default) for s in SETTINGS]
    )


def _rst(text: str) -> str:
    """The declarations' Markdown code spans as reStructuredText's."""
    return text.replace("`", "``")


def literal(value: Any) -> str:
    """``value`` as the stub and the docs write it (strings in double quotes)."""
    return f'"{value}"' if isinstance(value, str) else repr(value)


def setting_line(s: Setting, code: str = "``") -> str:
    """One setting in the docs: its name, its default and what the default means, its doc."""
    default = literal(s.default) if s.default_means is None else f"None: {s.default_means}"
    doc = s.doc if code == "`" else _rst(s.doc)
    means = default if code == "`" else _rst(default)
    return f"- {code}{s.name}{code} ({means}): {doc}"


_HEAD = """A data loader: iterate over it for the ``(images, labels)`` batches of one epoch.

``source`` is an image or audio folder (one sub-folder per class, or flat), a folder of
WebDataset ``.tar`` shards, Parquet files, ``s3://bucket/prefix``, a manifest of segments of
long recordings (``.jsonl``, ``.csv``), a list of locations (a mixture, see ``weights``), a
map-style Dataset object (its ``__getitem__`` runs in worker processes), or a
``datasets.Dataset`` (read natively). The settings, all keyword-only (None: the default):

"""

_TAIL = """

Images are ``[batch, 3, height, width]`` (or ``[batch, height, width, 3]`` for HWC) float32
or uint8, sharing the loader's batch buffer (no copy); labels are ``[batch]`` int64.
``len(loader)`` is the number of batches per epoch. Each ``iter(loader)`` runs the epoch set
by ``set_epoch``, or the position given to ``load_state_dict``, or else the epoch after the
last one finished.

Raises ``ConfigError`` for impossible settings, ``StorageError`` when the source cannot be
read, ``PeerError`` when the nodes of a partitioned cache cannot reach or refuse each other,
and (while iterating) ``SampleError`` naming a bad sample.
"""


class Loader(_Engine):
    __doc__ = _HEAD + "\n".join(setting_line(s) for s in SETTINGS) + _TAIL

    def __new__(cls, source: Any, **settings: Any) -> Loader:
        bound = _SIGNATURE.bind(cls, source, **settings)
        given = {name: value for name, value in bound.arguments.items()
                 if name not in ("cls", "source") and value is not None}
        remote = given.get("remote")
        asked = dict(given)
        spec = _resolve(source, given)
        if spec.node_cache is not None and spec.share in (None, "off"):
            # The node agent, another process, joins at nostall's rendezvous instead.
            spec.node_store = _store.job_store()
        loader = super().__new__(cls, spec)
        if remote is not None:
            _remote.attach(loader, remote, source, asked)
        return loader


_SIGNATURE = _signature()
Loader.__new__.__signature__ = _SIGNATURE  # type: ignore[attr-defined]
