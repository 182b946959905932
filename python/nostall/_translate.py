"""The user's recipe taken as it is: torchvision and timm transforms as nostall operators.

``Loader(pipeline=...)`` takes a ``torchvision.transforms`` (v1 or v2) ``Compose`` or list,
or what timm's ``create_transform`` returns, and hands it here when it is not a list of
nostall's operators. Each transform becomes the nostall operator of the same name and
arguments (read from its attributes). The conversions to tensors and floats
(``ToTensor``, ``PILToTensor``, ``ToImage``, ``ToDtype``, ``ConvertImageDtype``, timm's
``MaybeToTensor``) are followed, not dropped: the values they leave (8-bit, floats in
0..1, or floats in 0..255 from ``ToDtype`` without ``scale``) decide the loader's dtype
(``translate``) and the units of a ``Normalize`` after them, and a conversion nostall
cannot deliver exactly is refused naming it. OpenCLIP's conversions to RGB
(``MaybeConvertMode``, ``_convert_to_rgb``: nostall decodes every image to RGB) are
dropped, and so are v2's ``SanitizeBoundingBoxes()`` and ``ClampBoundingBoxes`` (a boxes
field does both); v2's ``ConvertBoundingBoxFormat`` sets the boxes fields' format
(``box_format``). A transform nostall does not have is refused naming it, so that a
recipe never changes silently.

What translates to what is declared with the operators, in the engine: each operator's
declaration names the transforms it stands for (library and class), and for each of its
parameters the transform's attribute and the converter that reads it (``_translations``).
Here is the one generic translation by those declarations, the converters
(``_CONVERTERS``) and the translators of transforms read as a whole (``_TRANSLATORS``).

nostall's operators follow torchvision.transforms.v2's kernels on uint8 tensors: a v1
transform that works on PIL images (``ColorJitter``, ``GaussianBlur``) is translated to
the tensor kernel, which differs from PIL's by a level here and there. timm's
``RandAugment`` becomes ``TimmRandAugment`` (PIL's kernels, as timm runs them) and its
``RandomErasing`` ``TimmRandomErasing``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from . import ops
from ._errors import ConfigError
from ._nostall import _translations

#: Transforms that only change the type or container of the image, by library (their
#: values' type is followed by ``translate``, not translated to an operator).
_CONVERTING = {
    "torchvision": ("ToTensor", "PILToTensor", "ToImage", "ToImageTensor", "ToPureTensor", "ConvertImageDtype",
                    "ToDtype"),
    "timm": ("MaybeToTensor", "MaybePILToTensor"),
}
CONVERSIONS = frozenset(name for names in _CONVERTING.values() for name in names)


def from_torchvision(transform: Any) -> list[ops.Op]:
    """nostall's operators for ``transform``: a torchvision (v1 or v2) or timm transform,
    a ``Compose`` of them, or a list. Raises ``ConfigError`` naming the first transform
    nostall does not have, or an argument it does not take."""
    converted = box_format(transform)
    if converted not in (None, "xyxy"):
        # Operators carry no box format: the fields do. Only the Loader, which has them,
        # can take this conversion.
        raise ConfigError(f'the recipe converts its boxes to "{converted}", which nostall\'s operators cannot '
                          f'carry: give the boxes field box_format="{converted}", or pass the recipe itself '
                          "as Loader(pipeline=...), which sets it")
    return translate(transform)[0]


def box_format(pipeline: Any) -> str | None:
    """The format v2's ``ConvertBoundingBoxFormat`` leaves the boxes in (``"xyxy"``,
    ``"xywh"`` or ``"cxcywh"``): its last one in the recipe (v2's kernels move boxes in
    any format, so only the last counts), or in any view's; None where none converts.
    ``ConfigError`` for a rotated box's format, or views that convert differently."""
    if isinstance(pipeline, str):
        return None
    if _is_views(pipeline):
        formats = {f for view in pipeline if (f := box_format(view)) is not None}
        if len(formats) > 1:
            raise ConfigError(f"the views convert their boxes to different formats ({', '.join(sorted(formats))}): "
                              "a boxes field has one")
        return next(iter(formats), None)
    converted = None
    for t in _flatten(pipeline):
        if type(t).__name__ == "ConvertBoundingBoxFormat" and type(t).__module__.startswith("torchvision"):
            name = str(getattr(t.format, "name", t.format)).lower()
            if name not in ("xyxy", "xywh", "cxcywh"):
                raise ConfigError(f'{_named(t)} to "{name}": a boxes field holds axis-aligned boxes, "xyxy", '
                                  '"xywh" or "cxcywh"')
            converted = name
    return converted


