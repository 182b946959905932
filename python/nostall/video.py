"""Operators of a video pipeline: a ``Clip`` first, then image operators for every frame.

>>> import nostall
>>> from nostall import ops, video
>>> loader = nostall.Loader("/data/kinetics/train", batch_size=8, pipeline=[
...     video.Clip(16, stride=2),
...     ops.Resize(256),
...     ops.RandomCrop(224),
...     ops.RandomHorizontalFlip(),
...     ops.Normalize((0.45, 0.45, 0.45), (0.225, 0.225, 0.225)),
... ])

``Clip`` says which frames of each video a sample holds (drawn from the seed, the epoch
and the sample, as every draw is); the image operators of ``nostall.ops`` after it run on
each frame with one draw per clip (the same crop, flip and jitter on every frame of a
clip: torchvision.transforms.v2's semantics on a video tensor). A batch is float32 (or
uint8 without ``Normalize``) ``[n, T, C, H, W]``, ``[n, C, T, H, W]`` with
``Clip(layout="CTHW")``, and ``[n, clips, ...]`` with several clips a video.

Videos are read from a folder of class folders (MP4, MOV, MKV, WebM, AVI: H.264, HEVC,
VP9, AV1, MPEG-4 Part 2) through FFmpeg's libraries. Each frame is the one at its index
in presentation order, as decoding the file from its start gives it.

Every class here is made from the engine's declaration of its operator (name,
parameters, defaults, docs): the engine is where an operator is defined, once.
"""

from __future__ import annotations

from ._declared import operator_class
from ._nostall import VideoOp as Op
from ._nostall import _video_operators

__all__ = ["Op"]

for _name, _doc, _params in _video_operators():
    globals()[_name] = operator_class(Op, __name__, _name, _doc, _params)
    __all__.append(_name)
__all__.sort()
del _name, _doc, _params
