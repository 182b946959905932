"""Audio presets from Python: real clips (crates/nostall/tests/audio) in class folders."""

import shutil
import warnings
from pathlib import Path

import pytest
import torch

import nostall

CLIPS = Path(__file__).resolve().parents[2] / "crates" / "nostall" / "tests" / "audio"
LOSSLESS = (".wav", ".flac")


def clip_files():
    """The real clips of every format nostall decodes."""
    return [c for c in sorted(CLIPS.iterdir())
            if c.suffix in (".wav", ".flac", ".ogg", ".opus", ".mp3")]


def batch_sizes(batch_size):
    count = len(clip_files())
    return [min(batch_size, count - start) for start in range(0, count, batch_size)]


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    root = tmp_path_factory.mktemp("clips")
    for clip in clip_files():
        class_dir = root / ("lossless" if clip.suffix in LOSSLESS else "lossy")
        class_dir.mkdir(exist_ok=True)
        shutil.copy(clip, class_dir / clip.name)
    return str(root)


@pytest.mark.parametrize("preset,shape", [("m5", (1, 32000)), ("melspec", (64, 401))])
def test_audio_presets_give_float32_batches_of_their_shape(clips, preset, shape):
    loader = nostall.Loader(clips, pipeline=preset, batch_size=4, seed=1)
    batches = [(audio.clone(), labels.clone()) for audio, labels in loader]
    assert [tuple(a.shape) for a, _ in batches] == [(n, *shape) for n in batch_sizes(4)]
    assert all(a.dtype == torch.float32 and torch.isfinite(a).all() for a, _ in batches)
    lossless = sum(c.suffix in LOSSLESS for c in clip_files())
    assert sorted(torch.cat([l for _, l in batches]).tolist()) == (
        [0] * lossless + [1] * (len(clip_files()) - lossless))
    again = [audio.clone() for audio, _ in nostall.Loader(clips, pipeline=preset, batch_size=4,
                                                          seed=1, threads=1)]
    assert all(torch.equal(a, b) for (a, _), b in zip(batches, again)), "same for any threads"


def test_image_settings_with_an_audio_preset_are_config_errors(clips):
    with pytest.raises(nostall.ConfigError, match="image_size"):
        nostall.Loader(clips, pipeline="m5", image_size=64)
    with pytest.raises(nostall.ConfigError, match="image"):
        nostall.Loader(clips, pipeline="m5", dtype="uint8")


def test_an_image_pipeline_over_audio_files_finds_no_images(clips):
    with pytest.raises(nostall.ConfigError, match="no images"):
        nostall.Loader(clips, pipeline="train")


def batches_of(loader):
    return [audio.clone() for audio, _ in loader]


@pytest.mark.parametrize("preset", ["m5", "melspec-val"])
def test_a_list_of_audio_operators_is_its_preset(clips, preset):
    from nostall import audio

    crop = audio.CenterCrop if preset.endswith("-val") else audio.RandomCrop
    ops = {
        "m5": [audio.Channels(1), audio.Resample(8000), audio.RandomCrop(32000)],
        "melspec-val": [
            audio.Channels(),
            audio.Resample(16000),
            crop(64000),
            audio.MelSpectrogram(16000, n_fft=400, hop_length=160, n_mels=64),
            audio.Log(1e-6),
        ],
    }[preset]
    listed = batches_of(nostall.Loader(clips, pipeline=ops, batch_size=4, seed=3))
    named = batches_of(nostall.Loader(clips, pipeline=preset, batch_size=4, seed=3))
    assert len(listed) == len(batch_sizes(4)) == len(named)
    assert all(torch.equal(a, b) for a, b in zip(listed, named))


def test_python_operators_run_on_the_waveform_before_the_spectrogram_and_after_it(clips):
    from nostall import audio, ops

    head = [audio.Channels(), audio.Resample(16000), audio.CenterCrop(16000)]
    mel = [audio.MelSpectrogram(16000, n_fft=400, hop_length=160, n_mels=64), audio.Log(1e-6)]
    shapes = []

    def silence(wave):
        shapes.append(tuple(wave.shape))
        return torch.zeros_like(wave)

    silent = batches_of(nostall.Loader(clips, pipeline=head + [ops.Python(silence)] + mel,
                                       batch_size=4, seed=3))
    assert set(shapes) == {(1, 16000)}
    assert all(torch.all(b == torch.log(torch.tensor(1e-6))) for b in silent)
    plain = batches_of(nostall.Loader(clips, pipeline=head + mel, batch_size=4, seed=3))
    negated = batches_of(nostall.Loader(clips, pipeline=head + mel + [ops.Python(lambda x: -x)],
                                        batch_size=4, seed=3))
    assert all(torch.equal(a, -b) for a, b in zip(plain, negated))
    with pytest.raises(nostall.ConfigError, match="before the crop"):
        nostall.Loader(clips, pipeline=[audio.Channels(), ops.Python(silence), audio.CenterCrop(100)])