# What a recipe's image holds at each point: the decoded 8-bit image (a PIL image, which
# nostall's operators take as v2 takes a uint8 tensor), an 8-bit tensor, floats in 0..1,
# or floats in 0..255 (v2's ``ToDtype(torch.float32)``: it scales only when told).
_DECODED, _UINT8, _FLOAT, _FLOAT255 = "decoded", "uint8", "float", "float255"


def translate(transform: Any) -> tuple[list[ops.Op], str | None]:
    """``from_torchvision``'s operators, and the dtype the recipe delivers: ``"uint8"``
    where it ends in 8-bit tensors, ``"float32"`` where it converts to floats, None where
    it converts nothing (the loader's default then). One pass follows the values' type
    through the conversions."""
    out: list[ops.Op] = []
    domain = _DECODED
    for t in _flatten(transform):
        if _is_conversion(t):
            domain = _converted(t, domain)
            continue
        name = type(t).__name__
        if domain == _FLOAT255 and name == "Normalize":
            # (x - m) / s over 0..255 is (x/255 - m/255) / (s/255): nostall's units.
            out.append(ops.Normalize(mean=[m / 255 for m in _floats(t.mean)], std=[v / 255 for v in _floats(t.std)]))
            domain = _FLOAT
            continue
        if domain == _FLOAT255:
            raise ConfigError(f"{_named(t)} after a ToDtype without scale=True works on floats in 0..255, which "
                              "nostall's operators do not take: give the ToDtype scale=True (and Normalize in 0..1 "
                              "units), or put it after a Normalize")
        if domain == _UINT8 and name == "Normalize":
            raise ConfigError(f"{_named(t)} on 8-bit tensors (no conversion to floats before it) raises in "
                              "torchvision: put ToDtype(torch.float32, scale=True) before it")
        op = _one(t)
        if op is not None:
            out.append(op)
    if domain == _FLOAT255:
        raise ConfigError("the recipe ends in a ToDtype without scale=True, which delivers floats in 0..255: nostall "
                          "delivers floats in 0..1 (pixel / 255) or 8-bit values (dtype='uint8'); give the ToDtype "
                          "scale=True, or end the recipe with a Normalize")
    return out, {_DECODED: None, _UINT8: "uint8", _FLOAT: "float32"}[domain]


def _is_conversion(t: Any) -> bool:
    module = type(t).__module__
    if module.startswith("open_clip"):
        return type(t).__name__ == "MaybeToTensor"
    return module.startswith(("torchvision", "timm")) and type(t).__name__ in CONVERSIONS


def _converted(t: Any, domain: str) -> str:
    """The values after the conversion ``t`` of values in ``domain``, as torchvision (v1
    and v2) and timm convert them; ``ConfigError`` where nostall cannot deliver them."""
    name = type(t).__name__
    v2 = ".v2" in type(t).__module__
    if name in ("ToPureTensor",):
        return domain
    if name in ("ToImage", "ToImageTensor", "PILToTensor", "MaybePILToTensor"):
        return _UINT8 if domain == _DECODED else domain
    if name in ("ToTensor", "MaybeToTensor"):
        return _FLOAT if domain == _DECODED else domain
    if name == "ConvertImageDtype":
        scale = True
    else:  # ToDtype
        scale = bool(getattr(t, "scale", False))
    if domain == _DECODED and v2:
        return domain  # v2 leaves a PIL image as it is: it converts tensors only
    target = _target_dtype(t)
    if target == "uint8" and domain in (_DECODED, _UINT8):
        return _UINT8
    if target != "float32":
        raise ConfigError(f"{_named(t)} to {target}: nostall delivers float32 (pixel / 255) or uint8 "
                          "(dtype='uint8'), and converts floats back to 8 bits nowhere mid-recipe")
    if domain in (_DECODED, _UINT8):
        return _FLOAT if scale else _FLOAT255
    return domain  # floats stay floats: a float-to-float conversion never scales


