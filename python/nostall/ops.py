"""Operators of a pipeline, DALI and torchvision style: a list of them is a Loader's ``pipeline``.

>>> import nostall
>>> from nostall import ops
>>> loader = nostall.Loader("/data/imagenet/train", pipeline=[
...     ops.RandomResizedCrop(224),
...     ops.RandomHorizontalFlip(),
...     ops.Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
... ], dtype="float32", layout="CHW")

The geometric operators (``RandomResizedCrop``, ``Resize``, ``CenterCrop``,
``RandomHorizontalFlip``) are planned before decoding: nostall decodes only the region of
the image that the crop keeps, resizes once to the output size, then flips, normalises,
converts and lays out the channels in one pass. The last sizing operator must give a
fixed size (a crop, or ``Resize((height, width))``) so that samples can be batched.
``Normalize`` needs ``dtype="float32"``; for ``dtype="uint8"`` leave it out and normalise
on the GPU.

The operators check their arguments when made and raise ``nostall.ConfigError`` (a
``ValueError``) for values the engine cannot use, ``TypeError`` for the wrong kind.
"""

from __future__ import annotations

from ._nostall import CenterCrop, Normalize, Op, RandomHorizontalFlip, RandomResizedCrop, Resize

__all__ = [
    "CenterCrop",
    "Normalize",
    "Op",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "Resize",
]
