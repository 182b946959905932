"""A Hugging Face ``datasets.Dataset`` read by nostall's engine, with no Python per sample:
the Arrow buffers of its ``Image`` column read in place (``python/src/arrow.rs``), its
labels from its ``ClassLabel`` (or a named) column, its order after ``select``,
``shuffle`` or ``filter`` kept. A dataset with a transform of its own (``set_transform``,
``with_transform``) runs its ``__getitem__`` as the user's code instead."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._errors import ConfigError


def is_hf_dataset(obj: Any) -> bool:
    """Whether ``obj`` is a ``datasets.Dataset`` (an ``arrow_dataset.Dataset``)."""
    kind = type(obj)
    return kind.__module__ == "datasets.arrow_dataset" and kind.__name__ == "Dataset"


def why_not_native(ds: Any) -> str | None:
    """Why ``ds`` cannot be read natively (its ``__getitem__`` runs as user code), or
    ``None`` when it can."""
    if ds.format.get("type") == "custom":
        transform = ds.format.get("format_kwargs", {}).get("transform")
        name = getattr(transform, "__qualname__", type(transform).__name__)
        return (f"its transform ({name}, from set_transform or with_transform) is a function: give "
                "nostall.Loader(dataset) its torchvision transform as pipeline= instead to run natively")
    from datasets import Image  # type: ignore[import-untyped]

    if not any(isinstance(f, Image) for f in ds.features.values()):
        return "it has no Image column"
    return None


def native_columns(obj: Any, image_column: str | None = None, label_column: str | None = None
                   ) -> dict[str, Any] | None:
    """The columns the engine reads ``obj`` from (``arrow_columns``) when it is a
    ``datasets.Dataset`` it can read natively; ``None`` for any other object."""
    if not is_hf_dataset(obj) or why_not_native(obj) is not None:
        return None
    label: tuple[str, str | None]
    if label_column in (None, "auto"):
        label = ("auto", None)
    elif label_column == "none":
        label = ("none", None)
    else:
        label = ("named", label_column)
    return arrow_columns(obj, image_column, label)


def _binary(array: Any) -> tuple[Any, Any, bool, Any, int, int]:
    """An Arrow binary or string array's buffers, as ``ArrowImages`` takes them."""
    import pyarrow as pa  # type: ignore[import-untyped]

    kind = array.type
    if not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)
            or pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise ConfigError(f"an Image column's child is {kind}, not binary or string")
    wide = pa.types.is_large_binary(kind) or pa.types.is_large_string(kind)
    validity, offsets, data = array.buffers()[:3]
    return validity, offsets, wide, data, array.offset, len(array)


def _labels(ds: Any, label: tuple[str, str | None], rows: np.ndarray | None
            ) -> tuple[list[int], list[str]]:
    """The labels (one per sample, in order) and class names ``label`` asks for:
    ``("auto", None)``: the one ``ClassLabel`` column, else a column named ``label``,
    ``labels`` or ``cls``, else none; ``("none", None)``; ``("named", column)``."""
    from datasets import ClassLabel

    kind, column = label
    features = ds.features
    if kind == "none":
        return [], []
    if kind == "auto":
        classes = [n for n, f in features.items() if isinstance(f, ClassLabel)]
        named = [n for n in ("label", "labels", "cls") if n in features]
        if len(classes) > 1:
            raise ConfigError(f"the dataset has several ClassLabel columns ({', '.join(classes)}): "
                              "name one with label_column=")
        column = (classes or named or [None])[0]
        if column is None:
            return [], []
    if column not in features:
        raise ConfigError(f"label_column={column!r}: the dataset's columns are {', '.join(features)}")
    values = ds.data.column(column).to_numpy(zero_copy_only=False)
    if rows is not None:
        values = values[rows]
    feature = features[column]
    if isinstance(feature, ClassLabel):
        names = list(feature.names)
    elif values.dtype.kind in "iu":
        names = []
    elif values.dtype.kind in "OUS" and all(isinstance(v, str) for v in values):
        names = sorted(set(values))
        values = np.searchsorted(np.array(names, dtype=object), values)
    else:
        raise ConfigError(f"label_column={column!r} holds {feature}: labels are class numbers or names")
    values = np.asarray(values)
    if len(values) and (values.min() < 0 or values.max() >= 2**32 - 1):
        first = int(np.argmax((values < 0) | (values >= 2**32 - 1)))
        raise ConfigError(f"label_column={column!r}: row {first} is {values[first]}, not a class number "
                          "(HF marks unlabeled rows -1: read the split with label_column='none')")
    return values.astype(np.uint32).tolist(), names


def arrow_columns(ds: Any, image_column: str | None, label: tuple[str, str | None]) -> dict[str, Any]:
    """The image column's Arrow chunks (each ``(bytes, path)``), the dataset's row order, its
    labels and class names, and its name: what the engine reads ``ds`` from."""
    from datasets import Image

    features = ds.features
    if image_column is None:
        images = [n for n, f in features.items() if isinstance(f, Image)]
        if len(images) > 1:
            raise ConfigError(f"the dataset has several Image columns ({', '.join(images)}): name one with "
                              "image_column=")
        image_column = images[0]
    elif not isinstance(features.get(image_column), Image):
        raise ConfigError(f"image_column={image_column!r} is {features.get(image_column)}, not an Image "
                          f"column; the dataset's columns are {', '.join(features)}")
    rows = None
    if ds._indices is not None:
        rows = ds._indices.column(0).to_numpy().astype(np.uint64)
    chunks = []
    for chunk in ds.data.column(image_column).chunks:
        names = [chunk.type.field(i).name for i in range(chunk.type.num_fields)]
        if "bytes" not in names:
            raise ConfigError(f"image_column={image_column!r} has no bytes ({chunk.type})")
        children = chunk.flatten()  # the struct's offset and nulls applied
        paths = children[names.index("path")] if "path" in names else None
        chunks.append((_binary(children[names.index("bytes")]),
                       None if paths is None else _binary(paths)))
    labels, classes = _labels(ds, label, rows)
    name = f"datasets.Dataset({ds.info.dataset_name})" if ds.info.dataset_name else "datasets.Dataset"
    return dict(chunks=chunks, rows=None if rows is None else rows.tolist(), labels=labels,
                classes=classes, name=name)
