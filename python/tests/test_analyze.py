"""nostall.analyze (DS-Analyzer from Python) and nostall.time_model, on the demo photographs
with tiny budgets."""

import html
import json
import sys
import time

import pytest
import torch

import nostall
from nostall import ops

BATCH = 8
SIZE = 64
CLASSES = 4  # of the demo photographs


def escape(text):
    """HTML-escaped as the report's page escapes text."""
    for a, b in [("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ('"', "&quot;"), ("'", "&#39;")]:
        text = text.replace(a, b)
    return text


@pytest.fixture(scope="module")
def analysis(photos, tmp_path_factory):
    """One analysis of the demo photographs: P(1..3), F, C, a prediction and a real run."""
    out = tmp_path_factory.mktemp("analysis")
    lines = []
    report = nostall.analyze(
        photos, batch_size=BATCH, image_size=SIZE, threads=2, max_threads=3, step_ms=10.0,
        budget=1.0, run_seconds=0.5, json=out / "report.json", html=out / "report.html",
        progress=lines.append)
    return report, out, lines


def test_measures_prep_for_each_thread_count_fetch_cache_and_a_real_run(analysis):
    report, _, lines = analysis
    assert isinstance(report, nostall.AnalysisReport) and isinstance(report, dict)
    m = report["measurements"]
    assert [p["threads"] for p in m["prep"]] == [1, 2, 3]
    assert all(p["samples_per_s"] > 0 and p["samples"] > 0 for p in m["prep"])
    assert report["rates"]["prep"] == [p["samples_per_s"] for p in m["prep"]]
    assert m["fetch"]["samples_per_s"] > 0 and m["fetch"]["bytes_per_s"] > 0
    assert m["fetch"]["failed"] == 0 and m["cache"]["samples_per_s"] > 0
    assert report["rates"]["samples"] == 32
    # The configuration is the one asked for, described as the command line does.
    c = report["configuration"]
    assert (c["batch_size"], c["prep_threads"], c["fetch_threads"]) == (BATCH, 2, 2)
    assert c["pipeline"] == (
        f"RandomResizedCrop({SIZE}) → RandomHorizontalFlip → "
        "Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)), float32 CHW"
    )
    assert c["cache"] == "none" and c["storage"] == "local files, read cold"
    # G: the simulated model, 10 ms per batch of 8.
    assert report.model_rate == pytest.approx(BATCH / 0.010)
    assert report["model"]["how"].startswith("simulated: 10 ms per batch of 8")
    # A prediction, and the real run beside it.
    assert report.predicted_images_per_s > 0
    assert report.bottleneck in ("fetch", "prep", "model")
    assert report.bottleneck == report["prediction"]["bottleneck"]
    assert len(report["observation"]["epochs"]) >= 1
    assert report.measured_images_per_s > 0
    # No faster than the simulated model allows (it sleeps 10 ms per batch of 8).
    assert report.measured_images_per_s < 1.05 * report.model_rate
    assert report.verdict and report.verdict == report["advice"]["verdict"]
    assert "predicted:" in report.text and "P  prep, 3 thread(s)" in report.text
    assert str(report) == report.text and "AnalysisReport" in repr(report)
    assert any(line.startswith("measuring fetch") for line in lines)
    assert any(line.startswith("measuring prep: 3 thread(s)") for line in lines)


def test_writes_the_json_and_a_page_with_the_verdict(analysis):
    report, out, _ = analysis
    assert json.loads((out / "report.json").read_text(encoding="utf-8")) == report
    page = (out / "report.html").read_text(encoding="utf-8")
    assert page == report.html
    assert page.startswith("<!DOCTYPE html>")
    assert escape(report.verdict) in page
    assert page.count("<svg") >= 5  # the stall breakdown and four what-if charts
    # In a notebook: the page, whole, in a frame of its own.
    frame = report._repr_html_()
    assert frame.startswith('<iframe srcdoc="')
    assert html.unescape(frame.split('"')[1]) == report.html


def test_reuses_the_rates_of_an_earlier_report_without_measuring(analysis, photos, tmp_path):
    report, out, _ = analysis
    for rates in (report, dict(report), out / "report.json"):
        lines = []
        again = nostall.analyze(photos, batch_size=BATCH, image_size=SIZE, rates=rates,
                                model_rate=123.0, run_seconds=0, progress=lines.append)
        assert again["measurements"] is None and again["observation"] is None
        assert not any("measur" in line for line in lines), lines
        assert again.measured_images_per_s is None
        assert again["rates"]["prep"] == report["rates"]["prep"]
        assert again.model_rate == 123.0 and again["model"]["how"] == "given: 123 samples/s"
    # No model: the input pipeline alone.
    alone = nostall.analyze(photos, batch_size=BATCH, image_size=SIZE, rates=report, run_seconds=0)
    assert alone.model_rate is None and alone.bottleneck != "model"
    assert not (tmp_path / "nostall-analysis.json").exists()  # nothing written unasked


# The timed steps sleep this long, so that the step's time, and with it the comparison of
# two timings taken one after the other, hardly depends on how busy the machine's cores are.
STEP_SECONDS = 0.05


class FakeClock:
    """The clock `time_model` reads, advanced only by the toy step: the step's time is
    then known exactly, whatever else the machine is doing."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(nostall._analyze, "time", fake)
    return fake


class ToyStep:
    """A small network's training step that records the batches it was given, and takes
    `seconds` of the fake clock's time (or none, with no clock)."""

    def __init__(self, clock=None, seconds=0.0):
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(), torch.nn.Linear(8, CLASSES))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.clock = clock
        self.seconds = seconds
        self.seen = []

    def __call__(self, images, labels):
        self.seen.append((tuple(images.shape), images.dtype, tuple(labels.shape), labels.dtype,
                          int(labels.min()), int(labels.max()), float(images.float().std())))
        loss = torch.nn.functional.cross_entropy(self.model(images), labels)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        if self.clock is not None:
            self.clock.now += self.seconds
        return loss


def test_model_is_timed_on_batches_of_the_configured_shape(analysis, photos, clock):
    report, _, _ = analysis
    step = ToyStep(clock, STEP_SECONDS)
    timed = nostall.analyze(photos, model=step, batch_size=BATCH, image_size=SIZE, rates=report,
                            run_seconds=0)
    assert len(step.seen) == 3 + 10  # warm-up, then the timed steps
    shape, dtype, label_shape, label_dtype, low, high, std = step.seen[0]
    assert shape == (BATCH, 3, SIZE, SIZE) and dtype == torch.float32
    assert label_shape == (BATCH,) and label_dtype == torch.int64
    assert 0 <= low <= high < CLASSES  # labels within the dataset's classes
    assert 0.5 < std < 2.0  # like normalised images
    assert timed["model"]["how"].startswith(
        f"timed: your training step on synthetic batches of {BATCH} × 3×{SIZE}×{SIZE} float32 "
        "on cpu, median of 10 steps")
    assert timed.model_rate == pytest.approx(BATCH / STEP_SECONDS)


def test_model_is_timed_on_uint8_hwc_batches_for_such_a_pipeline(analysis, photos):
    report, _, _ = analysis
    seen = []
    nostall.analyze(photos, model=lambda images, labels: seen.append(images), batch_size=4,
                    pipeline=[ops.RandomResizedCrop(48)], dtype="uint8", layout="HWC",
                    rates=report, run_seconds=0)
    assert seen[0].shape == (4, 48, 48, 3) and seen[0].dtype == torch.uint8
    assert int(seen[0].max()) > 200  # 0-255, not normalised


def test_time_model_gives_the_batch_over_the_step_time(clock):
    step = ToyStep(clock, STEP_SECONDS)
    rate = nostall.time_model(step, batch_size=BATCH, image_size=SIZE, num_classes=CLASSES)
    assert rate == pytest.approx(BATCH / STEP_SECONDS)
    assert step.seen[0][:2] == ((BATCH, 3, SIZE, SIZE), torch.float32)
    assert len(step.seen) == 3 + 10


def test_time_model_takes_the_median_step_not_the_mean(clock):
    calls = []

    def step(images, labels):
        calls.append(None)
        clock.now += 0.25 if len(calls) == 2 else 0.002  # one slow step among five

    rate = nostall.time_model(step, batch_size=10, image_size=8, warmup=0, steps=5)
    assert len(calls) == 5
    assert rate == pytest.approx(10 / 0.002)  # the mean step would give 192 samples/s


def test_time_model_shapes_dtypes_and_layouts():
    seen = []

    def step(images, labels):
        seen.append((tuple(images.shape), images.dtype, int(labels.max())))

    nostall.time_model(step, batch_size=2, image_size=(24, 32), dtype=torch.float16, layout="HWC",
                       num_classes=1, warmup=0, steps=1)
    assert seen == [((2, 24, 32, 3), torch.float16, 0)]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_time_model_waits_for_the_gpu():
    weight = torch.randn(4096, 4096, device="cuda")

    def step(images, labels):  # queues GPU work and returns at once
        x = weight
        for _ in range(20):
            x = x @ weight
        return x

    rate = nostall.time_model(step, batch_size=BATCH, image_size=SIZE, device="cuda")
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(5):
        step(None, None)
    torch.cuda.synchronize()
    direct = BATCH / ((time.perf_counter() - started) / 5)
    assert 0.5 < rate / direct < 2.0, (rate, direct)


def test_a_failing_step_raises_step_error_naming_the_batch(photos):
    def step(images, labels):
        raise ValueError("shapes do not match")

    with pytest.raises(nostall.StepError, match=r"ValueError.*\[8, 3, 64, 64\].*shapes do not") as e:
        nostall.time_model(step, batch_size=BATCH, image_size=SIZE)
    assert isinstance(e.value.__cause__, ValueError)
    assert isinstance(e.value, nostall.NostallError)
    with pytest.raises(nostall.StepError, match="shapes do not match"):
        nostall.analyze(photos, model=step, batch_size=BATCH, image_size=SIZE, budget=1.0)


def test_without_torch_time_model_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ModuleNotFoundError, match="needs PyTorch: pip install torch"):
        nostall.time_model(lambda images, labels: None)


