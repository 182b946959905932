"""Type stubs of the extension module nostall._nostall (the PyO3 bindings)."""

from collections.abc import Callable, Mapping, Sequence
from os import PathLike
from types import ModuleType
from typing import Any, Literal, final

from typing_extensions import disjoint_base

from . import audio
from .audio import Op as AudioOp
from .video import Op as VideoOp
from .ops import Op as Op

__all__ = [
    "__version__",
    "Loader",
    "Batches",
    "RemoteClient",
    "BatchTensor",
    "Op",
    "Mixup",
    "Tokenizer",
    "Field",
    "_connect",
    "_image_operators",
    "_translations",
    "_loader_settings",
    "_augment_draws",
    "_augment",
    "_crop_draws",
    "_perspective",
    "AudioOp",
    "_audio_operators",
    "VideoOp",
    "_video_operators",
    "imagenet_train",
    "imagenet_val",
    "demo_photos",
    "_run_agent",
    "_default_agent_socket",
    "_analyze",
    "_worker_wire",
]

__version__: str

#: The worker processes' wire (``nostall::prep::workers::wire``): ``magic`` (bytes), the
#: ``struct`` formats ``hello``, ``request`` and ``answer``, and ``max_message``.
_worker_wire: dict[str, Any]

@final
class BatchTensor:
    """One tensor of a batch (images or labels) as a DLPack producer.

    ``torch.from_dlpack(t)`` / ``numpy.from_dlpack(t)`` take its memory without copying;
    for images the memory is the loader's batch buffer, returned to the loader's pool
    when the consumer's array is freed. A ``BatchTensor`` can be exported once.
    """

    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """Exports the tensor as a ``"dltensor"`` capsule; the consumer takes ownership."""
    def __dlpack_device__(self) -> tuple[int, int]:
        """``(1, 0)``: DLPack's CPU device."""
    @property
    def data_ptr(self) -> int:
        """Address of the first element (for images: the loader's batch buffer)."""
    @property
    def shape(self) -> list[int]:
        """``[n, 3, h, w]`` (CHW) or ``[n, h, w, 3]`` (HWC) for images, ``[n, channels,
        samples]`` or ``[n, n_mels, frames]`` for audio, ``[n]`` for labels."""
    @property
    def dtype(self) -> str:
        """``"float32"``, ``"uint8"`` or ``"int64"``."""

@final
class Batches:
    """The batches of one ``iter(loader)``: iterating it again goes on where it stands."""
    def __iter__(self) -> Batches: ...
    def __next__(self) -> Any:
        """The next ``(images, labels)``: torch tensors, NumPy arrays or ``BatchTensor``s,
        depending on ``output``; with ``fields=``, a dictionary of the fields by name.
        The GIL is released while waiting."""

