"""Batches on a CUDA device (``Loader(..., device="cuda")``), through PyTorch's CUDA.

The engine writes each batch into page-locked memory (its buffers are registered with the
CUDA runtime as they are made) as 8-bit HWC pixels: a quarter of the bytes of float32.
The JPEGs its route leaves to the device (``decode="auto"`` or ``"gpu"``) it also queues
the moment a prep thread leaves them; the :class:`Decoder`, a thread of its own, takes
them as they come, as many at a time as have come, decodes them with torchvision's
batched nvJPEG decode (on the hardware decoder where the GPU has one) and crops, resizes
and mirrors each as the engine planned, on a stream of its own. So the device decodes
while the training step runs, and the decode's waits (torchvision's call returns only
once its batch is decoded) are that thread's, not the training thread's.

For each batch the :class:`Stager`, on a side stream of its own:

1. copies the pixels to the device (asynchronously: the memory is page-locked);
2. puts the batch's decoded samples in their slots (waiting, if it must, for the
   decoder to reach them);
3. converts to the pipeline's type and layout, normalised where it had ``Normalize``;

then records an event, which the consumer's current stream waits on before it reads the
batch (the order DLPack's stream protocol gives): the copy overlaps the previous training
step, and the training step never reads a batch before it is complete. The host batch is
kept until its copy has finished, so that its buffer returns to the engine only then.

The CUDA libraries are PyTorch's, loaded at run time: nothing here is needed to build or
test nostall without a GPU, and asking for a device that is not there is a clear error.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import os
import threading
import weakref
from typing import Any, Callable

from ._errors import ConfigError, SampleError

#: A sample of a batch that the engine left to the device: slot in the batch, epoch,
#: sample id, location. The epoch and id name it (they fix its augmentation).
Deferred = tuple[int, int, int, str]

#: A sample as the engine's queue hands it to the decoder: epoch, sample id, encoded
#: bytes, region (x, y, w, h in source pixels), output (width, height), mirrored or not.
Queued = tuple[int, int, bytearray, tuple[float, float, float, float], tuple[int, int], bool]

#: The most samples one batched decode takes: a group's decoded images are held at once
#: (a 12-megapixel image is 36 MB).
MOST_AT_ONCE = 128

#: How long the decoder waits for samples before it checks whether it is to stop, and how
#: long a batch waits for the decoder between checks that it is still running (seconds).
POLL = 0.1


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
    or a dict of ``dtype`` and ``layout`` (what the user's pipeline produces), for a
    video's clips ``clip`` (``"TCHW"`` or ``"CTHW"``, the Clip's layout) and, where it
    normalised, ``mean`` and ``std`` in [0, 1] units. ``queue`` is where the engine
    queues the samples it leaves to the device (an object whose ``take(most, timeout)``
    returns a list of :data:`Queued`); ``None`` where it leaves none. ``device`` may be
    any torch device (the tests run the decode path on the CPU).
    """

    def __init__(self, index: int | str, finish: dict[str, Any] | None,
                 queue: Any = None) -> None:
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
        self.decoder = Decoder(self.device, queue) if queue is not None else None
        # Host batches whose copies may still be running, with the events that end them.
        self.in_flight: collections.deque[tuple[Any, Any]] = collections.deque()
        self.batches = 0

    def __del__(self) -> None:
        decoder = getattr(self, "decoder", None)
        if decoder is not None:
            decoder.close()

    def stage(self, images: Any, labels: Any, deferred: list[Deferred],
              transform: Callable[[Any, Any], tuple[Any, Any]] | None = None) -> tuple[Any, Any]:
        """The batch on the device, in the consumer's stream order; ``transform`` (the
        loader's ``batch_transform``) run on it in the side stream, after the conversion."""
        import torch

        self._release_copied()
        consumer = torch.cuda.current_stream(self.device) if self.cuda else None
        decoded = self._decoded(deferred)
        # The side stream does not wait for the consumer's queued work (the step before):
        # the copy of this batch overlaps it. Memory the consumer used is not reused here
        # before its work is done: what it received was recorded on its stream.
        with torch.cuda.stream(self.stream) if self.cuda else contextlib.nullcontext():
            pixels = images.to(self.device, non_blocking=True)
            out_labels = labels.to(self.device, non_blocking=True)
            if decoded:
                self._put(pixels, deferred, decoded)
            out = self._finish(pixels)
            if transform is not None:
                out, out_labels = transform(out, out_labels)
            done = None
            if self.stream is not None and consumer is not None:
                done = self.stream.record_event()
                consumer.wait_event(done)
                out.record_stream(consumer)
                out_labels.record_stream(consumer)
                self.in_flight.append((done, images))
        self.batches += 1
        return out, out_labels

    def stage_record(self, record: Any, labels: Any, varying: dict[str, list[Any]],
                     deferred: list[Deferred], split: Any,
                     transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                     cut: Any = None) -> dict[str, Any]:
        """A batch of records (``Loader(fields=...)``) on the device: its one buffer copied
        as it is, ``split`` (``nostall._fields.Split``) into its fields there (cut to its
        largest image with ``cut``), the pipeline's field decoded and finished as
        :meth:`stage` does the images; text, JSON and bytes stay on the host.
        ``transform`` runs on the dictionary after."""
        import torch

        self._release_copied()
        consumer = torch.cuda.current_stream(self.device) if self.cuda else None
        decoded = self._decoded(deferred)
        with torch.cuda.stream(self.stream) if self.cuda else contextlib.nullcontext():
            on_device = record.to(self.device, non_blocking=True)
            out = split(on_device, labels.to(self.device, non_blocking=True), varying, cut=cut)
            pixels = out[split.sample]
            if decoded:
                self._put(pixels, deferred, decoded)
            out[split.sample] = self._finish(pixels)
            if transform is not None:
                out = transform(out)
            if self.stream is not None and consumer is not None:
                done = self.stream.record_event()
                consumer.wait_event(done)
                on_device.record_stream(consumer)
                for value in out.values():
                    for tensor in value if isinstance(value, tuple) else (value,):
                        if isinstance(tensor, torch.Tensor):
                            tensor.record_stream(consumer)
                self.in_flight.append((done, record))
        self.batches += 1
        return out

    def metrics(self) -> dict[str, Any]:
        """What the stager did: batches moved, samples decoded on the device, groups whose
        batched device decode failed and were decoded one by one."""
        decoder = self.decoder
        return {"device": str(self.device), "batches": self.batches,
                "decoded_on_device": decoder.decoded if decoder else 0,
                "decode_fallbacks": decoder.fallbacks if decoder else 0}

    def _release_copied(self) -> None:
        while self.in_flight and self.in_flight[0][0].query():
            self.in_flight.popleft()

    def _decoded(self, deferred: list[Deferred]) -> list[Decoded]:
        """The batch's samples as the decoder made them; a sample no decoder could read
        raises :class:`SampleError` naming it."""
        if not deferred:
            return []
        if self.decoder is None:
            raise RuntimeError("a batch has samples left to the device, and no decoder")
        decoded = self.decoder.take([(epoch, sample) for _, epoch, sample, _ in deferred])
        for (_, _, sample, location), (pixels, _) in zip(deferred, decoded):
            if isinstance(pixels, Failed):
                raise SampleError(
                    f"{location} (sample {sample}) could not be decoded on {self.device} "
                    f"({pixels.device_error}) nor on the CPU ({pixels.error})",
                    sample_id=sample, location=location, cause="corrupt",
                    detail=pixels.error) from None
        return decoded

    def _put(self, pixels: Any, deferred: list[Deferred], decoded: list[Decoded]) -> None:
        """The decoded samples into their slots of ``pixels`` (NHWC, 8-bit), on the side
        stream, once the decoder's work on them is done."""
        for event in {id(e): e for _, e in decoded if e is not None}.values():
            self.stream.wait_event(event)  # type: ignore[union-attr]
        for (slot, _, _, _), (sample, _) in zip(deferred, decoded):
            if self.stream is not None:
                # Made on the decoder's stream, read on this one: not reused before that.
                sample.record_stream(self.stream)
            pixels[slot].copy_(sample)

    def _finish(self, pixels: Any) -> Any:
        """8-bit NHWC pixels in the type and layout the pipeline asked for. CHW comes out
        channels-last in memory (what convolutions on tensor cores want), NCHW in shape.
        A video's clips come frames first (``[N, (clips,) T, H, W, C]``) and go where the
        Clip's layout puts the channels: before the height (``TCHW``) or before the frames
        (``CTHW``, channels-last-3d in memory), or stay last with the HWC layout."""
        if self.finish is None:
            return pixels
        # Where the channels go, counted from the end.
        axis = -1
        if self.finish["layout"] == "CHW":
            axis = -4 if self.finish.get("clip") == "CTHW" else -3
        x = pixels.movedim(-1, axis)
        if self.scale is None:
            return x
        view = (3,) + (1,) * (-axis - 1)
        return x.float().mul_(self.scale.view(view)).add_(self.shift.view(view))


