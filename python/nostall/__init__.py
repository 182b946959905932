"""nostall: a data-loading runtime for deep-learning training; the GPU never waits for data.

The engine is written in Rust: one pool of workers, each fetching or preparing as a
scheduler says, reads samples along a seeded plan, decodes only the part of each JPEG a
random crop keeps, and writes every prepared sample straight into its slot of a reusable
batch buffer. This package gives it Python's arguments, datasets, code and tensors:

>>> import nostall
>>> loader = nostall.Loader("/data/imagenet/train", batch_size=256, threads=8)
>>> for epoch in range(90):
...     loader.set_epoch(epoch)
...     for images, labels in loader:   # torch tensors: [256, 3, 224, 224] float32, [256] int64
...         ...
...     print(loader.metrics["images_per_s"], loader.metrics["stall_s"])

The pipeline is a preset (``"train"``, ``"val"``) or a list of operators from
:mod:`nostall.ops`, with the output's element type and layout:

>>> from nostall import ops
>>> loader = nostall.Loader("/data/imagenet/train", pipeline=[
...     ops.RandomResizedCrop(224), ops.RandomHorizontalFlip()], dtype="uint8", layout="HWC")

Audio datasets (class folders or shards of ``.wav``, ``.flac``, ``.ogg``, ``.opus``, ``.mp3``) take an
audio preset: ``"m5"`` (the data-stall paper's M5 input: mono, resampled to 8 kHz, a
random 32 000-sample crop, ``[n, 1, 32000]``) or ``"melspec"`` (16 kHz, a random 4 s crop,
64 log-mel bands of 25 ms windows every 10 ms, ``[n, 64, 401]``), and ``"m5-val"`` /
``"melspec-val"`` with centre crops:

>>> loader = nostall.Loader("/data/fma/train", pipeline="m5", batch_size=32)

or a list of operators from :mod:`nostall.audio` (``Channels``, ``Resample``,
``RandomCrop``, ``CenterCrop``, ``MelSpectrogram``, ``Log``, ``FrequencyMasking``,
``TimeMasking``: torchaudio's parameters).

Batches reach Python without a copy (DLPack): the tensor's memory is the loader's batch
buffer, and it returns to the loader's pool when the tensor is freed. The GIL is released
while the loader works and while Python waits for a batch. Under ``torchrun`` each rank
reads its own shard (``RANK`` / ``WORLD_SIZE`` from the environment) with the same number
of batches on every rank.

Public names:

- :class:`Loader`: the data loader (a dataset's location, or a map-style ``Dataset``
  object whose ``__getitem__`` it runs: in worker processes under the GIL, in its
  threads on a free-threaded interpreter).
- :class:`DataLoader`: ``torch.utils.data.DataLoader``'s arguments over nostall (a
  torchvision ``ImageFolder`` whose transform nostall translates runs natively).
- :func:`sample_generator`: in a ``Dataset``'s ``__getitem__``, the sample's own
  generator (the same draws whatever thread or worker makes it).
- :mod:`nostall.ops`: the operators of an image pipeline, one class for each operator
  the engine declares (``nostall.ops.__all__`` lists them): crops, resizes and flips,
  colour and pixel operators, blur, rotation and affine, torchvision's and timm's
  automatic augmentations, random erasing, and ``RandomApply`` / ``RandomChoice`` /
  ``RandomOrder``; besides them ``ops.Python(fn)``, your own function on each sample, and
  ``ops.from_torchvision``, a torchvision or timm recipe as nostall's operators.
- :mod:`nostall.audio`: the operators of an audio pipeline (``Channels``, ``Resample``,
  ``RandomCrop``, ``CenterCrop``, ``MelSpectrogram``, ``Log``, and SpecAugment's
  ``FrequencyMasking`` and ``TimeMasking``).
- :mod:`nostall.video`: ``Clip``, the frames of a video a sample holds; the image
  operators of ``nostall.ops`` after it run on each frame, one draw per clip.
- :func:`imagenet_train`, :func:`imagenet_val`: the ImageNet presets as operator lists.
- :class:`Remote`, :class:`Scaling`: batches prepared by Ray actors on other machines as
  well (``remote=``), their number following the stall.
- :class:`Mixup`: MixUp and CutMix of each batch in the engine, as timm's (``mix=``).
- :class:`Field`, :class:`Tokenizer`: a sample's named fields (``fields=``), and a
  Hugging Face tokenizer run in the engine for a text field.
- :class:`BatchTensor`: one tensor of a batch as a DLPack producer (``output="dlpack"``).
- :func:`demo_photos`: writes a few real photographs to disk, a dataset to try nostall on.
- :func:`analyze`: where training waits for data and what would fix it (``nostall
  analyze``, DS-Analyzer), returning an :class:`AnalysisReport`; :func:`time_model`:
  the rate of a training step on synthetic batches, samples/s.
- Exceptions: :class:`NostallError` (base), :class:`SampleError`, :class:`ConfigError`
  (a ``ValueError``), :class:`StorageError` (an ``OSError``), :class:`PeerError` (a
  ``ConnectionError``: the nodes of a partitioned cache cannot reach each other),
  :class:`StepError` (a training step being timed raised), :class:`AgentError` (the
  node agent of ``share=`` could not be started, reached, or refused the job).
- ``python -m nostall.agent``: the node agent, through which jobs on a node that read
  the same stream share one fetch and prep pass (``Loader(..., share="auto")``).
"""

from __future__ import annotations

from . import audio, ops, video
from ._analyze import AnalysisReport, analyze, time_model
from ._dataloader import DataLoader
from ._errors import AgentError, ConfigError, NostallError, PeerError, SampleError, StepError, StorageError
from ._loader import Loader
from ._remote import Remote, Scaling
from ._nostall import BatchTensor, Field, Mixup, Tokenizer, __version__, demo_photos, imagenet_train, imagenet_val
from ._user_code import sample_generator

# The extension calls back into these; it never imports the package itself.
from . import _device, _errors, _fields, _python_ops, _tokenizer, _user_code  # noqa: E402
from . import _nostall as _extension  # noqa: E402

_extension._connect(_errors, ops, _python_ops, _user_code, _fields, _tokenizer, _device)

__all__ = [
    "AgentError",
    "AnalysisReport",
    "BatchTensor",
    "ConfigError",
    "DataLoader",
    "Field",
    "Loader",
    "Mixup",
    "NostallError",
    "PeerError",
    "Remote",
    "SampleError",
    "Scaling",
    "StepError",
    "StorageError",
    "Tokenizer",
    "__version__",
    "analyze",
    "audio",
    "demo_photos",
    "imagenet_train",
    "imagenet_val",
    "ops",
    "sample_generator",
    "time_model",
    "video",
]