@disjoint_base
class Loader:
    """The engine's loader, made from the spec ``nostall.Loader`` resolves (``nostall._loader``
    subclasses it and documents every setting)."""

    def __new__(cls, spec: Any) -> Loader: ...
    def __len__(self) -> int:
        """Batches per epoch on this rank (when no sample is skipped)."""
    def __iter__(self) -> Batches:
        """Starts an epoch and returns a fresh iterator over its batches (the epoch set by
        ``set_epoch``, a ``load_state_dict`` position, consumed by the first epoch started
        after it, or the epoch after the last one finished). A later ``iter()`` starts its
        epoch again from the start, and an earlier iterator then raises."""
    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration run ``epoch`` from its start."""
    @property
    def epoch(self) -> int:
        """The epoch being iterated, or the one the next iteration runs."""
    def state_dict(self) -> dict[str, Any]:
        """``{"epoch", "batch", "sample", "rank", "identity", "skipped", "history"}``:
        resumes exactly after the last batch delivered, with the dataset and settings
        ``identity`` records, the epoch's skip counts by cause, and its stretches under
        other world sizes. Plain ints, lists and dicts."""
    def load_state_dict(self, state: dict[str, Any] | list[dict[str, Any]]) -> None:
        """Makes the next iteration resume from ``state_dict()``: one rank's, or a list of
        every rank's. With another world size than it was saved with, the rest of the
        epoch is re-sharded over this job's ranks, each sample once with the augmentation
        it would have had (one rank's state suffices unless a rank skipped samples in the
        epoch). Raises ``ConfigError`` naming what differs when it was saved with another
        dataset, seed, batch size, shard policy or pipeline."""
    @property
    def rank(self) -> int:
        """This process's rank (argument, else ``RANK``, else 0)."""
    @property
    def world_size(self) -> int:
        """Number of ranks (argument, else ``WORLD_SIZE``, else 1)."""
    @property
    def metrics_addr(self) -> str | None:
        """Where live metrics are served for Prometheus (``host:port``; the port chosen
        when ``:0`` was given), or None."""
    @property
    def local_rank(self) -> int:
        """Rank within the node (``LOCAL_RANK``, else the rank)."""
    @property
    def dataset_len(self) -> int:
        """Samples in the whole dataset, all ranks together."""
    @property
    def classes(self) -> list[str]:
        """Class names in label order (empty for a flat folder)."""
    @property
    def last_ids(self) -> list[int]:
        """Catalog ids of the samples of the batch last returned."""
    @property
    def buffers_allocated(self) -> int:
        """Batch buffers allocated so far: bounded by prefetch (twice while epochs overlap)
        plus the batches Python holds."""
    @property
    def memory_plan(self) -> dict[str, int] | None:
        """How ``memory=`` was split: budget, batch_buffers, readahead, groups, cache, prefetch."""
    @property
    def metrics(self) -> dict[str, Any]:
        """The current (or last) epoch's figures: ``images_per_s``, ``stall_s``,
        ``stall_fraction``, ``max_wait_s``, ``wall_s``, ``batches``, ``samples``,
        ``fetch`` / ``prep`` (threads, busy_s, items, bytes, per_thread_per_s,
        capacity_per_s), ``prep_starved_s``, ``cache`` (hits, misses, hit_bytes,
        miss_bytes, hit_rate, entries, used_bytes, capacity_bytes), ``storage`` (bytes,
        requests), ``readahead`` (window_bytes, peak_bytes, limit_bytes,
        reads_in_flight, read_time_s: the read time that bound followed, and ``tiers``:
        for memory, peer and storage, the next reads it served and its read time),
        ``skipped`` (by cause), ``skipped_total``,
        ``slowest`` (the 10 costliest samples: id, location, fetch_s, prep_s),
        ``slowest_shards`` (the 5 costliest tar shards: shard, samples, fetch_s, prep_s),
        ``buffers_allocated``; with ``cache_policy="partitioned"`` also ``partitioned``
        (since the node joined: local_samples, local_bytes, peer_samples, peer_bytes,
        storage_bytes, fallbacks, peer_downs, peer_mismatches, served_bytes,
        served_local_bytes: what the node's service sent its own other ranks over TCP; with
        ``share=`` these are the node's counters in the agent, for all its local ranks)."""
    def skipped(self) -> list[dict[str, Any]]:
        """Samples skipped in the current (or last) epoch: ``sample_id``, ``location``,
        ``cause``, ``detail`` (the first 1 000)."""
    def _serve_remote(self, host: str, port: int) -> str:
        """Serves this loader's batches to its job's trainers (a remote preparer); returns
        the address it listens on."""
    def _connect_remote(self, addresses: list[str], options: Mapping[str, Any]) -> RemoteClient:
        """Makes this loader's epochs with the preparers at ``addresses`` (each checked)."""

@final
class RemoteClient:
    """A trainer's client of its remote preparers (``remote=``)."""

    def set_addresses(self, addresses: list[str]) -> None:
        """Replaces the preparers' addresses."""
    @property
    def addresses(self) -> list[str]:
        """The preparers' addresses."""
    def stats(self) -> list[dict[str, Any]]:
        """Each preparer's figures: name, batches, duplicates, bytes, parts, busy_s,
        waited_s, failures, up."""
    def delivered(self) -> tuple[int, int, float]:
        """Batches, samples and seconds waited so far."""

