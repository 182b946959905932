"""A batch of records as the dictionary ``Loader(fields=...)`` returns: each field of
the batch's one buffer as its own tensor (or array), a view of that buffer, no copy.

The engine lays each sample's fields one after another in its slot, each at a multiple
of 8 bytes, so that every fixed field of a batch is a strided view of the ``[n, bytes]``
buffer: ``record[:, offset:offset + bytes]`` seen as its element type and shaped.
Text, JSON and bytes fields arrive as lists (read out of the same buffer by the engine);
JSON is parsed here, the engine having checked it is a document nested at most 128 deep.
An npz field's arrays lie one after another in its part, and it is a dict of them by
name, as a JSON field's chosen keys are. A boxes field's part holds its count (int64), the
image's size (int64 height and width), its boxes (float32 ``[max_boxes, 4]``), their labels
(int64 ``[max_boxes]``) and, where asked, SSD's targets, their keypoints (float32
``[max_boxes, keypoints, 3]``) and masks (uint8 ``[max_boxes, height, row_bytes]``): a list
of each sample's ``{"boxes", "labels", "size"(, ...)}`` (views cut to its count), or
padded, all whole. With a list of pipelines, the sample's field and each target field
(boxes, a mask) hold one part a view, one after another: a tuple over the views, each
item what the field gives for one pipeline.
"""

from __future__ import annotations

import json
import math
from typing import Any, Sequence

from . import _padding


class Split:
    """Makes a batch's dictionary; ``parts`` are ``(name, kind, offset, bytes, shape,
    dtype)`` each, as the engine's layout gives them (an ``arrays`` part's shape is each
    array's ``(name, dims)``, in order)."""

    def __init__(self, parts: Sequence[tuple[str, str, int, int, tuple[Any, ...], str]],
                 shapes: Sequence[tuple[str, Sequence[str], bool]] = ()):
        self.parts = list(parts)
        #: The JSON fields' chosen keys: such a field is a dict of one list a key.
        self.keys = {name: list(keys) for name, keys, _ in shapes if keys}
        #: The text, bytes and boxes fields given padded: ``(data, lengths)``, or the boxes'
        #: ``{"boxes", "labels", "count"}``.
        self.padded = {name for name, _, padded in shapes if padded}
        #: The field of the loader's pipeline (the one ``tensor`` part, or of a list of
        #: pipelines the ``views`` of tensors): what a device stager finishes after the
        #: copy, and where a batch transform's generator lives.
        self.sample = next(name for name, kind, _, _, shape, _ in self.parts
                           if kind == "tensor" or kind == "views" and shape[0][0] == "tensor")

    def __call__(self, record: Any, labels: Any, varying: dict[str, list[Any]], cut: Any = None) -> dict[str, Any]:
        """The dictionary; with ``cut`` (``pad_to_largest``: the engine's cut of this
        batch), its image and masks cut to the batch's largest image (``_padding``)."""
        n = record.shape[0]
        out: dict[str, Any] = {}
        for name, kind, offset, size, shape, dtype in self.parts:
            if kind == "label":
                out[name] = labels
            elif kind == "views":
                # One part a view: the views' images as the loader hands over views
                # without fields (a tuple), and each view's targets likewise.
                out[name] = tuple(self._fixed(record, name, *view) for view in shape)
            elif name in self.padded and kind != "boxes":
                lengths = _part(record, offset, 4, "uint8")
                data = record[:, offset + 4 : offset + size]
                out[name] = (data, _lengths(lengths))
            elif kind in ("text", "bytes"):
                out[name] = varying[name]
            elif kind == "json" and name in self.keys:
                documents = [json.loads(text) for text in varying[name]]
                out[name] = {key: [d[key] for d in documents] for key in self.keys[name]}
            elif kind == "json":
                out[name] = [json.loads(text) for text in varying[name]]
            else:
                out[name] = self._fixed(record, name, kind, offset, size, shape, dtype)
        if cut is not None:
            boxes = [(name, offset) for name, kind, offset, *_ in self.parts if kind == "boxes"]
            # Each image's height and width: the first boxes field's, as the engine read them.
            sizes = _part(record, boxes[0][1] + 8, 16, "int64").reshape(n, 2)
            out = _padding.cut(out, self.sample, [name for name, _ in boxes], sizes, cut)
        return out

    def _fixed(self, record: Any, name: str, kind: str, offset: int, size: int,
               shape: tuple[Any, ...], dtype: str) -> Any:
        """Field ``name``'s part of fixed size at ``offset`` of ``record``, of ``kind``."""
        n = record.shape[0]
        if kind == "boxes":
            return _boxes(record, offset, shape, name in self.padded)
        if kind == "tokens":
            pairs = _part(record, offset, size, "int64").reshape(n, 2, shape[0])
            return (pairs[:, 0], pairs[:, 1])
        if kind == "arrays":
            arrays, at = {}, offset
            for key, dims in shape:
                length = _ITEMSIZE[dtype] * math.prod(dims)
                arrays[key] = _part(record, at, length, dtype).reshape((n, *dims))
                at += length
            return arrays
        return _part(record, offset, size, dtype).reshape((n, *shape))


