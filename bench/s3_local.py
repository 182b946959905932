"""A local S3-compatible server (s3s-fs) serving a copy of a dataset, for benchmarks
that read through the S3 client. `make deps` installs s3s-fs."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

BUCKET = "bench"
KEYS = ("bench", "bench-secret")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def s3s_fs():
    """The s3s-fs binary: on the PATH, else where `cargo install` puts it."""
    found = shutil.which("s3s-fs")
    cargo = os.path.join(os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo")),
                         "bin", "s3s-fs")
    return found or (cargo if os.access(cargo, os.X_OK) else None)


class S3Server:
    """s3s-fs on a free loopback port serving a copy of `data` as bucket `bench`; the
    loader finds it through `env()`, and `url` names the dataset."""

    url = f"s3://{BUCKET}"

    def __init__(self, data):
        binary = s3s_fs()
        if binary is None:
            sys.exit("s3s-fs is not installed (make deps installs it)")
        self.root = tempfile.mkdtemp(prefix="nostall-s3-")
        shutil.copytree(data, os.path.join(self.root, BUCKET),
                        ignore=shutil.ignore_patterns(".*"))
        self.port = free_port()
        self.proc = subprocess.Popen(
            [binary, "--host", "127.0.0.1", "--port", str(self.port), "--access-key", KEYS[0],
             "--secret-key", KEYS[1], self.root],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.1).close()
                return
            except OSError:
                time.sleep(0.05)
        sys.exit("s3s-fs did not start listening")

    def env(self):
        env = dict(os.environ)
        env.update(AWS_ACCESS_KEY_ID=KEYS[0], AWS_SECRET_ACCESS_KEY=KEYS[1],
                   AWS_ENDPOINT_URL=f"http://127.0.0.1:{self.port}", AWS_REGION="us-east-1",
                   AWS_ALLOW_HTTP="true")
        return env

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)
