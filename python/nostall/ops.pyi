"""Type stubs of nostall.ops: the operators of a pipeline.

Written by python/write_ops_stub.py from the engine's declarations: do not edit.
"""

from collections.abc import Callable, Sequence
from typing import Any, final

from typing_extensions import disjoint_base

__all__ = [
    "AugMix",
    "AutoAugment",
    "CenterCrop",
    "ColorJitter",
    "Compose",
    "DetrRandomResize",
    "FixedSizeCrop",
    "GaussianBlur",
    "MultiScaleCrop",
    "Normalize",
    "Op",
    "Pad",
    "Python",
    "RandAugment",
    "RandomAdjustSharpness",
    "RandomAffine",
    "RandomApply",
    "RandomAutocontrast",
    "RandomChoice",
    "RandomCrop",
    "RandomEqualize",
    "RandomErasing",
    "RandomGrayscale",
    "RandomHorizontalFlip",
    "RandomInvert",
    "RandomIoUCrop",
    "RandomOrder",
    "RandomPerspective",
    "RandomPhotometricDistort",
    "RandomPosterize",
    "RandomResize",
    "RandomResizedCrop",
    "RandomRotation",
    "RandomShortestSize",
    "RandomSizeCrop",
    "RandomSolarize",
    "RandomVerticalFlip",
    "RandomZoomOut",
    "Resize",
    "ScaleJitter",
    "TimmRandAugment",
    "TimmRandomErasing",
    "TrivialAugmentWide",
    "VideoMAERandomErasing",
    "from_torchvision",
]

@disjoint_base
class Op:
    """An operator of a pipeline: the base class of the operators of ``nostall.ops``.

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
class RandomResizedCrop(Op):
    """Crops a random area and aspect ratio of the image and resizes it to ``size``
    (torchvision's ``RandomResizedCrop``, with the same random choices: ten tries, then the
    centre). nostall decodes only the cropped region of a JPEG, at the smallest sufficient
    scale.

    - ``size``: output size, an int (square) or ``(height, width)``.
    - ``scale`` (``(0.08, 1.0)``): range of the crop's area, as a fraction of the image's.
    - ``ratio`` (``(0.75, 1.3333333333333333)``): range of the crop's aspect ratio (width /
      height).
    - ``interpolation`` (``'bilinear'``): ``'bilinear'``, ``'bicubic'`` (PIL's and
      torchvision's antialiased filters) or ``'nearest'``.
    - ``antialias`` (``True``): antialiasing when shrinking (torchvision.transforms.v2's
      default); ``False`` with ``'bilinear'`` interpolates the two nearest pixels at any
      scale, as torch's ``F.interpolate`` (torchvision's video classification recipe).
    """

    def __new__(cls, size: int | tuple[int, int] | list[int], scale: tuple[float, float] | list[float] = (0.08, 1.0), ratio: tuple[float, float] | list[float] = (0.75, 1.3333333333333333), interpolation: str = 'bilinear', antialias: bool = True) -> RandomResizedCrop: ...
    @property
    def size(self) -> tuple[int, int]:
        """Output size, an int (square) or ``(height, width)``."""
    @property
    def scale(self) -> tuple[float, float]:
        """Range of the crop's area, as a fraction of the image's."""
    @property
    def ratio(self) -> tuple[float, float]:
        """Range of the crop's aspect ratio (width / height)."""
    @property
    def interpolation(self) -> str:
        """``'bilinear'``, ``'bicubic'`` (PIL's and torchvision's antialiased filters) or ``'nearest'``."""
    @property
    def antialias(self) -> bool:
        """Antialiasing when shrinking (torchvision.transforms.v2's default); ``False`` with ``'bilinear'`` interpolates the two nearest pixels at any scale, as torch's ``F.interpolate`` (torchvision's video classification recipe)."""

@final
class Resize(Op):
    """Resizes the image (torchvision.transforms.v2's ``Resize``, antialiased when shrinking).
    Like the crops it only plans the geometry: the one resize of a sample happens once the
    crop is known, with the last resizing operator's interpolation.

    - ``size``: an int resizes the shorter side to it, keeping the aspect ratio (follow it
      with ``CenterCrop`` for batches of one shape); ``(height, width)`` resizes to exactly
      that.
    - ``interpolation`` (``'bilinear'``): ``'bilinear'``, ``'bicubic'`` (PIL's and
      torchvision's antialiased filters) or ``'nearest'``.
    - ``antialias`` (``True``): antialiasing when shrinking (torchvision.transforms.v2's
      default); ``False`` with ``'bilinear'`` interpolates the two nearest pixels at any
      scale, as torch's ``F.interpolate`` (torchvision's video classification recipe).
    """

    def __new__(cls, size: int | tuple[int, int] | list[int], interpolation: str = 'bilinear', antialias: bool = True) -> Resize: ...
    @property
    def size(self) -> int | tuple[int, int]:
        """An int resizes the shorter side to it, keeping the aspect ratio (follow it with ``CenterCrop`` for batches of one shape); ``(height, width)`` resizes to exactly that."""
    @property
    def interpolation(self) -> str:
        """``'bilinear'``, ``'bicubic'`` (PIL's and torchvision's antialiased filters) or ``'nearest'``."""
    @property
    def antialias(self) -> bool:
        """Antialiasing when shrinking (torchvision.transforms.v2's default); ``False`` with ``'bilinear'`` interpolates the two nearest pixels at any scale, as torch's ``F.interpolate`` (torchvision's video classification recipe)."""

@final
class CenterCrop(Op):
    """Crops the centre of the image to ``size`` (torchvision's ``CenterCrop``: an image
    smaller than ``size`` is first padded with zeros to it, the odd pixel after).

    - ``size``: an int (square) or ``(height, width)``.
    """

    def __new__(cls, size: int | tuple[int, int] | list[int]) -> CenterCrop: ...
    @property
    def size(self) -> tuple[int, int]:
        """An int (square) or ``(height, width)``."""

@final
class Pad(Op):
    """Pads each side of the image by ``padding`` pixels of ``fill`` (torchvision's ``Pad``:
    one int for every side, two for left and right then top and bottom, or four for left,
    top, right, bottom). Boxes, masks and keypoints move with the image.

    - ``padding``: pixels: one int, two (left/right, top/bottom) or four (left, top, right,
      bottom).
    - ``fill`` (``0``): the padding's colour, one or 3 numbers.
    - ``padding_mode`` (``'constant'``): 'constant' (the others, which repeat the image's
      edge, are not supported).
    """

    def __new__(cls, padding: int | Sequence[int] | None, fill: float | tuple[float, float, float] | list[float] = 0, padding_mode: str = 'constant') -> Pad: ...
    @property
    def padding(self) -> tuple[int, int, int, int] | None:
        """Pixels: one int, two (left/right, top/bottom) or four (left, top, right, bottom)."""
    @property
    def fill(self) -> float | tuple[float, float, float]:
        """The padding's colour, one or 3 numbers."""
    @property
    def padding_mode(self) -> str:
        """'constant' (the others, which repeat the image's edge, are not supported)."""

@final
class RandomCrop(Op):
    """Crops a window of ``size`` at a random place (torchvision's ``RandomCrop``: the image
    padded by ``padding`` first, then, with ``pad_if_needed``, each side of a dimension
    shorter than the window by the shortfall; then the top row, then the left column, each
    uniform over the places the window fits). An image still smaller than the window is
    cropped at its centre, as ``CenterCrop`` does.

    - ``size``: an int (square) or ``(height, width)``.
    - ``padding`` (``None``): pixels padded first: one int, two (left/right, top/bottom) or
      four.
    - ``pad_if_needed`` (``False``): pad a dimension shorter than the window, both its sides
      by the shortfall.
    - ``fill`` (``0``): the padding's colour, one or 3 numbers.
    - ``padding_mode`` (``'constant'``): 'constant' (the others, which repeat the image's
      edge, are not supported).
    """

    def __new__(cls, size: int | tuple[int, int] | list[int], padding: int | Sequence[int] | None = None, pad_if_needed: bool = False, fill: float | tuple[float, float, float] | list[float] = 0, padding_mode: str = 'constant') -> RandomCrop: ...
    @property
    def size(self) -> tuple[int, int]:
        """An int (square) or ``(height, width)``."""
    @property
    def padding(self) -> tuple[int, int, int, int] | None:
        """Pixels padded first: one int, two (left/right, top/bottom) or four."""
    @property
    def pad_if_needed(self) -> bool:
        """Pad a dimension shorter than the window, both its sides by the shortfall."""
    @property
    def fill(self) -> float | tuple[float, float, float]:
        """The padding's colour, one or 3 numbers."""
    @property
    def padding_mode(self) -> str:
        """'constant' (the others, which repeat the image's edge, are not supported)."""

