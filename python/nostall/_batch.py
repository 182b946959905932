"""``Loader(batch_transform=fn)``: the user's function on each batch before it is handed
over (on the device, in the stager's stream, with ``device=``).

``fn(images, labels)`` returns the new ``(images, labels)``; with ``fields=``,
``fn(batch)`` takes the batch's dictionary and returns the new one. A function that takes a
``generator`` keyword gets one seeded by (seed, rank, epoch, batch): a
``torch.Generator`` on the batch's device, or a NumPy ``Generator`` for NumPy batches, so
that its draws are the same whatever the thread count and after a resume.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable


class BatchTransform:
    """``fn`` checked once, then called on each batch with its seed."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise TypeError(f"batch_transform: give a function of (images, labels), not {type(fn).__name__}")
        self.fn = fn
        self.name = getattr(fn, "__qualname__", type(fn).__name__)
        self.wants_generator = _takes_generator(fn)

    def __call__(self, images: Any, labels: Any, seed: int) -> tuple[Any, Any]:
        if self.wants_generator:
            out = self.fn(images, labels, generator=_generator(images, seed))
        else:
            out = self.fn(images, labels)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(f"batch_transform {self.name} returned {type(out).__name__}: return (images, labels)")
        return out

    def bound(self, seed: int) -> Callable[[Any, Any], tuple[Any, Any]]:
        """This transform for the batch of ``seed`` (for the device's stager)."""
        return lambda images, labels: self(images, labels, seed)

    def record(self, batch: dict[str, Any], seed: int, sample: str) -> dict[str, Any]:
        """On a batch of fields (``Loader(fields=...)``); its generator lives where the
        field ``sample`` (the pipeline's) does."""
        if self.wants_generator:
            out = self.fn(batch, generator=_generator(batch[sample], seed))
        else:
            out = self.fn(batch)
        if not isinstance(out, dict):
            raise TypeError(f"batch_transform {self.name} returned {type(out).__name__}: with fields=, "
                            "return the batch's dictionary")
        return out

    def bound_record(self, seed: int, sample: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """:meth:`record` for the batch of ``seed`` (for the device's stager)."""
        return lambda batch: self.record(batch, seed, sample)


def _takes_generator(fn: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "generator" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def _generator(images: Any, seed: int) -> Any:
    """A generator seeded by ``seed`` where the batch lives."""
    first = images[0] if isinstance(images, tuple) else images
    if type(first).__module__.startswith("torch"):
        import torch

        generator = torch.Generator(device=first.device)
        generator.manual_seed(seed)
        return generator
    import numpy as np

    return np.random.default_rng(seed)
