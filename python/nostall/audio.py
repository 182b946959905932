"""Operators of an audio pipeline, torchaudio style: a list of them is a Loader's ``pipeline``.

>>> import nostall
>>> from nostall import audio
>>> loader = nostall.Loader("/data/fma/train", batch_size=32, pipeline=[
...     audio.Channels(1),
...     audio.Resample(16000),
...     audio.RandomCrop(64000),
...     audio.MelSpectrogram(16000, n_fft=400, hop_length=160, n_mels=64),
...     audio.Log(1e-6),
... ])

They go in this order, each at most once: ``Channels`` (mono by default), ``Resample``,
a crop (``RandomCrop`` or ``CenterCrop``: required, it fixes the length so that samples can
be batched), ``MelSpectrogram`` (at the resampled rate), ``Log``. The output is float32
``[n, channels, length]``, or ``[n, n_mels, frames]`` with a spectrogram. ``Resample`` and
``MelSpectrogram`` take torchaudio's parameters, with its defaults, and give its values
(see docs/audio.md). Only the frames a crop keeps are decoded and resampled.

The presets ``pipeline="m5"`` and ``pipeline="melspec"`` are such lists (``"m5-val"`` and
``"melspec-val"`` with ``CenterCrop``). The operators check their arguments when made and
raise ``nostall.ConfigError`` (a ``ValueError``) for values the engine cannot use; their
order is checked when the ``Loader`` is made.
"""

from __future__ import annotations

from ._nostall import AudioCenterCrop as CenterCrop
from ._nostall import AudioOp as Op
from ._nostall import Channels, Log, MelSpectrogram, RandomCrop, Resample

__all__ = [
    "CenterCrop",
    "Channels",
    "Log",
    "MelSpectrogram",
    "Op",
    "RandomCrop",
    "Resample",
]