@final
class MultiScaleCrop(Op):
    """Crops a window whose height and width are each ``int(short side × scale)`` for scales at
    most ``max_distort`` places apart in ``scales`` (a side within 2 pixels of the output's
    is the output's), at one of 5 fixed places (the corners and the centre; 13 with
    ``more_fix_crop``: the edges' middles and the quarters too) or, without ``fix_crop``,
    anywhere; then resizes it to ``size`` (TSN's and VideoMAE's ``GroupMultiScaleCrop``,
    with the same choices: the pair, then the place; in a clip, one draw for every frame).
    ``size`` is ``(height, width)``, as torchvision's; VideoMAE's ``input_size`` list is
    ``[width, height]``.

    - ``size``: output size, an int (square) or ``(height, width)``.
    - ``scales`` (``(1.0, 0.875, 0.75, 0.66)``): fractions of the short side, each in (0,
      1].
    - ``max_distort`` (``1``): how many places apart in ``scales`` the height's and the
      width's scales may be.
    - ``fix_crop`` (``True``): place the window at one of the fixed places, not anywhere.
    - ``more_fix_crop`` (``True``): 13 fixed places rather than 5.
    - ``interpolation`` (``'bilinear'``): ``'bilinear'``, ``'bicubic'`` (PIL's and
      torchvision's antialiased filters) or ``'nearest'``.
    - ``antialias`` (``True``): antialiasing when shrinking (torchvision.transforms.v2's
      default); ``False`` with ``'bilinear'`` interpolates the two nearest pixels at any
      scale, as torch's ``F.interpolate`` (torchvision's video classification recipe).
    """

    def __new__(cls, size: int | tuple[int, int] | list[int], scales: Sequence[float] | None = (1.0, 0.875, 0.75, 0.66), max_distort: int = 1, fix_crop: bool = True, more_fix_crop: bool = True, interpolation: str = 'bilinear', antialias: bool = True) -> MultiScaleCrop: ...
    @property
    def size(self) -> tuple[int, int]:
        """Output size, an int (square) or ``(height, width)``."""
    @property
    def scales(self) -> tuple[float, ...] | None:
        """Fractions of the short side, each in (0, 1]."""
    @property
    def max_distort(self) -> int:
        """How many places apart in ``scales`` the height's and the width's scales may be."""
    @property
    def fix_crop(self) -> bool:
        """Place the window at one of the fixed places, not anywhere."""
    @property
    def more_fix_crop(self) -> bool:
        """13 fixed places rather than 5."""
    @property
    def interpolation(self) -> str:
        """``'bilinear'``, ``'bicubic'`` (PIL's and torchvision's antialiased filters) or ``'nearest'``."""
    @property
    def antialias(self) -> bool:
        """Antialiasing when shrinking (torchvision.transforms.v2's default); ``False`` with ``'bilinear'`` interpolates the two nearest pixels at any scale, as torch's ``F.interpolate`` (torchvision's video classification recipe)."""

@final
class RandomIoUCrop(Op):
    """Crops a random window that overlaps the sample's boxes by at least a drawn IoU, as SSD
    trains (torchvision.transforms.v2's ``RandomIoUCrop``, with its random choices: an IoU
    among 0, 0.1, 0.3, 0.5, 0.7, 0.9 or none, then up to ``trials`` windows). Boxes whose
    centre falls outside the window are dropped. Needs a boxes field.

    - ``min_scale`` (``0.3``): least side, as a fraction.
    - ``max_scale`` (``1.0``): greatest side, as a fraction.
    - ``min_aspect_ratio`` (``0.5``): least width / height.
    - ``max_aspect_ratio`` (``2.0``): greatest width / height.
    - ``trials`` (``40``): windows tried an IoU drawn.
    """

    def __new__(cls, min_scale: float = 0.3, max_scale: float = 1.0, min_aspect_ratio: float = 0.5, max_aspect_ratio: float = 2.0, trials: int = 40) -> RandomIoUCrop: ...
    @property
    def min_scale(self) -> float:
        """Least side, as a fraction."""
    @property
    def max_scale(self) -> float:
        """Greatest side, as a fraction."""
    @property
    def min_aspect_ratio(self) -> float:
        """Least width / height."""
    @property
    def max_aspect_ratio(self) -> float:
        """Greatest width / height."""
    @property
    def trials(self) -> int:
        """Windows tried an IoU drawn."""

@final
class RandomResize(Op):
    """Resizes the shorter side to a length drawn uniformly from ``min_size`` to ``max_size -
    1`` for each sample, keeping the aspect ratio (torchvision.transforms.v2's
    ``RandomResize``). The output's size varies: follow it with a crop of a fixed size
    (``RandomCrop(size, pad_if_needed=True)``, as the segmentation references do).

    - ``min_size``: the least length drawn.
    - ``max_size``: one past the greatest length drawn.
    - ``interpolation`` (``'bilinear'``): ``'bilinear'``, ``'bicubic'`` (PIL's and
      torchvision's antialiased filters) or ``'nearest'``.
    - ``antialias`` (``True``): antialiasing when shrinking (torchvision.transforms.v2's
      default); ``False`` with ``'bilinear'`` interpolates the two nearest pixels at any
      scale, as torch's ``F.interpolate`` (torchvision's video classification recipe).
    """

    def __new__(cls, min_size: int, max_size: int, interpolation: str = 'bilinear', antialias: bool = True) -> RandomResize: ...
    @property
    def min_size(self) -> int:
        """The least length drawn."""
    @property
    def max_size(self) -> int:
        """One past the greatest length drawn."""
    @property
    def interpolation(self) -> str:
        """``'bilinear'``, ``'bicubic'`` (PIL's and torchvision's antialiased filters) or ``'nearest'``."""
    @property
    def antialias(self) -> bool:
        """Antialiasing when shrinking (torchvision.transforms.v2's default); ``False`` with ``'bilinear'`` interpolates the two nearest pixels at any scale, as torch's ``F.interpolate`` (torchvision's video classification recipe)."""

@final
class RandomZoomOut(Op):
    """With probability ``p``, places the image on a canvas ``side_range`` times its size
    (drawn), at a random place, the rest ``fill`` (torchvision.transforms.v2's
    ``RandomZoomOut``). Boxes move with the image.

    - ``fill`` (``0``): the canvas's colour, one or 3 numbers.
    - ``side_range`` (``(1.0, 4.0)``): range of the canvas's side, in the image's.
    - ``p`` (``0.5``): probability of zooming out.
    """

    def __new__(cls, fill: float | tuple[float, float, float] | list[float] = 0, side_range: tuple[float, float] | list[float] = (1.0, 4.0), p: float = 0.5) -> RandomZoomOut: ...
    @property
    def fill(self) -> float | tuple[float, float, float]:
        """The canvas's colour, one or 3 numbers."""
    @property
    def side_range(self) -> tuple[float, float]:
        """Range of the canvas's side, in the image's."""
    @property
    def p(self) -> float:
        """Probability of zooming out."""