def _target_dtype(t: Any) -> str:
    dtype = t.dtype
    if isinstance(dtype, dict):  # v2: a dtype per input type; the image's is what matters
        image = [v for k, v in dtype.items() if getattr(k, "__name__", k) in ("Image", "Tensor")]
        if len(image) != 1:
            raise ConfigError(f"{_named(t)}: a dtype per type ({dtype!r}) names no single dtype for the image")
        dtype = image[0]
    text = str(dtype)
    return {"torch.float32": "float32", "torch.uint8": "uint8"}.get(text, text)


def resolve(pipeline: Any, dtype: str | None) -> tuple[Any, str | None]:
    """``pipeline=`` with every torchvision or timm recipe in it (its own, or a view's)
    translated, and the dtype the loader delivers: ``dtype`` when given, else the one the
    recipes deliver (None: they say nothing). Raises ``ConfigError`` when a given dtype
    differs from the recipe's, or the views' recipes end in different types."""
    pipeline, delivers = _native(pipeline)
    if dtype is not None and delivers is not None and dtype != delivers:
        raise ConfigError(f'dtype="{dtype}" with a recipe that delivers {delivers}: torchvision would give '
                          f"{delivers}; leave dtype= out, or change the recipe's conversions")
    return pipeline, dtype or delivers


def _native(pipeline: Any) -> tuple[Any, str | None]:
    """``pipeline`` as nostall's operators (a preset's name as it is), and the dtype its
    recipes deliver."""
    if isinstance(pipeline, str):
        return pipeline, None
    if _is_views(pipeline):
        views, delivers = [], None
        for view in pipeline:
            ops_, dtype = _native(view)
            if delivers is not None and dtype is not None and dtype != delivers:
                raise ConfigError(f"the views end in different types ({delivers}, {dtype}): a batch has one "
                                  "dtype")
            delivers = delivers or dtype
            views.append(ops_)
        return views, delivers
    if not _is_native(pipeline) and _holds_transforms(pipeline):
        return translate(pipeline)
    return pipeline, None


def _is_views(pipeline: Any) -> bool:
    """Whether ``pipeline`` is a list of pipelines (lists, or recipes' ``Compose``)."""
    return (isinstance(pipeline, (list, tuple)) and len(pipeline) > 0
            and all(isinstance(v, (list, tuple)) or type(v).__name__ == "Compose" for v in pipeline))


def _is_native(pipeline: Any) -> bool:
    """Whether ``pipeline`` is a sequence of nostall's operators alone."""
    from . import audio, video

    return isinstance(pipeline, (list, tuple)) and all(isinstance(op, (ops.Op, audio.Op, video.Op))
                                                       for op in pipeline)


def _holds_transforms(pipeline: Any) -> bool:
    """Whether ``pipeline`` is a torchvision or timm transform, or a sequence holding one."""
    def theirs(obj: Any) -> bool:
        return type(obj).__module__.startswith(("torchvision", "timm"))

    return theirs(pipeline) or (isinstance(pipeline, (list, tuple)) and any(theirs(t) for t in pipeline))


def _flatten(transform: Any) -> Iterable[Any]:
    if type(transform).__name__ == "Compose":
        for t in transform.transforms:
            yield from _flatten(t)
    elif isinstance(transform, (list, tuple)):
        for t in transform:
            yield from _flatten(t)
    else:
        yield transform


def _choice(choice: Any, t: Any) -> ops.Op:
    """One choice of ``t`` (a ``RandomChoice``) as one operator: a ``Compose`` as
    nostall's, whole (flattened into the list, its steps would be choices of their own)."""
    steps = from_torchvision(choice)
    if type(choice).__name__ == "Compose":
        return ops.Compose(steps)
    if len(steps) != 1:
        raise ConfigError(f"{_named(t)}: the choice {_named(choice)} is not one operator: wrap it in a Compose")
    return steps[0]