def test_audio_operators_follow_torchaudio_and_check_their_arguments(clips):
    from nostall import audio

    mel = audio.MelSpectrogram(16000, n_fft=512)
    assert (mel.win_length, mel.hop_length, mel.f_max, mel.n_mels) == (512, 256, 8000.0, 128)
    assert audio.Resample(8000) == audio.Resample(8000, lowpass_filter_width=6)
    assert audio.Resample(8000) != audio.Resample(8000, resampling_method="sinc_interp_kaiser")
    assert repr(audio.RandomCrop(5)) == "RandomCrop(length=5)"
    assert isinstance(audio.CenterCrop(5), audio.Op) and audio.CenterCrop.__name__ == "CenterCrop"
    for bad in (
        lambda: audio.Resample(0),
        lambda: audio.Resample(8000, resampling_method="linear"),
        lambda: audio.Channels(0),
        lambda: audio.RandomCrop(0),
        lambda: audio.MelSpectrogram(16000, f_max=9000.0),
        lambda: audio.MelSpectrogram(16000, mel_scale="bark"),
        lambda: audio.Log(0.0),
    ):
        with pytest.raises(nostall.ConfigError):
            bad()


def test_audio_operator_lists_that_do_not_fit_are_refused(clips):
    from nostall import audio, ops

    with pytest.raises(nostall.ConfigError, match="order"):
        nostall.Loader(clips, pipeline=[audio.RandomCrop(100), audio.Resample(8000)])
    with pytest.raises(nostall.ConfigError, match="RandomCrop or CenterCrop"):
        nostall.Loader(clips, pipeline=[audio.Resample(8000)])
    with pytest.raises(nostall.ConfigError, match="resampled to 8000"):
        nostall.Loader(clips, pipeline=[audio.Resample(8000), audio.RandomCrop(8000),
                                        audio.MelSpectrogram(16000)])
    with pytest.raises(nostall.ConfigError, match="images only"):
        nostall.Loader(clips, pipeline=[audio.RandomCrop(100)], layout="HWC")
    with pytest.raises(TypeError, match="all of nostall.ops"):
        nostall.Loader(clips, pipeline=[audio.RandomCrop(100), ops.CenterCrop(10)])


RECORDINGS = CLIPS.parent / "recordings"


def test_a_manifest_of_segments_of_long_recordings_is_a_dataset(tmp_path):
    """NeMo's JSON lines: each segment a sample, cropped within its segment."""
    for recording in RECORDINGS.glob("battle.*"):
        shutil.copy(recording, tmp_path / recording.name)
    rows = [f'{{"audio_filepath": "battle.{ext}", "offset": {start}, "duration": 2.0, '
            f'"text": "-", "label": "{ext}"}}'
            for ext in ("flac", "opus") for start in (0.5, 3.0, 7.5)]
    manifest = tmp_path / "train.json"
    manifest.write_text("\n".join(rows) + "\n")
    loader = nostall.Loader(str(manifest), pipeline="m5", batch_size=3, seed=2, shuffle=False)
    batches = [(audio.clone(), labels.clone()) for audio, labels in loader]
    assert [tuple(a.shape) for a, _ in batches] == [(3, 1, 32000)] * 2
    assert torch.cat([l for _, l in batches]).tolist() == [0, 0, 0, 1, 1, 1]
    for audio, _ in batches:
        # A 2 s segment at 8 kHz, padded to the 4 s crop: audio, then zeros.
        assert audio[:, :, :15000].abs().amax(dim=2).min() > 0
        assert torch.count_nonzero(audio[:, :, 16001:]) == 0
    CSV = tmp_path / "bad.csv"
    CSV.write_text("path,start\nbattle.flac,x\n")
    with pytest.raises(nostall.ConfigError, match="bad.csv, line 2"):
        nostall.Loader(str(CSV), pipeline="m5")