@final
class ScaleJitter(Op):
    """Resizes the image by ``scale`` drawn from ``scale_range`` times the factor that fits it
    in ``target_size`` (torchvision.transforms.v2's ``ScaleJitter``). The size varies with
    the image: follow it with ``FixedSizeCrop``.

    - ``target_size``: an int (a square) or a pair, read as v2 reads it: the first number
      against the width, the second against the height.
    - ``scale_range`` (``(0.1, 2.0)``): range of the factor drawn.
    - ``interpolation`` (``'bilinear'``): ``'bilinear'``, ``'bicubic'`` (PIL's and
      torchvision's antialiased filters) or ``'nearest'``.
    - ``antialias`` (``True``): antialiasing when shrinking (torchvision.transforms.v2's
      default); ``False`` with ``'bilinear'`` interpolates the two nearest pixels at any
      scale, as torch's ``F.interpolate`` (torchvision's video classification recipe).
    """

    def __new__(cls, target_size: int | tuple[int, int] | list[int], scale_range: tuple[float, float] | list[float] = (0.1, 2.0), interpolation: str = 'bilinear', antialias: bool = True) -> ScaleJitter: ...
    @property
    def target_size(self) -> tuple[int, int]:
        """An int (a square) or a pair, read as v2 reads it: the first number against the width, the second against the height."""
    @property
    def scale_range(self) -> tuple[float, float]:
        """Range of the factor drawn."""
    @property
    def interpolation(self) -> str:
        """``'bilinear'``, ``'bicubic'`` (PIL's and torchvision's antialiased filters) or ``'nearest'``."""
    @property
    def antialias(self) -> bool:
        """Antialiasing when shrinking (torchvision.transforms.v2's default); ``False`` with ``'bilinear'`` interpolates the two nearest pixels at any scale, as torch's ``F.interpolate`` (torchvision's video classification recipe)."""

@final
class FixedSizeCrop(Op):
    """Crops a random window of at most ``size``, then pads at the right and the bottom with
    ``fill`` up to ``size`` (torchvision's detection references' ``FixedSizeCrop``). Boxes
    are clamped to the window; only ``RandomHorizontalFlip`` may follow it among the
    geometric operators.

    - ``size``: an int (a square) or ``(height, width)``.
    - ``fill`` (``0``): the padding's colour, one or 3 numbers.
    """

    def __new__(cls, size: int | tuple[int, int] | list[int], fill: float | tuple[float, float, float] | list[float] = 0) -> FixedSizeCrop: ...
    @property
    def size(self) -> tuple[int, int]:
        """An int (a square) or ``(height, width)``."""
    @property
    def fill(self) -> float | tuple[float, float, float]:
        """The padding's colour, one or 3 numbers."""

@final
class RandomShortestSize(Op):
    """Resizes the shorter side to a size drawn among ``min_size``, the longer side at most
    ``max_size`` (torchvision.transforms.v2's ``RandomShortestSize``). Each image keeps its
    size, at the top left of a ``max_size`` square canvas of ``fill`` in the batch; a boxes
    field's ``size`` says where it ends. Without ``max_size`` the output's size varies, for
    a crop after it.

    - ``min_size``: the shorter side's sizes, drawn with equal chances.
    - ``max_size`` (``None``): the most the longer side may be, and the batch canvas's side
      (the references use 1333); ``None``: no bound and no canvas, the output's size varies
      (for a crop after it).
    - ``interpolation`` (``'bilinear'``): ``'bilinear'``, ``'bicubic'`` (PIL's and
      torchvision's antialiased filters) or ``'nearest'``.
    - ``antialias`` (``True``): antialiasing when shrinking (torchvision.transforms.v2's
      default); ``False`` with ``'bilinear'`` interpolates the two nearest pixels at any
      scale, as torch's ``F.interpolate`` (torchvision's video classification recipe).
    - ``fill`` (``0``): the canvas's colour around each image, one or 3 numbers.
    """

    def __new__(cls, min_size: int | Sequence[int], max_size: int | None = None, interpolation: str = 'bilinear', antialias: bool = True, fill: float | tuple[float, float, float] | list[float] = 0) -> RandomShortestSize: ...
    @property
    def min_size(self) -> tuple[int, ...]:
        """The shorter side's sizes, drawn with equal chances."""
    @property
    def max_size(self) -> int | None:
        """The most the longer side may be, and the batch canvas's side (the references use 1333); ``None``: no bound and no canvas, the output's size varies (for a crop after it)."""
    @property
    def interpolation(self) -> str:
        """``'bilinear'``, ``'bicubic'`` (PIL's and torchvision's antialiased filters) or ``'nearest'``."""
    @property
    def antialias(self) -> bool:
        """Antialiasing when shrinking (torchvision.transforms.v2's default); ``False`` with ``'bilinear'`` interpolates the two nearest pixels at any scale, as torch's ``F.interpolate`` (torchvision's video classification recipe)."""
    @property
    def fill(self) -> float | tuple[float, float, float]:
        """The canvas's colour around each image, one or 3 numbers."""

@final
class DetrRandomResize(Op):
    """Resizes the shorter side to a size drawn among ``sizes``, the longer side at most about
    ``max_size``, as DETR's ``RandomResize`` rounds (bilinear, as PIL). With ``max_size``,
    each image keeps its size at the top left of a ``max_size`` square canvas of 0 in the
    batch (a boxes field's ``size`` says where it ends; a side DETR's rounding takes past
    ``max_size`` is cut to it); without, the output's size varies, for a crop after it.

    - ``sizes``: the shorter side's sizes, drawn with equal chances.
    - ``max_size`` (``None``): the most the longer side may be, and the batch canvas's side
      (DETR's 1333).
    """

    def __new__(cls, sizes: int | Sequence[int], max_size: int | None = None) -> DetrRandomResize: ...
    @property
    def sizes(self) -> tuple[int, ...]:
        """The shorter side's sizes, drawn with equal chances."""
    @property
    def max_size(self) -> int | None:
        """The most the longer side may be, and the batch canvas's side (DETR's 1333)."""

@final
class RandomSizeCrop(Op):
    """Crops a window of a width drawn from ``min_size`` to the image's width (at most
    ``max_size``) and a height drawn likewise, at a place drawn (DETR's ``RandomSizeCrop``).
    The output's size varies: follow it with a resize to a canvas (``DetrRandomResize(...,
    max_size=...)``, as DETR does). A side shorter than ``min_size`` is kept whole (DETR
    raises).

    - ``min_size``: the least side drawn.
    - ``max_size``: the greatest side drawn.
    """

    def __new__(cls, min_size: int, max_size: int) -> RandomSizeCrop: ...
    @property
    def min_size(self) -> int:
        """The least side drawn."""
    @property
    def max_size(self) -> int:
        """The greatest side drawn."""

@final
class RandomHorizontalFlip(Op):
    """Mirrors the image left to right with probability ``p`` (torchvision's
    ``RandomHorizontalFlip``). Planned before decoding: the last pass reads mirrored rows
    backwards.

    - ``p`` (``0.5``): probability of mirroring.
    """

    def __new__(cls, p: float = 0.5) -> RandomHorizontalFlip: ...
    @property
    def p(self) -> float:
        """Probability of mirroring."""

@final
class RandomVerticalFlip(Op):
    """Flips the image upside down with probability ``p`` (torchvision.transforms.v2's
    ``RandomVerticalFlip``), after the geometric operators.

    - ``p`` (``0.5``): probability of flipping.
    """

    def __new__(cls, p: float = 0.5) -> RandomVerticalFlip: ...
    @property
    def p(self) -> float:
        """Probability of flipping."""

@final
class Normalize(Op):
    """Subtracts ``mean`` and divides by ``std``, per RGB channel, in [0, 1] units (pixel /
    255), as torchvision's ``ToTensor`` then ``Normalize`` do, in 32-bit floats. Needs
    ``dtype="float32"``. ImageNet's: ``Normalize(mean=(0.485, 0.456, 0.406), std=(0.229,
    0.224, 0.225))``.

    - ``mean``: per-channel mean (R, G, B).
    - ``std``: per-channel standard deviation (R, G, B).
    """

    def __new__(cls, mean: tuple[float, float, float] | list[float], std: tuple[float, float, float] | list[float]) -> Normalize: ...
    @property
    def mean(self) -> tuple[float, float, float]:
        """Per-channel mean (R, G, B)."""
    @property
    def std(self) -> tuple[float, float, float]:
        """Per-channel standard deviation (R, G, B)."""

