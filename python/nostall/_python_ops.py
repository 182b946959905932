"""``ops.Python(fn)``: the user's function on each sample, in the loader's threads (in
parallel on a free-threaded interpreter), anywhere after the geometric operators (images)
or the crop (audio).

Where it stands decides what ``fn(sample)`` gets, the sample as a torch tensor (a NumPy
array without torch, or with ``output="numpy"``) over memory of its own, written back to
the batch after the call (so a tensor ``fn`` keeps stays valid):

- images, followed by an operator on pixels or ``Normalize``: the 8-bit pixels as
  ``uint8[3, H, W]`` (what torchvision's tensor transforms take);
- audio, followed by ``MelSpectrogram``: the cut waveform as ``float32[channels, length]``;
- otherwise the sample as delivered (its type and layout, after the other operators).

``fn`` returns the new sample of the same shape and type, or ``None`` when it changed the
view in place. A function that takes a ``generator`` keyword gets one seeded by (seed,
epoch, sample, operator): its draws do not depend on the thread that ran it.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ._batch import _takes_generator


class Python:
    """Your own function on each sample: ``fn(sample)`` or ``fn(sample, generator=...)``
    returns the new sample (same shape and type) or ``None`` (changed in place). Images:
    after the geometric operators; it gets ``uint8[3, H, W]`` pixels where an operator on
    pixels or ``Normalize`` follows, else the sample as delivered. Audio: after the crop;
    the waveform where ``MelSpectrogram`` follows, else the sample as delivered. Video:
    last, on the whole clip as delivered (``[T, C, H, W]``, ``[C, T, H, W]``, with a
    leading axis of clips when a sample holds several)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise TypeError(f"ops.Python: give a function of the sample, not {type(fn).__name__}")
        self.fn = fn
        self.name = getattr(fn, "__qualname__", type(fn).__name__)
        self.wants_generator = _takes_generator(fn)

    def __repr__(self) -> str:
        return f"Python({self.name})"

    def _apply(self, seed: int, out: memoryview, shape: Sequence[int], dtype: str, torch: bool) -> None:
        """Runs the function with `seed` on the sample in `out` (bytes of `shape` values of
        `dtype`), giving it a torch tensor when `torch` (what the engine calls)."""
        kind = np.dtype(dtype)
        array = np.frombuffer(out, dtype=kind).reshape(shape)
        if torch:
            import torch as _torch

            sample: Any = _torch.from_numpy(array)
            generator: Any = _torch.Generator().manual_seed(seed & 0x7FFF_FFFF_FFFF_FFFF)
        else:
            sample = array
            generator = np.random.default_rng(seed)
        result = self.fn(sample, generator=generator) if self.wants_generator else self.fn(sample)
        if result is None or result is sample:
            return
        got = result.numpy() if type(result).__module__.startswith("torch") else np.asarray(result)
        if tuple(got.shape) != tuple(shape) or got.dtype != kind:
            raise ValueError(f"ops.Python({self.name}) returned {got.dtype}{list(got.shape)}: return the "
                             f"sample as it came, {kind}{list(shape)}")
        np.copyto(array, got)


#: The header the engine writes before a sample it sends a worker: ``ndim``, 6 dims,
#: the element type's number in ``HEADER_DTYPES`` (8 little-endian u64).
HEADER_BYTES = 64
HEADER_DTYPES = ("uint8", "float32")


class OpsJob:
    """What a worker process runs for ``ops.Python`` under the GIL: request ``index`` is the
    loader's ``index``-th function, on the sample after the header in its memory."""

    def __init__(self, ops: Sequence[Python], torch: bool):
        self.ops = list(ops)
        self.torch = torch

    def __call__(self, index: int, seed: int, memory: np.ndarray) -> None:
        from ._user_code import seed_all

        # The global generators too, in this process of its own: a function drawing from
        # them draws the same in any worker.
        seed_all(seed)
        ndim, *dims, code = memory[:HEADER_BYTES].view("<u8").tolist()
        shape = dims[:ndim]
        dtype = HEADER_DTYPES[code]
        size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        sample = memoryview(memory[HEADER_BYTES:HEADER_BYTES + size].data)
        self.ops[index]._apply(seed, sample, shape, dtype, self.torch)
