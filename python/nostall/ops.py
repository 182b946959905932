"""Operators of a pipeline, DALI and torchvision style: a list of them is a Loader's ``pipeline``.

>>> import nostall
>>> from nostall import ops
>>> loader = nostall.Loader("/data/imagenet/train", pipeline=[
...     ops.RandomResizedCrop(224),
...     ops.RandomHorizontalFlip(),
...     ops.RandomSolarize(threshold=128, p=0.2),
...     ops.Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
... ], dtype="float32", layout="CHW")

The geometric operators (``RandomResizedCrop``, ``Resize``, ``CenterCrop``,
``RandomHorizontalFlip``) are planned before decoding: nostall decodes only the region of
the image that the crop keeps and resizes once to the output size. The operators on
pixels (``ColorJitter``, ``GaussianBlur``, ``RandomRotation``, ``RandomAffine``, ...)
then run on the resized 8-bit image in the order written, each with its own random draws
from the sample's seed, one last pass normalises, converts and lays out the channels,
and ``RandomErasing`` erases the sample as delivered. So the geometric operators come
first, ``Normalize`` and ``RandomErasing`` last; the last sizing operator must give a
fixed size (a crop, or ``Resize((height, width))``) so that samples can be batched. A
torchvision or timm recipe is translated by :func:`from_torchvision`. ``Normalize`` needs ``dtype="float32"``; for ``dtype="uint8"`` leave it out and
normalise on the GPU.

The operators check their arguments when made and raise ``nostall.ConfigError`` (a
``ValueError``) naming the operator and the argument the engine cannot use (out of its
bounds, or of the wrong kind), ``TypeError`` for an object that is no argument at all.

Every class here is made from the engine's declaration of its operator (name,
parameters, defaults, docs): the engine is where an operator is defined, once.
"""

from __future__ import annotations

from typing import Any

from ._declared import operator_class
from ._nostall import Op, _image_operators

__all__ = ["Op"]


for _name, _doc, _params in _image_operators():
    globals()[_name] = operator_class(Op, __name__, _name, _doc, _params)
    __all__.append(_name)
__all__.sort()
del _name, _doc, _params


def from_torchvision(transform: Any) -> list[Op]:
    """nostall's operators for a torchvision (v1 or v2) or timm recipe: a ``Compose``, a
    transform, or a list of them (``Loader(pipeline=...)`` calls this itself). Raises
    ``nostall.ConfigError`` naming the first transform nostall does not have."""
    from ._translate import from_torchvision as translate

    return translate(transform)


__all__.append("from_torchvision")
__all__.sort()


from ._python_ops import Python  # noqa: E402  (the user's function: not an engine operator)

__all__.append("Python")
__all__.sort()