@final
class RandomGrayscale(Op):
    """Replaces each channel by the pixel's luma, ``0.2989 R + 0.587 G + 0.114 B`` (as torch
    computes it) truncated to 8 bits, with probability ``p`` (torchvision.transforms.v2's
    ``RandomGrayscale`` on uint8 tensors; three channels stay three).

    - ``p`` (``0.1``): probability of converting.
    """

    def __new__(cls, p: float = 0.1) -> RandomGrayscale: ...
    @property
    def p(self) -> float:
        """Probability of converting."""

@final
class RandomInvert(Op):
    """Inverts the colours, ``255 - v``, with probability ``p`` (torchvision.transforms.v2's
    ``RandomInvert``).

    - ``p`` (``0.5``): probability of inverting.
    """

    def __new__(cls, p: float = 0.5) -> RandomInvert: ...
    @property
    def p(self) -> float:
        """Probability of inverting."""

@final
class RandomSolarize(Op):
    """Inverts every value at or above ``threshold`` (``v >= threshold`` becomes ``255 - v``),
    with probability ``p`` (torchvision.transforms.v2's ``RandomSolarize`` on uint8 images).

    - ``threshold``: values at or above it are inverted, in 0..=255.
    - ``p`` (``0.5``): probability of solarizing.
    """

    def __new__(cls, threshold: float, p: float = 0.5) -> RandomSolarize: ...
    @property
    def threshold(self) -> float:
        """Values at or above it are inverted, in 0..=255."""
    @property
    def p(self) -> float:
        """Probability of solarizing."""

@final
class RandomPosterize(Op):
    """Keeps the ``bits`` high bits of every value, with probability ``p``
    (torchvision.transforms.v2's ``RandomPosterize`` on uint8 images).

    - ``bits``: bits kept, 0 to 8.
    - ``p`` (``0.5``): probability of posterizing.
    """

    def __new__(cls, bits: int, p: float = 0.5) -> RandomPosterize: ...
    @property
    def bits(self) -> int:
        """Bits kept, 0 to 8."""
    @property
    def p(self) -> float:
        """Probability of posterizing."""

@final
class ColorJitter(Op):
    """Changes the brightness, contrast, saturation and hue of the image by factors drawn
    uniformly from their ranges, applying those that are on in a random order
    (torchvision.transforms.v2's ``ColorJitter`` on uint8 images: its kernels and their
    32-bit float arithmetic, the order a uniform permutation as ``torch.randperm(4)``). A
    number ``x`` is the range ``[max(0, 1 - x), 1 + x]`` (for hue ``[-x, x]``, ``x <=
    0.5``), a ``(min, max)`` pair the range itself; ``None``, or a range that changes
    nothing (``0``, ``(1, 1)``; hue ``(0, 0)``), leaves that adjustment out. Each range is
    given back as its ``(min, max)`` pair, or ``None`` where off.

    - ``brightness`` (``None``): range of the factor the values are multiplied by (non-
      negative).
    - ``contrast`` (``None``): range of the factor of the blend with the mean of the
      grayscale image (non-negative).
    - ``saturation`` (``None``): range of the factor of the blend with the grayscale image
      (non-negative).
    - ``hue`` (``None``): range of the turn added to the hue, within [-0.5, 0.5].
    """

    def __new__(cls, brightness: float | tuple[float, float] | list[float] | None = None, contrast: float | tuple[float, float] | list[float] | None = None, saturation: float | tuple[float, float] | list[float] | None = None, hue: float | tuple[float, float] | list[float] | None = None) -> ColorJitter: ...
    @property
    def brightness(self) -> tuple[float, float] | None:
        """Range of the factor the values are multiplied by (non-negative)."""
    @property
    def contrast(self) -> tuple[float, float] | None:
        """Range of the factor of the blend with the mean of the grayscale image (non-negative)."""
    @property
    def saturation(self) -> tuple[float, float] | None:
        """Range of the factor of the blend with the grayscale image (non-negative)."""
    @property
    def hue(self) -> tuple[float, float] | None:
        """Range of the turn added to the hue, within [-0.5, 0.5]."""

@final
class RandomPhotometricDistort(Op):
    """Distorts brightness, contrast, saturation and hue, each with probability ``p`` and a
    factor drawn from its range, contrast before or after the other two, then permutes the
    channels with probability ``p`` (torchvision.transforms.v2's
    ``RandomPhotometricDistort``, as SSD trains).

    - ``brightness`` (``(0.875, 1.125)``): range of the brightness factor.
    - ``contrast`` (``(0.5, 1.5)``): range of the contrast factor.
    - ``saturation`` (``(0.5, 1.5)``): range of the saturation factor.
    - ``hue`` (``(-0.05, 0.05)``): range of the hue shift.
    - ``p`` (``0.5``): probability of each distortion.
    """

    def __new__(cls, brightness: tuple[float, float] | list[float] = (0.875, 1.125), contrast: tuple[float, float] | list[float] = (0.5, 1.5), saturation: tuple[float, float] | list[float] = (0.5, 1.5), hue: tuple[float, float] | list[float] = (-0.05, 0.05), p: float = 0.5) -> RandomPhotometricDistort: ...
    @property
    def brightness(self) -> tuple[float, float]:
        """Range of the brightness factor."""
    @property
    def contrast(self) -> tuple[float, float]:
        """Range of the contrast factor."""
    @property
    def saturation(self) -> tuple[float, float]:
        """Range of the saturation factor."""
    @property
    def hue(self) -> tuple[float, float]:
        """Range of the hue shift."""
    @property
    def p(self) -> float:
        """Probability of each distortion."""

@final
class RandomAutocontrast(Op):
    """Stretches each channel so that its lowest value becomes 0 and its highest 255 (``(v -
    min) / ((max - min) / 255)`` in 32-bit floats, truncated; a flat channel is kept), with
    probability ``p`` (torchvision.transforms.v2's ``RandomAutocontrast`` on uint8 images).

    - ``p`` (``0.5``): probability of autocontrasting.
    """

    def __new__(cls, p: float = 0.5) -> RandomAutocontrast: ...
    @property
    def p(self) -> float:
        """Probability of autocontrasting."""

@final
class RandomEqualize(Op):
    """Equalizes the histogram of each channel, with probability ``p``
    (torchvision.transforms.v2's ``RandomEqualize`` on uint8 images: its tensor kernel,
    PIL's lookup table from the cumulative histogram, a channel left as it is where all but
    its highest value are fewer than 255 pixels).

    - ``p`` (``0.5``): probability of equalizing.
    """

    def __new__(cls, p: float = 0.5) -> RandomEqualize: ...
    @property
    def p(self) -> float:
        """Probability of equalizing."""

@final
class RandomAdjustSharpness(Op):
    """Adjusts the sharpness: blends the image with its smoothing by the 3×3 kernel ``[[1, 1,
    1], [1, 5, 1], [1, 1, 1]] / 13`` (rounded), the border pixels kept, with probability
    ``p`` (torchvision.transforms.v2's ``RandomAdjustSharpness`` on uint8 images). Factor 0
    gives the smoothed image, 1 the image, 2 twice as sharp.

    - ``sharpness_factor``: how much to sharpen (non-negative): 0 smooths, 1 keeps.
    - ``p`` (``0.5``): probability of adjusting.
    """

    def __new__(cls, sharpness_factor: float, p: float = 0.5) -> RandomAdjustSharpness: ...
    @property
    def sharpness_factor(self) -> float:
        """How much to sharpen (non-negative): 0 smooths, 1 keeps."""
    @property
    def p(self) -> float:
        """Probability of adjusting."""

