"""A video's audio track as a field (``Field(..., kind="audio")``) on real footage with real
recordings muxed in (nostall-video's tests/footage, made by its make.sh from
crates/nostall/tests/audio): each clip's segment is the track cut at the clip's span (its
first frame's time to its last frame's end) and resampled as ``audio.Resample`` does.

The references come from FFmpeg's command-line tools: ffprobe for the frames' and the
track's times, ffmpeg for the whole track decoded to float32 (or the original recording,
for the PCM track); the cut is resampled by nostall's own ``audio.Resample`` over a WAV file
of it, the resampler the field uses."""

import io
import json
import math
import pathlib
import shutil
import struct
import subprocess
import tarfile
from fractions import Fraction

import numpy as np
import pytest
import torch

import nostall
from nostall import audio, ops, video

ROOT = pathlib.Path(__file__).parents[2]
FOOTAGE = ROOT / "crates" / "nostall-video" / "tests" / "footage"
RECORDINGS = ROOT / "crates" / "nostall" / "tests" / "audio"

if shutil.which("ffprobe") is None or shutil.which("ffmpeg") is None:
    pytest.fail("the references need FFmpeg's command-line tools (ffmpeg, ffprobe): `make deps` installs them",
                pytrace=False)

RATE = 16000
FRAME_OPS = [ops.Resize(40), ops.CenterCrop(32)]


def probe(path, *args):
    out = subprocess.run(["ffprobe", "-v", "error", "-of", "json", *args, str(path)],
                         check=True, capture_output=True).stdout
    return json.loads(out)


def video_times(path):
    """The video's frames' times in presentation order, the last one's end, its time base."""
    info = probe(path, "-select_streams", "v:0", "-show_entries",
                 "stream=time_base:packet=pts,duration")
    tb = Fraction(info["streams"][0]["time_base"])
    packets = sorted(info["packets"], key=lambda p: int(p["pts"]))
    times = [int(p["pts"]) for p in packets]
    last = packets[-1].get("duration")
    end = times[-1] + (int(last) if last else (times[-1] - times[0]) // (len(times) - 1))
    return times, end, tb


def span_samples(start, end, tb, rate):
    """The samples whose time k / rate lies in [start, end) (times in tb)."""
    return math.ceil(start * tb * rate), math.ceil(end * tb * rate)


def read_wav(data):
    """A WAV file's samples as float32 [channels, n] (16-bit or float32 PCM) and its rate."""
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE"
    at, fmt = 12, None
    while at < len(data):
        tag, size = data[at:at + 4], struct.unpack("<I", data[at + 4:at + 8])[0]
        body = data[at + 8:at + 8 + size]
        if tag == b"fmt ":
            code, channels, rate = struct.unpack("<HHI", body[:8])
            bits = struct.unpack("<H", body[14:16])[0]
            if code == 0xFFFE:
                code = struct.unpack("<H", body[24:26])[0]
            fmt = (code, channels, rate, bits)
        elif tag == b"data":
            code, channels, rate, bits = fmt
            if (code, bits) == (1, 16):
                x = np.frombuffer(body, "<i2").astype(np.float32) / 32768
            else:
                assert (code, bits) == (3, 32), fmt
                x = np.frombuffer(body, "<f4")
            return x.reshape(-1, channels).T.copy(), rate
        at += 8 + size + (size & 1)
    raise AssertionError("no data chunk")


def write_wav(path, planes, rate):
    """Float32 [channels, n] as an IEEE-float WAV file."""
    channels, n = planes.shape
    data = planes.T.astype("<f4").tobytes()
    fmt = struct.pack("<HHIIHH", 3, channels, rate, rate * channels * 4, channels * 4, 32)
    path.write_bytes(b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt) + 8 + len(data)) + b"WAVE"
                     + b"fmt " + struct.pack("<I", len(fmt)) + fmt
                     + b"data" + struct.pack("<I", len(data)) + data)


