"""``nostall.DataLoader``: ``torch.utils.data.DataLoader``'s arguments over nostall's plan.

A map-style dataset is loaded one of two ways, and ``metrics["path"]`` says which and why:

- **native**: a torchvision ``ImageFolder`` (or ``DatasetFolder`` with the default image
  loader) whose ``transform`` nostall translates (``_translate.from_torchvision``), or a
  webdataset pipeline of PIL-decoded images, ``.cls`` labels and such a transform
  (``_webdataset``), is read by nostall's own readers and operators, no Python per sample;
- **user code**: anything else runs the dataset's ``__getitem__`` for nostall (a Hugging
  Face ``datasets.Dataset`` with ``set_transform`` too: its transform is a function, while
  ``nostall.Loader(dataset, pipeline=...)`` reads its Arrow data natively, ``_hf``)
  (``nostall.Loader(dataset)``): in worker processes under the GIL, in nostall's threads
  on a free-threaded interpreter (``workers=`` forces either).

Either way the order is nostall's plan (seeded shuffle, ranks, resume with
``state_dict``), and the batches are the same for any number of workers.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Literal

from ._errors import ConfigError


def _order(dataset: Any, shuffle: bool | None, sampler: Any, batch_sampler: Any,
           drop_last: bool) -> dict[str, Any]:
    """The plan's arguments for the DataLoader's order arguments."""
    if batch_sampler is not None:
        raise ConfigError("batch_sampler=: nostall plans the batches itself; give batch_size=, "
                          "shuffle= and drop_last= instead")
    if sampler is None:
        return dict(shuffle=bool(shuffle), drop_last=drop_last)
    if shuffle:
        raise ConfigError("sampler= and shuffle=True: give one of them (as the DataLoader asks)")
    kind = type(sampler).__name__
    if kind == "SequentialSampler":
        return dict(shuffle=False, drop_last=drop_last)
    if kind == "RandomSampler" and not sampler.replacement and sampler._num_samples is None:
        return dict(shuffle=True, drop_last=drop_last)
    if kind == "DistributedSampler":
        # The sampler's drop_last evens the ranks out; the DataLoader's drops partial batches.
        return dict(shuffle=sampler.shuffle, drop_last=drop_last, shard="drop" if sampler.drop_last else "pad",
                    rank=sampler.rank, world_size=sampler.num_replicas, seed=sampler.seed)
    raise ConfigError(f"sampler={kind}: nostall plans the order itself (a seeded shuffle, "
                      "ranks, resume); give shuffle= (and rank=, world_size=) instead")


def _native(dataset: Any) -> tuple[Any, str]:
    """``(pipeline, why)``: nostall's operators for an image folder dataset whose transform
    it translates, else ``None`` and the reason it runs the user's code."""
    kind = type(dataset).__name__
    from ._hf import is_hf_dataset, why_not_native

    if is_hf_dataset(dataset):
        why = why_not_native(dataset) or ("a datasets.Dataset without a transform gives PIL images: give "
                                          "nostall.Loader(dataset) a pipeline= to read it natively")
        return None, why
    datasets = __import__("sys").modules.get("torchvision.datasets")
    folder = datasets is not None and isinstance(dataset, datasets.DatasetFolder)
    if not folder:
        return None, f"the dataset is a {kind}, not a torchvision ImageFolder"
    from torchvision.datasets.folder import default_loader  # type: ignore[import-untyped]

    if dataset.loader is not default_loader:
        return None, f"{kind} reads its files with its own loader"
    if getattr(dataset, "target_transform", None) is not None:
        return None, f"{kind} has a target_transform"
    if dataset.transform is None:
        return None, f"{kind} has no transform (its samples are PIL images)"
    from ._translate import translate

    try:
        translate(dataset.transform)  # the Loader translates it again, with the dtype it delivers
        return dataset.transform, "translated"
    except ConfigError as e:
        return None, f"its transform cannot be translated: {e}"
    except TypeError:
        return None, f"its transform holds {_foreign(dataset.transform)}, not a torchvision or timm transform"