#: The decoders whose threads may run: stopped and joined as the interpreter exits (a
#: thread still in PyTorch then aborts the process).
_RUNNING: weakref.WeakSet[Decoder] = weakref.WeakSet()


@atexit.register
def _stop_decoders() -> None:
    running = list(_RUNNING)
    for decoder in running:
        decoder.close()
    for decoder in running:
        decoder.thread.join()


class Failed:
    """A sample neither the device's decoder nor the CPU's could read."""

    def __init__(self, device_error: str, error: str) -> None:
        self.device_error = device_error
        self.error = error


#: A decoded sample (HWC, 8-bit, on the device) or why there is none, with the event
#: that ends the decoder's work on it (``None`` off CUDA).
Decoded = tuple[Any, Any]


class Decoder:
    """Decodes the samples the engine leaves to the device as they come, on a thread and
    a CUDA stream of its own (see the module docs), and keeps each, by epoch and sample
    id, until its batch takes it.

    A sample may be decoded more than once (an epoch left and run again); each decoding
    is kept and the batch takes the oldest, which is the same sample with the same
    augmentation. Those of epochs before a batch's are dropped when it takes its own.
    """

    def __init__(self, device: Any, queue: Any) -> None:
        import torch

        self.device = device
        self.queue = queue
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.ready: dict[tuple[int, int], collections.deque[Decoded]] = {}
        self.changed = threading.Condition()
        self.error: BaseException | None = None
        self.stopping = False
        self.decoded = 0
        self.fallbacks = 0
        # The thread holds the decoder, not the stager: a stager dropped stops it.
        self.thread = threading.Thread(target=self._run, name="nostall-device-decoder",
                                       daemon=True)
        self.thread.start()
        _RUNNING.add(self)

    def close(self) -> None:
        """Stops the thread once its current group is done."""
        self.stopping = True

    def take(self, keys: list[tuple[int, int]]) -> list[Decoded]:
        """The decoded samples named by ``keys`` (epoch, sample id), waiting for the
        decoder to reach them."""
        epoch = min(e for e, _ in keys)
        wanted = collections.Counter(keys)
        with self.changed:
            for key in [k for k in self.ready if k[0] < epoch]:
                del self.ready[key]
            while True:
                if all(len(self.ready.get(k, ())) >= n for k, n in wanted.items()):
                    taken = [self.ready[k].popleft() for k in keys]
                    for k in wanted:
                        if not self.ready[k]:
                            del self.ready[k]
                    return taken
                if self.error is not None:
                    raise RuntimeError(f"nostall's device decoder stopped: {self.error!r}") \
                        from self.error
                self.changed.wait(POLL)

    def _run(self) -> None:
        import torch

        try:
            with torch.cuda.stream(self.stream) if self.stream else contextlib.nullcontext():
                while not self.stopping:
                    group = self.queue.take(MOST_AT_ONCE, POLL)
                    if group:
                        self._decode(group)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, which raises it
            with self.changed:
                self.error = e
                self.changed.notify_all()

    def _decode(self, group: list[Queued]) -> None:
        import torch

        from torchvision.io import ImageReadMode, decode_jpeg  # type: ignore[import-untyped]

        datas = [torch.frombuffer(q[2], dtype=torch.uint8) for q in group]
        images: list[Any]
        try:
            images = decode_jpeg(datas, mode=ImageReadMode.RGB, device=self.device)
        except RuntimeError:
            # One bad file fails nvJPEG's whole batch: decode one by one.
            self.fallbacks += 1
            images = [self._decode_one(data) for data in datas]
        pixels = _crop_resize_all(images, [(q[3], q[4], q[5]) for q in group])
        made = [((q[0], q[1]), p) for q, p in zip(group, pixels)]
        event = self.stream.record_event() if self.stream is not None else None
        with self.changed:
            for key, pixels in made:
                self.ready.setdefault(key, collections.deque()).append((pixels, event))
            self.decoded += len(group)
            self.changed.notify_all()

    def _decode_one(self, data: Any) -> Any:
        from torchvision.io import ImageReadMode, decode_jpeg  # type: ignore[import-untyped]

        try:
            return decode_jpeg(data, mode=ImageReadMode.RGB, device=self.device)
        except RuntimeError as device_error:
            try:
                # The CPU's decoder (libjpeg-turbo) tolerates what it can, as nostall's does.
                return decode_jpeg(data, mode=ImageReadMode.RGB).to(self.device)
            except RuntimeError as e:
                return Failed(str(device_error), str(e))


