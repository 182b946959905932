"""``nostall.analyze`` (DS-Analyzer) from Python, and ``nostall.time_model``.

The analysis itself is the engine's (``nostall analyze`` on the command line runs the
same code); what this module adds is G, the model's rate, measured by timing the user's
own training step on synthetic batches of the shape the loader would deliver.
"""

from __future__ import annotations

import html as _html
import json as _json
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from . import _hf, _loader, _nostall, _translate
from ._errors import ConfigError, StepError

if TYPE_CHECKING:
    import torch

    from .ops import Op

__all__ = ["AnalysisReport", "analyze", "time_model"]


class AnalysisReport(dict[str, Any]):
    """What :func:`nostall.analyze` found: the report's figures as a dict, and its renderings.

    The dict is the JSON report that ``nostall analyze --json`` writes (``json.dumps``
    gives it back): ``"version"``, ``"dataset"``, ``"configuration"``, ``"model"`` (G and
    how it was obtained), ``"rates"`` (``"prep"``: P(1), P(2), … in samples/s;
    ``"storage_bytes_per_s"``; ``"cache"``; ``"model"``: G, ``None`` without a model),
    ``"measurements"`` (F, P(n) and C with their spreads; ``None`` when the rates came
    from an earlier report), ``"prediction"``, ``"observation"`` and ``"observed"`` (the
    real run; ``None`` without one), ``"what_if"`` and ``"advice"`` (with ``"remote"``: the
    remote cores that would remove a prep stall, at the receive cost measured for
    ``remote=``; ``None`` without a model). docs/analyze.md explains every figure.

    Attributes:
        text: the summary ``nostall analyze`` prints (also ``str(report)``).
        html: the self-contained HTML page with the verdict and the charts (a notebook
            shows it inline).
    """

    text: str
    html: str

    def __init__(self, data: Mapping[str, Any], *, text: str = "", html: str = "") -> None:
        super().__init__(data)
        self.text = text
        self.html = html

    @property
    def verdict(self) -> str:
        """The verdict in plain words: what limits training and what would remove the wait."""
        return str(self["advice"]["verdict"])

    @property
    def bottleneck(self) -> Literal["fetch", "prep", "model"]:
        """What the prediction says limits training: ``"fetch"``, ``"prep"`` or ``"model"``."""
        value: Literal["fetch", "prep", "model"] = self["prediction"]["bottleneck"]
        return value

    @property
    def predicted_images_per_s(self) -> float:
        """The predicted throughput of the configuration analysed, samples/s."""
        return float(self["prediction"]["throughput"])

    @property
    def measured_images_per_s(self) -> float | None:
        """The throughput of the real run (steady state), samples/s; ``None`` without one."""
        observed = self.get("observed")
        return None if observed is None else float(observed["images_per_s"])

    @property
    def model_rate(self) -> float | None:
        """G, the model's rate in samples/s; ``None`` when the input pipeline was analysed alone."""
        rate = self["rates"]["model"]
        return None if rate is None else float(rate)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        measured = self.measured_images_per_s
        return (
            f"<nostall.AnalysisReport of {self.get('dataset')!r}: predicted "
            f"{self.predicted_images_per_s:.0f} samples/s, limited by {self.bottleneck}"
            + ("" if measured is None else f"; measured {measured:.0f} samples/s")
            + ">"
        )

    def _repr_html_(self) -> str:
        # In a frame, so that the page's styles and script stay out of the notebook's.
        return (
            f'<iframe srcdoc="{_html.escape(self.html, quote=True)}" '
            'style="width: 100%; height: 900px; border: 0"></iframe>'
        )


def _import_torch(what: str) -> Any:
    try:
        import torch
    except ImportError as e:
        raise ModuleNotFoundError(
            f"{what} times a PyTorch training step and needs PyTorch: pip install torch",
            name="torch",
        ) from e
    return torch


def _positive_int(name: str, value: int, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} takes an int, not {value!r}")
    if value < minimum:
        raise ConfigError(f"{name}={value}: give {minimum} or more")
    return value