@final
class Mixup:
    """MixUp and CutMix of each batch, in the engine, as timm's ``Mixup``."""

    def __new__(
        cls,
        mixup_alpha: float = 1.0,
        cutmix_alpha: float = 0.0,
        cutmix_minmax: tuple[float, float] | None = None,
        prob: float = 1.0,
        switch_prob: float = 0.5,
        mode: Literal["batch", "pair", "elem"] = "batch",
        correct_lam: bool = True,
        label_smoothing: float = 0.1,
        num_classes: int = 1000,
    ) -> Mixup: ...
    def __getnewargs_ex__(self) -> tuple[tuple[()], dict[str, Any]]: ...

@final
class Tokenizer:
    """A Hugging Face tokenizer run by nostall's engine, every text cut or padded to
    ``length`` ids."""

    def __new__(
        cls,
        tokenizer: str | PathLike[str] | Any,
        length: int = 77,
        *,
        pad_id: int | None = None,
        max_bytes: int = 65536,
    ) -> Tokenizer: ...
    @staticmethod
    def _from_json(json: str, length: int, pad_id: int | None, max_bytes: int) -> Tokenizer: ...
    def __reduce__(self) -> tuple[Any, tuple[str, int, int | None, int]]: ...
    @property
    def length(self) -> int:
        """The number of ids a text."""
    @property
    def pad_id(self) -> int:
        """The padding's id."""
    def __call__(self, texts: Sequence[str | bytes], *, output: Literal["torch", "numpy", "dlpack"] = "torch") -> tuple[Any, Any]:
        """``(input_ids, attention_mask)`` of ``texts``, each int64 ``[len(texts), length]``."""

@final
class Field:
    """One field of a sample, for ``Loader(fields={name: Field(...)})``: the members it
    is read from, its kind, its ``max_bytes``, a tokenizer for its text, a vector's
    ``length``, the ``arrays`` of an ``.npz`` archive, how a ``boxes`` field holds and
    sanitises its boxes, a ``mask`` field's ``fill``, or an ``audio`` field's
    ``sample_rate`` and ``channels``. With a list of pipelines (views), the image field
    is a tuple of one tensor a view and a ``boxes`` or ``mask`` field a tuple over the
    views, each item what the field gives for that view's pipeline alone."""

    def __new__(
        cls,
        members: str,
        *,
        kind: Literal["sample", "label", "text", "json", "bytes", "vector", "npz", "boxes", "mask", "audio"] | None = None,
        max_bytes: int | None = None,
        tokenizer: Tokenizer | None = None,
        keys: Sequence[str] | None = None,
        padded: bool = False,
        length: int | None = None,
        arrays: Mapping[str, int | tuple[int, ...]] | None = None,
        max_boxes: int | None = None,
        box_format: Literal["xyxy", "xywh", "cxcywh"] | None = None,
        stored_format: Literal["xyxy", "xywh", "cxcywh"] | None = None,
        label_subcolumn: str | None = None,
        normalized: bool | None = None,
        min_size: float | None = None,
        min_area: float | None = None,
        crowd: bool | None = None,
        masks: bool | Literal["bits"] | None = None,
        keypoints: int | None = None,
        keypoint_flip: Sequence[int] | None = None,
        fill: int | None = None,
        anchors: Literal["ssd300", "ssdlite320"] | None = None,
        sample_rate: int | None = None,
        channels: int | None = None,
    ) -> Field: ...
    def __getnewargs_ex__(self) -> tuple[tuple[str], dict[str, Any]]: ...

def _loader_settings() -> list[tuple[str, str, list[str], str | None, str, str]]:
    """The engine's loader settings: name, kind, choices, default text, what it takes, doc."""

def _connect(
    errors: ModuleType,
    ops: ModuleType,
    python_ops: ModuleType,
    user_code: ModuleType,
    fields: ModuleType,
    tokenizer: ModuleType,
    device: ModuleType,
) -> None:
    """Hands the extension the package's modules it calls back."""

def _image_operators() -> list[tuple[str, str, list[tuple[str, str, str, str | None, str]]]]:
    """The image operators' declarations: ``(name, doc, [(parameter, takes, gives, default
    or None, doc), ...])``, from which ``nostall.ops`` makes its classes."""

