"""Batches on a CUDA device (``Loader(..., device="cuda")``), through PyTorch's CUDA.

The engine writes each batch into page-locked memory (its buffers are registered with the
CUDA runtime as they are made) as 8-bit HWC pixels: a quarter of the bytes of float32.
For each batch the :class:`Stager`, on a side stream of its own:

1. copies the pixels to the device (asynchronously: the memory is page-locked);
2. decodes on the device the JPEGs the engine's route left to it (``decode="auto"`` or
   ``"gpu"``: torchvision's batched nvJPEG decode, on the hardware decoder where the GPU
   has one), and crops, resizes and mirrors each as the engine planned, into its slot;
3. converts to the pipeline's type and layout, normalised where it had ``Normalize``;

then records an event, which the consumer's current stream waits on before it reads the
batch (the order DLPack's stream protocol gives): the copy and decode overlap the previous
training step, and the training step never reads a batch before it is complete. The host
batch is kept until its copy has finished, so that its buffer returns to the engine only
then.

The CUDA libraries are PyTorch's, loaded at run time: nothing here is needed to build or
test nostall without a GPU, and asking for a device that is not there is a clear error.
"""

from __future__ import annotations

import collections
import contextlib
import os
from typing import Any

from ._errors import ConfigError, SampleError

#: A JPEG the engine left to the device: slot in the batch, encoded bytes, region (x, y,
#: w, h in source pixels), mirrored or not, sample id, location.
Deferred = tuple[int, bytearray, tuple[float, float, float, float], bool, int, str]


def resolve(device: str) -> int:
    """The CUDA device index ``device`` names: ``"cuda"`` is ``cuda:LOCAL_RANK`` under
    torchrun (the device of this rank), ``cuda:0`` otherwise; ``"cuda:N"`` is device N."""
    kind, _, index_text = str(device).partition(":")
    if kind != "cuda":
        raise ConfigError(f"device={device!r}: use \"cuda\" or \"cuda:N\" (batches on a CUDA GPU)")
    try:
        import torch
    except ImportError as e:
        raise ConfigError(f"device={device!r} needs PyTorch with CUDA support: {e}") from None
    if not torch.cuda.is_available():
        raise ConfigError(
            f"device={device!r}: no CUDA device is available to PyTorch "
            f"(torch {torch.__version__}, CUDA {torch.version.cuda}); leave device out to "
            "receive CPU tensors")
    if index_text:
        try:
            index = int(index_text)
        except ValueError:
            raise ConfigError(f"device={device!r}: the device number must be an integer") from None
    else:
        index = int(os.environ.get("LOCAL_RANK", "0"))
    count = torch.cuda.device_count()
    if not 0 <= index < count:
        raise ConfigError(f"device={device!r}: cuda:{index} asked for, and this machine has "
                          f"{count} CUDA device(s)")
    # The engine registers its buffers with the runtime PyTorch loaded: initialise it first.
    torch.cuda.init()
    return index


