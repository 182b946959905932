"""``remote=``: batches prepared by Ray actors, the same as the local loader's, each once.

The scenarios on a real Ray cluster (a head and three worker nodes, `ray start`
processes) run in one child process inside a network namespace of its own
(``ray_scenarios.py``: Ray binds the machine's addresses otherwise); this file checks what
it saw. The errors that need no cluster, and the scaling rule, are checked here.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import nostall
from nostall._remote import Scaling, _Rule

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> dict:
    if shutil.which("unshare") is None:
        pytest.fail("the Ray tests need unshare (util-linux) for a network namespace of their own")
    out = tmp_path_factory.mktemp("ray") / "seen.json"
    script = f"ip link set lo up && exec {sys.executable} {HERE / 'ray_scenarios.py'} {out}"
    run = subprocess.run(["unshare", "-rn", "sh", "-c", script], capture_output=True, text=True,
                         timeout=900, env={**os.environ, "PYTHONPATH": str(HERE.parent)})
    error = out.with_suffix(".error")
    assert run.returncode == 0 and out.exists(), (
        (error.read_text() if error.exists() else "") + run.stdout[-3000:] + run.stderr[-3000:])
    return json.loads(out.read_text())


def test_batches_made_by_actors_are_the_local_loaders(seen):
    assert seen["nodes"] == 4
    assert seen["batches"] == 8
    for with_local in ("True", "False"):
        assert seen[f"equal_local_{with_local}"], with_local
        stats = seen[f"stats_local_{with_local}"]
        assert sum(s["batches"] for s in stats) == seen["batches"]
        actors = [s for s in stats if s["name"] != "local"]
        assert len(actors) == 2 and sum(s["batches"] for s in actors) > 0
    assert all(s["name"] != "local" for s in seen["stats_local_False"])


def test_the_next_epoch_is_started_ahead_by_the_actors_and_is_the_local_loaders(seen):
    for with_local in ("True", "False"):
        assert seen[f"equal_second_epoch_{with_local}"], with_local
        assert seen[f"runs_ahead_{with_local}"] == 1, with_local


def test_an_actor_killed_mid_epoch_loses_no_batch_and_repeats_none(seen):
    assert seen["equal_after_kill"]
    assert seen["followed_restart"], "the trainer did not follow the restarted actor"
    assert seen["equal_after_restart"]


def test_state_dict_resumes_exactly_with_or_without_remote_and_on_fewer_ranks(seen):
    assert seen["resume_remote"]
    assert seen["resume_local"]
    assert seen["elastic"]


def test_the_users_own_code_runs_in_the_actors_with_the_same_batches(seen):
    assert seen["dataset"], "a Dataset object through remote= gave other batches"
    assert seen["python_op"], "ops.Python through remote= gave other batches"


def test_fields_with_a_tokenizer_audio_and_mixtures_made_by_actors_are_the_local_loaders(seen):
    assert seen["fields"], "captions tokenized by the actors differ from the local loader's"
    assert seen["audio"], "audio batches made by the actors differ from the local loader's"
    assert seen["mixture"], "a mixture's batches made by the actors differ from the local loader's"


def test_what_cannot_work_is_a_config_error_before_the_first_epoch(seen):
    assert seen["no_cluster"].startswith("ConfigError") and "no Ray cluster" in seen["no_cluster"]
    assert seen["no_label"].startswith("ConfigError") and "pool=gpu-less" in seen["no_label"]
    assert seen["wrong_secret"].startswith("ConfigError") and "secret" in seen["wrong_secret"]
    assert seen["other_settings"].startswith("ConfigError") and "seed" in seen["other_settings"]


def test_without_ray_or_a_secret_remote_is_refused_by_name(monkeypatch, tmp_path):
    photos = nostall.demo_photos(str(tmp_path / "photos"))
    monkeypatch.delenv("NOSTALL_PEER_SECRET", raising=False)
    with pytest.raises(nostall.ConfigError, match="NOSTALL_PEER_SECRET"):
        nostall.Loader(photos, remote=nostall.Remote())
    monkeypatch.setenv("NOSTALL_PEER_SECRET", "x" * 32)
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(nostall.ConfigError, match="needs Ray"):
        nostall.Loader(photos, remote=nostall.Remote())
    with pytest.raises(nostall.ConfigError, match="remote= takes a nostall.Remote"):
        nostall.Loader(photos, remote=2)
    with pytest.raises(nostall.ConfigError, match="share="):
        nostall.Loader(photos, remote=nostall.Remote(), share="auto")
    with pytest.raises(nostall.ConfigError, match="actors"):
        nostall.Remote(actors=0, local=False)


def test_settings_sent_to_actors_pickle():
    mix = nostall.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, cutmix_minmax=(0.2, 0.8), mode="elem",
                        num_classes=10)
    assert repr(pickle.loads(pickle.dumps(mix))) == repr(mix)
    field = nostall.Field("npz", kind="npz", arrays={"a": 3, "b": (2, 2)})
    assert repr(pickle.loads(pickle.dumps(field))) == repr(field)


def test_the_scaling_rule_adds_while_it_pays_and_gives_back_when_idle():
    rule = _Rule(Scaling(min_actors=1, max_actors=4, stall=0.05, gain=0.07, loss=0.03, idle=2))
    # A stall: add one; the time per batch fell by 20%: keep it.
    assert rule.decide(1, 0.30, 1.0) == +1
    assert rule.decide(2, 0.10, 0.8) == 0
    # Still stalling: add another; it did not pay (2% better): give it back, and add no
    # more while the stall stays at that level.
    assert rule.decide(2, 0.10, 0.8) == +1
    assert rule.decide(3, 0.10, 0.79) == -1
    assert rule.decide(2, 0.10, 0.8) == 0
    # The stall doubles: adding pays again.
    assert rule.decide(2, 0.25, 1.0) == +1
    assert rule.decide(3, 0.0, 0.7) == 0
    # Idle for two intervals: give one back; the loss is 10%: take it again.
    assert rule.decide(3, 0.0, 0.7) == 0
    assert rule.decide(3, 0.0, 0.7) == -1
    assert rule.decide(2, 0.0, 0.77) == +1
    # At the ceiling nothing is added, at the floor nothing given back.
    full = _Rule(Scaling(min_actors=1, max_actors=2, idle=1))
    assert full.decide(2, 0.9, 1.0) == 0
    assert full.decide(1, 0.0, 1.0) == 0


class _FakeRay:
    """What ``_Pool`` asks of Ray, recorded: actors that start at once, and the requests
    made of the autoscaler (``ray.autoscaler.sdk.request_resources``)."""

    class exceptions:
        class GetTimeoutError(Exception):
            pass

        class RayError(Exception):
            pass

    def __init__(self) -> None:
        self.requests: list[list[dict]] = []
        self.killed = 0
        self.made = 0

    def remote(self, cls):
        fake = self

        class Actor:
            def __init__(self) -> None:
                fake.made += 1
                self.where = f"127.0.0.1:{fake.made}"

                class Address:
                    @staticmethod
                    def remote():
                        return self.where

                self.address = Address

        class Options:
            @staticmethod
            def options(**_):
                return Options

            @staticmethod
            def remote(*_):
                return Actor()

        return Options

    def get(self, refs, timeout=None):
        return refs

    def kill(self, actor) -> None:
        self.killed += 1

    def request_resources(self, bundles) -> None:
        self.requests.append(bundles)


def test_scaling_asks_the_autoscaler_for_room_and_gives_it_back(monkeypatch):
    import types

    from nostall._remote import _Pool

    ray = _FakeRay()
    sdk = types.ModuleType("ray.autoscaler.sdk")
    sdk.request_resources = ray.request_resources  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ray.autoscaler.sdk", sdk)

    class Client:
        addresses: list[str] = []

        def set_addresses(self, addresses):
            Client.addresses = addresses

    remote = nostall.Remote(actors=1, num_cpus=2, resources={"prep": 1}, scaling=Scaling())
    pool = _Pool(ray, remote, "data", {})
    pool.client = Client()
    pool.start(1)
    bundle = {"CPU": 2, "prep": 1}
    pool._scale(+1)
    assert ray.requests[-1] == [bundle] * 2 and len(Client.addresses) == 2
    # Shrinking lowers the standing request: the autoscaler may take the node back.
    pool._scale(-1)
    assert ray.requests[-1] == [bundle] and ray.killed == 1 and len(Client.addresses) == 1
    pool.stop()
    assert ray.requests[-1] == [] and ray.killed == 2

