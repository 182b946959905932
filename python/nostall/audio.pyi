"""Type stubs of nostall.audio: the operators of an audio pipeline.

Written by python/write_ops_stub.py from the engine's declarations: do not edit.
"""

from collections.abc import Sequence
from typing import Any, final

from typing_extensions import disjoint_base

__all__ = [
    "CenterCrop",
    "Channels",
    "FrequencyMasking",
    "Log",
    "MelSpectrogram",
    "Op",
    "RandomCrop",
    "Resample",
    "TimeMasking",
]

@disjoint_base
class Op:
    """An operator of an audio pipeline: the base class of the operators of
    ``nostall.audio``.

    Operators are made by their subclasses and cannot be changed once made; a list of
    them is the ``pipeline`` of a ``nostall.Loader``. Two operators are equal when they
    do the same thing.
    """

    def __new__(cls, name: str, args: Sequence[Any], kwargs: dict[str, Any] | None) -> Op: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def _arg(self, name: str) -> Any: ...
    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]: ...

@final
class Channels(Op):
    """Keeps ``count`` channels: 1 mixes every file to mono (the mean of its channels, as
    ``waveform.mean(dim=0)``); more keeps that many and refuses files with another count.

    - ``count`` (``1``): channels kept, 1 (mono) to 64.
    """

    def __new__(cls, count: int = 1) -> Channels: ...
    @property
    def count(self) -> int:
        """Channels kept, 1 (mono) to 64."""

@final
class Resample(Op):
    """Resamples to ``rate`` Hz with torchaudio's band-limited sinc interpolation
    (``torchaudio.functional.resample``, same parameters and defaults); files already at
    ``rate`` pass unchanged.

    - ``rate``: target rate, Hz (1 to 768 000).
    - ``lowpass_filter_width`` (``6``): zero crossings of the sinc kept on each side.
    - ``rolloff`` (``0.99``): cut-off as a fraction of the lower Nyquist frequency, in (0,
      1].
    - ``resampling_method`` (``'sinc_interp_hann'``): ``'sinc_interp_hann'`` or
      ``'sinc_interp_kaiser'``.
    - ``beta`` (``None``): the Kaiser window's shape, with ``'sinc_interp_kaiser'``
      (``None`` there is torchaudio's 14.769656459379492).
    """

    def __new__(cls, rate: int, lowpass_filter_width: int = 6, rolloff: float = 0.99, resampling_method: str = 'sinc_interp_hann', beta: float | None = None) -> Resample: ...
    @property
    def rate(self) -> int:
        """Target rate, Hz (1 to 768 000)."""
    @property
    def lowpass_filter_width(self) -> int:
        """Zero crossings of the sinc kept on each side."""
    @property
    def rolloff(self) -> float:
        """Cut-off as a fraction of the lower Nyquist frequency, in (0, 1]."""
    @property
    def resampling_method(self) -> str:
        """``'sinc_interp_hann'`` or ``'sinc_interp_kaiser'``."""
    @property
    def beta(self) -> float | None:
        """The Kaiser window's shape, with ``'sinc_interp_kaiser'`` (``None`` there is torchaudio's 14.769656459379492)."""

@final
class RandomCrop(Op):
    """A random window of ``length`` samples (at the output rate), chosen from the seed, the
    epoch and the sample; shorter clips are padded with zeros at the end.

    - ``length``: samples kept, 1 to 2^28.
    """

    def __new__(cls, length: int) -> RandomCrop: ...
    @property
    def length(self) -> int:
        """Samples kept, 1 to 2^28."""

@final
class CenterCrop(Op):
    """The middle ``length`` samples (for evaluation); shorter clips are padded with zeros at
    the end.

    - ``length``: samples kept, 1 to 2^28.
    """

    def __new__(cls, length: int) -> CenterCrop: ...
    @property
    def length(self) -> int:
        """Samples kept, 1 to 2^28."""