def _boxes(record: Any, offset: int, shape: tuple[int, ...], padded: bool) -> Any:
    """A boxes part at ``offset`` of ``record``, its ``shape`` the boxes a sample
    (``capacity``), the keypoints a box, the default boxes, then a mask's height, width and
    bytes a row (all 0 without masks).

    Padded: ``{"boxes": [n, capacity, 4], "labels": [n, capacity], "size": [n, 2],
    "count": [n]}``, and where asked ``"anchor_labels": [n, anchors]``, ``"anchor_boxes":
    [n, anchors, 4]``, ``"keypoints": [n, capacity, keypoints, 3]``, ``"masks": [n,
    capacity, height, row_bytes]``. Else a list of one dict a sample: its boxes, labels,
    keypoints and masks cut to its count, its size and anchors' targets whole."""
    n, (capacity, points, anchors, height, _, row_bytes) = record.shape[0], shape
    count = _part(record, offset, 8, "int64").reshape(n)
    boxes = _part(record, offset + 24, 16 * capacity, "float32").reshape(n, capacity, 4)
    labels = _part(record, offset + 24 + 16 * capacity, 8 * capacity, "int64")
    out = {"boxes": boxes, "labels": labels}
    at = offset + 24 + 24 * capacity
    whole = {"size": _part(record, offset + 8, 16, "int64").reshape(n, 2)}
    if anchors:
        whole["anchor_labels"] = _part(record, at, 8 * anchors, "int64")
        whole["anchor_boxes"] = _part(record, at + 8 * anchors, 16 * anchors, "float32").reshape(n, anchors, 4)
        at += 24 * anchors
    if points:
        out["keypoints"] = _part(record, at, 12 * points * capacity, "float32").reshape(n, capacity, points, 3)
        at += 12 * points * capacity
    if row_bytes:
        masks = record[:, at : at + capacity * height * row_bytes]
        out["masks"] = masks.reshape(n, capacity, height, row_bytes)
    if padded:
        return {**out, **whole, "count": count}
    counts = count.tolist()
    return [{**{key: value[i, :k] for key, value in out.items()}, **{key: value[i] for key, value in whole.items()}}
            for i, k in enumerate(counts)]


def _lengths(columns: Any) -> Any:
    """The little-endian ``u32`` lengths in ``columns`` (``[n, 4]`` uint8) as int64 ``[n]``."""
    wide = columns.long() if type(columns).__module__.startswith("torch") else columns.astype("int64")
    return wide[:, 0] | wide[:, 1] << 8 | wide[:, 2] << 16 | wide[:, 3] << 24


#: Bytes of an element of each type a field holds.
_ITEMSIZE = {"uint8": 1, "float32": 4, "int64": 8}


def _part(record: Any, offset: int, size: int, dtype: str) -> Any:
    """The columns ``offset:offset + size`` (bytes) of ``record`` (``[n, slot]`` uint8,
    contiguous) seen as ``dtype``: the whole record is viewed first (its slot and the
    part's offset are multiples of 8), then sliced, which every NumPy and torch allows."""
    item = _ITEMSIZE[dtype]
    if type(record).__module__.startswith("torch"):
        import torch

        typed = record.view(getattr(torch, dtype))
    else:
        import numpy

        typed = record.view(numpy.dtype(dtype))
    return typed[:, offset // item : (offset + size) // item]
