"""share=: jobs reading one stream through the node agent (real agent processes, real
sockets and shared memory; signals to real member processes)."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch

import nostall
import nostall.agent
from parquet_files import rows, write

SETTINGS = dict(batch_size=4, pipeline="train", image_size=64, seed=11, threads=2)


def start_agent(tmp_path, monkeypatch, lease):
    """An agent of its own (2-batch staging), for one test, listening when returned."""
    socket = tmp_path / "run" / "agent.sock"
    monkeypatch.setenv("NOSTALL_AGENT_SOCKET", str(socket))
    return socket, nostall.agent.start(socket, staging="1", lease=lease, idle=600)


@pytest.fixture
def agent(tmp_path, monkeypatch):
    """An agent whose lease (60 s) no test outlasts: which member is served from the
    group's stream then depends on the protocol only, not on the machine's load."""
    socket, proc = start_agent(tmp_path, monkeypatch, 60)
    yield socket
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture
def quick_agent(tmp_path, monkeypatch):
    """An agent with a 0.5 s lease, for members that stop: what the tests check of it
    (every batch once, exactly) holds whoever the lease detaches."""
    socket, proc = start_agent(tmp_path, monkeypatch, 0.5)
    yield socket
    proc.terminate()
    proc.wait(timeout=30)


def own(photos, epoch, settings=SETTINGS):
    """What a loader of the job's own gives in `epoch`: (ids, labels, images) per batch."""
    loader = nostall.Loader(photos, **settings)
    loader.set_epoch(epoch)
    out = []
    for images, labels in loader:
        out.append((loader.last_ids, labels.clone(), images.clone()))
    return out


def two_members(photos):
    """Two jobs of one group."""
    return (nostall.Loader(photos, share="auto", **SETTINGS),
            nostall.Loader(photos, share="auto", **SETTINGS))


def epochs_of(photos, a, b, n=2):
    """For each of `n` epochs: `a` and `b` set to it, and what `own` gives there."""
    for epoch in range(n):
        a.set_epoch(epoch)
        b.set_epoch(epoch)
        yield own(photos, epoch)


def both_get(a, b, expected):
    """Iterates `a` and `b` in step through an epoch: each gets the batches `own` gave."""
    got_a, got_b = [], []
    for (ia, la), (ib, lb) in zip(a, b):
        got_a.append((a.last_ids, la.clone(), ia.clone()))
        got_b.append((b.last_ids, lb.clone(), ib.clone()))
    for got in (got_a, got_b):
        same_batches(got, expected)


def same_batches(got, expected):
    """`got` is what `own` gave: the same ids, labels and images, batch by batch."""
    assert len(got) == len(expected)
    for (ids, labels, images), (eids, elabels, eimages) in zip(got, expected):
        assert ids == eids
        assert torch.equal(labels, elabels)
        assert torch.equal(images, eimages)


def test_jobs_sharing_a_stream_get_what_their_own_loaders_give(photos, agent):
    a, b = two_members(photos)
    for expected in epochs_of(photos, a, b):
        both_get(a, b, expected)
        assert a.metrics["shared"]["batches_from_group"] == len(expected)
        assert b.metrics["shared"]["batches_from_group"] == len(expected)
    shared = a.metrics["shared"]
    assert shared["group"] == b.metrics["shared"]["group"]
    assert f"group {shared['group']}" in repr(a)
    assert shared["members"] == 2
    # Two epochs made once, each batch delivered to both (the last few deliveries may
    # come after these figures were sent).
    batches = len(a)
    assert 2 * batches <= shared["group_batches_prepared"] <= 2 * batches + 2
    assert shared["group_batches_delivered"] >= 4 * batches - 2
    assert shared["bytes_saved"] > 0


def test_jobs_sharing_a_parquet_dataset_get_what_their_own_loaders_give(photos, agent, tmp_path):
    data, classes = rows(photos)
    path = str(tmp_path / "train.parquet")
    write(path, data, classes, row_group_size=5)
    a = nostall.Loader(path, share="auto", **SETTINGS)
    b = nostall.Loader(path, share="auto", **SETTINGS)
    for expected in epochs_of(path, a, b):
        both_get(a, b, expected)
        assert a.metrics["shared"]["batches_from_group"] == len(expected)
    assert a.metrics["shared"]["members"] == 2