def _foreign(transform: Any) -> str:
    """The name of the first transform of `transform` that is not torchvision's or timm's."""
    from ._translate import _flatten

    for t in _flatten(transform):
        module = type(t).__module__
        if not module.startswith(("torchvision", "timm")):
            return f"{type(t).__name__} (from {module})"
    return type(transform).__name__


class DataLoader:
    """``torch.utils.data.DataLoader(dataset, batch_size, shuffle, sampler, num_workers,
    collate_fn, drop_last, worker_init_fn, generator, ...)`` with nostall underneath.

    - The order is nostall's: ``shuffle`` (or a ``RandomSampler``, ``SequentialSampler``,
      ``DistributedSampler``, which it reads) seeded by ``seed=``, else the
      ``generator``'s initial seed, else torch's (``torch.manual_seed`` makes it
      repeatable); a custom sampler or ``batch_sampler`` is a ``ConfigError``.
    - ``num_workers``: nostall's threads, and with the user's code under the GIL as many
      worker processes (forked when the loader is made, from a process that holds the
      dataset: nothing is pickled); ``workers="threads"`` or ``"processes"`` forces one.
    - ``collate_fn``: None (or ``default_collate``) gives each leaf of the samples stacked,
      a view of nostall's batch buffer; any other function is called with the batch's
      samples as a list.
    - ``timeout`` (seconds, 0: 300): a sample whose ``__getitem__`` takes longer fails as
      hung, its worker killed and started again.
    - ``on_error``: ``"error"`` (the default) or ``"skip"``: an exception in the user's
      code is the sample's ``SampleError`` (cause ``user-code``, its traceback), raised or
      skipped and counted.
    - ``state_dict()`` / ``load_state_dict()``, ``set_epoch``, ``metrics`` as
      ``nostall.Loader``'s; ``metrics["path"]`` is ``{"path": "native" | "user code",
      "why": ...}``.

    ``pin_memory``, ``prefetch_factor``, ``persistent_workers``, ``multiprocessing_context``
    and ``in_order`` are accepted for compatibility: nostall's buffers and workers persist,
    and batches come in order.
    """

    def __init__(self, dataset: Any, batch_size: int | None = 1, shuffle: bool | None = None,
                 sampler: Any = None, batch_sampler: Any = None, num_workers: int = 0,
                 collate_fn: Callable[[list[Any]], Any] | None = None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0, worker_init_fn: Callable[[int], None] | None = None,
                 multiprocessing_context: Any = None, generator: Any = None, *,
                 prefetch_factor: int | None = None, persistent_workers: bool = False,
                 pin_memory_device: str = "", in_order: bool = True, seed: int | None = None,
                 workers: Literal["auto", "threads", "processes"] = "auto", on_error: str = "error",
                 **loader_kwargs: Any):
        from . import Loader
        from ._webdataset import is_webdataset

        if is_webdataset(dataset):
            self._from_webdataset(dataset, batch_size, shuffle, num_workers, seed, generator, loader_kwargs)
            return
        if batch_size is None:
            raise ConfigError("batch_size=None (samples one at a time): nostall loads batches; "
                              "give a batch size")
        if num_workers < 0:
            raise ConfigError(f"num_workers={num_workers}: give 0 or more")
        order = _order(dataset, shuffle, sampler, batch_sampler, drop_last)
        if seed is None:
            seed = order.pop("seed", None)
        if seed is None:
            seed = _default_seed(generator)
        order.pop("seed", None)
        self.dataset = dataset
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.collate_fn = collate_fn
        common = dict(batch_size=batch_size, seed=seed % (1 << 63), threads=max(1, num_workers),
                      on_error=on_error, **order, **loader_kwargs)
        # One batch ready ahead of the one being made and the one the step holds (the
        # DataLoader's prefetch_factor batches per worker are samples in flight, which
        # nostall's threads take from the next batch as they finish).
        common.setdefault("prefetch", 1 if prefetch_factor is None else max(1, prefetch_factor - 1))
        pipeline, why = _native(dataset)
        if pipeline is not None and workers == "auto" and collate_fn is None:
            self._loader = Loader(dataset.root, pipeline=pipeline, **common)
            self._path = {"path": "native", "why": "an ImageFolder whose transform nostall translates"}
        else:
            if pipeline is not None:
                why = f"workers={workers!r} asks for the user's code" if workers != "auto" else \
                    "collate_fn= is the user's"
            self._loader = Loader(dataset, workers=workers, worker_init_fn=worker_init_fn,
                                  timeout=timeout or None, **common)
            self._path = {"path": "user code", "why": why,
                          "workers": self._loader.metrics["workers"]["mode"]}

    def _from_webdataset(self, pipeline: Any, batch_size: int | None, shuffle: bool | None,
                         num_workers: int, seed: int | None, generator: Any,
                         loader_kwargs: dict[str, Any]) -> None:
        """A webdataset pipeline: nostall's Loader over its shards when it translates
        (``_webdataset``), else a ``ConfigError`` naming the stage that keeps it from it."""
        from . import Loader
        from ._webdataset import translate

        kwargs, why = translate(pipeline)
        if kwargs is None:
            raise ConfigError(f"a webdataset pipeline nostall cannot read: {why}. nostall runs the user's "
                              "code for map-style datasets only; give nostall.Loader the shards' folder")
        if shuffle:
            raise ConfigError("shuffle=True with a webdataset pipeline: its shuffle() stage says it "
                              "(as the DataLoader refuses shuffle for an IterableDataset)")
        batched = kwargs.pop("batch_size", None)
        if (batched is None) == (batch_size is None):
            raise ConfigError("a webdataset pipeline is batched once: by its batched() stage with "
                              "batch_size=None, or by batch_size= without one")
        kwargs.setdefault("drop_last", False)
        if seed is None:
            seed = _default_seed(generator)
        source = kwargs.pop("source")
        size = batched if batched is not None else batch_size
        assert size is not None  # one of them is set (checked above)
        self.dataset, self.batch_size, self.num_workers, self.collate_fn = pipeline, size, num_workers, None
        self._loader = Loader(source, batch_size=size, seed=seed % (1 << 63), threads=max(1, num_workers),
                              **kwargs, **loader_kwargs)
        self._path = {"path": "native", "why": why}

    def __iter__(self) -> Iterator[Any]:
        for batch in self._loader:
            if self.collate_fn is None or _is_default_collate(self.collate_fn):
                yield batch
            else:
                yield self.collate_fn(_samples(batch))

    def __len__(self) -> int:
        return len(self._loader)

    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration run epoch `epoch` (its shuffle follows from the seed)."""
        self._loader.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """Where the loader stands (``nostall.Loader.state_dict``)."""
        return self._loader.state_dict()

    def load_state_dict(self, state: Any) -> None:
        """Resumes from ``state_dict()`` (``nostall.Loader.load_state_dict``)."""
        self._loader.load_state_dict(state)

    @property
    def metrics(self) -> dict[str, Any]:
        """``nostall.Loader.metrics``, with ``"path"``: which way the samples are made, and why."""
        return {**self._loader.metrics, "path": dict(self._path)}

    @property
    def loader(self) -> Any:
        """The ``nostall.Loader`` underneath."""
        return self._loader


def _default_seed(generator: Any) -> int:
    """The seed of a DataLoader given none: its ``generator``'s initial seed, else torch's
    (what the DataLoader's shuffle would draw from)."""
    import torch

    return int(generator.initial_seed() if generator is not None else torch.initial_seed())


def _is_default_collate(fn: Any) -> bool:
    return getattr(fn, "__name__", "") == "default_collate" and \
        getattr(fn, "__module__", "").startswith("torch.utils.data")


def _samples(batch: Any) -> list[Any]:
    """A batch of stacked leaves (or ``(images, labels)``) split into its samples."""
    from ._user_code import _index

    def n_of(b: Any) -> int:
        if isinstance(b, (tuple, list)):
            return n_of(b[0])
        if isinstance(b, dict):
            return n_of(next(iter(b.values())))
        return len(b)

    return [_index(batch, i) for i in range(n_of(batch))]