def _interpolation(mode: Any, t: Any) -> str:
    """The transform ``t``'s interpolation ``mode`` as nostall names it."""
    name = str(getattr(mode, "value", mode))
    if name not in ("bilinear", "bicubic", "nearest"):
        raise ConfigError(f"{_named(t)}: interpolation {name!r}: nostall resizes with 'bilinear', 'bicubic' or "
                          "'nearest'")
    return name


def _named(t: Any) -> str:
    return f"{type(t).__module__}.{type(t).__name__}"


def _floats(values: Any) -> list[float]:
    if getattr(values, "dtype", None) is not None and str(values.dtype).endswith("float32"):
        # A float32 tensor (timm keeps Normalize's statistics so): the shortest decimal
        # that rounds to each value, which the engine's 32-bit arithmetic reads back to it.
        import numpy as np

        return [float(str(np.float32(v))) for v in values.tolist()]
    return [float(v) for v in values]


def _size(size: Any) -> Any:
    if isinstance(size, (list, tuple)):
        return size[0] if len(size) == 1 else tuple(int(s) for s in size)
    return int(size)


def _is_open_clip_rgb(t: Any) -> bool:
    """OpenCLIP's conversions to RGB: its ``MaybeConvertMode("RGB")`` (open_clip 2.24 on)
    or its ``_convert_to_rgb`` function (before)."""
    if type(t).__module__.startswith("open_clip"):
        return type(t).__name__ == "MaybeConvertMode" and getattr(t, "mode", None) == "RGB"
    return getattr(t, "__module__", "").startswith("open_clip") and getattr(t, "__name__", "") == "_convert_to_rgb"


def _is_default_sanitize(t: Any) -> bool:
    """v2's ``SanitizeBoundingBoxes`` with its defaults: what a boxes field does to its
    boxes after the geometry (``Field(kind="boxes")``'s ``min_size`` and ``min_area``), so
    dropped here; with other settings, ``ConfigError`` saying where they go."""
    if type(t).__name__ != "SanitizeBoundingBoxes" or not type(t).__module__.startswith("torchvision"):
        return False
    min_size, min_area = getattr(t, "min_size", 1.0), getattr(t, "min_area", 1.0)
    if (min_size, min_area) != (1.0, 1.0):
        raise ConfigError(f"{_named(t)} with min_size={min_size}, min_area={min_area}: a boxes field sanitises its "
                          "boxes itself; give it those settings (nostall.Field(\"coco\", kind=\"boxes\", "
                          f"min_size={min_size}, min_area={min_area})) and leave this transform out")
    return True


class Translation(NamedTuple):
    """A transform an operator's declaration translates: the operator, its arguments as
    ``(parameter, attribute, converter)``, the attributes refused when set, and the
    translator that reads the whole transform instead (``None``: the arguments say)."""

    operator: str
    args: list[tuple[str, str, str]]
    unsupported: list[str]
    translator: str | None


#: The declarations' translations, by library and transform class name.
TRANSLATIONS: dict[tuple[str, str], Translation] = {
    (library, name): Translation(operator, args, unsupported, translator)
    for operator, library, name, args, unsupported, translator in _translations()
}


def _library(t: Any) -> str | None:
    """The library of the transform ``t`` (torchvision's or timm's), None for another's."""
    module = type(t).__module__
    return next((library for library in ("torchvision", "timm") if module.startswith(library)), None)