def _synchronize(torch: Any, device: Any) -> None:
    """Waits for the work queued on ``device``, and on CUDA whenever the step has used it
    (a step may move CPU batches to the GPU itself)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type != "cpu":
        backend = getattr(torch, device.type, None)
        synchronize = getattr(backend, "synchronize", None)
        if synchronize is not None:
            synchronize()
    if device.type != "cuda" and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _time_step(
    torch: Any,
    step: Callable[[Any, Any], object],
    shape: Sequence[int],
    dtype: Any,
    num_classes: int,
    device: Any,
    warmup: int,
    steps: int,
) -> tuple[float, str]:
    """Times ``step`` on a synthetic batch of images of ``shape``: (images/s, what was timed)."""
    generator = torch.Generator().manual_seed(0)
    batch = shape[0]
    if dtype == torch.uint8:
        images = torch.randint(0, 256, tuple(shape), dtype=torch.uint8, generator=generator)
    else:
        # Roughly what a normalising pipeline delivers: zero mean, unit variance.
        images = torch.randn(tuple(shape), generator=generator).to(dtype)
    labels = torch.randint(0, num_classes, (batch,), dtype=torch.int64, generator=generator)
    if device is not None:
        try:
            device = torch.device(device)
            images, labels = images.to(device), labels.to(device)
        except (RuntimeError, AssertionError, TypeError) as e:
            raise ConfigError(f"device={device!r}: {e}") from e
    device = images.device
    dtype_name = str(dtype).removeprefix("torch.")
    described = (
        f"images {dtype_name} {list(shape)} and labels int64 [{batch}] in [0, {num_classes}) "
        f"on {device}"
    )

    def call() -> float:
        started = time.perf_counter()
        try:
            step(images, labels)
            _synchronize(torch, device)
        except Exception as e:
            raise StepError(
                f"the training step raised {type(e).__name__} on a synthetic batch "
                f"({described}): {e}"
            ) from e
        return time.perf_counter() - started

    for _ in range(warmup):
        call()
    seconds = statistics.median(call() for _ in range(steps))
    rate = batch / max(seconds, 1e-9)
    what = (
        f"your training step on synthetic batches of {batch} × "
        f"{'×'.join(str(d) for d in shape[1:])} {dtype_name} on {device}, "
        f"median of {steps} steps"
    )
    return rate, what


def _torch_dtype(torch: Any, dtype: Any) -> Any:
    value = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
    if not isinstance(value, torch.dtype) or not (value.is_floating_point or value == torch.uint8):
        raise ConfigError(
            f"dtype={dtype!r}: give a floating-point dtype (\"float32\", torch.float16, …) or "
            "\"uint8\", as the loader would deliver"
        )
    return value


def time_model(
    step: Callable[[Any, Any], object],
    *,
    batch_size: int = 64,
    image_size: int | tuple[int, int] = 224,
    dtype: str | torch.dtype = "float32",
    layout: Literal["CHW", "HWC"] = "CHW",
    num_classes: int = 1000,
    device: str | torch.device | None = None,
    warmup: int = 3,
    steps: int = 10,
) -> float:
    """Times a training step on synthetic batches and returns the model's rate, samples/s.

    ``step(images, labels)`` is the user's training step (forward, backward, optimiser
    step); it is called ``warmup`` times, untimed (lazy initialisation, autotuning), then
    ``steps`` times, each timed on its own, and the rate is ``batch_size`` divided by
    the **median** step time. The median, not the total: a shared machine's hiccups (a
    garbage collection, another process) would otherwise count as model time, and the
    analysis wants the model's steady rate. Each timed step ends with a synchronisation
    of the device the batch is on (and of CUDA whenever the step has used it), so that
    the GPU's queued work is counted; most training loops synchronise every step anyway
    (``loss.item()``).

    The batch is what a nostall loader would deliver: ``images`` of shape
    ``[batch_size, 3, height, width]`` (``layout="HWC"``: ``[batch_size, height,
    width, 3]``), float32 values of zero mean and unit variance (like normalised images;
    ``dtype="uint8"``: 0-255), and ``labels``, int64 in ``[0, num_classes)``. Without
    ``device`` the tensors are on the CPU, as the loader delivers them, and the step's own
    copy to the GPU is timed with it; with ``device`` (e.g. ``"cuda"``) they are made
    there, and only the computation is timed.

    Give the result to :func:`nostall.analyze` as ``model_rate``, or give the step itself
    as ``model``.

    Raises ``ModuleNotFoundError`` without PyTorch, ``ConfigError`` for impossible
    arguments, and :class:`StepError` (its ``__cause__`` the step's exception) when the
    step raises.
    """
    torch = _import_torch("nostall.time_model")
    if not callable(step):
        raise TypeError(f"step takes a callable step(images, labels), not {step!r}")
    _positive_int("batch_size", batch_size, 1)
    _positive_int("num_classes", num_classes, 1)
    _positive_int("warmup", warmup, 0)
    _positive_int("steps", steps, 1)
    if isinstance(image_size, int):
        height = width = image_size
    else:
        height, width = image_size
    _positive_int("image_size", height, 1)
    _positive_int("image_size", width, 1)
    if layout.upper() == "CHW":
        shape = [batch_size, 3, height, width]
    elif layout.upper() == "HWC":
        shape = [batch_size, height, width, 3]
    else:
        raise ConfigError(f"layout={layout!r}: use \"CHW\" or \"HWC\"")
    rate, _ = _time_step(
        torch, step, shape, _torch_dtype(torch, dtype), num_classes, device, warmup, steps
    )
    return rate


def _analyzed_source(source: Any) -> tuple[str, Any, Any]:
    """The location analyze reads, the Dataset object whose ``__getitem__`` it runs, and
    the columns of a ``datasets.Dataset`` read natively."""
    if isinstance(source, (list, tuple)):
        raise ConfigError("analyze measures one dataset: give one location (or Dataset)")
    if not _loader.is_path(source) and hasattr(source, "__getitem__") and hasattr(source, "__len__"):
        arrow = _hf.native_columns(source)
        return type(source).__name__, source if arrow is None else None, arrow
    return os.fsdecode(source), None, None


def analyze(
    source: str | os.PathLike[str] | Any,
    *,
    model: Callable[[Any, Any], object] | None = None,
    model_rate: float | None = None,
    step_ms: float | None = None,
    device: str | torch.device | None = None,
    batch_size: int = 64,
    pipeline: str | Sequence[Op] | None = None,
    image_size: int | None = None,
    dtype: Literal["float32", "uint8"] = "float32",
    layout: Literal["CHW", "HWC"] = "CHW",
    threads: int = 2,
    fetch_threads: int = 2,
    cache: str | float | int | None = None,
    cache_policy: Literal["minio", "lru", "none"] = "minio",
    on_error: Literal["error", "skip"] = "error",
    budget: float = 20.0,
    run_seconds: float = 10.0,
    run_epochs: int = 0,
    max_threads: int | None = None,
    warm: bool = False,
    throttle_mbps: float | None = None,
    latency_ms: float | None = None,
    rates: AnalysisReport | Mapping[str, Any] | str | os.PathLike[str] | None = None,
    node_cache: str | float | None = None,
    network_gbps: float = 10.0,
    json: str | os.PathLike[str] | None = None,
    html: str | os.PathLike[str] | None = None,
    seed: int = 0,
    progress: Callable[[str], object] | None = None,
    fields: Mapping[str, Any] | None = None,
) -> AnalysisReport:
    """Where training waits for data, and what would fix it: ``nostall analyze`` from Python.

    Measures F (cold reads from ``source``), P(n) (prep with the data in memory, for 1 to
    ``max_threads`` threads) and C (cache hits) within ``budget`` seconds, predicts the
    throughput and the split of epoch time into compute, prep stall and fetch stall,
    runs the loader as configured for ``run_seconds`` beside a simulated model at rate G,
    and says what would remove the wait (docs/analyze.md). Returns an
    :class:`AnalysisReport`; ``print(report)`` shows the summary.

    G, the model's rate, is given one way at most:

    - ``model``: the training step ``step(images, labels)``, timed with
      :func:`time_model` on synthetic batches of this configuration's shape, element type
      and number of classes, on ``device`` (see :func:`time_model`);
    - ``model_rate``: samples/s (e.g. from :func:`time_model` with settings of your own);
    - ``step_ms``: a simulated model taking this many milliseconds per batch
      (``step_ms=batch_size`` is the command line's default, 1 ms per image);
    - none of them: the input pipeline alone (the command line's ``--no-model``). Unlike
      the command line, which simulates a model by default, Python analyses no model
      unless given one: a made-up G would make a verdict about a model that is not yours.

    ``source`` is a dataset's location, or a map-style ``Dataset`` object as ``Loader``
    takes one: its ``__getitem__`` runs in worker processes (``max_threads`` of them; F
    is then nothing to fetch, and its reads are timed as prep in P(n)), with ``model_rate``
    or ``step_ms`` for G; a Hugging Face ``datasets.Dataset`` without a transform is read
    from its Arrow buffers, with ``pipeline``.

    The configuration analysed takes ``Loader``'s arguments, with the same meaning:
    ``batch_size``, ``pipeline`` (``"train"``, the default, ``"val"`` or a list of
    ``nostall.ops``),
    ``image_size``, ``dtype``, ``layout``, ``threads`` (prep threads, 2),
    ``fetch_threads`` (2), ``cache`` and ``cache_policy``, ``on_error``, ``fields`` (samples
    as records of named fields: their reads and prep, the captions' tokenization included,
    are what is measured; the model then as ``model_rate`` or ``step_ms``); one rank
    reading the whole dataset, shuffled with ``seed``.

    How the analysis runs (as the command line's options of the same names):

    - ``budget`` (20): seconds for the measurements together (at least 0.5); a fifth
      for F, the rest for P(n).
    - ``run_seconds`` (10), ``run_epochs`` (0): the real run's length, and the fewest
      epochs it runs after the cache's first; ``run_seconds=0`` skips the real run.
    - ``max_threads`` (None: the number of cores): P(n) is measured for n = 1 … this.
    - ``warm`` (False): read through the page cache instead of cold.
    - ``throttle_mbps``, ``latency_ms``: emulate slower storage in front of ``source``.
    - ``rates``: reuse the rates of an earlier report (an :class:`AnalysisReport`, its
      dict, or the path of its JSON file) instead of measuring; G still comes from this
      call. With ``run_seconds=0`` this takes no time: what-if questions for free.
    - ``node_cache`` (None: the configured cache, else 25%), ``network_gbps`` (10): the
      node sweep's cache per node (a share: ``"25%"`` or 0.25) and network.
    - ``json``, ``html``: write the JSON report and the HTML page there (nothing is
      written without them).
    - ``progress``: called with each line of progress (e.g. ``progress=print``).

    The GIL is released while the engine measures and runs. Raises ``ConfigError`` for
    impossible settings (before measuring anything), ``StorageError`` when ``source``
    cannot be read, ``SampleError`` for a bad sample under ``on_error="error"``,
    :class:`StepError` when ``model`` raises, ``ModuleNotFoundError`` for ``model``
    without PyTorch.
    """
    if model is not None and not callable(model):
        raise TypeError(f"model takes a callable step(images, labels), not {model!r}")
    if device is not None and model is None:
        raise ConfigError("device is where the training step given as model= is timed: give model too")
    time_hook: Callable[[list[int], str, int], tuple[float, str]] | None = None
    if model is not None:
        torch = _import_torch("nostall.analyze(model=...)")
        step = model

        def timer(shape: list[int], dtype: str, num_classes: int) -> tuple[float, str]:
            return _time_step(
                torch, step, shape, _torch_dtype(torch, dtype), num_classes, device, 3, 10
            )

        time_hook = timer

    rates_json: str | None
    if rates is None:
        rates_json = None
    elif isinstance(rates, Mapping):
        rates_json = _json.dumps(dict(rates))
    elif isinstance(rates, (str, os.PathLike)):
        rates_json = Path(rates).read_text(encoding="utf-8")
    else:
        raise TypeError(
            f"rates takes an AnalysisReport, its dict, or the path of its JSON file, not {rates!r}"
        )
    location, dataset, arrow = _analyzed_source(source)
    if fields is not None and time_hook is not None:
        raise ConfigError("analyze times a training step on synthetic images: with fields=, give the model as "
                          "model_rate or step_ms")
    if dataset is not None:
        refused = [(pipeline is not None, "pipeline= (its transform is its own)"),
                   (image_size is not None, "image_size="), (fields is not None, "fields="),
                   (model is not None, "model= (timed on batches of images; give model_rate or step_ms)")]
        for given, what in refused:
            if given:
                raise ConfigError(f"analyze of a Dataset object with {what} is not supported")
    if cache_policy == "partitioned":
        raise ConfigError('analyze measures one node: give the node\'s cache with cache_policy "minio", and '
                          "node_cache to predict a cache partitioned over more nodes")
    settings: dict[str, Any] = {
        "batch_size": batch_size, "dtype": dtype, "layout": layout, "seed": seed, "threads": threads,
        "fetch_threads": fetch_threads, "on_error": on_error,
        # One node reading the whole dataset; the node sweep predicts for more.
        "rank": 0, "world_size": 1,
    }
    if image_size is not None:
        settings["image_size"] = image_size
    if cache is not None:
        settings.update(cache=cache, cache_policy=cache_policy)
    report_json, text, page = _nostall._analyze(
        location,
        dataset=dataset,
        settings=_loader.texts(settings),
        pipeline=None if pipeline is None else _translate.resolve(pipeline, None)[0],
        model_rate=model_rate,
        step_ms=step_ms,
        time_model=time_hook,
        budget=budget,
        run_seconds=run_seconds,
        run_epochs=run_epochs,
        max_threads=max_threads,
        warm=warm,
        throttle_mbps=throttle_mbps,
        latency_ms=latency_ms,
        rates=rates_json,
        node_cache=None if node_cache is None else _loader.texts({"cache": node_cache})[0][1],
        network_gbps=network_gbps,
        progress=progress,
        fields=fields,
        arrow=arrow,
    )
    if json is not None:
        Path(json).write_text(report_json, encoding="utf-8")
    if html is not None:
        Path(html).write_text(page, encoding="utf-8")
    return AnalysisReport(_json.loads(report_json), text=text, html=page)