@final
class GaussianBlur(Op):
    """Blurs the image with a Gaussian kernel whose standard deviation is drawn uniformly from
    ``sigma`` for each sample, the borders reflected (torchvision.transforms.v2's
    ``GaussianBlur`` on uint8 images: its kernel weights, sampled at ``kernel_size`` points
    over ±(size - 1) / (2√2) and normalised, applied in 32-bit floats, one direction then
    the other, and rounded). As in torchvision, a ``kernel_size`` pair is (x, y): the
    kernel's width (along a row) first, then its height; one int is both.

    - ``kernel_size``: the kernel's size, odd and positive: one int, or (width, height) as
      torchvision takes it.
    - ``sigma`` (``(0.1, 2.0)``): the standard deviation: a positive number, or the (min,
      max) range it is drawn from.
    """

    def __new__(cls, kernel_size: int | tuple[int, int] | list[int], sigma: float | tuple[float, float] | list[float] = (0.1, 2.0)) -> GaussianBlur: ...
    @property
    def kernel_size(self) -> tuple[int, int]:
        """The kernel's size, odd and positive: one int, or (width, height) as torchvision takes it."""
    @property
    def sigma(self) -> tuple[float, float]:
        """The standard deviation: a positive number, or the (min, max) range it is drawn from."""

@final
class RandomRotation(Op):
    """Rotates the image anticlockwise about its centre by an angle in degrees drawn uniformly
    from ``degrees`` for each sample, keeping its size; what comes from outside the image is
    ``fill`` (torchvision.transforms.v2's ``RandomRotation`` on uint8 images: its draw, its
    inverse matrix and its sampling, in 32-bit floats, and its exact turns by 0 and 180
    degrees, and by 90 and 270 on square images). With ``expand=True`` each image grows to
    hold the whole turned image (v2's size, its quarter turns exact on any image), at the
    top left of a canvas of ``fill`` as large as the largest ``degrees`` allows; a boxes
    field's ``size`` says where it ends. Only operators on pixels that do not move them, and
    ``Normalize``, may follow it. Only ``center=None`` is taken.

    - ``degrees``: range of the angle in degrees: a non-negative number ``d`` (``(-d, d)``)
      or a (min, max) pair.
    - ``interpolation`` (``'nearest'``): how the image is sampled: 'nearest' or 'bilinear'.
    - ``expand`` (``False``): whether each image grows to hold the whole rotated image, on a
      canvas that holds the largest.
    - ``center`` (``None``): the centre of the transform: only None (the image's centre) is
      taken.
    - ``fill`` (``0``): the value of what comes from outside the image: one number, or one
      per channel (R, G, B).
    """

    def __new__(cls, degrees: float | tuple[float, float] | list[float], interpolation: str = 'nearest', expand: bool = False, center: tuple[float, float] | list[float] | None = None, fill: float | tuple[float, float, float] | list[float] = 0) -> RandomRotation: ...
    @property
    def degrees(self) -> tuple[float, float]:
        """Range of the angle in degrees: a non-negative number ``d`` (``(-d, d)``) or a (min, max) pair."""
    @property
    def interpolation(self) -> str:
        """How the image is sampled: 'nearest' or 'bilinear'."""
    @property
    def expand(self) -> bool:
        """Whether each image grows to hold the whole rotated image, on a canvas that holds the largest."""
    @property
    def center(self) -> tuple[float, float] | None:
        """The centre of the transform: only None (the image's centre) is taken."""
    @property
    def fill(self) -> float | tuple[float, float, float]:
        """The value of what comes from outside the image: one number, or one per channel (R, G, B)."""

@final
class RandomAffine(Op):
    """Rotates, translates, scales and shears the image about its centre by amounts drawn
    uniformly for each sample, keeping its size; what comes from outside the image is
    ``fill`` (torchvision.transforms.v2's ``RandomAffine`` on uint8 images: its draws, in
    its order, its inverse matrix and its sampling, in 32-bit floats). The angle is
    anticlockwise, in degrees; a translation is a whole number of pixels, drawn within
    ±``translate`` × the image's width and height; ``shear`` is one angle's range (along x)
    or two (x then y), in degrees. Only ``center=None`` (the image's centre) is taken.

    - ``degrees``: range of the rotation in degrees: a non-negative number ``d`` (``(-d,
      d)``) or a (min, max) pair.
    - ``translate`` (``None``): the largest translations as fractions of the width and the
      height, each in [0, 1], or None for none.
    - ``scale`` (``None``): range of the scale factor (positive), or None to keep the scale.
    - ``shear`` (``None``): range of the shear in degrees: a non-negative number ``s``
      (``(-s, s)`` along x), a (min, max) pair along x, or four numbers (x's range, then
      y's); None for none.
    - ``interpolation`` (``'nearest'``): how the image is sampled: 'nearest' or 'bilinear'.
    - ``fill`` (``0``): the value of what comes from outside the image: one number, or one
      per channel (R, G, B).
    - ``center`` (``None``): the centre of the transform: only None (the image's centre) is
      taken.
    """

    def __new__(cls, degrees: float | tuple[float, float] | list[float], translate: tuple[float, float] | list[float] | None = None, scale: tuple[float, float] | list[float] | None = None, shear: float | tuple[float, float] | tuple[float, float, float, float] | list[float] | None = None, interpolation: str = 'nearest', fill: float | tuple[float, float, float] | list[float] = 0, center: tuple[float, float] | list[float] | None = None) -> RandomAffine: ...
    @property
    def degrees(self) -> tuple[float, float]:
        """Range of the rotation in degrees: a non-negative number ``d`` (``(-d, d)``) or a (min, max) pair."""
    @property
    def translate(self) -> tuple[float, float] | None:
        """The largest translations as fractions of the width and the height, each in [0, 1], or None for none."""
    @property
    def scale(self) -> tuple[float, float] | None:
        """Range of the scale factor (positive), or None to keep the scale."""
    @property
    def shear(self) -> tuple[float, float] | tuple[float, float, float, float] | None:
        """Range of the shear in degrees: a non-negative number ``s`` (``(-s, s)`` along x), a (min, max) pair along x, or four numbers (x's range, then y's); None for none."""
    @property
    def interpolation(self) -> str:
        """How the image is sampled: 'nearest' or 'bilinear'."""
    @property
    def fill(self) -> float | tuple[float, float, float]:
        """The value of what comes from outside the image: one number, or one per channel (R, G, B)."""
    @property
    def center(self) -> tuple[float, float] | None:
        """The centre of the transform: only None (the image's centre) is taken."""

@final
class RandomPerspective(Op):
    """With probability ``p``, warps the image by a perspective, keeping its size: each corner
    moves inwards by a whole number of pixels drawn uniformly, at most ``distortion_scale``
    × half the width across and × half the height down, and the image follows its corners;
    what comes from outside the image is ``fill`` (torchvision.transforms.v2's
    ``RandomPerspective`` on uint8 images: its draws, in its order, its coefficients and its
    sampling, in 32-bit floats).

    - ``distortion_scale`` (``0.5``): how far the corners may move, from 0 (not at all) to 1
      (up to half the image).
    - ``p`` (``0.5``): probability of warping a sample.
    - ``interpolation`` (``'bilinear'``): how the image is sampled: 'nearest' or 'bilinear'.
    - ``fill`` (``0``): the value of what comes from outside the image: one number, or one
      per channel (R, G, B).
    """

    def __new__(cls, distortion_scale: float = 0.5, p: float = 0.5, interpolation: str = 'bilinear', fill: float | tuple[float, float, float] | list[float] = 0) -> RandomPerspective: ...
    @property
    def distortion_scale(self) -> float:
        """How far the corners may move, from 0 (not at all) to 1 (up to half the image)."""
    @property
    def p(self) -> float:
        """Probability of warping a sample."""
    @property
    def interpolation(self) -> str:
        """How the image is sampled: 'nearest' or 'bilinear'."""
    @property
    def fill(self) -> float | tuple[float, float, float]:
        """The value of what comes from outside the image: one number, or one per channel (R, G, B)."""

