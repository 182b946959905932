"""The node agent: ``python -m nostall.agent``.

Jobs of this user on this node that read the same stream (dataset, pipeline, seed, batch
size, ranks) share one fetch and prep pass through it, receiving each batch in shared
memory. ``Loader(..., share="auto")`` starts it when none runs; it leaves after
``--idle`` seconds with no job attached. The same as ``nostall agent`` from the CLI.
"""

from __future__ import annotations

import argparse
import os
import sys

from ._nostall import _run_agent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nostall.agent", description=__doc__.split("\n\n")[0])
    parser.add_argument("--socket", help="where to listen (default: NOSTALL_AGENT_SOCKET, "
                        "else $XDG_RUNTIME_DIR/nostall/agent.sock, else /tmp/nostall-<uid>/agent.sock)")
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
