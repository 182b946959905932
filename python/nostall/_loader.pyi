"""Type stub of nostall.Loader.

Written by python/write_loader_stub.py from the settings' declarations: do not edit.
"""

from collections.abc import Callable, Mapping, Sequence
from os import PathLike
from typing import Any, Literal

from ._nostall import Field, Mixup
from ._nostall import Loader as _Engine
from ._remote import Remote

__all__ = ["Loader", "is_path", "texts"]

def is_path(obj: Any) -> bool: ...
def texts(given: Mapping[str, Any]) -> list[tuple[str, str]]: ...

class Loader(_Engine):
    """A data loader: iterate over it for the batches of one epoch (``help(nostall.Loader)``
    has every setting)."""

    def __new__(
        cls,
        source: str | PathLike[str] | Sequence[str | PathLike[str]] | Any,
        *,
        pipeline: str | Sequence[Any] | Any = "train",
        image_size: int | None = None,
        dtype: Literal["float32", "uint8"] = "float32",
        layout: Literal["CHW", "HWC"] = "CHW",
        pad_to_largest: int | None = None,
        batch_size: int = 64,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        aug_repeats: int = 1,
        shard: Literal["pad", "drop"] = "pad",
        rank: int | None = None,
        world_size: int | None = None,
        threads: int | Literal["auto"] = "auto",
        balance_ranks: bool | None = None,
        fetch_threads: int = 128,
        adaptive_reads: bool = True,
        adaptive_prep: bool = True,
        worker_nice: int | None = None,
        prefetch: int = 4,
        overlap_epochs: bool = True,
        on_error: Literal["error", "skip"] = "error",
        quarantine: str | PathLike[str] | None = None,
        cache: int | float | str | None = None,
        cache_policy: Literal["none", "minio", "lookahead", "frequency", "lru", "partitioned"] | None = None,
        cache_epochs: int = 0,
        cache_fill: Literal["background", "before"] = "background",
        readahead: int | str = 67108864,
        memory: int | str | None = None,
        group_memory: int | str | None = None,
        frame_index_cache: int | str = 67108864,
        read: Literal["cached", "cold"] = "cached",
        throttle: str | None = None,
        label_column: str = "auto",
        output: Literal["auto", "torch", "numpy", "dlpack"] = "auto",
        metrics_addr: str | None = None,
        share: str | None = None,
        remote: Remote | None = None,
        device: str | None = None,
        decode: Literal["auto", "gpu", "cpu"] = "auto",
        gpu_decode_min_pixels: int = 1000000,
        image_column: str | None = None,
        audio_column: str | None = None,
        mix: Mixup | None = None,
        batch_transform: Callable[..., Any] | None = None,
        stack_views: bool = False,
        fields: Mapping[str, str | Field] | None = None,
        weights: Sequence[float] | None = None,
        workers: Literal["auto", "threads", "processes"] | None = None,
        worker_init_fn: Callable[[int], None] | None = None,
        timeout: float | None = None,
    ) -> Loader: ...