def _one(t: Any) -> ops.Op | None:
    """The operator the transform ``t`` translates to by its declaration (``t`` itself for
    nostall's operator, None for one dropped); ``ConfigError`` for a transform nostall
    does not have or a setting it does not take, ``TypeError`` for what is no transform."""
    from . import video

    if isinstance(t, ops.Op):
        return t
    if isinstance(t, video.Op):
        # A recipe after a video's Clip: the Clip passes through among the image operators
        # (the engine checks it comes first), typed as they are.
        return t  # type: ignore[return-value]
    if _is_open_clip_rgb(t):
        return None
    if _is_default_sanitize(t) or _is_taken_by_fields(t):
        return None
    library = _library(t)
    if library is None:
        raise TypeError(
            f"{t!r} is not an operator: build the pipeline from nostall.ops (images) or nostall.audio (audio), "
            "or give a torchvision or timm recipe"
        )
    translation = TRANSLATIONS.get((library, type(t).__name__))
    if translation is None:
        raise ConfigError(
            f"{_named(t)} has no nostall operator yet: nostall translates {_translatable()}; "
            "write the pipeline with nostall.ops, or leave this transform out knowingly"
        )
    for attribute in translation.unsupported:
        if getattr(t, attribute, None) is not None:
            raise ConfigError(f"{_named(t)}: {attribute} is not supported")
    for attribute, default in _DEFAULTS_ONLY.get(type(t).__name__, {}).items():
        if list(getattr(t, attribute, default)) != default:
            raise ConfigError(f"{_named(t)}: {attribute} other than {default} is not supported")
    if translation.translator is not None:
        args = _TRANSLATORS[translation.translator](t)
    else:
        # An attribute the transform's release lacks reads as None.
        args = {param: _CONVERTERS[converter](getattr(t, attribute, None), t)
                for param, attribute, converter in translation.args}
    return getattr(ops, translation.operator)(**args)


def _is_taken_by_fields(t: Any) -> bool:
    """v2's ``ConvertBoundingBoxFormat`` (its format is the boxes fields', ``box_format``)
    and ``ClampBoundingBoxes``: a boxes field's boxes never leave the canvas (each crop,
    pad and move clamps them as v2's do, and a box reaching past its image, which only a
    JSON member can hold, is dropped when read), so clamping again changes nothing."""
    return type(t).__module__.startswith("torchvision") and type(t).__name__ in ("ConvertBoundingBoxFormat",
                                                                                 "ClampBoundingBoxes")

#: Attributes nostall's operator takes only at their default, by transform.
_DEFAULTS_ONLY = {"RandomIoUCrop": {"options": [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0]}}


def _translatable() -> str:
    """What nostall translates, by library: the declarations' transforms, the conversions
    ``translate`` follows, and torchvision's ``Compose``."""
    names: dict[str, set[str]] = {library: set(converting) for library, converting in _CONVERTING.items()}
    names["torchvision"].add("Compose")
    for library, name in TRANSLATIONS:
        names[library].add(name)
    return " and ".join(f"{library}'s {', '.join(sorted(names[library]))}" for library in names)


def _max_aspect(log_range: Any) -> float | None:
    """timm's erasing keeps its aspect range as logarithms: `None` (1 / min_aspect, timm's
    default) where the range is symmetric, else the upper end."""
    low, high = log_range
    return None if high == -low else math.exp(high)


def _timm_rand_augment(t: Any) -> dict[str, Any]:
    """``TimmRandAugment``'s arguments for timm's ``RandAugment`` object (what
    ``rand_augment_transform`` and ``create_transform`` make): its config string rebuilt
    from its augmentations, layers and hparams."""
    from timm.data import auto_augment as aa

    names = [op.name for op in t.ops]
    sets = {"": aa._RAND_TRANSFORMS, "-inc1": aa._RAND_INCREASING_TRANSFORMS, "-t3a": aa._RAND_3A,
            "-tweights": aa._RAND_WEIGHTED_0, "-t3aw": aa._RAND_WEIGHTED_3A}
    suffix = next((k for k, v in sets.items() if names == list(v)), None)
    if suffix is None:
        raise ConfigError(f"{_named(t)}: its augmentations {names} are none of timm's named sets (the default, "
                          "inc1, t3a, tweights, t3aw): nostall's TimmRandAugment takes those")
    first = t.ops[0]
    settings = ("prob", "magnitude", "magnitude_std", "magnitude_max")
    if any(getattr(op, k) != getattr(first, k) for op in t.ops for k in settings) or any(
            op.kwargs != first.kwargs for op in t.ops):
        raise ConfigError(f"{_named(t)}: its augmentations differ in probability, magnitude or hparams; "
                          "TimmRandAugment applies one config to all")
    if float(first.magnitude) != int(first.magnitude):
        raise ConfigError(f"{_named(t)}: magnitude {first.magnitude}: timm's config strings take an int")
    resample = first.kwargs["resample"]
    interpolation = "random"
    if not isinstance(resample, (list, tuple)):
        filter_name = {2: "bilinear", 3: "bicubic"}.get(int(resample))
        if filter_name is None:
            raise ConfigError(f"{_named(t)}: resampling {resample!r}: TimmRandAugment resamples bilinear, bicubic "
                              "or random (either)")
        interpolation = filter_name
    # timm's mstd above 100 is its infinity: the magnitude drawn uniformly.
    mstd = 101.0 if math.isinf(first.magnitude_std) else float(first.magnitude_std)
    config = f"rand-m{int(first.magnitude)}-n{int(t.num_layers)}-p{float(first.prob)}-mstd{mstd}{suffix}"
    return dict(config=config, interpolation=interpolation, fill=[float(v) for v in first.kwargs["fillcolor"]],
                translate_pct=float(first.hparams.get("translate_pct", 0.45)),
                magnitude_max=None if first.magnitude_max is None else float(first.magnitude_max))