def _crop_resize_all(images: list[Any],
                     geometry: list[tuple[tuple[float, float, float, float], tuple[int, int], bool]]
                     ) -> list[Any]:
    """Each CHW 8-bit image's region (x, y, w, h in source pixels) resized to its output
    (width, height) (bilinear, antialiased when shrinking, as nostall's CPU resampler and
    PIL) and mirrored if asked: HWC 8-bit tensors, in order; a :class:`Failed` stays as
    it is. Each image costs its crop's conversion and resize; the mirroring, rounding and
    conversion back are done once for all the images of an output size (the decoder's
    thread issues each operation from Python: fewer of them is what it can do more of)."""
    import torch

    done: list[Any] = list(images)
    alike: dict[tuple[int, int, bool], list[tuple[int, Any]]] = {}
    for i, (image, ((x, y, w, h), (width, height), flip)) in enumerate(zip(images, geometry)):
        if isinstance(image, Failed):
            continue
        _, rows, cols = image.shape
        # At least one pixel, inside the image, whatever the region says.
        left, top = min(cols - 1, max(0, int(round(x)))), min(rows - 1, max(0, int(round(y))))
        right = min(cols, max(left + 1, int(round(x + w))))
        bottom = min(rows, max(top + 1, int(round(y + h))))
        crop = image[:, top:bottom, left:right].unsqueeze(0).float()
        resized = torch.nn.functional.interpolate(crop, size=(height, width), mode="bilinear",
                                                  align_corners=False, antialias=True)
        alike.setdefault((height, width, flip), []).append((i, resized))
    for (_, _, flip), members in alike.items():
        batch = torch.cat([resized for _, resized in members])
        if flip:
            batch = batch.flip(-1)
        pixels = batch.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1)
        for (i, _), sample in zip(members, pixels):
            done[i] = sample
    return done
