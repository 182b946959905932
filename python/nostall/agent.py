"""The node agent: ``python -m nostall.agent``.

Jobs of this user on this node that read the same stream (dataset, pipeline, seed, batch
size, ranks) share one fetch and prep pass through it, receiving each batch in shared
memory. ``Loader(..., share="auto")`` starts it when none runs; it leaves after
``--idle`` seconds with no job attached. The same as ``nostall agent`` from the CLI.
"""

from __future__ import annotations

import argparse
import os
import socket as _socket
import subprocess
import sys
import time

from ._nostall import _default_agent_socket, _run_agent


def start(
    socket: str | os.PathLike[str] | None = None,
    *,
    staging: str = "512MiB",
    lease: float = 2.0,
    idle: float = 60.0,
    patience: float = 30.0,
) -> subprocess.Popen[bytes]:
    """Starts an agent process with these settings and returns it once it accepts jobs
    (a job started before then would start an agent of its own). Stop it with
    ``terminate()``. Raises ``RuntimeError`` if it exits first (another agent serves the
    socket, say) or does not listen within ``patience`` seconds."""
    path = str(socket) if socket is not None else str(_default_agent_socket())
    proc = subprocess.Popen(
        [sys.executable, "-m", "nostall.agent", "--socket", path, "--staging", staging,
         "--lease", str(lease), "--idle", str(idle)],
        stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the agent exited ({proc.returncode}) before listening at {path}")
        probe = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
        try:
            probe.connect(path)
            return proc
        except OSError:
            time.sleep(0.02)
        finally:
            probe.close()
    proc.terminate()
    raise RuntimeError(f"the agent does not listen at {path} after {patience} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nostall.agent", description=__doc__.split("\n\n")[0])
    parser.add_argument("--socket", help="where to listen (default: NOSTALL_AGENT_SOCKET, "
                        "else $XDG_RUNTIME_DIR/nostall/agent-p9.sock, else /tmp/nostall-<uid>/agent-p9.sock)")
    parser.add_argument("--staging", default="512MiB", help="bytes of batches a group prepares ahead of its slowest job")
    parser.add_argument("--lease", type=float, default=2.0,
                        help="seconds a job may hold its group up without asking for a batch")
    parser.add_argument("--idle", type=float, default=60.0, help="seconds with no job after which the agent leaves")
    parser.add_argument("--detach", action="store_true",
                        help="fork into a new session and return at once (how share= starts it)")
    args = parser.parse_args(argv)
    if args.detach:
        if os.fork():
            os._exit(0)
        os.setsid()
    served = _run_agent(args.socket, args.staging, args.lease, args.idle)
    if not served:
        print("nostall agent: another agent of this user serves that socket already", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
