"""A batch of detection records cut to its largest image (``pad_to_largest``): the
engine says how far (``cut``: the image's dimensions, the masks' rows and bytes a row,
and the extent), this module slices the batch's dictionary and adds DETR's padding mask.

Every slice is a view of the batch's buffer, whose samples keep their ``max_size``
canvas: nothing is copied here, and a copy of the view (to a device) moves only the
extent.
"""

from __future__ import annotations

from typing import Any, Sequence

#: The key of the padding mask (``nostall::loader::PADDING_MASK``).
PADDING_MASK = "padding_mask"


def cut(out: dict[str, Any], image: str, boxes: Sequence[str], sizes: Any,
        how: tuple[tuple[int, int, int], tuple[int, int], tuple[int, int]]) -> dict[str, Any]:
    """``out`` (a batch's dictionary) with field ``image`` cut to ``how``'s dimensions, the
    instance masks of the ``boxes`` fields to its mask rows and bytes a row, and
    ``padding_mask`` (bool ``[n, height, width]``, True on the padding, as DETR's
    ``nested_tensor_from_tensor_list``) made from ``sizes`` (int64 ``[n, 2]``, each
    image's height and width, where ``out`` lives)."""
    dims, (rows, row_bytes), (height, width) = how
    out[image] = out[image][(slice(None), *(slice(0, d) for d in dims))]
    for name in boxes:
        value = out[name]
        if isinstance(value, dict):
            if "masks" in value:
                value["masks"] = value["masks"][:, :, :rows, :row_bytes]
        else:
            for sample in value:
                if "masks" in sample:
                    sample["masks"] = sample["masks"][:, :rows, :row_bytes]
    out[PADDING_MASK] = _padding(sizes, height, width)
    return out


def _padding(sizes: Any, height: int, width: int) -> Any:
    """True where a pixel of the ``height`` × ``width`` batch lies past its image's
    ``sizes`` (height, width), torch or NumPy as ``sizes`` is, on its device."""
    if type(sizes).__module__.startswith("torch"):
        import torch

        rows: Any = torch.arange(height, device=sizes.device)
        cols: Any = torch.arange(width, device=sizes.device)
    else:
        import numpy

        rows, cols = numpy.arange(height), numpy.arange(width)
    below = rows[None, :, None] >= sizes[:, 0, None, None]
    right = cols[None, None, :] >= sizes[:, 1, None, None]
    return below | right