def _translations() -> list[
    tuple[str, str, str, list[tuple[str, str, str]], list[str], str | None]
]:
    """The torchvision and timm transforms the image operators' declarations translate:
    ``(operator, library, transform class, [(parameter, attribute, converter), ...],
    [attributes refused when set], translator or None)``, by which ``nostall._translate``
    translates recipes."""

def _audio_operators() -> list[tuple[str, str, list[tuple[str, str, str, str | None, str]]]]:
    """The audio operators' declarations, as ``_image_operators``'s, from which
    ``nostall.audio`` makes its classes."""

def _video_operators() -> list[tuple[str, str, list[tuple[str, str, str, str | None, str]]]]:
    """The video operators' declarations, as ``_image_operators``'s, from which
    ``nostall.video`` makes its classes."""

def _augment_draws(op: Op, seed: int, count: int, width: int, height: int) -> list[list[tuple[str, float]]]:
    """The augmentations an automatic augmentation draws for ``count`` samples of
    ``width`` x ``height``, each as the reference names it with its argument (tests)."""

def _augment(op: Op, name: str, value: float, image: bytes, width: int, height: int, seed: int = 0) -> list[int]:
    """One augmentation ``name`` with argument ``value`` of an automatic augmentation,
    applied to ``image`` (3 planes of ``width`` x ``height`` bytes) (tests)."""

def _crop_draws(op: Op, seed: int, count: int, width: int, height: int) -> list[tuple[float, float, float, float]]:
    """The regions (left, top, width, height) ``count`` samples of ``width`` x
    ``height`` read under the crop ``op``, drawn in turn from one seeded generator
    (tests)."""

def _perspective(
    endpoints: Sequence[int], interpolation: str = "bilinear", fill: Sequence[float] = ...,
) -> Op:
    """The perspective taking an image's corners to ``endpoints`` (x then y of the top
    left, top right, bottom right and bottom left corner): ``RandomPerspective`` with its
    draw pinned, as torchvision's functional ``perspective`` (tests)."""

def imagenet_train(size: int = 224) -> list[Op]:
    """The ImageNet training pipeline as operators: ``[RandomResizedCrop(size),
    RandomHorizontalFlip(), Normalize(ImageNet mean, std)]`` (``pipeline="train"``)."""

def imagenet_val(size: int = 224) -> list[Op]:
    """The ImageNet evaluation pipeline as operators: ``[Resize(round(size * 256 / 224)),
    CenterCrop(size), Normalize(ImageNet mean, std)]`` (``pipeline="val"``)."""

def _run_agent(
    socket: str | PathLike[str] | None = None,
    staging: str = "512MiB",
    lease: float = 2.0,
    idle: float = 60.0,
) -> bool:
    """Serves as the node agent until idle (``python -m nostall.agent``); False if another
    agent serves the socket."""

def _default_agent_socket() -> str:
    """Where this user's node agent listens."""

def demo_photos(directory: str | PathLike[str] | None = None) -> str:
    """Writes the built-in demo photographs (ImageFolder, 4 classes) and returns the folder."""

def _analyze(
    location: str,
    *,
    dataset: Any,
    settings: Sequence[tuple[str, str]],
    pipeline: Any,
    model_rate: float | None,
    step_ms: float | None,
    time_model: Callable[[list[int], str, int], tuple[float, str]] | None,
    budget: float,
    run_seconds: float,
    run_epochs: int,
    max_threads: int | None,
    warm: bool,
    throttle_mbps: float | None,
    latency_ms: float | None,
    rates: str | None,
    node_cache: str | None,
    network_gbps: float,
    progress: Callable[[str], object] | None,
    fields: Mapping[str, str | Field] | None = None,
    arrow: dict[str, Any] | None = None,
) -> tuple[str, str, str]:
    """The engine's side of ``nostall.analyze``: the report as ``(json, text, html)``.

    Every argument is keyword-only and required (``nostall.analyze`` gives the
    defaults). ``time_model(shape, dtype, num_classes)`` returns ``(images_per_s,
    what_was_timed)``; ``rates`` is the JSON text of an earlier report."""