@final
class MelSpectrogram(Op):
    """A mel spectrogram of the crop, ``[n_mels, frames]``, as
    ``torchaudio.transforms.MelSpectrogram`` computes it (Hann window, centred frames with
    reflect padding), with its parameters and defaults. ``sample_rate`` must be the rate of
    a ``Resample`` before it.

    - ``sample_rate`` (``16000``): sample rate of the input, Hz.
    - ``n_fft`` (``400``): FFT size, 2 to 65536.
    - ``win_length`` (``None``): window length (``None``: ``n_fft``).
    - ``hop_length`` (``None``): samples between frames (``None``: ``win_length // 2``).
    - ``f_min`` (``0.0``): lowest frequency of the filters, Hz.
    - ``f_max`` (``None``): highest frequency of the filters, Hz (``None``: the Nyquist
      frequency).
    - ``n_mels`` (``128``): mel bands, 1 to 1024.
    - ``power`` (``2.0``): exponent of the magnitude: 2 for power, 1 for magnitude.
    - ``norm`` (``None``): ``'slaney'`` (filters of equal area) or ``None``.
    - ``mel_scale`` (``'htk'``): ``'htk'`` or ``'slaney'``.
    """

    def __new__(cls, sample_rate: int = 16000, n_fft: int = 400, win_length: int | None = None, hop_length: int | None = None, f_min: float = 0.0, f_max: float | None = None, n_mels: int = 128, power: float = 2.0, norm: str | None = None, mel_scale: str = 'htk') -> MelSpectrogram: ...
    @property
    def sample_rate(self) -> int:
        """Sample rate of the input, Hz."""
    @property
    def n_fft(self) -> int:
        """FFT size, 2 to 65536."""
    @property
    def win_length(self) -> int:
        """Window length (``None``: ``n_fft``)."""
    @property
    def hop_length(self) -> int:
        """Samples between frames (``None``: ``win_length // 2``)."""
    @property
    def f_min(self) -> float:
        """Lowest frequency of the filters, Hz."""
    @property
    def f_max(self) -> float:
        """Highest frequency of the filters, Hz (``None``: the Nyquist frequency)."""
    @property
    def n_mels(self) -> int:
        """Mel bands, 1 to 1024."""
    @property
    def power(self) -> float:
        """Exponent of the magnitude: 2 for power, 1 for magnitude."""
    @property
    def norm(self) -> str | None:
        """``'slaney'`` (filters of equal area) or ``None``."""
    @property
    def mel_scale(self) -> str:
        """``'htk'`` or ``'slaney'``."""

@final
class Log(Op):
    """``ln(x + offset)`` of every value of a ``MelSpectrogram`` before it (``offset`` keeps
    silence finite; torchaudio users commonly take 1e-6).

    - ``offset`` (``1e-06``): added before the logarithm, above 0 (as a float32).
    """

    def __new__(cls, offset: float = 1e-06) -> Log: ...
    @property
    def offset(self) -> float:
        """Added before the logarithm, above 0 (as a float32)."""

@final
class FrequencyMasking(Op):
    """Sets a random band of mel bands of the spectrogram to 0 (SpecAugment, as torchaudio's
    ``FrequencyMasking``): its width drawn uniformly below ``freq_mask_param``, its start
    uniformly where it fits. It runs on the spectrogram as delivered, so after
    ``MelSpectrogram`` and ``Log``.

    - ``freq_mask_param``: the widest mask (widths are drawn below it), at most ``n_mels``.
    - ``iid_masks`` (``False``): a band drawn for each channel, rather than one for all of
      them.
    """

    def __new__(cls, freq_mask_param: int, iid_masks: bool = False) -> FrequencyMasking: ...
    @property
    def freq_mask_param(self) -> int:
        """The widest mask (widths are drawn below it), at most ``n_mels``."""
    @property
    def iid_masks(self) -> bool:
        """A band drawn for each channel, rather than one for all of them."""

@final
class TimeMasking(Op):
    """Sets a random band of frames of the spectrogram to 0 (SpecAugment, as torchaudio's
    ``TimeMasking``): its width drawn uniformly below ``time_mask_param`` (and below ``p`` ×
    frames), its start uniformly where it fits. It runs on the spectrogram as delivered, so
    after ``MelSpectrogram`` and ``Log``.

    - ``time_mask_param``: the widest mask (widths are drawn below it), at most the frames.
    - ``iid_masks`` (``False``): a band drawn for each channel, rather than one for all of
      them.
    - ``p`` (``1.0``): the widest mask as a fraction of the frames, in [0, 1].
    """

    def __new__(cls, time_mask_param: int, iid_masks: bool = False, p: float = 1.0) -> TimeMasking: ...
    @property
    def time_mask_param(self) -> int:
        """The widest mask (widths are drawn below it), at most the frames."""
    @property
    def iid_masks(self) -> bool:
        """A band drawn for each channel, rather than one for all of them."""
    @property
    def p(self) -> float:
        """The widest mask as a fraction of the frames, in [0, 1]."""