def whole_track(path, tmp_path):
    """The whole audio track as FFmpeg decodes it, float32 [channels, n], its rate, and the
    timeline index of its first sample (the first decoded frame's time)."""
    info = probe(path, "-select_streams", "a:0", "-show_entries",
                 "stream=time_base:frame=best_effort_timestamp", "-read_intervals", "%+#8")
    tb = Fraction(info["streams"][0]["time_base"])
    wav = tmp_path / (path.name + ".wav")
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", str(path), "-map", "0:a:0",
                    "-c:a", "pcm_f32le", str(wav)], check=True)
    planes, rate = read_wav(wav.read_bytes())
    first = math.floor(int(info["frames"][0]["best_effort_timestamp"]) * tb * rate + Fraction(1, 2))
    return planes, rate, first


def cut(planes, first, lo, hi):
    """Samples lo..hi of the track's timeline, zeros where it has none."""
    out = np.zeros((planes.shape[0], hi - lo), np.float32)
    a, b = max(lo, first), min(hi, first + planes.shape[1])
    if b > a:
        out[:, a - lo:b - lo] = planes[:, a - first:b - first]
    return out


def resampled(planes, rate, channels, tmp_path):
    """nostall's audio.Resample of planes (mixed to mono by audio.Channels(1) if asked)."""
    root = tmp_path / "reference"
    shutil.rmtree(root, ignore_errors=True)
    (root / "a").mkdir(parents=True)
    write_wav(root / "a" / "cut.wav", planes, rate)
    length = math.ceil(planes.shape[1] * RATE / rate)
    loader = nostall.Loader(str(root), batch_size=1, shuffle=False, seed=0, output="torch",
                            pipeline=[audio.Channels(channels), audio.Resample(RATE),
                                      audio.CenterCrop(length)])
    (x, _), = [(a.clone(), l) for a, l in loader]
    return x[0].numpy()


def shard(path, tmp_path, name="videos"):
    """A WebDataset shard holding the video."""
    root = tmp_path / name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    payload = path.read_bytes()
    with tarfile.open(root / "shard-000000.tar", "w") as tar:
        info = tarfile.TarInfo("s0000" + path.suffix)
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    return root


def field_batch(root, clip, members, length, channels=1, **kwargs):
    fields = {"video": members, "audio": nostall.Field(members, kind="audio", sample_rate=RATE,
                                                        channels=channels, length=length)}
    loader = nostall.Loader(str(root), fields=fields, pipeline=[clip, *FRAME_OPS], batch_size=8,
                            shuffle=False, seed=5, dtype="uint8", output="torch", **kwargs)
    (batch,) = list(loader)
    return batch


# (video, its track's reference, channels kept): the PCM track of the original recording
# (16-bit WAV, read here), and lossy tracks as FFmpeg decodes them.
CASES = [
    ("h264_pcm.mkv", "knolls.wav", 1),
    ("h264_aac.mp4", None, 1),
    ("h264_aac.mp4", None, 2),
    ("vp9_opus.webm", None, 1),
]


@pytest.mark.parametrize("name,recording,channels", CASES)
def test_a_clips_audio_is_the_track_cut_at_its_span_and_resampled(name, recording, channels, tmp_path):
    path = FOOTAGE / name
    times, end, tb = video_times(path)
    if recording:
        planes, rate = read_wav((RECORDINGS / recording).read_bytes())
        first = 0
        ffmpeg_planes, ffmpeg_rate, ffmpeg_first = whole_track(path, tmp_path)
        assert (ffmpeg_rate, ffmpeg_first) == (rate, first)
        np.testing.assert_array_equal(ffmpeg_planes, planes)
    else:
        planes, rate, first = whole_track(path, tmp_path)
    # Clip(8, sampler="center"): frames latest // 2 ... + 7, latest = n - 8.
    n = len(times)
    start = (n - 8) // 2
    frames = range(start, start + 8)
    span_end = times[frames[-1] + 1] if frames[-1] + 1 < n else end
    lo, hi = span_samples(times[frames[0]], span_end, tb, rate)
    reference = resampled(cut(planes, first, lo, hi), rate, channels, tmp_path)
    length = reference.shape[1]
    assert length == math.ceil((hi - lo) * RATE / rate)
    # The span is the clip's: about 8 frames' time, in samples at the field's rate.
    seconds = float((span_end - times[frames[0]]) * tb)
    assert abs(length / RATE - seconds) < 2 / min(rate, RATE) + 1e-9
    members = "mp4;mkv;webm"
    clip = video.Clip(8, sampler="center")
    batch = field_batch(shard(path, tmp_path), clip, members, length, channels)
    got = batch["audio"]
    assert got.shape == (1, channels, length) and got.dtype == torch.float32
    np.testing.assert_allclose(got[0].numpy(), reference, rtol=0, atol=1e-6)
    assert np.abs(reference).max() > 0.01, "the span holds sound"
    # A longer field: the same samples, then zeros.
    longer = field_batch(shard(path, tmp_path), clip, members, length + 300, channels)["audio"]
    assert torch.equal(longer[0, :, :length], got[0])
    assert not longer[0, :, length:].any()
    # The frames are the loader's without the field.
    plain = nostall.Loader(str(shard(path, tmp_path)), pipeline=[clip, *FRAME_OPS], batch_size=8,
                           shuffle=False, seed=5, dtype="uint8", output="torch")
    (frames_only, _), = list(plain)
    assert torch.equal(batch["video"], frames_only)