class Stager:
    """Moves batches to device ``index`` and finishes them there (see the module docs).

    ``finish`` is ``None`` (batches moved as they are: audio, or a pipeline made in code)
    or a dict of ``dtype`` and ``layout`` (what the user's pipeline produces) and, where
    it normalised, ``mean`` and ``std`` in [0, 1] units. ``device`` may be any torch
    device (the tests run the decode path on the CPU).
    """

    def __init__(self, index: int | str, finish: dict[str, Any] | None) -> None:
        import torch

        self.device = torch.device("cuda", index) if isinstance(index, int) else torch.device(index)
        self.cuda = self.device.type == "cuda"
        self.stream = torch.cuda.Stream(self.device) if self.cuda else None
        self.finish = finish
        self.scale: Any = None
        self.shift: Any = None
        if finish is not None and finish["dtype"] == "float32":
            mean = finish.get("mean", [0.0, 0.0, 0.0])
            std = finish.get("std", [1.0, 1.0, 1.0])
            # (x / 255 - mean) / std as one multiply-add on the 8-bit values.
            self.scale = torch.tensor([1 / (255 * s) for s in std], device=self.device)
            self.shift = torch.tensor([-m / s for m, s in zip(mean, std)], device=self.device)
        # Host batches whose copies may still be running, with the events that end them.
        self.in_flight: collections.deque[tuple[Any, Any]] = collections.deque()
        self.batches = 0
        self.decoded = 0
        self.decode_fallbacks = 0

    def stage(self, images: Any, labels: Any, deferred: list[Deferred]) -> tuple[Any, Any]:
        """The batch on the device, in the consumer's stream order."""
        import torch

        self._release_copied()
        consumer = torch.cuda.current_stream(self.device) if self.cuda else None
        # The side stream does not wait for the consumer's queued work (the step before):
        # the copy and decode of this batch overlap it. Memory the consumer used is not
        # reused here before its work is done: what it received was recorded on its stream.
        with torch.cuda.stream(self.stream) if self.cuda else contextlib.nullcontext():
            pixels = images.to(self.device, non_blocking=True)
            out_labels = labels.to(self.device, non_blocking=True)
            if deferred:
                self._decode_into(pixels, deferred)
            out = self._finish(pixels)
            done = None
            if self.stream is not None and consumer is not None:
                done = self.stream.record_event()
                consumer.wait_event(done)
                out.record_stream(consumer)
                out_labels.record_stream(consumer)
                self.in_flight.append((done, images))
        self.batches += 1
        return out, out_labels

    def metrics(self) -> dict[str, Any]:
        """What the stager did: batches moved, samples decoded on the device, batches whose
        device decode failed and fell back sample by sample."""
        return {"device": str(self.device), "batches": self.batches,
                "decoded_on_device": self.decoded, "decode_fallbacks": self.decode_fallbacks}

    def _release_copied(self) -> None:
        while self.in_flight and self.in_flight[0][0].query():
            self.in_flight.popleft()

    def _finish(self, pixels: Any) -> Any:
        """8-bit NHWC pixels in the type and layout the pipeline asked for. CHW comes out
        channels-last in memory (what convolutions on tensor cores want), NCHW in shape."""
        if self.finish is None:
            return pixels
        x = pixels.permute(0, 3, 1, 2) if self.finish["layout"] == "CHW" else pixels
        if self.scale is None:
            return x
        view = (1, 3, 1, 1) if self.finish["layout"] == "CHW" else (1, 1, 1, 3)
        return x.float().mul_(self.scale.view(view)).add_(self.shift.view(view))

    def _decode_into(self, pixels: Any, deferred: list[Any]) -> None:
        """Decodes the deferred JPEGs on the device, each cropped, resized and mirrored as
        the engine planned, into its slot of ``pixels`` (NHWC, 8-bit)."""
        import torch

        from torchvision.io import ImageReadMode, decode_jpeg  # type: ignore[import-untyped]

        datas = [torch.frombuffer(d[1], dtype=torch.uint8) for d in deferred]
        try:
            decoded = decode_jpeg(datas, mode=ImageReadMode.RGB, device=self.device)
        except RuntimeError:
            # One bad file fails nvJPEG's whole batch: decode one by one, naming the one.
            self.decode_fallbacks += 1
            decoded = [self._decode_one(data, d) for data, d in zip(datas, deferred)]
        height, width = pixels.shape[1], pixels.shape[2]
        for image, (slot, _, region, flip, _, _) in zip(decoded, deferred):
            pixels[slot] = _crop_resize(image, region, height, width, flip)
        self.decoded += len(deferred)

    def _decode_one(self, data: Any, sample: Any) -> Any:
        from torchvision.io import ImageReadMode, decode_jpeg  # type: ignore[import-untyped]

        try:
            return decode_jpeg(data, mode=ImageReadMode.RGB, device=self.device)
        except RuntimeError as device_error:
            try:
                # The CPU's decoder (libjpeg-turbo) tolerates what it can, as nostall's does.
                return decode_jpeg(data, mode=ImageReadMode.RGB).to(self.device)
            except RuntimeError as e:
                raise SampleError(
                    f"{sample[5]} (sample {sample[4]}) could not be decoded on {self.device} "
                    f"({device_error}) nor on the CPU ({e})", sample_id=sample[4],
                    location=sample[5], cause="corrupt", detail=str(e)) from None


def _crop_resize(image: Any, region: tuple[float, float, float, float], height: int, width: int,
                 flip: bool) -> Any:
    """``region`` (x, y, w, h in source pixels) of a CHW 8-bit image, resized to
    ``height`` × ``width`` (bilinear, antialiased when shrinking, as nostall's CPU
    resampler and PIL), mirrored if ``flip``: an HWC 8-bit tensor."""
    import torch

    x, y, w, h = region
    _, rows, cols = image.shape
    left, top = max(0, int(round(x))), max(0, int(round(y)))
    right, bottom = min(cols, max(left + 1, int(round(x + w)))), min(rows, max(top + 1, int(round(y + h))))
    crop = image[:, top:bottom, left:right].unsqueeze(0).float()
    out = torch.nn.functional.interpolate(crop, size=(height, width), mode="bilinear",
                                          align_corners=False, antialias=True)
    if flip:
        out = out.flip(-1)
    return out[0].round_().clamp_(0, 255).to(torch.uint8).permute(1, 2, 0)
