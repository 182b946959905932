"""A local S3-compatible server (s3s-fs) serving a copy of a dataset, for benchmarks
that read through the S3 client. `make deps` installs s3s-fs.

s3s-fs answers every GET, ranged ones too, with the object's MD5 as its ETag, and for a
file copied into its root (not uploaded through it) computes that MD5 over the whole
file on each request: a ranged read of a 60 MB Parquet file cost a 60 MB hash. The
copies here get the ETag s3s-fs would have stored on upload (`write_etags`), so each
GET costs what it reads, as on a real server. `python3 bench/s3_local.py etags ROOT`
does the same for a root prepared elsewhere (bench/testbed.sh)."""

import base64
import hashlib
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


def write_etags(root):
    """Gives each object under `root` (a directory of buckets) the ETag s3s-fs stores
    when an object is uploaded through it (its internal-info file beside the buckets)."""
    encode = lambda s: base64.urlsafe_b64encode(s.encode()).decode().rstrip("=")
    for bucket in os.listdir(root):
        top = os.path.join(root, bucket)
        if bucket.startswith(".") or not os.path.isdir(top):
            continue
        for folder, _, files in os.walk(top):
            for name in files:
                path = os.path.join(folder, name)
                digest = hashlib.md5()
                with open(path, "rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        digest.update(block)
                key = os.path.relpath(path, top)
                info = os.path.join(root, f".bucket-{encode(bucket)}.object-{encode(key)}.internal.json")
                with open(info, "w") as f:
                    f.write('{"e_tag":"%s"}' % digest.hexdigest())


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
        write_etags(self.root)
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


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "etags":
        sys.exit("usage: python3 bench/s3_local.py etags ROOT")
    write_etags(sys.argv[2])