def test_audio_batches_move_to_the_device_as_they_are(clips, monkeypatch):
    """``device=`` with audio, the CPU standing in for the GPU: the batches are the CPU
    loader's, and no decoder thread is started (no JPEG to leave to the device)."""
    from nostall import _device

    stager = _device.Stager
    monkeypatch.setattr(_device, "resolve", lambda device: 0)
    made = []

    def cpu_stager(index, finish, queue=None):
        made.append(stager("cpu", finish, queue))
        return made[-1]

    monkeypatch.setattr(_device, "Stager", cpu_stager)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no CUDA runtime here to page-lock the buffers
        on_device = nostall.Loader(clips, pipeline="m5", batch_size=4, device="cuda")
    on_cpu = nostall.Loader(clips, pipeline="m5", batch_size=4)
    for (a, labels_a), (b, labels_b) in zip(on_cpu, on_device, strict=True):
        assert torch.equal(a, b) and torch.equal(labels_a, labels_b)
    assert made[0].decoder is None and made[0].finish is None


def test_the_audio_stubs_are_written_from_the_engines_declarations():
    import pathlib
    import sys

    python_dir = pathlib.Path(__file__).parents[1]
    sys.path.insert(0, str(python_dir))
    try:
        import write_ops_stub
    finally:
        sys.path.remove(str(python_dir))
    assert write_ops_stub.AUDIO_STUB.read_text() == write_ops_stub.render_audio(), (
        "nostall/audio.pyi differs from the engine's declarations: run python python/write_ops_stub.py")


def test_every_audio_operator_class_comes_from_its_declaration():
    import inspect
    import pickle

    from nostall import audio
    from nostall._nostall import _audio_operators

    for name, _doc, params in _audio_operators():
        cls = getattr(audio, name)
        assert issubclass(cls, audio.Op) and cls.__module__ == "nostall.audio" and name in audio.__all__
        assert [p for p in inspect.signature(cls).parameters] == [p[0] for p in params]
        for param, *_ in params:
            assert param in cls.__doc__ and isinstance(cls.__dict__[param], property)
    masking = audio.TimeMasking(40, p=0.5)
    assert (masking.time_mask_param, masking.iid_masks, masking.p) == (40, False, 0.5)
    assert repr(masking) == "TimeMasking(time_mask_param=40, iid_masks=False, p=0.5)"
    assert eval(repr(masking), vars(audio)) == masking
    assert pickle.loads(pickle.dumps(masking)) == masking
    assert hash(audio.FrequencyMasking(27)) == hash(audio.FrequencyMasking(freq_mask_param=27, iid_masks=False))
    with pytest.raises(nostall.ConfigError, match="TimeMasking: p 1.5 is not a probability"):
        audio.TimeMasking(10, p=1.5)
    with pytest.raises(nostall.ConfigError, match="FrequencyMasking needs freq_mask_param"):
        audio.FrequencyMasking()


# The masks' tests: nostall's masks against torchaudio's definition. No torchaudio matches
# the torch under test, so its functions are transcribed below, their two random draws
# given as the band they make (read back from nostall's output), mask value 0.


def mask_along_axis(specgram, mask_start, mask_end, axis):
    """torchaudio.functional.mask_along_axis, the band [mask_start, mask_end) given."""
    dim = specgram.dim()
    shape = specgram.size()
    specgram = specgram.reshape([-1] + list(shape[-2:]))
    mask = torch.arange(0, specgram.shape[axis - dim + 3], device=specgram.device, dtype=specgram.dtype)
    mask = (mask >= mask_start) & (mask < mask_end)
    if axis == dim - 2:
        mask = mask.unsqueeze(-1)
    specgram = specgram.masked_fill(mask, 0.0)
    return specgram.reshape(shape[:-2] + specgram.shape[-2:])


def mask_along_axis_iid(specgrams, mask_start, mask_end, axis):
    """torchaudio.functional.mask_along_axis_iid, each channel's band [mask_start[c],
    mask_end[c]) given."""
    mask_start = torch.tensor(mask_start)[..., None, None]
    mask_end = torch.tensor(mask_end)[..., None, None]
    mask = torch.arange(0, specgrams.size(axis), device=specgrams.device, dtype=specgrams.dtype)
    specgrams = specgrams.transpose(axis, -1)
    specgrams = specgrams.masked_fill((mask >= mask_start) & (mask < mask_end), 0.0)
    return specgrams.transpose(axis, -1)


def bands(before, masked, axis):
    """Each channel's band ``(start, end)`` along ``axis`` (-2: mel bands, -1: frames) of
    whole rows or columns that ``masked`` holds at 0 (where ``before`` was not 0 already)."""
    across = -1 if axis == -2 else -2
    whole = ((masked == 0) | (before == 0)).all(dim=across) & (before != 0).any(dim=across)
    found = []
    for line in whole.reshape(-1, whole.shape[-1]):
        at = torch.nonzero(line).flatten().tolist()
        found.append((at[0], at[-1] + 1) if at else (0, 0))
    return found


