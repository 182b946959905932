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

They go in this order: ``Channels`` (mono by default), ``Resample``, a crop
(``RandomCrop`` or ``CenterCrop``: required, it fixes the length so that samples can be
batched), ``MelSpectrogram`` (at the resampled rate), ``Log``, each at most once; then,
on the spectrogram as delivered, any number of SpecAugment's masks (``FrequencyMasking``,
``TimeMasking``). The output is float32 ``[n, channels, length]``, or ``[n, n_mels,
frames]`` with a spectrogram. ``Resample``, ``MelSpectrogram`` and the masks take
torchaudio's parameters, with its defaults, and give its values (see docs/audio.md). Only
the frames a crop keeps are decoded and resampled.

The presets ``pipeline="m5"`` and ``pipeline="melspec"`` are such lists (``"m5-val"`` and
``"melspec-val"`` with ``CenterCrop``). The operators check their arguments when made and
raise ``nostall.ConfigError`` (a ``ValueError``) for values the engine cannot use; their
order is checked when the ``Loader`` is made.

Every class here is made from the engine's declaration of its operator (name,
parameters, defaults, docs): the engine is where an operator is defined, once.
"""

from __future__ import annotations

from ._declared import operator_class
from ._nostall import AudioOp as Op
from ._nostall import _audio_operators

__all__ = ["Op"]

for _name, _doc, _params in _audio_operators():
    globals()[_name] = operator_class(Op, __name__, _name, _doc, _params)
    __all__.append(_name)
__all__.sort()
del _name, _doc, _params
