"""Live metrics: a real Prometheus server (Debian's `prometheus`) scrapes a running loader,
and its HTTP API returns the figures the loader reports."""

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

import nostall

PROMETHEUS = shutil.which("prometheus")
DEADLINE = 120  # seconds: Prometheus starts and scrapes within a few; this only bounds a hang


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url):
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.read().decode()


def until(what, check):
    """Polls `check` until it returns something, or fails naming `what` at the deadline."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        try:
            found = check()
        except OSError:
            found = None
        if found is not None:
            return found
        time.sleep(0.2)
    pytest.fail(f"{what} within {DEADLINE} s")


@pytest.fixture
def prometheus(tmp_path):
    """Starts Prometheus on loopback; yields a function that makes it scrape an address."""
    assert PROMETHEUS, "prometheus is not installed (make deps installs it)"
    procs = []

    def start(target):
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n"
            "scrape_configs:\n  - job_name: nostall\n"
            f"    static_configs:\n      - targets: ['{target}']\n")
        port = free_port()
        log = open(tmp_path / "prometheus.log", "w")
        procs.append(subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT))
        base = f"http://127.0.0.1:{port}"
        until("Prometheus ready", lambda: get(base + "/-/ready") and True)
        return base

    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=30)


def query(base, expr):
    """The value of each series `expr` selects, by its labels, once Prometheus has any."""
    def ask():
        answer = json.loads(get(base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
        result = answer["data"]["result"]
        return {json.dumps(r["metric"], sort_keys=True): float(r["value"][1]) for r in result} or None
    return until(f"Prometheus returning {expr}", ask)


def test_prometheus_scrapes_the_stall_histogram_and_cache_counters(photos, prometheus):
    # Without overlap the counters stop with the second epoch (a third, started ahead,
    # would read the cache too).
    loader = nostall.Loader(photos, batch_size=8, image_size=32, cache="100%",
                            metrics_addr="127.0.0.1:0", overlap_epochs=False)
    waits, batches = 0.0, 0
    for _ in range(2):  # the second epoch reads from the cache
        for _ in loader:
            batches += 1
        waits += loader.metrics["stall_s"]
    assert loader.metrics["cache"]["hits"] == 32
    base = prometheus(loader.metrics_addr)
    count = query(base, 'nostall_batch_wait_seconds_count{job="nostall"}')
    assert list(count.values()) == [batches]
    wait_sum = query(base, "nostall_batch_wait_seconds_sum")
    assert list(wait_sum.values())[0] == pytest.approx(waits, rel=1e-6, abs=1e-9)
    buckets = query(base, "nostall_batch_wait_seconds_bucket")
    assert len(buckets) == 13  # 12 bounds and +Inf
    assert max(buckets.values()) == batches
    assert list(query(base, "nostall_cache_hits_total").values()) == [32]
    assert list(query(base, "nostall_cache_misses_total").values()) == [32]
    tiers = query(base, "nostall_read_bytes_total")
    by_tier = {json.loads(k)["tier"]: v for k, v in tiers.items()}
    assert by_tier["cache"] == loader.metrics["cache"]["hit_bytes"]
    assert by_tier["source"] == loader.metrics["cache"]["hit_bytes"]  # each photo read once
    assert list(query(base, "nostall_samples_total").values()) == [64]


def test_an_address_that_cannot_be_served_is_a_config_error(photos, monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        addr = "127.0.0.1:%d" % taken.getsockname()[1]
        with pytest.raises(nostall.ConfigError, match="metrics address"):
            nostall.Loader(photos, metrics_addr=addr)
    with pytest.raises(nostall.ConfigError, match="metrics address"):
        nostall.Loader(photos, metrics_addr="not an address")
    assert nostall.Loader(photos).metrics_addr is None
    monkeypatch.setenv("NOSTALL_METRICS_ADDR", "127.0.0.1:0")
    assert nostall.Loader(photos).metrics_addr.startswith("127.0.0.1:")
