"""Audio presets from Python: real clips (crates/nostall/tests/audio) in class folders."""

import shutil
from pathlib import Path

import pytest
import torch

import nostall

CLIPS = Path(__file__).resolve().parents[2] / "crates" / "nostall" / "tests" / "audio"


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    root = tmp_path_factory.mktemp("clips")
    for clip in sorted(CLIPS.iterdir()):
        if clip.suffix in (".wav", ".flac", ".ogg", ".mp3"):
            class_dir = root / ("lossless" if clip.suffix in (".wav", ".flac") else "lossy")
            class_dir.mkdir(exist_ok=True)
            shutil.copy(clip, class_dir / clip.name)
    return str(root)


@pytest.mark.parametrize("preset,shape", [("m5", (1, 32000)), ("melspec", (64, 401))])
def test_audio_presets_give_float32_batches_of_their_shape(clips, preset, shape):
    loader = nostall.Loader(clips, pipeline=preset, batch_size=4, seed=1)
    batches = [(audio.clone(), labels.clone()) for audio, labels in loader]
    assert [tuple(a.shape) for a, _ in batches] == [(4, *shape), (4, *shape)]
    assert all(a.dtype == torch.float32 and torch.isfinite(a).all() for a, _ in batches)
    assert sorted(torch.cat([l for _, l in batches]).tolist()) == [0, 0, 0, 0, 1, 1, 1, 1]
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
