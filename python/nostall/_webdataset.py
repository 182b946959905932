"""A webdataset pipeline read by nostall's engine: ``wds.WebDataset(urls)`` (or a
``wds.DataPipeline``) that decodes images with PIL, picks an image and its ``.cls`` label,
and maps a torchvision or timm transform over the image becomes ``nostall.Loader(folder,
pipeline=transform)`` over the same shards, with no Python per sample.

What is read from the stages (each a ``FilterFunction`` whose function and arguments
webdataset keeps): the shard list (every ``.tar`` of one local folder), ``shuffle``
(nostall shuffles the whole epoch, seeded, instead of a buffer), ``decode`` with a PIL
image spec (``"pil"``, ``"pilrgb"``: nostall decodes to RGB), ``rename``, ``to_tuple`` of an
image and a ``cls`` member, ``map_tuple`` / ``map_dict`` of the image's transform, and
``batched``. Any other stage (a function of the user's, ``select``, ``ResampledShards``)
is named in the reason it runs as it is.
"""

from __future__ import annotations

import os
from typing import Any

from ._errors import ConfigError

# Stages that move samples between nodes and workers, open shards or split them into
# samples: nostall's own ranks, threads and reader do that.
PLUMBING = {"single_node_only", "split_by_node", "split_by_worker", "check_empty", "tar_file_expander",
            "group_by_keys", "tarfile_samples", "url_opener"}
PIL_SPECS = {"pil", "pilrgb"}
IMAGE_KEYS = {"jpg", "jpeg", "png"}


def is_webdataset(obj: Any) -> bool:
    """Whether ``obj`` is a webdataset pipeline (``WebDataset``, ``DataPipeline``)."""
    return any(c.__module__.startswith("webdataset") and c.__name__ == "DataPipeline"
               for c in type(obj).__mro__)


def _shards(stage: Any) -> str:
    """The folder whose ``.tar`` files are exactly the shard list's URLs."""
    if type(stage).__name__ != "SimpleShardList":
        raise _Untranslatable(f"its shards come from {type(stage).__name__}, not a list of shards "
                              "(nostall reads each shard once an epoch)")
    urls = [u[len("file:"):] if u.startswith("file:") else u for u in stage.urls]
    if any("://" in u or u.startswith("pipe:") for u in urls):
        raise _Untranslatable("its shards are not local files (give nostall.Loader the s3:// prefix)")
    folders = {os.path.dirname(os.path.abspath(u)) for u in urls}
    if len(folders) != 1:
        raise _Untranslatable("its shards lie in several folders")
    folder = folders.pop()
    tars = {os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".tar")}
    if tars != {os.path.abspath(u) for u in urls}:
        raise _Untranslatable(f"its shards are some of the .tar files of {folder}, not all of them")
    return folder


def _decodes_pil(stage_args: tuple[Any, ...]) -> bool:
    """Whether a ``decode`` stage's handlers decode images with PIL (and nothing else of
    the user's)."""
    specs = []
    for handler in stage_args:
        if isinstance(handler, str):
            specs.append(handler)
        elif type(handler).__name__ == "Decoder":
            specs += [h.imagespec for h in handler.handlers if type(h).__name__ == "ImageHandler"]
            if any(type(h).__name__ not in ("ImageHandler", "function") for h in handler.handlers):
                return False
        else:
            return False
    return bool(specs) and all(s in PIL_SPECS for s in specs)


class _Untranslatable(Exception):
    """Why a pipeline runs as it is."""


def translate(pipeline: Any) -> tuple[dict[str, Any] | None, str]:
    """``(loader_kwargs, why)``: ``nostall.Loader``'s arguments for ``pipeline``, or
    ``None`` and the first stage that keeps it from translating."""
    try:
        return _translate(pipeline), "a webdataset pipeline nostall translates"
    except _Untranslatable as e:
        return None, str(e)


def _translate(pipeline: Any) -> dict[str, Any]:
    from ._translate import translate as translate_recipe

    stages = list(pipeline.pipeline)
    if not stages:
        raise _Untranslatable("it has no stages")
    kwargs: dict[str, Any] = {"source": _shards(stages[0]), "shuffle": False}
    names: dict[str, str] = {}  # a renamed field: the members it is read from
    decoded = False
    keys: tuple[str, ...] | None = None
    transform = None
    for stage in stages[1:]:
        f = getattr(stage, "f", None)
        name = str(getattr(f, "__name__", None) or getattr(stage, "__name__", type(stage).__name__))
        args: tuple[Any, ...] = tuple(getattr(stage, "args", ()) or ())
        kw: dict[str, Any] = dict(getattr(stage, "kw", {}) or {})
        if name in PLUMBING or type(stage).__name__ == "StreamingOpen":
            continue
        if name == "_shuffle":
            # WebDataset(shardshuffle=False) leaves a shuffle of a buffer of False: none.
            kwargs["shuffle"] = kwargs["shuffle"] or bool(args and args[0])
        elif name == "_decode" or name == "_map" and args and type(args[0]).__name__ == "Decoder":
            if not _decodes_pil(args if name == "_decode" else (args[0],)):
                raise _Untranslatable("its decode is not PIL's (decode('pil') or 'pilrgb')")
            decoded = True
        elif name == "_rename" and not args:
            names.update({new: old for new, old in kw.items() if new not in ("keep",)})
        elif name == "_to_tuple" and keys is None:
            keys = tuple(args)
        elif name == "_map_tuple" and keys is not None and transform is None:
            fns = list(args) + [None] * (len(keys) - len(args))
            if any(fn is not None for fn in fns[1:]):
                raise _Untranslatable("map_tuple maps the label with a function of the user's")
            transform = fns[0]
        elif name == "_map_dict" and transform is None and len(kw) - ("handler" in kw) == 1:
            (field, fn), = ((k, v) for k, v in kw.items() if k != "handler")
            transform, keys = fn, keys or (field,)
            if keys[0] != field:
                raise _Untranslatable(f"map_dict maps {field}, not the image")
        elif name == "_batched":
            size = args[0] if args else kw.get("batchsize")
            collation = kw.get("collation_fn")
            if collation is not None and getattr(collation, "__name__", "") != "default_collation_fn":
                raise _Untranslatable("batched() collates with a function of the user's")
            kwargs["batch_size"], kwargs["drop_last"] = size, not kw.get("partial", True)
        else:
            shown = str(getattr(f, "__qualname__", name)) if f is not None else name
            raise _Untranslatable(f"its stage {shown.lstrip('_')}{tuple(args) if args else '()'} is not one "
                                  "nostall reads")
    if not decoded:
        raise _Untranslatable("it does not decode the images (decode('pil'))")
    if keys is None or len(keys) != 2:
        raise _Untranslatable("it does not end in to_tuple(image, label)")
    image, label = (names.get(k, k) for k in keys)
    if not set(image.split(";")) <= IMAGE_KEYS:
        raise _Untranslatable(f"to_tuple's first field reads {image!r}, not jpg, jpeg or png members")
    if label != "cls":
        raise _Untranslatable(f"to_tuple's second field reads {label!r}, not the cls label")
    if transform is None:
        raise _Untranslatable("it maps no transform over the images (its samples are PIL images)")
    try:
        translate_recipe(transform)  # the Loader translates it again, with the dtype it delivers
        kwargs["pipeline"] = transform
    except (ConfigError, TypeError) as e:
        raise _Untranslatable(f"its image transform cannot be translated: {e}") from None
    return kwargs