@pytest.mark.parametrize("kwargs", [
    dict(model_rate=0.0),
    dict(model_rate=float("nan")),
    dict(model_rate=100.0, step_ms=5.0),
    dict(model_rate=100.0, model=lambda images, labels: None),
    dict(step_ms=-1.0),
    dict(device="cpu"),  # without a model to time there
    dict(budget=0.0),
    dict(budget=float("inf")),
    dict(run_seconds=-1.0),
    dict(max_threads=0),
    dict(threads=0),
    dict(batch_size=0),
    dict(cache="lots"),
    dict(cache="50%", cache_policy="fifo"),
    dict(node_cache="2GiB"),
    dict(network_gbps=0.0),
    dict(throttle_mbps=-5.0),
    dict(pipeline="nope"),
    dict(pipeline=[ops.RandomResizedCrop(64)], image_size=64),
    dict(dtype="float64"),
    dict(on_error="ignore"),
])
def test_bad_arguments_raise_config_error_before_measuring(photos, kwargs):
    lines = []
    with pytest.raises(nostall.ConfigError):
        nostall.analyze(photos, budget=kwargs.pop("budget", 30.0), progress=lines.append,
                        **kwargs)
    assert lines == []  # nothing was measured


def test_bad_rates_model_and_source_raise(photos, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": "0.1"}', encoding="utf-8")
    with pytest.raises(nostall.ConfigError, match="not a report"):
        nostall.analyze(photos, rates=bad, run_seconds=0)
    with pytest.raises(FileNotFoundError):
        nostall.analyze(photos, rates=tmp_path / "missing.json", run_seconds=0)
    with pytest.raises(TypeError):
        nostall.analyze(photos, model=42)
    with pytest.raises(TypeError):
        nostall.analyze(photos, rates=42)
    with pytest.raises(nostall.StorageError):
        nostall.analyze(tmp_path / "nowhere", budget=1.0)
    step = ToyStep()
    with pytest.raises(nostall.ConfigError):
        nostall.time_model(step, steps=0)
    with pytest.raises(nostall.ConfigError):
        nostall.time_model(step, dtype="int32")
    with pytest.raises(nostall.ConfigError):
        nostall.time_model(step, device="no-such-device")
    with pytest.raises(TypeError):
        nostall.time_model("not a step")
    assert step.seen == []


def test_an_exception_from_progress_is_raised(analysis, photos):
    report, _, _ = analysis

    def progress(line):
        raise KeyboardInterrupt

    # Measuring (not reusing rates) makes progress lines.
    with pytest.raises(KeyboardInterrupt):
        nostall.analyze(photos, batch_size=BATCH, image_size=SIZE, max_threads=1, budget=0.5,
                        run_seconds=0, progress=progress)