HEAD = [nostall.audio.Channels(), nostall.audio.Resample(16000), nostall.audio.RandomCrop(16000)]
SPECTROGRAM = [nostall.audio.MelSpectrogram(16000, n_fft=400, hop_length=160, n_mels=64),
               nostall.audio.Log(1e-6)]


def masked_pairs(clips, head, masks, seeds, **settings):
    """Each sample of each seed as (without the masks, with them)."""
    for seed in seeds:
        common = dict(batch_size=4, seed=seed, **settings)
        plain = batches_of(nostall.Loader(clips, pipeline=head + SPECTROGRAM, **common))
        masked = batches_of(nostall.Loader(clips, pipeline=head + SPECTROGRAM + masks, **common))
        assert len(plain) == len(masked) > 0
        for a, b in zip(plain, masked):
            yield from zip(a, b)


@pytest.mark.parametrize("name,param,axis", [("FrequencyMasking", 27, -2), ("TimeMasking", 40, -1)])
def test_masks_are_torchaudios_on_the_spectrogram_as_delivered(clips, name, param, axis):
    from nostall import audio

    widths = []
    for plain, masked in masked_pairs(clips, HEAD, [getattr(audio, name)(param)], range(8)):
        assert plain.shape == (64, 101)
        [(start, end)] = bands(plain, masked, axis)
        assert end - start < param and end <= plain.shape[axis]
        assert torch.equal(masked, mask_along_axis(plain, start, end, plain.dim() + axis))
        widths.append(end - start)
    assert len(widths) == 8 * len(clip_files())
    assert len(set(widths)) > param // 2, f"widths spread over [0, {param}): {sorted(set(widths))}"


def test_masks_are_drawn_per_channel_with_iid_masks_and_capped_by_p(clips):
    from nostall import audio

    stereo = [audio.Channels(2), *HEAD[1:]]
    shared, own = audio.FrequencyMasking(20), audio.TimeMasking(30, iid_masks=True)
    differ = 0
    for plain, masked in masked_pairs(clips, stereo, [shared, own], range(4), on_error="skip"):
        assert plain.shape == (2, 64, 101)
        [(f_start, f_end), other] = bands(plain, masked, -2)
        assert other == (f_start, f_end), "one band for both channels"
        # Time bands are found beside the frequency band's rows, which are masked whole.
        frequency = mask_along_axis(plain, f_start, f_end, 1)
        time = bands(frequency, masked, -1)
        starts, ends = [s for s, _ in time], [e for _, e in time]
        assert all(e - s < 30 for s, e in time)
        assert torch.equal(masked, mask_along_axis_iid(frequency, starts, ends, 2))
        differ += time[0] != time[1]
    assert differ > 4, "each channel draws its own time band"
    widths = {end - start
              for plain, masked in masked_pairs(clips, HEAD, [audio.TimeMasking(90, p=0.1)], range(6))
              for start, end in bands(plain, masked, -1)}
    assert max(widths) < 10 and len(widths) > 4, f"below p × 101 frames: {sorted(widths)}"


def test_masks_are_the_same_for_any_thread_count_and_refused_where_they_do_not_fit(clips):
    from nostall import audio

    pipeline = HEAD + SPECTROGRAM + [audio.FrequencyMasking(27, iid_masks=True), audio.TimeMasking(40)]
    one = batches_of(nostall.Loader(clips, pipeline=pipeline, batch_size=4, seed=5, threads=1))
    many = batches_of(nostall.Loader(clips, pipeline=pipeline, batch_size=4, seed=5, threads=3))
    again = batches_of(nostall.Loader(clips, pipeline=repr(pipeline), batch_size=4, seed=5))
    assert all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(one, many, again, strict=True))
    with pytest.raises(nostall.ConfigError, match="FrequencyMasking: freq_mask_param 65 is more than"):
        nostall.Loader(clips, pipeline=HEAD + SPECTROGRAM + [audio.FrequencyMasking(65)])
    with pytest.raises(nostall.ConfigError, match="TimeMasking applies to a spectrogram"):
        nostall.Loader(clips, pipeline=HEAD + [audio.TimeMasking(10)])
    with pytest.raises(nostall.ConfigError, match="order"):
        nostall.Loader(clips, pipeline=HEAD + [SPECTROGRAM[0], audio.TimeMasking(10), SPECTROGRAM[1]])
