"""Type stubs of nostall.ops: the operators of a pipeline (classes of the extension module)."""

from collections.abc import Sequence
from typing import final

from typing_extensions import disjoint_base

__all__ = [
    "CenterCrop",
    "Normalize",
    "Op",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "Resize",
]

@disjoint_base
class Op:
    """An operator of a pipeline: the base class of the operators of ``nostall.ops``.

    Operators are made by their subclasses and cannot be changed once made; a list of
    them is the ``pipeline`` of a ``nostall.Loader``. Two operators are equal when they
    do the same thing.
    """

    def __eq__(self, value: object, /) -> bool:
        """Whether ``value`` is an operator doing the same thing."""

@final
class RandomResizedCrop(Op):
    """Crops a random area and aspect ratio of the image and resizes it to ``size``
    (torchvision's ``RandomResizedCrop``, with the same random choices).

    - ``size``: output size, an int (square) or ``(height, width)``.
    - ``scale`` (``(0.08, 1.0)``): range of the crop's area as a fraction of the image's.
    - ``ratio`` (``(3/4, 4/3)``): range of the crop's aspect ratio (width / height).
    """

    def __new__(
        cls,
        size: int | Sequence[int],
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (0.75, 1.3333333333333333),
    ) -> RandomResizedCrop: ...
    @property
    def size(self) -> tuple[int, int]:
        """Output ``(height, width)``."""
    @property
    def scale(self) -> tuple[float, float]:
        """Range of the crop's area, as a fraction of the image's."""
    @property
    def ratio(self) -> tuple[float, float]:
        """Range of the crop's aspect ratio (width / height)."""

@final
class Resize(Op):
    """Resizes the image (bilinear, antialiased when shrinking).

    ``size``: an int resizes the shorter side to it, keeping the aspect ratio (follow it
    with ``CenterCrop`` for batches of one shape); ``(height, width)`` resizes to exactly
    that.
    """

    def __new__(cls, size: int | Sequence[int]) -> Resize: ...
    @property
    def size(self) -> int | tuple[int, int]:
        """The shorter side's new length (an int), or the exact ``(height, width)``."""

@final
class CenterCrop(Op):
    """Crops the centre of the image to ``size``: an int (square) or ``(height, width)``."""

    def __new__(cls, size: int | Sequence[int]) -> CenterCrop: ...
    @property
    def size(self) -> tuple[int, int]:
        """Output ``(height, width)``."""

@final
class RandomHorizontalFlip(Op):
    """Mirrors the image left to right with probability ``p`` (0.5)."""

    def __new__(cls, p: float = 0.5) -> RandomHorizontalFlip: ...
    @property
    def p(self) -> float:
        """Probability of mirroring."""

@final
class Normalize(Op):
    """Subtracts ``mean`` and divides by ``std``, per RGB channel, in [0, 1] units
    (pixel / 255), as torchvision's ``ToTensor`` then ``Normalize`` do. Needs
    ``dtype="float32"``."""

    def __new__(cls, mean: Sequence[float], std: Sequence[float]) -> Normalize: ...
    @property
    def mean(self) -> tuple[float, float, float]:
        """Per-channel mean (R, G, B), as the engine holds it (32-bit floats)."""
    @property
    def std(self) -> tuple[float, float, float]:
        """Per-channel standard deviation (R, G, B), as the engine holds it."""