@final
class AutoAugment(Op):
    """Applies one sub-policy drawn uniformly from the 25 of ``policy``: two augmentations in
    turn, each with its probability at its magnitude, the sign of a signed one drawn
    (torchvision.transforms.v2's ``AutoAugment`` on uint8 images: its policies, magnitudes,
    draws and kernels). ``policy`` is 'imagenet', 'cifar10' or 'svhn' (torchvision's
    ``AutoAugmentPolicy`` values).

    - ``policy`` (``'imagenet'``): the learned policy: 'imagenet', 'cifar10' or 'svhn'.
    - ``interpolation`` (``'nearest'``): how shears, translations and rotations sample the
      image: 'nearest' or 'bilinear'.
    - ``fill`` (``None``): the value of what comes in from outside the image in shears,
      translations and rotations: one number, one per channel (R, G, B), or None (zeros,
      torchvision's default).
    """

    def __new__(cls, policy: str = 'imagenet', interpolation: str = 'nearest', fill: float | tuple[float, float, float] | list[float] | None = None) -> AutoAugment: ...
    @property
    def policy(self) -> str:
        """The learned policy: 'imagenet', 'cifar10' or 'svhn'."""
    @property
    def interpolation(self) -> str:
        """How shears, translations and rotations sample the image: 'nearest' or 'bilinear'."""
    @property
    def fill(self) -> float | tuple[float, float, float] | None:
        """The value of what comes in from outside the image in shears, translations and rotations: one number, one per channel (R, G, B), or None (zeros, torchvision's default)."""

@final
class RandAugment(Op):
    """Applies ``num_ops`` augmentations in turn, each drawn uniformly from 14 (Identity,
    ShearX, ShearY, TranslateX, TranslateY, Rotate, Brightness, Color, Contrast, Sharpness,
    Posterize, Solarize, AutoContrast, Equalize) at bin ``magnitude`` of
    ``num_magnitude_bins``, the sign of a signed one drawn (torchvision.transforms.v2's
    ``RandAugment`` on uint8 images: its space, magnitudes, draws and kernels). For timm's
    RandAugment (``rand-m9-mstd0.5-inc1``) see ``TimmRandAugment``.

    - ``num_ops`` (``2``): augmentations applied in turn (non-negative).
    - ``magnitude`` (``9``): the bin of every augmentation's magnitude, in [0,
      num_magnitude_bins).
    - ``num_magnitude_bins`` (``31``): how many magnitudes each augmentation's range is
      split into (at least 2).
    - ``interpolation`` (``'nearest'``): how shears, translations and rotations sample the
      image: 'nearest' or 'bilinear'.
    - ``fill`` (``None``): the value of what comes in from outside the image in shears,
      translations and rotations: one number, one per channel (R, G, B), or None (zeros,
      torchvision's default).
    """

    def __new__(cls, num_ops: int = 2, magnitude: int = 9, num_magnitude_bins: int = 31, interpolation: str = 'nearest', fill: float | tuple[float, float, float] | list[float] | None = None) -> RandAugment: ...
    @property
    def num_ops(self) -> int:
        """Augmentations applied in turn (non-negative)."""
    @property
    def magnitude(self) -> int:
        """The bin of every augmentation's magnitude, in [0, num_magnitude_bins)."""
    @property
    def num_magnitude_bins(self) -> int:
        """How many magnitudes each augmentation's range is split into (at least 2)."""
    @property
    def interpolation(self) -> str:
        """How shears, translations and rotations sample the image: 'nearest' or 'bilinear'."""
    @property
    def fill(self) -> float | tuple[float, float, float] | None:
        """The value of what comes in from outside the image in shears, translations and rotations: one number, one per channel (R, G, B), or None (zeros, torchvision's default)."""

@final
class TrivialAugmentWide(Op):
    """Applies one augmentation drawn uniformly from 14 (Identity, ShearX, ShearY, TranslateX,
    TranslateY, Rotate, Brightness, Color, Contrast, Sharpness, Posterize, Solarize,
    AutoContrast, Equalize) at a magnitude bin drawn uniformly, the sign of a signed one
    drawn, with the wide ranges (torchvision.transforms.v2's ``TrivialAugmentWide`` on uint8
    images: its space, magnitudes, draws and kernels).

    - ``num_magnitude_bins`` (``31``): how many magnitudes each augmentation's range is
      split into (at least 2).
    - ``interpolation`` (``'nearest'``): how shears, translations and rotations sample the
      image: 'nearest' or 'bilinear'.
    - ``fill`` (``None``): the value of what comes in from outside the image in shears,
      translations and rotations: one number, one per channel (R, G, B), or None (zeros,
      torchvision's default).
    """

    def __new__(cls, num_magnitude_bins: int = 31, interpolation: str = 'nearest', fill: float | tuple[float, float, float] | list[float] | None = None) -> TrivialAugmentWide: ...
    @property
    def num_magnitude_bins(self) -> int:
        """How many magnitudes each augmentation's range is split into (at least 2)."""
    @property
    def interpolation(self) -> str:
        """How shears, translations and rotations sample the image: 'nearest' or 'bilinear'."""
    @property
    def fill(self) -> float | tuple[float, float, float] | None:
        """The value of what comes in from outside the image in shears, translations and rotations: one number, one per channel (R, G, B), or None (zeros, torchvision's default)."""

@final
class AugMix(Op):
    """Blends the image with ``mixture_width`` chains of augmentations of it (each chain
    ``chain_depth`` augmentations, or 1 to 3 drawn when it is not positive, each drawn
    uniformly at a magnitude bin drawn below ``severity``, the sign of a signed one drawn):
    the weight of the image from Beta(``alpha``, ``alpha``), the chains' from
    Dirichlet(``alpha``, ...) (torchvision.transforms.v2's ``AugMix`` on uint8 images: its
    space, magnitudes, draws, kernels, and its 32-bit float sum truncated to 8 bits).
    ``all_ops=False`` leaves out Brightness, Color, Contrast and Sharpness.

    - ``severity`` (``3``): the magnitude bins drawn from: the lowest ``severity`` of 10 (1
      to 10).
    - ``mixture_width`` (``3``): how many chains are blended (at least 1).
    - ``chain_depth`` (``-1``): augmentations a chain, or a depth drawn from 1 to 3 for each
      chain when not positive.
    - ``alpha`` (``1.0``): the concentration of the Beta and Dirichlet weights (positive).
    - ``all_ops`` (``True``): whether Brightness, Color, Contrast and Sharpness are in the
      space.
    - ``interpolation`` (``'bilinear'``): how shears, translations and rotations sample the
      image: 'nearest' or 'bilinear'.
    - ``fill`` (``None``): the value of what comes in from outside the image in shears,
      translations and rotations: one number, one per channel (R, G, B), or None (zeros,
      torchvision's default).
    """

    def __new__(cls, severity: int = 3, mixture_width: int = 3, chain_depth: int = -1, alpha: float = 1.0, all_ops: bool = True, interpolation: str = 'bilinear', fill: float | tuple[float, float, float] | list[float] | None = None) -> AugMix: ...
    @property
    def severity(self) -> int:
        """The magnitude bins drawn from: the lowest ``severity`` of 10 (1 to 10)."""
    @property
    def mixture_width(self) -> int:
        """How many chains are blended (at least 1)."""
    @property
    def chain_depth(self) -> int:
        """Augmentations a chain, or a depth drawn from 1 to 3 for each chain when not positive."""
    @property
    def alpha(self) -> float:
        """The concentration of the Beta and Dirichlet weights (positive)."""
    @property
    def all_ops(self) -> bool:
        """Whether Brightness, Color, Contrast and Sharpness are in the space."""
    @property
    def interpolation(self) -> str:
        """How shears, translations and rotations sample the image: 'nearest' or 'bilinear'."""
    @property
    def fill(self) -> float | tuple[float, float, float] | None:
        """The value of what comes in from outside the image in shears, translations and rotations: one number, one per channel (R, G, B), or None (zeros, torchvision's default)."""

