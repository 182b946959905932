"""A batch of records as the dictionary ``Loader(fields=...)`` returns: each field of
the batch's one buffer as its own tensor (or array), a view of that buffer, no copy.

The engine lays each sample's fields one after another in its slot, each at a multiple
of 8 bytes, so that every fixed field of a batch is a strided view of the ``[n, bytes]``
buffer: ``record[:, offset:offset + bytes]`` seen as its element type and shaped.
Text, JSON and bytes fields arrive as lists (read out of the same buffer by the engine);
JSON is parsed here, the engine having checked it is a document nested at most 128 deep.
"""

from __future__ import annotations

import json
from typing import Any, Sequence


class Split:
    """Makes a batch's dictionary; ``parts`` are ``(name, kind, offset, bytes, shape,
    dtype)`` each, as the engine's layout gives them."""

    def __init__(self, parts: Sequence[tuple[str, str, int, int, tuple[int, ...], str]]):
        self.parts = list(parts)
        #: The field of the loader's pipeline (the one ``tensor`` part): what a device
        #: stager finishes after the copy.
        self.sample = next(name for name, kind, *_ in self.parts if kind == "tensor")

    def __call__(self, record: Any, labels: Any, varying: dict[str, list[Any]]) -> dict[str, Any]:
        n = record.shape[0]
        out: dict[str, Any] = {}
        for name, kind, offset, size, shape, dtype in self.parts:
            if kind == "label":
                out[name] = labels
            elif kind in ("text", "bytes"):
                out[name] = varying[name]
            elif kind == "json":
                out[name] = [json.loads(text) for text in varying[name]]
            elif kind == "tokens":
                pairs = _as(record[:, offset : offset + size], "int64").reshape(n, 2, shape[0])
                out[name] = (pairs[:, 0], pairs[:, 1])
            else:
                out[name] = _as(record[:, offset : offset + size], dtype).reshape((n, *shape))
        return out


def _as(columns: Any, dtype: str) -> Any:
    """``columns`` (a uint8 view whose rows are contiguous) seen as ``dtype``."""
    module = type(columns).__module__
    if module.startswith("torch"):
        import torch

        return columns.view(getattr(torch, dtype))
    import numpy

    return columns.view(numpy.dtype(dtype))
