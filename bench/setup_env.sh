#!/usr/bin/env bash
# Create (or bring up to date) the benchmark virtualenv at <repo>/.venv-bench
# with the pinned packages of bench/requirements.txt: torch, torchvision,
# pillow, numpy, psutil and NVIDIA DALI (used on CPU only).
#
# Idempotent: when the venv exists and was last synced with the same
# requirements.txt, only a quick import check runs.
#
# Usage: bash bench/setup_env.sh        (PYTHON=python3.11 to pick the interpreter)
set -euo pipefail

BENCH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$BENCH")"
VENV="$REPO/.venv-bench"
REQ="$BENCH/requirements.txt"
PYTHON="${PYTHON:-python3}"
STAMP="$VENV/.requirements.sha256"

if [ ! -x "$VENV/bin/python" ]; then
    echo "creating $VENV with $($PYTHON --version)"
    "$PYTHON" -m venv "$VENV"
fi

want="$(sha256sum "$REQ" | cut -d' ' -f1)"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
    start=$(date +%s)
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install -r "$REQ"
    echo "$want" > "$STAMP"
    echo "installed in $(( $(date +%s) - start )) s"
fi

"$VENV/bin/python" - <<'PY'
import numpy, PIL, psutil, torch, torchvision, nvidia.dali
print("ok: torch", torch.__version__, "| torchvision", torchvision.__version__,
      "| dali", nvidia.dali.__version__, "| pillow", PIL.__version__,
      "| numpy", numpy.__version__, "| psutil", psutil.__version__)
PY
