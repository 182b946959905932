"""Type stubs of nostall.video: the operators of a video pipeline.

Written by python/write_ops_stub.py from the engine's declarations: do not edit.
"""

from collections.abc import Sequence
from typing import Any, final

from typing_extensions import disjoint_base

__all__ = [
    "Clip",
    "Op",
]

@disjoint_base
class Op:
    """An operator of a video pipeline: the base class of the operators of
    ``nostall.video``.

    Operators are made by their subclasses and cannot be changed once made; a list of
    them is the ``pipeline`` of a ``nostall.Loader``. Two operators are equal when they
    do the same thing.
    """

    def __new__(cls, name: str, args: Sequence[Any], kwargs: dict[str, Any] | None) -> Op: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def _arg(self, name: str) -> Any: ...
    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]: ...

@final
class Clip(Op):
    """The frames of a video a sample holds: ``frames`` frames, ``stride`` frames apart, or
    ``1/fps`` seconds apart by presentation time (variable frame rates included).
    ``sampler`` places the clip: 'random' (uniform over the places it fits, torchvision's
    RandomClipSampler), 'center' (the middle), 'uniform' (``clips`` clips evenly spaced from
    the first frame to the last, torchvision's UniformClipSampler), 'segments' (the video
    cut in ``frames`` equal segments, a random frame of each: TSN's training) or 'spread'
    (each segment's middle frame: VideoMAE's and TSN's evaluation). A video shorter than the
    clip repeats its last frame. The image operators after it run on every frame, with one
    draw per clip: the same crop, flip and jitter on each of its frames.

    - ``frames``: frames a clip holds, 1 to 1024.
    - ``stride`` (``1``): frames of the video from one of the clip's to the next (1:
      consecutive).
    - ``fps`` (``None``): frames a second of the clip, by presentation time (instead of
      ``stride``).
    - ``sampler`` (``'random'``): 'random', 'center', 'uniform', 'segments' or 'spread'.
    - ``clips`` (``1``): clips of each video a sample holds (more than one: a leading
      dimension).
    - ``layout`` (``'TCHW'``): 'TCHW' (frames first, torchvision's video tensors) or 'CTHW'
      (channels first, for 3D convolutions).
    """

    def __new__(cls, frames: int, stride: int = 1, fps: float | None = None, sampler: str = 'random', clips: int = 1, layout: str = 'TCHW') -> Clip: ...
    @property
    def frames(self) -> int:
        """Frames a clip holds, 1 to 1024."""
    @property
    def stride(self) -> int:
        """Frames of the video from one of the clip's to the next (1: consecutive)."""
    @property
    def fps(self) -> float | None:
        """Frames a second of the clip, by presentation time (instead of ``stride``)."""
    @property
    def sampler(self) -> str:
        """'random', 'center', 'uniform', 'segments' or 'spread'."""
    @property
    def clips(self) -> int:
        """Clips of each video a sample holds (more than one: a leading dimension)."""
    @property
    def layout(self) -> str:
        """'TCHW' (frames first, torchvision's video tensors) or 'CTHW' (channels first, for 3D convolutions)."""