def test_a_job_changing_its_batches_in_place_changes_nothing_for_the_other(photos, agent):
    """Training code changes batches in place: each job's batch is a private
    copy-on-write mapping of the group's memory, so that is safe and stays its own."""
    a, b = two_members(photos)
    for expected in epochs_of(photos, a, b):
        got_b = []
        for (ia, _), (ib, lb), (_, _, eimages) in zip(a, b, expected):
            assert torch.equal(ia, eimages)
            ia.sub_(0.5)
            ia[:, 0].zero_()
            got_b.append((b.last_ids, lb.clone(), ib.clone()))
            assert not torch.equal(ia, eimages)
        same_batches(got_b, expected)
        assert a.metrics["shared"]["batches_from_group"] == len(expected)


def operators(flip):
    """A list of operators made afresh (equal lists, different objects)."""
    return [
        nostall.ops.RandomResizedCrop(48, scale=(0.3, 1.0)),
        nostall.ops.RandomHorizontalFlip(flip),
        nostall.ops.Normalize(mean=(0.5, 0.25, 0.125), std=(1 / 3, 0.2, 0.7)),
    ]


def test_jobs_giving_the_same_operators_share_a_stream_and_other_operators_do_not(
    photos, agent
):
    settings = dict(SETTINGS, pipeline=operators(0.5))
    del settings["image_size"]
    a = nostall.Loader(photos, share="auto", **settings)
    b = nostall.Loader(photos, share="auto", **dict(settings, pipeline=operators(0.5)))
    c = nostall.Loader(photos, share="auto", **dict(settings, pipeline=operators(0.25)))
    expected = own(photos, 0, settings)
    both_get(a, b, expected)
    assert a.metrics["shared"]["group"] == b.metrics["shared"]["group"]
    assert a.metrics["shared"]["members"] == 2
    assert c.metrics["shared"]["group"] != a.metrics["shared"]["group"]
    assert sum(1 for _ in c) == len(expected)


def test_share_with_a_foreign_group_stream_is_refused_clearly(photos, agent):
    keep = nostall.Loader(photos, share="g", **SETTINGS)
    other = dict(SETTINGS, seed=12)
    with pytest.raises(nostall.AgentError, match="group \"g\" reads another stream"):
        nostall.Loader(photos, share="g", **other)
    larger = dict(SETTINGS, batch_size=2 * SETTINGS["batch_size"])
    with pytest.raises(nostall.AgentError, match="Jobs of a group use one batch size"):
        nostall.Loader(photos, share="g", **larger)
    del keep


MEMBER = textwrap.dedent("""
    import json, sys
    import nostall
    photos, settings, pause_after = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    loader = nostall.Loader(photos, share="auto", **settings)
    print("attached", flush=True)
    sys.stdin.readline()  # every member attached: go
    ids = []
    for n, (images, labels) in enumerate(loader):
        ids.append(loader.last_ids)
        if n + 1 == pause_after:
            print("paused", flush=True)
            sys.stdin.readline()
    print(json.dumps(ids), flush=True)
""")


