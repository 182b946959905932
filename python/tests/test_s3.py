"""S3 locations from Python, against a real S3-compatible server: ``s3s-fs``.

``s3s-fs`` serves a directory over the S3 API (each sub-directory is a bucket, each file
below it an object); ``make deps`` installs it. Without it these tests fail, naming what
to install; they never skip. The server holds the demo photographs twice: as WebDataset
tar shards (bucket ``shards``) and as one object per image (bucket ``objects``). Loaders
over both must deliver exactly what a loader over the local folder delivers: the same
sample ids, labels and pixels, batch by batch. Bucket ``videos`` holds camera footage
(nostall-video's) in class folders and a manifest of segments of it.
"""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tarfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import nostall

ACCESS_KEY = "nostall-test"
SECRET_KEY = "nostall-test-secret"
PER_SHARD = 10


def s3s_fs() -> str:
    """The ``s3s-fs`` binary: ``$S3S_FS``, else cargo's bin directory, else ``PATH``."""
    if os.environ.get("S3S_FS"):
        if not os.access(os.environ["S3S_FS"], os.X_OK):
            pytest.fail(f"S3S_FS={os.environ['S3S_FS']} is not an executable file: point it at "
                        "the s3s-fs binary, or unset it to use the one `make deps` installs",
                        pytrace=False)
        return os.environ["S3S_FS"]
    cargo_home = Path(os.environ.get("CARGO_HOME") or Path.home() / ".cargo")
    candidate = cargo_home / "bin" / "s3s-fs"
    if candidate.is_file():
        return str(candidate)
    found = shutil.which("s3s-fs")
    if found:
        return found
    pytest.fail("the S3 tests need the `s3s-fs` server and it is not installed (looked in "
                "$CARGO_HOME/bin and PATH): run `make deps` (or `cargo install s3s-fs@0.14.1 "
                "--features binary --locked`), or point S3S_FS at the binary", pytrace=False)


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_shards(folder: Path, out: Path) -> None:
    """The ImageFolder `folder` as WebDataset shards of PER_SHARD samples in `out`, in the
    order nostall catalogs the folder (classes sorted, then names), with `.cls` labels."""
    classes = sorted(d.name for d in folder.iterdir() if d.is_dir())
    samples = [(label, f) for label, c in enumerate(classes)
               for f in sorted((folder / c).iterdir()) if f.is_file()]
    out.mkdir(parents=True)
    for n in range(0, len(samples), PER_SHARD):
        with tarfile.open(out / f"train-{n // PER_SHARD:04d}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
            for i, (label, path) in enumerate(samples[n:n + PER_SHARD], start=n):
                tar.add(path, arcname=f"{i:06d}{path.suffix}")
                cls = out / f"{i:06d}.cls"
                cls.write_text(str(label))
                tar.add(cls, arcname=cls.name)
                cls.unlink()


def write_records(folder: Path, out: Path) -> None:
    """The ImageFolder `folder` as WebDataset shards of records: each photograph with a
    caption (a sentence of the interpreter's documentation), metadata and its class."""
    from test_fields import captions, write_shard

    files = sorted(folder.rglob("*.jpg"))
    classes = sorted({p.parent.name for p in files})
    out.mkdir(parents=True)
    samples = [[(f"{i:06d}.jpg", path.read_bytes()), (f"{i:06d}.txt", caption.encode()),
                (f"{i:06d}.json", f'{{"key": {i}}}'.encode()),
                (f"{i:06d}.cls", str(classes.index(path.parent.name)).encode())]
               for i, (path, caption) in enumerate(zip(files, captions(len(files)), strict=True))]
    for n in range(0, len(samples), PER_SHARD):
        write_shard(out / f"train-{n // PER_SHARD:04d}.tar",
                    [m for sample in samples[n:n + PER_SHARD] for m in sample])


FOOTAGE = Path(__file__).parents[2] / "crates" / "nostall-video" / "tests" / "footage"
VIDEOS = ["av1.mp4", "h264_bframes.mp4", "h264_opengop.mkv", "vp9.webm"]


def write_videos(out: Path) -> None:
    """The footage in class folders under ``train/`` (by container), and ``clips.jsonl``:
    two segments of each video, labelled."""
    rows = []
    for name in VIDEOS:
        relative = f"train/{name.rsplit('.', 1)[1]}/{name}"
        (out / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(FOOTAGE / name, out / relative)
        rows += [f'{{"video": "{relative}", "start": {s}, "end": {s + 1}, "label": "{c}"}}\n'
                 for s, c in ((0.0, "first"), (1.5, "second"))]
    (out / "clips.jsonl").write_text("".join(rows))


@pytest.fixture(scope="module")
def s3_process(photos, tmp_path_factory):
    """An ``s3s-fs`` process on a free port of 127.0.0.1 serving buckets ``shards`` (the
    demo photographs as tar shards under ``train/``) and ``objects`` (the ImageFolder under
    ``train/``); yields its endpoint URL and the process, and stops it at the end."""
    root = tmp_path_factory.mktemp("s3")
    write_shards(Path(photos), root / "shards" / "train")
    shutil.copytree(photos, root / "objects" / "train")
    write_records(Path(photos), root / "records" / "train")
    write_videos(root / "videos")
    with serving(root, root.parent / f"{root.name}-s3s-fs.log") as served:
        yield served


@contextlib.contextmanager
def serving(root: Path, log: Path):
    """An ``s3s-fs`` process serving ``root`` on a free port of 127.0.0.1, listening when
    entered: its endpoint URL and the process; stopped on leaving."""
    binary = s3s_fs()
    port = free_port()
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [binary, "--host", "127.0.0.1", "--port", str(port), "--access-key", ACCESS_KEY,
             "--secret-key", SECRET_KEY, str(root)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                pass
            if server.poll() is not None:
                pytest.fail(f"s3s-fs exited ({server.returncode}) before listening on port {port}: "
                            f"{log.read_text(errors='replace')}", pytrace=False)
            if time.monotonic() > deadline:
                pytest.fail(f"s3s-fs is not listening on 127.0.0.1:{port} after 20 s", pytrace=False)
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture(scope="module")
def s3_server(s3_process):
    """The endpoint URL of the module's ``s3s-fs``."""
    return s3_process[0]


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """The environment a user sets for an S3-compatible server: endpoint and keys (and
    no other AWS settings of this machine)."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    return s3_server


def epochs(location, n=2):
    """Every batch of epochs 0..n-1 of a shuffled, augmented loader: (ids, labels, images)."""
    loader = nostall.Loader(location, batch_size=8, image_size=32, seed=11, threads=2,
                            fetch_threads=2, output="numpy")
    out = [(list(loader.last_ids), y.copy(), x.copy()) for _ in range(n) for x, y in loader]
    return loader, out


@pytest.mark.parametrize("location", ["s3://shards/train", "s3://shards", "s3://objects/train",
                                      "s3://objects/train/"])
def test_s3_locations_deliver_what_the_local_folder_delivers(photos, s3_env, location):
    local, expected = epochs(photos)
    remote, got = epochs(location)
    assert remote.dataset_len == local.dataset_len == 32
    assert len(got) == len(expected) == 8  # 2 epochs of 4 batches
    for (ids, labels, images), (ids_local, labels_local, images_local) in zip(got, expected):
        assert ids == ids_local
        np.testing.assert_array_equal(labels, labels_local)
        np.testing.assert_array_equal(images, images_local)
    assert remote.metrics["storage"]["requests"] >= 32  # the bytes came from the server
    if location.startswith("s3://objects"):
        assert remote.classes == local.classes == ["flowers", "grass", "leaves", "water"]


@pytest.mark.parametrize("where", ["train", "clips.jsonl"])
def test_videos_and_their_manifest_from_s3_are_those_of_the_local_copy(s3_env, where, tmp_path):
    from nostall import ops, video

    write_videos(tmp_path)

    def clips(location):
        loader = nostall.Loader(location, batch_size=3, seed=2, threads=2, dtype="uint8",
                                output="numpy", pipeline=[video.Clip(4, stride=2), ops.Resize(40),
                                                          ops.RandomCrop(32), ops.RandomHorizontalFlip()])
        return loader, [(list(loader.last_ids), y.copy(), x.copy()) for x, y in loader]

    local, expected = clips(str(tmp_path / where))
    remote, got = clips(f"s3://videos/{where}")
    assert remote.dataset_len == local.dataset_len == len(VIDEOS) * (1 if where == "train" else 2)
    assert len(got) == len(expected)
    for (ids, labels, x), (ids_local, labels_local, x_local) in zip(got, expected):
        assert ids == ids_local
        np.testing.assert_array_equal(labels, labels_local)
        np.testing.assert_array_equal(x, x_local)
    assert remote.metrics["storage"]["requests"] >= remote.dataset_len


def test_local_shards_deliver_what_the_local_folder_delivers(photos, tmp_path):
    write_shards(Path(photos), tmp_path / "shards")
    _, expected = epochs(photos)
    _, got = epochs(str(tmp_path / "shards"))
    assert [(ids, labels.tolist()) for ids, labels, _ in got] == \
        [(ids, labels.tolist()) for ids, labels, _ in expected]
    for (_, _, images), (_, _, images_local) in zip(got, expected):
        np.testing.assert_array_equal(images, images_local)


def test_records_from_s3_shards_are_the_local_shards_records(photos, s3_env, tmp_path):
    write_records(Path(photos), tmp_path / "records")
    fields = {"image": "jpg", "caption": "txt", "meta": "json", "label": "cls"}
    kw = dict(batch_size=8, image_size=32, seed=5, threads=2, fetch_threads=2,
              output="numpy", fields=fields)

    def read(location):
        loader = nostall.Loader(location, **kw)
        return [{k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in b.items()}
                for b in loader]

    got, expected = read("s3://records/train"), read(str(tmp_path / "records"))
    assert len(got) == len(expected) == 4
    for remote, local in zip(got, expected):
        assert remote["caption"] == local["caption"] and remote["meta"] == local["meta"]
        np.testing.assert_array_equal(remote["image"], local["image"])
        np.testing.assert_array_equal(remote["label"], local["label"])


def test_a_mixture_of_an_s3_dataset_and_a_local_one_is_that_of_their_local_copies(
        photos, s3_env, tmp_path):
    write_shards(Path(photos), tmp_path / "shards")
    kw = dict(batch_size=8, image_size=32, seed=5, threads=2, fetch_threads=2,
              output="numpy", weights=[0.75, 0.25])

    def read(sources):
        loader = nostall.Loader(sources, **kw)
        batches = [(list(loader.last_ids), y.copy(), x.copy()) for x, y in loader]
        return batches, loader.metrics["sources"]

    got, remote = read(["s3://shards/train", photos])
    expected, local = read([str(tmp_path / "shards"), photos])
    assert [(ids, y.tolist()) for ids, y, _ in got] == [(ids, y.tolist()) for ids, y, _ in expected]
    for (_, _, x), (_, _, x_local) in zip(got, expected):
        np.testing.assert_array_equal(x, x_local)
    assert [s["delivered"] for s in remote] == [s["delivered"] for s in local] == [48, 16]


def test_s3_errors_name_the_location(s3_env):
    with pytest.raises(nostall.StorageError) as info:
        nostall.Loader("s3://no-such-bucket/train")
    assert info.value.location == "s3://no-such-bucket/train"
    assert "bucket `no-such-bucket` does not exist" in str(info.value)
    with pytest.raises(nostall.NostallError, match="s3://shards/nothing-here"):
        nostall.Loader("s3://shards/nothing-here")


def test_ctrl_c_interrupts_a_wait_on_storage_that_does_not_answer(
    s3_env, s3_process, sigint_raises
):
    server = s3_process[1]
    loader = nostall.Loader("s3://objects/train", batch_size=8, image_size=32)
    # The server stops answering (its connections stay open): the first batch cannot come.
    server.send_signal(signal.SIGSTOP)
    timer = threading.Timer(0.5, signal.raise_signal, (signal.SIGINT,))
    try:
        it = iter(loader)
        timer.start()
        with pytest.raises(KeyboardInterrupt) as info:
            next(it)
        # The interrupt ended the wait itself: no storage error came first.
        assert info.value.__context__ is None
        del it, loader  # stopping the epoch does not wait for the stuck requests
    finally:
        timer.cancel()
        server.send_signal(signal.SIGCONT)


def test_ctrl_c_interrupts_opening_a_bucket_on_a_server_that_never_answers(
    monkeypatch, sigint_raises
):
    # A server that takes connections and never says a word.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held = []
    stop = threading.Event()

    def hold():
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                pass

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{listener.getsockname()[1]}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    timer = threading.Timer(0.5, signal.raise_signal, (signal.SIGINT,))
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt) as info:
            nostall.Loader("s3://bucket/train")
        # The interrupt ended the wait itself: no storage error came first.
        assert info.value.__context__ is None
    finally:
        timer.cancel()
        stop.set()
        holder.join()
        for conn in held:
            conn.close()
        listener.close()


def test_jobs_naming_one_bucket_on_two_servers_each_read_their_own_through_the_agent(
        photos, s3_env, tmp_path, monkeypatch):
    """Two jobs on one node agent (``share="auto"``) name the same ``s3://objects/train``,
    each with its own server: each reads its own server's data (they are two groups, and
    the agent reads each with its job's settings). Before, the agent grouped them by the
    URL alone, and read with the environment it inherited: the second job trained on the
    first server's data."""
    import nostall.agent

    # The second server's bucket holds two of the four classes.
    other_root = tmp_path / "other"
    for name in ["flowers", "grass"]:
        shutil.copytree(Path(photos) / name, other_root / "objects" / "train" / name)
    agent_socket = tmp_path / "run" / "agent.sock"
    monkeypatch.setenv("NOSTALL_AGENT_SOCKET", str(agent_socket))
    # The agent starts with no S3 settings at all: it must read with each job's.
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    agent = nostall.agent.start(agent_socket, staging="16MiB", lease=60, idle=600)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_env)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    settings = dict(batch_size=4, image_size=32, seed=11, threads=2, output="numpy",
                    share="auto")
    try:
        with serving(other_root, tmp_path / "other-s3s-fs.log") as (other, _):
            first = nostall.Loader("s3://objects/train", **settings)
            monkeypatch.setenv("AWS_ENDPOINT_URL", other)
            second = nostall.Loader("s3://objects/train", **settings)
            read = {}
            for name, loader in [("first", first), ("second", second)]:
                labels = [int(label) for _, y in loader for label in y]
                read[name] = (len(labels), sorted(set(labels)))
            assert read["first"] == (32, [0, 1, 2, 3])
            assert read["second"] == (16, [0, 1])
    finally:
        agent.terminate()
        agent.wait()
