"""``ops.Python(fn)``: the user's function on each prepared sample, after nostall's
operators, run in the loader's threads (in parallel on a free-threaded interpreter).

``fn(sample)`` gets the sample's pixels (or frames) as a torch tensor (a NumPy array
without torch, or with ``output="numpy"``), a view of its slot in the batch buffer, and
returns the new sample of the same shape and type (or ``None`` when it changed the view
in place). A function that takes a ``generator`` keyword gets one seeded by (seed, epoch,
sample, operator): its draws do not depend on the thread that ran it.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ._batch import _takes_generator


class Python:
    """Your own function on each sample, after nostall's operators: ``fn(sample)`` or
    ``fn(sample, generator=...)`` returns the new sample (same shape and type) or
    ``None`` (changed in place). Put it last in ``pipeline=``; several may follow one
    another."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise TypeError(f"ops.Python: give a function of the sample, not {type(fn).__name__}")
        self.fn = fn
        self.name = getattr(fn, "__qualname__", type(fn).__name__)
        self.wants_generator = _takes_generator(fn)

    def __repr__(self) -> str:
        return f"Python({self.name})"


class Applier:
    """Runs a pipeline's ``ops.Python`` on one sample's slot (what the engine calls)."""

    def __init__(self, ops: Sequence[Python], shape: Sequence[int], dtype: str, torch: bool):
        self.ops = list(ops)
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.torch = torch

    def apply(self, k: int, seed: int, out: memoryview) -> None:
        """Runs operator `k` with `seed` on the sample in `out` (its slot's bytes)."""
        op = self.ops[k]
        array = np.frombuffer(out, dtype=self.dtype).reshape(self.shape)
        if self.torch:
            import torch

            sample: Any = torch.from_numpy(array)
            generator: Any = torch.Generator().manual_seed(seed & 0x7FFF_FFFF_FFFF_FFFF)
        else:
            sample = array
            generator = np.random.default_rng(seed)
        result = op.fn(sample, generator=generator) if op.wants_generator else op.fn(sample)
        if result is None or result is sample:
            return
        got = result.numpy() if type(result).__module__.startswith("torch") else np.asarray(result)
        if tuple(got.shape) != self.shape or got.dtype != self.dtype:
            raise ValueError(f"ops.Python({op.name}) returned {got.dtype}{list(got.shape)}: return the "
                             f"sample as it came, {self.dtype}{list(self.shape)}")
        np.copyto(array, got)