def member(photos, pause_after, stderr=None):
    return subprocess.Popen(
        [sys.executable, "-c", MEMBER, str(photos), json.dumps(SETTINGS), str(pause_after)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True)


def test_killed_and_stopped_members_do_not_hold_up_the_others(photos, quick_agent):
    expected = [ids for ids, _, _ in own(photos, 0)]
    killed, stopped = member(photos, 2), member(photos, 2)
    others = [member(photos, 0) for _ in range(2)]
    everyone = [killed, stopped] + others
    for p in everyone:
        assert p.stdout.readline().strip() == "attached"
    for p in everyone:
        p.stdin.write("go\n")
        p.stdin.flush()
    assert killed.stdout.readline().strip() == "paused"
    assert stopped.stdout.readline().strip() == "paused"
    killed.send_signal(signal.SIGKILL)
    stopped.send_signal(signal.SIGSTOP)
    # The group's staging holds two batches of an 8-batch epoch: the others finish only
    # if the killed member is dropped and the stopped one detached by its lease.
    for p in others:
        assert json.loads(p.stdout.readline()) == expected
        assert p.wait(timeout=60) == 0
    # The stopped member, resumed, finishes its epoch exactly once on its own stream.
    stopped.send_signal(signal.SIGCONT)
    stopped.stdin.write("go\n")
    stopped.stdin.flush()
    assert json.loads(stopped.stdout.readline()) == expected
    assert stopped.wait(timeout=60) == 0
    killed.wait(timeout=10)


def test_members_go_on_alone_while_the_agent_is_stopped(photos, tmp_path, monkeypatch):
    """A stopped agent says nothing for a whole lease: its members give it up and finish
    their epoch on threads of their own, every batch once, while it is still stopped."""
    _, agent = start_agent(tmp_path, monkeypatch, 1.0)
    expected = [ids for ids, _, _ in own(photos, 0)]
    members = [member(photos, 2, stderr=subprocess.PIPE) for _ in range(2)]
    try:
        for p in members:
            assert p.stdout.readline().strip() == "attached"
        for p in members:
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in members:
            assert p.stdout.readline().strip() == "paused"
        # At most 3 batches of the 8 were sent ahead: each member waits for the agent.
        agent.send_signal(signal.SIGSTOP)
        for p in members:
            out, err = p.communicate("go\n", timeout=120)
            assert p.returncode == 0, err
            assert json.loads(out) == expected
            assert "the node agent is lost (the nostall agent said nothing" in err, err
    finally:
        for p in members:
            p.kill()
        agent.send_signal(signal.SIGCONT)
        agent.terminate()
        agent.wait(timeout=30)


def test_a_job_starts_the_agent_when_none_runs(photos, tmp_path, monkeypatch):
    socket = tmp_path / "auto" / "agent.sock"
    monkeypatch.setenv("NOSTALL_AGENT_SOCKET", str(socket))
    loader = nostall.Loader(photos, share="auto", **SETTINGS)
    try:
        got = [loader.last_ids for _ in loader]
        assert got == [ids for ids, _, _ in own(photos, 0)]
        assert oct(os.stat(socket.parent).st_mode & 0o777) == "0o700"
    finally:
        del loader
        log = (socket.parent / "agent.log").read_text()
        pid = int(re.search(r"\(pid (\d+)\)", log).group(1))
        os.kill(pid, signal.SIGTERM)


def test_one_dataset_named_two_ways_is_one_group(photos, agent, monkeypatch):
    absolute = nostall.Loader(photos, share="auto", **SETTINGS)
    monkeypatch.chdir(os.path.dirname(photos))
    relative = nostall.Loader(os.path.basename(photos), share="auto", **SETTINGS)
    assert relative.metrics["shared"]["group"] == absolute.metrics["shared"]["group"]
    assert relative.metrics["shared"]["members_at_attach"] == 2


def test_an_agent_that_cannot_start_is_a_clear_error(photos, tmp_path, monkeypatch):
    shared_dir = tmp_path / "everyone"
    shared_dir.mkdir()
    shared_dir.chmod(0o777)
    monkeypatch.setenv("NOSTALL_AGENT_SOCKET", str(shared_dir / "agent.sock"))
    with pytest.raises(nostall.AgentError, match="0700"):
        nostall.Loader(photos, share="auto", **SETTINGS)


def test_a_bad_sample_raises_the_same_sample_error_as_the_jobs_own_loader(photos_copy, agent):
    broken = photos_copy / "flowers" / "zz-broken.jpg"
    good = next((photos_copy / "flowers").iterdir()).read_bytes()
    broken.write_bytes(good[: len(good) // 3])
    def first_error(**kwargs):
        loader = nostall.Loader(photos_copy, **SETTINGS, **kwargs)
        batches = 0
        with pytest.raises(nostall.SampleError) as raised:
            for _ in loader:
                batches += 1
        return batches, raised.value.location, raised.value.cause
    own = first_error()
    assert own[1].endswith("zz-broken.jpg")
    assert first_error(share="auto") == own


def test_a_shared_loader_resumes_mid_epoch_exactly(photos, agent):
    expected = [ids for ids, _, _ in own(photos, 0)]
    first = nostall.Loader(photos, share="auto", **SETTINGS)
    it = iter(first)
    seen = []
    for _ in range(3):
        next(it)
        seen.append(first.last_ids)
    state = first.state_dict()
    assert (state["epoch"], state["batch"]) == (0, 3)
    del it, first
    again = nostall.Loader(photos, share="auto", **SETTINGS)
    again.load_state_dict(state)
    seen.extend(again.last_ids for _ in again)
    assert seen == expected


def test_a_shared_loader_reports_its_epoch_and_its_group_in_metrics_and_live(photos, agent):
    loader = nostall.Loader(photos, share="auto", metrics_addr="127.0.0.1:0", **SETTINGS)
    n = 0
    for images, labels in loader:
        n += len(labels)
    m = loader.metrics
    assert (m["batches"], m["samples"]) == (len(loader), n)
    assert m["images_per_s"] > 0 and 0 <= m["stall_s"] <= m["wall_s"]
    assert m["shared"]["batches_from_group"] == len(loader)
    import urllib.request
    with urllib.request.urlopen(f"http://{loader.metrics_addr}/metrics", timeout=10) as r:
        text = r.read().decode()

    def value(name):
        lines = [line for line in text.splitlines() if line.startswith(name)]
        assert lines, f"{name} not served:\n{text}"
        return float(lines[0].split()[-1])

    assert value("nostall_samples_total") == n
    assert value("nostall_batch_wait_seconds_count") == len(loader)
    assert value("nostall_group_members") == 1
    assert value("nostall_group_batches_delivered_total") == len(loader)
    assert value("nostall_group_bytes_saved_total") == 0  # alone: nothing saved


def test_a_shared_loader_iterated_again_mid_epoch_starts_where_asked(photos, agent):
    """The batch made ahead for the old position is dropped, not delivered."""
    expected = [ids for ids, _, _ in own(photos, 0)]
    loader = nostall.Loader(photos, share="auto", **SETTINGS)
    it = iter(loader)
    for _ in range(3):
        next(it)
    loader.set_epoch(0)
    assert [loader.last_ids for _ in loader] == expected
    state = None
    for n, _ in enumerate(loader):  # epoch 1, left after two batches
        if n == 1:
            state = loader.state_dict()
            break
    loader.load_state_dict(state)
    rest = [loader.last_ids for _ in loader]
    assert rest == [ids for ids, _, _ in own(photos, 1)][2:]


def test_ctrl_c_while_waiting_for_the_agent_raises_and_the_epoch_goes_on_exactly(
    photos, tmp_path, monkeypatch, sigint_raises
):
    _, agent = start_agent(tmp_path, monkeypatch, 60)
    expected = [ids for ids, _, _ in own(photos, 0)]
    loader = nostall.Loader(photos, share="auto", **SETTINGS)
    it = iter(loader)
    next(it)
    seen = [loader.last_ids]
    # The agent stops: the batches already sent (a few of the 8) are taken, then the
    # wait for the next can only end by the signal (or, if it never did, by the agent
    # coming back: the epoch would then end uninterrupted, and the test fail).
    agent.send_signal(signal.SIGSTOP)
    interrupt = threading.Timer(0.5, signal.raise_signal, (signal.SIGINT,))
    back = threading.Timer(20, agent.send_signal, (signal.SIGCONT,))
    interrupt.start()
    back.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            while True:  # (iter() again would start the epoch again)
                next(it)
                seen.append(loader.last_ids)
        assert len(seen) < len(expected)
        agent.send_signal(signal.SIGCONT)
        # Resumed from what was delivered: every batch once.
        loader.load_state_dict(loader.state_dict())
        seen.extend(loader.last_ids for _ in loader)
        assert seen == expected
    finally:
        interrupt.cancel()
        back.cancel()
        agent.send_signal(signal.SIGCONT)
        agent.terminate()
        agent.wait(timeout=30)


EXITS_MID_EPOCH = textwrap.dedent("""
    import sys
    import nostall
    photos, batch_size = sys.argv[1], int(sys.argv[2])
    loader = nostall.Loader(photos, share="auto", batch_size=batch_size, image_size=64)
    it = iter(loader)
    next(it)
    print("ready", flush=True)
    sys.stdin.readline()
    # Exits with the loader alive, its hand-off thread waiting on the agent.
""")


def test_a_script_that_exits_mid_epoch_exits_at_once_while_the_agent_is_stopped(
    photos, tmp_path, monkeypatch
):
    _, agent = start_agent(tmp_path, monkeypatch, 60)
    script = subprocess.Popen(
        [sys.executable, "-c", EXITS_MID_EPOCH, str(photos), "2"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert script.stdout.readline().strip() == "ready"
        agent.send_signal(signal.SIGSTOP)
        script.stdin.write("go\n")
        script.stdin.flush()
        assert script.wait(timeout=30) == 0, script.stderr.read()
    finally:
        script.kill()
        agent.send_signal(signal.SIGCONT)
        agent.terminate()
        agent.wait(timeout=30)


def test_a_member_on_a_device_gets_the_group_s_batches_there(photos, agent, monkeypatch):
    """``device=`` with ``share=``, the CPU standing in for the GPU: the member with a
    device and the one without share one group, and each gets what its own loader gives
    (the group's float32 batches, moved as they are)."""
    from nostall import _device

    stager = _device.Stager
    monkeypatch.setattr(_device, "resolve", lambda device: 0)
    monkeypatch.setattr(_device, "Stager",
                        lambda index, finish, queue=None: stager("cpu", finish, queue))
    a = nostall.Loader(photos, share="auto", device="cuda", **SETTINGS)
    b = nostall.Loader(photos, share="auto", **SETTINGS)
    for expected in epochs_of(photos, a, b, n=1):
        both_get(a, b, expected)
    assert a.metrics["shared"]["group"] == b.metrics["shared"]["group"]
    assert a.metrics["shared"]["members"] == 2
    device = a.metrics["device"]
    assert device["batches"] == len(a) and not device["page_locked"]


def test_jobs_reading_records_share_them_tokenizer_and_all(photos, agent, tmp_path):
    """Fields travel to the agent (a CLIP tokenizer's tokenizer.json beside the hello):
    both members get the dictionaries their own loaders give, from the group's stream."""
    open_clip = pytest.importorskip("open_clip")
    from test_fields import captions, write_shard

    files = sorted(Path(photos).rglob("*.jpg"))
    classes = sorted({p.parent.name for p in files})
    members = []
    for i, (path, caption) in enumerate(zip(files, captions(len(files)), strict=True)):
        members += [
            (f"{i:06d}.jpg", path.read_bytes()),
            (f"{i:06d}.txt", caption.encode()),
            (f"{i:06d}.json", json.dumps({"key": i}).encode()),
            (f"{i:06d}.cls", str(classes.index(path.parent.name)).encode()),
        ]
    (tmp_path / "shards").mkdir()
    write_shard(tmp_path / "shards" / "train-000000.tar", members)
    tokenizer = nostall.Tokenizer(open_clip.get_tokenizer("ViT-B-32"), length=77)
    fields = {"image": "jpg", "text": nostall.Field("txt", tokenizer=tokenizer),
              "caption": "txt", "meta": "json", "label": "cls"}
    kw = dict(SETTINGS, fields=fields)
    location = str(tmp_path / "shards")

    def copied(batch):
        return {k: (tuple(t.clone() for t in v) if isinstance(v, tuple)
                    else v.clone() if isinstance(v, torch.Tensor) else list(v))
                for k, v in batch.items()}

    def equal(got, want):
        assert list(got) == list(want)
        for k, v in want.items():
            if isinstance(v, tuple):
                assert all(torch.equal(g, w) for g, w in zip(got[k], v, strict=True)), k
            elif isinstance(v, torch.Tensor):
                assert torch.equal(got[k], v), k
            else:
                assert got[k] == v, k

    expected = [copied(batch) for batch in nostall.Loader(location, **kw)]
    a = nostall.Loader(location, share="auto", **kw)
    b = nostall.Loader(location, share="auto", **kw)
    for got_a, got_b, want in zip(a, b, expected, strict=True):
        equal(got_a, want)
        equal(got_b, want)
    for loader in (a, b):
        assert loader.metrics["shared"]["batches_from_group"] == len(expected)
        assert loader.metrics["shared"]["members"] == 2
    assert a.metrics["shared"]["group"] == b.metrics["shared"]["group"]
    plain = nostall.Loader(location, share="auto", **dict(kw, fields={"image": "jpg"}))
    assert plain.metrics["shared"]["group"] != a.metrics["shared"]["group"]


def test_jobs_mixing_datasets_share_the_mixture_and_count_its_sources(photos, agent, tmp_path):
    small = tmp_path / "small"
    for path in sorted(Path(photos).rglob("*.jpg"))[::2]:
        (small / path.parent.name).mkdir(parents=True, exist_ok=True)
        (small / path.parent.name / path.name).write_bytes(path.read_bytes())
    kw = dict(SETTINGS, weights=[0.25, 0.75])
    sources = [photos, str(small)]
    own_loader = nostall.Loader(sources, **kw)
    expected = [(own_loader.last_ids, labels.clone(), images.clone()) for images, labels in own_loader]
    a = nostall.Loader(sources, share="auto", **kw)
    b = nostall.Loader(sources, share="auto", **kw)
    both_get(a, b, expected)
    for loader in (a, b):
        assert loader.metrics["shared"]["batches_from_group"] == len(expected)
        assert loader.metrics["sources"] == own_loader.metrics["sources"]
    other = nostall.Loader(sources, share="auto", **dict(kw, weights=[0.5, 0.5]))
    assert other.metrics["shared"]["group"] != a.metrics["shared"]["group"]


def test_a_pipeline_calling_python_is_not_shared(photos, agent):
    from nostall import ops

    pipeline = [ops.RandomResizedCrop(32), ops.Python(lambda x: x)]
    with pytest.raises(nostall.ConfigError, match="ops.Python"):
        nostall.Loader(photos, share="auto", batch_size=8, pipeline=pipeline)