def test_several_clips_give_one_segment_each_in_their_order(tmp_path):
    path = FOOTAGE / "h264_pcm.mkv"
    times, end, tb = video_times(path)
    planes, rate = read_wav((RECORDINGS / "knolls.wav").read_bytes())
    n = len(times)
    # Clip(4, sampler="uniform", clips=3): starts floor(c * latest / 2), latest = n - 4.
    latest = n - 4
    starts = [c * latest // 2 for c in range(3)]
    spans = []
    for s in starts:
        last = s + 3
        spans.append(span_samples(times[s], times[last + 1] if last + 1 < n else end, tb, rate))
    references = [resampled(cut(planes, 0, lo, hi), rate, 1, tmp_path) for lo, hi in spans]
    length = max(r.shape[1] for r in references) + 16
    batch = field_batch(shard(path, tmp_path), video.Clip(4, sampler="uniform", clips=3),
                        "mkv", length)
    got = batch["audio"]
    assert got.shape == (1, 3, 1, length)
    assert batch["video"].shape[:2] == (1, 3)
    for c, reference in enumerate(references):
        k = reference.shape[1]
        np.testing.assert_allclose(got[0, c, :, :k].numpy(), reference, rtol=0, atol=1e-6)
        assert not got[0, c, :, k:].any()
    # The last clip ends after the recording does: zeros past the track's end.
    assert spans[-1][1] > planes.shape[1]


def test_the_same_bytes_for_any_number_of_threads(tmp_path):
    root = tmp_path / "many"
    root.mkdir()
    with tarfile.open(root / "shard-000000.tar", "w") as tar:
        for i, name in enumerate(["h264_aac.mp4", "vp9_opus.webm", "h264_pcm.mkv"] * 2):
            payload = (FOOTAGE / name).read_bytes()
            info = tarfile.TarInfo(f"s{i:04d}{pathlib.Path(name).suffix}")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    fields = {"video": "mp4;mkv;webm",
              "audio": nostall.Field("mp4;mkv;webm", kind="audio", sample_rate=RATE, length=9000)}

    def run(threads):
        loader = nostall.Loader(str(root), fields=fields, batch_size=2, shuffle=True, seed=9,
                                pipeline=[video.Clip(8, clips=2), *FRAME_OPS], dtype="uint8",
                                output="torch", threads=threads)
        return [(b["video"].clone(), b["audio"].clone()) for b in loader]

    one, two = run(1), run(2)
    assert len(one) == 3
    for (v1, a1), (v2, a2) in zip(one, two):
        assert torch.equal(v1, v2) and torch.equal(a1, a2)
    assert all(a.abs().max() > 0.01 for _, a in one)


def test_a_video_without_audio_or_cut_short_is_skipped_naming_its_cause(tmp_path):
    root = tmp_path / "bad"
    root.mkdir()
    good = (FOOTAGE / "h264_aac.mp4").read_bytes()
    members = [("silent.mp4", (FOOTAGE / "h264_bframes.mp4").read_bytes()),
               ("cut.mp4", good[: len(good) * 6 // 10]),
               ("good.mp4", good)]
    with tarfile.open(root / "shard-000000.tar", "w") as tar:
        for name, payload in members:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    fields = {"video": "mp4", "sound": nostall.Field("mp4", kind="audio", sample_rate=RATE,
                                                     length=4000)}
    kwargs = dict(fields=fields, batch_size=4, shuffle=False, seed=1, dtype="uint8",
                  pipeline=[video.Clip(4), *FRAME_OPS], output="torch")
    loader = nostall.Loader(str(root), on_error="skip", **kwargs)
    batches = list(loader)
    assert sum(len(b["sound"]) for b in batches) == 1
    skipped = {s["location"].rsplit(":", 1)[-1]: s for s in loader.skipped()}
    assert sorted(skipped) == ["cut", "silent"]
    assert skipped["silent"]["cause"] == "corrupt"
    assert '"sound"' in skipped["silent"]["detail"] and "no audio track" in skipped["silent"]["detail"]
    strict = nostall.Loader(str(root), **kwargs)
    with pytest.raises(nostall.SampleError, match=r"silent.*no audio track"):
        for _ in strict:
            pass


def test_the_field_refuses_what_does_not_fit(tmp_path):
    with pytest.raises(nostall.ConfigError, match="length="):
        nostall.Loader(str(shard(FOOTAGE / "h264_aac.mp4", tmp_path)), pipeline=[video.Clip(4), *FRAME_OPS],
                       fields={"video": "mp4", "audio": nostall.Field("mp4", kind="audio",
                                                                      sample_rate=RATE)})
    with pytest.raises(nostall.ConfigError, match="channels=0"):
        nostall.Loader(str(shard(FOOTAGE / "h264_aac.mp4", tmp_path)), pipeline=[video.Clip(4), *FRAME_OPS],
                       fields={"video": "mp4", "audio": nostall.Field(
                           "mp4", kind="audio", sample_rate=RATE, channels=0, length=100)})
    with pytest.raises(nostall.ConfigError, match="audio track of a video"):
        nostall.Loader(nostall.demo_photos(), pipeline="val", image_size=32,
                       fields={"image": "jpg", "audio": nostall.Field(
                           "jpg", kind="audio", sample_rate=RATE, length=100)})
    field = nostall.Field("mp4", kind="audio", sample_rate=RATE, channels=2, length=100)
    assert "sample_rate=16000" in repr(field) and "channels=2" in repr(field)
    import pickle
    assert repr(pickle.loads(pickle.dumps(field))) == repr(field)


def test_a_manifests_segment_gives_the_audio_of_the_clip_drawn_within_it(tmp_path):
    """A manifest's row carries the whole video and the segment's times: the clip is drawn
    among the frames shown in the segment, and its audio is that clip's span."""
    path = FOOTAGE / "h264_pcm.mkv"
    shutil.copy(path, tmp_path / path.name)
    (tmp_path / "clips.jsonl").write_text(
        json.dumps({"video": path.name, "start": 1.0, "end": 2.0, "label": "a"}) + "\n")
    times, end, tb = video_times(path)
    planes, rate = read_wav((RECORDINGS / "knolls.wav").read_bytes())
    # The frames shown in [1 s, 2 s) from the first frame's time; spread's 4 frames: the
    # middle of each quarter of them.
    shown = [k for k, t in enumerate(times) if 1 <= (t - times[0]) * tb < 2]
    frames = [shown[math.floor((i + 0.5) * len(shown) / 4)] for i in range(4)]
    lo, hi = span_samples(times[frames[0]], times[frames[-1] + 1], tb, rate)
    reference = resampled(cut(planes, 0, lo, hi), rate, 1, tmp_path)
    fields = {"video": "video", "audio": nostall.Field("video", kind="audio", sample_rate=RATE,
                                                       length=reference.shape[1])}
    loader = nostall.Loader(str(tmp_path / "clips.jsonl"), fields=fields, batch_size=1,
                            pipeline=[video.Clip(4, sampler="spread"), *FRAME_OPS],
                            shuffle=False, seed=2, dtype="uint8", output="torch")
    (batch,) = list(loader)
    np.testing.assert_allclose(batch["audio"][0].numpy(), reference, rtol=0, atol=1e-6)