def _padding(value: Any, t: Any) -> Any:
    """A transform's padding as torchvision's ``pad`` takes it (None where it has none)."""
    if value is None or isinstance(value, int):
        return value
    sides = [int(v) for v in value]
    # v2's RandomCrop keeps its padding as left, right, top, bottom (`_parse_pad_padding`).
    if type(t).__name__ == "RandomCrop" and hasattr(t, "_fill") and len(sides) == 4:
        left, right, top, bottom = sides
        return [left, top, right, bottom]
    return sides


def _fill(fill: Any) -> Any:
    """A transform's fill, 0 where it has none."""
    fill = _optional_fill(fill)
    return 0 if fill is None else fill


def _optional_fill(fill: Any) -> Any:
    """A transform's fill, None where it has none (zeros, unmasked in torchvision)."""
    if isinstance(fill, dict):
        # v2 keeps a fill per input type and looks the image's type up by membership (a
        # defaultdict's default is not taken), then "others": a recipe's image is a PIL
        # image until a conversion, then a tensor.
        named = {k if isinstance(k, str) else f"{k.__module__}.{k.__qualname__}": v for k, v in fill.items()}
        kinds = ("PIL.Image.Image", "torchvision.tv_tensors._image.Image", "torch.Tensor", "others")
        fill = next((named[kind] for kind in kinds if kind in named), None)
    if fill is None:
        return None
    if isinstance(fill, (list, tuple)):
        return _floats(fill) if len(fill) > 1 else float(fill[0])
    return float(fill)


def _erasing_value(value: Any) -> Any:
    """torchvision's ``RandomErasing`` value: ``'random'`` (also for None), numbers, or one."""
    if value is None or value == "random":
        return "random"
    if isinstance(value, (list, tuple)):
        return _floats(value)
    return value


#: The converters the declarations name (``Conv`` in the engine): each takes an
#: attribute's value and its transform (for the errors) and gives the operator's argument.
_CONVERTERS: dict[str, Callable[[Any, Any], Any]] = {
    "int": lambda value, t: int(value),
    "float": lambda value, t: float(value),
    "bool": lambda value, t: bool(value),
    "str": lambda value, t: str(value),
    "same": lambda value, t: value,
    "size": lambda value, t: _size(value),
    "floats": lambda value, t: _floats(value),
    "optional_floats": lambda value, t: None if value is None else _floats(value),
    "ints": lambda value, t: [int(v) for v in value],
    "interpolation": _interpolation,
    "fill": lambda value, t: _fill(value),
    "optional_fill": lambda value, t: _optional_fill(value),
    "enum_value": lambda value, t: str(getattr(value, "value", value)),
    "transforms": lambda value, t: from_torchvision(list(_flatten(value))),
    "choices": lambda value, t: [_choice(v, t) for v in value],
    "erasing_value": lambda value, t: _erasing_value(value),
    "padding": _padding,
    "exp_low": lambda value, t: math.exp(value[0]),
    "exp_high_or_none": lambda value, t: _max_aspect(value),
}

#: The translators the declarations name: each reads a whole transform into its
#: operator's arguments.
_TRANSLATORS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "timm_rand_augment": _timm_rand_augment,
}