@final
class TimmRandAugment(Op):
    """Applies timm's RandAugment as its config string defines it (timm's
    ``rand_augment_transform(config, hparams)``, with its draws and PIL's kernels). The
    string is ``rand`` then dash-separated sections, as timm reads them: ``m`` the magnitude
    (an int, default 10), ``n`` the augmentations drawn per image (2), ``p`` the probability
    of applying each (0.5), ``mstd`` the standard deviation of the Gaussian noise added to
    the magnitude (0: none; above 100: the magnitude drawn uniformly in [0, m]), ``mmax``
    the magnitude's upper bound (10; 0 is 10), ``inc1`` the set whose strength increases
    with the magnitude, and ``t`` a named set (``tweights`` and ``t3aw``, weighted and drawn
    without replacement, or ``t3a``); the first ``mstd``, ``mmax`` and ``t`` count, the last
    of the others. Each image gets ``n`` augmentations drawn uniformly with replacement (a
    weighted set: without), each applied with probability ``p`` at the magnitude, noised,
    clipped to [0, mmax], and mapped to its argument by timm's ``LEVEL_TO_ARG`` (rotations,
    shears, translations and the increasing enhancements negated with probability 1/2). The
    kernels are Pillow's (``Image.transform`` and ``Image.rotate`` with bilinear or bicubic
    resampling, ``ImageEnhance``, ``ImageOps``, ``ImageFilter.GaussianBlur``), their
    arithmetic repeated to the byte. Differences from timm: the draws come from nostall's
    own generator (timm's distributions, not Python's and NumPy's streams); posterizing to 0
    bits (timm's ``Posterize`` below magnitude 2.5, ``PosterizeIncreasing`` at 10) gives
    black, as Pillow did before version 13, which raises instead; strings timm would half
    ignore (a section without a number, an unknown ``t`` set) are errors; only bilinear and
    bicubic resampling are offered.

    - ``config`` (``'rand-m9-mstd0.5-inc1'``): timm's RandAugment config string: 'rand',
      then sections m<int>, n<int>, p<float>, mstd<float>, mmax<int>, inc<int>, t<set>,
      joined by '-'.
    - ``interpolation`` (``'bilinear'``): how shears, translations and rotations resample
      the image: 'bilinear', 'bicubic', or 'random' (either, drawn for each augmentation);
      timm's ``interpolation`` hparam, create_transform's 'bilinear' by default.
    - ``fill`` (``(124, 116, 104)``): the colour of what comes from outside the image
      (timm's ``img_mean`` hparam): an int in [0, 255] for every channel, or one per channel
      (R, G, B); by default ImageNet's mean as timm rounds it.
    - ``translate_pct`` (``0.45``): the largest translation, at magnitude 10, as a fraction
      of the width or height (timm's ``translate_pct`` hparam; non-negative).
    - ``magnitude_std`` (``None``): timm's ``magnitude_std`` hparam: where given, it wins
      over the config's mstd (non-negative; 0 adds no noise).
    - ``magnitude_max`` (``None``): timm's ``magnitude_max`` hparam: where given, it wins
      over the config's mmax (non-negative; 0 means 10, as in timm).
    """

    def __new__(cls, config: str = 'rand-m9-mstd0.5-inc1', interpolation: str = 'bilinear', fill: float | tuple[float, float, float] | list[float] = (124, 116, 104), translate_pct: float = 0.45, magnitude_std: float | None = None, magnitude_max: float | None = None) -> TimmRandAugment: ...
    @property
    def config(self) -> str:
        """Timm's RandAugment config string: 'rand', then sections m<int>, n<int>, p<float>, mstd<float>, mmax<int>, inc<int>, t<set>, joined by '-'."""
    @property
    def interpolation(self) -> str:
        """How shears, translations and rotations resample the image: 'bilinear', 'bicubic', or 'random' (either, drawn for each augmentation); timm's ``interpolation`` hparam, create_transform's 'bilinear' by default."""
    @property
    def fill(self) -> float | tuple[float, float, float]:
        """The colour of what comes from outside the image (timm's ``img_mean`` hparam): an int in [0, 255] for every channel, or one per channel (R, G, B); by default ImageNet's mean as timm rounds it."""
    @property
    def translate_pct(self) -> float:
        """The largest translation, at magnitude 10, as a fraction of the width or height (timm's ``translate_pct`` hparam; non-negative)."""
    @property
    def magnitude_std(self) -> float | None:
        """Timm's ``magnitude_std`` hparam: where given, it wins over the config's mstd (non-negative; 0 adds no noise)."""
    @property
    def magnitude_max(self) -> float | None:
        """Timm's ``magnitude_max`` hparam: where given, it wins over the config's mmax (non-negative; 0 means 10, as in timm)."""

@final
class Compose(Op):
    """Applies ``transforms`` in order, as one operator (torchvision.transforms.v2's
    ``Compose``, where it is one choice of a ``RandomChoice``: DETR's ``RandomSelect(...,
    Compose([RandomResize, RandomSizeCrop, RandomResize]))``). They are all operators on
    pixels, or all geometric operators. A pipeline's own list needs none.

    - ``transforms``: the operators, at least one.
    """

    def __new__(cls, transforms: Sequence[Op]) -> Compose: ...
    @property
    def transforms(self) -> list[Op]:
        """The operators, at least one."""

@final
class RandomApply(Op):
    """Applies ``transforms``, in order, with probability ``p``, or none of them
    (torchvision.transforms.v2's ``RandomApply``). They are all operators on pixels, or all
    geometric operators; those may size the image where an operator after them fixes the
    output's size (none may place it on a canvas).

    - ``transforms``: the operators.
    - ``p`` (``0.5``): probability of applying them.
    """

    def __new__(cls, transforms: Sequence[Op], p: float = 0.5) -> RandomApply: ...
    @property
    def transforms(self) -> list[Op]:
        """The operators."""
    @property
    def p(self) -> float:
        """Probability of applying them."""

@final
class RandomChoice(Op):
    """Applies one of ``transforms``, drawn with the weights ``p`` (all alike when ``None``)
    (torchvision.transforms.v2's ``RandomChoice``; DETR's ``RandomSelect(t1, t2, p)`` is
    ``RandomChoice([t1, t2], p=[p, 1 - p])``). They are all operators on pixels, or all
    geometric operators; those may each size the image (a ``Compose`` each), where every one
    ends on a batch canvas (the largest holds any) or an operator after them fixes the
    output's size.

    - ``transforms``: the operators, at least one.
    - ``p`` (``None``): a weight for each operator, or ``None`` for equal weights.
    """

    def __new__(cls, transforms: Sequence[Op], p: Sequence[float] | None = None) -> RandomChoice: ...
    @property
    def transforms(self) -> list[Op]:
        """The operators, at least one."""
    @property
    def p(self) -> tuple[float, ...] | None:
        """A weight for each operator, or ``None`` for equal weights."""

@final
class RandomOrder(Op):
    """Applies every one of ``transforms`` in a random order (torchvision.transforms.v2's
    ``RandomOrder``). They are all operators on pixels, or all geometric operators that keep
    the image's size.

    - ``transforms``: the operators.
    """

    def __new__(cls, transforms: Sequence[Op]) -> RandomOrder: ...
    @property
    def transforms(self) -> list[Op]:
        """The operators."""

@final
class RandomErasing(Op):
    """Sets a random rectangle of the sample to ``value``, with probability ``p``
    (torchvision.transforms.v2's ``RandomErasing``, the same draws: ten tries at an area and
    aspect ratio that fit, else nothing). It erases the sample as delivered, so it comes
    last, after ``Normalize`` (values are in the normalised units, as in torchvision's
    recipes). ``value='random'`` fills each value with standard normal noise (timm's
    ``re_mode='pixel'``).

    - ``p`` (``0.5``): probability of erasing.
    - ``scale`` (``(0.02, 0.33)``): range of the erased area, as a fraction of the sample's.
    - ``ratio`` (``(0.3, 3.3)``): range of the erased rectangle's aspect ratio (height /
      width).
    - ``value`` (``0``): the value erased to: one number, one per channel, or ``'random'``
      (standard normal noise, each value drawn).
    """

    def __new__(cls, p: float = 0.5, scale: tuple[float, float] | list[float] = (0.02, 0.33), ratio: tuple[float, float] | list[float] = (0.3, 3.3), value: float | tuple[float, float, float] | list[float] | str = 0) -> RandomErasing: ...
    @property
    def p(self) -> float:
        """Probability of erasing."""
    @property
    def scale(self) -> tuple[float, float]:
        """Range of the erased area, as a fraction of the sample's."""
    @property
    def ratio(self) -> tuple[float, float]:
        """Range of the erased rectangle's aspect ratio (height / width)."""
    @property
    def value(self) -> float | tuple[float, float, float] | str:
        """The value erased to: one number, one per channel, or ``'random'`` (standard normal noise, each value drawn)."""

