"""Type stubs of nostall.audio: the operators of an audio pipeline (classes of the extension module)."""

from typing import Literal, final

from typing_extensions import disjoint_base

__all__ = [
    "CenterCrop",
    "Channels",
    "Log",
    "MelSpectrogram",
    "Op",
    "RandomCrop",
    "Resample",
]

@disjoint_base
class Op:
    """An operator of an audio pipeline: the base class of the operators of
    ``nostall.audio``.

    Operators are made by their subclasses and cannot be changed once made; a list of
    them is the ``pipeline`` of a ``nostall.Loader``. Two operators are equal when they do
    the same thing.
    """

    def __eq__(self, value: object, /) -> bool:
        """Whether ``value`` is an operator doing the same thing."""

@final
class Channels(Op):
    """Keeps ``count`` channels: 1 mixes every file to mono (the mean of its channels);
    more keeps that many and refuses files with another count."""

    def __new__(cls, count: int = 1) -> Channels: ...
    @property
    def count(self) -> int:
        """Channels kept."""

@final
class Resample(Op):
    """Resamples to ``rate`` Hz with torchaudio's band-limited sinc interpolation
    (``torchaudio.functional.resample``, same parameters and defaults)."""

    def __new__(
        cls,
        rate: int,
        lowpass_filter_width: int = 6,
        rolloff: float = 0.99,
        resampling_method: Literal["sinc_interp_hann", "sinc_interp_kaiser"] = "sinc_interp_hann",
        beta: float | None = None,
    ) -> Resample: ...
    @property
    def rate(self) -> int:
        """Target rate, Hz."""
    @property
    def lowpass_filter_width(self) -> int:
        """Zero crossings of the sinc kept on each side."""
    @property
    def rolloff(self) -> float:
        """Cut-off as a fraction of the lower Nyquist frequency."""
    @property
    def resampling_method(self) -> str:
        """``"sinc_interp_hann"`` or ``"sinc_interp_kaiser"``."""
    @property
    def beta(self) -> float | None:
        """The Kaiser window's shape (with ``"sinc_interp_kaiser"``)."""

@final
class RandomCrop(Op):
    """A random window of ``length`` samples (at the output rate), chosen from the seed, the
    epoch and the sample; shorter clips are padded with zeros at the end."""

    def __new__(cls, length: int) -> RandomCrop: ...
    @property
    def length(self) -> int:
        """Samples kept."""

@final
class CenterCrop(Op):
    """The middle ``length`` samples (for evaluation); shorter clips are padded with zeros
    at the end."""

    def __new__(cls, length: int) -> CenterCrop: ...
    @property
    def length(self) -> int:
        """Samples kept."""

@final
class MelSpectrogram(Op):
    """A mel spectrogram of the crop, ``[n_mels, frames]``, as
    ``torchaudio.transforms.MelSpectrogram`` computes it, with its parameters and defaults;
    ``sample_rate`` must be the rate of a ``Resample`` before it."""

    def __new__(
        cls,
        sample_rate: int = 16000,
        n_fft: int = 400,
        win_length: int | None = None,
        hop_length: int | None = None,
        f_min: float = 0.0,
        f_max: float | None = None,
        n_mels: int = 128,
        power: float = 2.0,
        norm: Literal["slaney"] | None = None,
        mel_scale: Literal["htk", "slaney"] = "htk",
    ) -> MelSpectrogram: ...
    @property
    def sample_rate(self) -> int:
        """Sample rate of the input, Hz."""
    @property
    def n_fft(self) -> int:
        """FFT size."""
    @property
    def win_length(self) -> int:
        """Window length."""
    @property
    def hop_length(self) -> int:
        """Samples between frames."""
    @property
    def f_min(self) -> float:
        """Lowest frequency of the filters, Hz."""
    @property
    def f_max(self) -> float:
        """Highest frequency of the filters, Hz."""
    @property
    def n_mels(self) -> int:
        """Mel bands."""
    @property
    def power(self) -> float:
        """2 for power, 1 for magnitude."""
    @property
    def norm(self) -> str | None:
        """``"slaney"`` (filters of equal area) or ``None``."""
    @property
    def mel_scale(self) -> str:
        """``"htk"`` or ``"slaney"``."""

@final
class Log(Op):
    """``ln(x + offset)`` of every value of a ``MelSpectrogram`` before it."""

    def __new__(cls, offset: float = 1e-6) -> Log: ...
    @property
    def offset(self) -> float:
        """Added before the logarithm."""