@final
class TimmRandomErasing(Op):
    """Erases ``min_count`` to ``max_count`` random rectangles of the sample with probability
    ``probability``: timm's ``RandomErasing`` (``timm.data.random_erasing``, what
    ``create_transform``'s ``re_prob``, ``re_mode`` and ``re_count`` make), the same
    parameters and draws: the count, then per rectangle ten tries at an area (its share of
    the drawn fraction) and a log-uniform aspect ratio that fit, else none. ``mode='const'``
    sets it to zeros, ``'rand'`` to one standard normal value per channel, ``'pixel'`` to
    standard normal noise, each value drawn. It erases the sample as delivered, so it comes
    last, after ``Normalize`` (zeros and noise are in the normalised units, as in timm's
    recipes). ``num_splits`` > 1 (timm's ``re_split``, which leaves a batch's first split
    clean for AugMix's split training) is refused: nostall prepares each sample without
    knowing its place in the batch.

    - ``probability`` (``0.5``): probability of erasing.
    - ``min_area`` (``0.02``): smallest fraction of the sample's area erased (shared by the
      rectangles).
    - ``max_area`` (``0.3333333333333333``): largest fraction of the sample's area erased
      (shared by the rectangles).
    - ``min_aspect`` (``0.3``): one end of the rectangles' aspect ratio (height / width),
      drawn log-uniformly.
    - ``max_aspect`` (``None``): the other end of the aspect ratio's range; ``None``: 1 /
      ``min_aspect``.
    - ``mode`` (``'const'``): what the rectangles are set to: ``'const'`` (zeros),
      ``'rand'`` (a standard normal value per channel) or ``'pixel'`` (standard normal
      noise).
    - ``min_count`` (``1``): fewest rectangles a sample erased gets.
    - ``max_count`` (``None``): most rectangles a sample erased gets (an int), the count
      drawn uniformly; ``None``: ``min_count``.
    - ``num_splits`` (``0``): timm's batch splits: 0 or 1 (erase every sample); more is
      refused.
    """

    def __new__(cls, probability: float = 0.5, min_area: float = 0.02, max_area: float = 0.3333333333333333, min_aspect: float = 0.3, max_aspect: float | None = None, mode: str = 'const', min_count: int = 1, max_count: int | None = None, num_splits: int = 0) -> TimmRandomErasing: ...
    @property
    def probability(self) -> float:
        """Probability of erasing."""
    @property
    def min_area(self) -> float:
        """Smallest fraction of the sample's area erased (shared by the rectangles)."""
    @property
    def max_area(self) -> float:
        """Largest fraction of the sample's area erased (shared by the rectangles)."""
    @property
    def min_aspect(self) -> float:
        """One end of the rectangles' aspect ratio (height / width), drawn log-uniformly."""
    @property
    def max_aspect(self) -> float | None:
        """The other end of the aspect ratio's range; ``None``: 1 / ``min_aspect``."""
    @property
    def mode(self) -> str:
        """What the rectangles are set to: ``'const'`` (zeros), ``'rand'`` (a standard normal value per channel) or ``'pixel'`` (standard normal noise)."""
    @property
    def min_count(self) -> int:
        """Fewest rectangles a sample erased gets."""
    @property
    def max_count(self) -> int | None:
        """Most rectangles a sample erased gets (an int), the count drawn uniformly; ``None``: ``min_count``."""
    @property
    def num_splits(self) -> int:
        """Timm's batch splits: 0 or 1 (erase every sample); more is refused."""

@final
class VideoMAERandomErasing(Op):
    """Erases random rectangles of a clip's frames with probability ``probability``: VideoMAE's
    own ``RandomErasing`` (its ``random_erasing.py``), as its fine-tuning's ``_aug_frame``
    runs it on the clip's frames, after the crop, flip and normalisation (write it last).
    The parameters are timm's ``RandomErasing``'s (``TimmRandomErasing``). With
    ``cube=True``, VideoMAE's default and its recipe, the clip draws once whether it is
    erased, the count, and each rectangle (a hundred tries at one that fits, else none), and
    every frame is erased at those rectangles, the noise of ``'rand'`` and ``'pixel'`` drawn
    for each frame. With ``cube=False`` each frame draws its own erasing, as timm's erasing
    of a batch does: whether, how many, where (ten tries) and the noise. The clip's draws
    come first from the operator's generator; each frame's own come from a generator forked
    from it by the frame's place in the clip, so they are the same for any number of
    threads. On a still image it is one frame. VideoMAE's ``num_splits`` above 1 (its
    ``--recount`` above 1, which leaves the clip's first frames clean) is not offered.

    - ``probability`` (``0.5``): probability of erasing.
    - ``min_area`` (``0.02``): smallest fraction of a frame's area erased (shared by the
      rectangles).
    - ``max_area`` (``0.3333333333333333``): largest fraction of a frame's area erased
      (shared by the rectangles).
    - ``min_aspect`` (``0.3``): one end of the rectangles' aspect ratio (height / width),
      drawn log-uniformly.
    - ``max_aspect`` (``None``): the other end of the aspect ratio's range; ``None``: 1 /
      ``min_aspect``.
    - ``mode`` (``'const'``): what the rectangles are set to: ``'const'`` (zeros),
      ``'rand'`` (a standard normal value per channel) or ``'pixel'`` (standard normal
      noise).
    - ``min_count`` (``1``): fewest rectangles an erased clip (or frame) gets.
    - ``max_count`` (``None``): most rectangles an erased clip (or frame) gets, the count
      drawn uniformly; ``None``: ``min_count``.
    - ``cube`` (``True``): ``True``: one erasing a clip, at the same rectangles in every
      frame (VideoMAE's default); ``False``: each frame draws its own.
    """

    def __new__(cls, probability: float = 0.5, min_area: float = 0.02, max_area: float = 0.3333333333333333, min_aspect: float = 0.3, max_aspect: float | None = None, mode: str = 'const', min_count: int = 1, max_count: int | None = None, cube: bool = True) -> VideoMAERandomErasing: ...
    @property
    def probability(self) -> float:
        """Probability of erasing."""
    @property
    def min_area(self) -> float:
        """Smallest fraction of a frame's area erased (shared by the rectangles)."""
    @property
    def max_area(self) -> float:
        """Largest fraction of a frame's area erased (shared by the rectangles)."""
    @property
    def min_aspect(self) -> float:
        """One end of the rectangles' aspect ratio (height / width), drawn log-uniformly."""
    @property
    def max_aspect(self) -> float | None:
        """The other end of the aspect ratio's range; ``None``: 1 / ``min_aspect``."""
    @property
    def mode(self) -> str:
        """What the rectangles are set to: ``'const'`` (zeros), ``'rand'`` (a standard normal value per channel) or ``'pixel'`` (standard normal noise)."""
    @property
    def min_count(self) -> int:
        """Fewest rectangles an erased clip (or frame) gets."""
    @property
    def max_count(self) -> int | None:
        """Most rectangles an erased clip (or frame) gets, the count drawn uniformly; ``None``: ``min_count``."""
    @property
    def cube(self) -> bool:
        """``True``: one erasing a clip, at the same rectangles in every frame (VideoMAE's default); ``False``: each frame draws its own."""

def from_torchvision(transform: Any) -> list[Op]:
    """nostall's operators for a torchvision (v1 or v2) or timm recipe."""

class Python:
    """Your own function on each sample, after the geometric operators (images) or the
    crop (audio): the 8-bit pixels ``uint8[3, H, W]`` where an operator on pixels or
    ``Normalize`` follows, the waveform where ``MelSpectrogram`` follows, else the sample
    as delivered; last in a video pipeline, the whole clip as delivered."""

    fn: Callable[..., Any]
    name: str
    wants_generator: bool
    def __init__(self, fn: Callable[..., Any]) -> None: ...
