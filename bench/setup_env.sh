#!/usr/bin/env bash
# Create (or bring up to date) a benchmark virtualenv with pinned packages:
#   bash bench/setup_env.sh        <repo>/.venv-bench from bench/requirements.txt: torch,
#                                  torchvision, pillow, numpy, psutil and NVIDIA DALI
#                                  (used on CPU only), for the image benchmarks;
#   bash bench/setup_env.sh audio  <repo>/.venv-audio from bench/requirements-audio.txt:
#                                  torch 2.11 with torchaudio 2.11, soundfile, soxr, DALI.
#
# Idempotent: when the venv exists and was last synced with the same
# requirements file, only a quick import check runs.
#
# PYTHON=python3.11 picks the interpreter.
set -euo pipefail

BENCH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$BENCH")"
KIND="${1:-image}"
case "$KIND" in
    image) VENV="$REPO/.venv-bench"; REQ="$BENCH/requirements.txt" ;;
    audio) VENV="$REPO/.venv-audio"; REQ="$BENCH/requirements-audio.txt" ;;
    *) echo "usage: bash bench/setup_env.sh [image|audio]" >&2; exit 2 ;;
esac
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

if [ "$KIND" = image ]; then
"$VENV/bin/python" - <<'PY'
import numpy, PIL, psutil, torch, torchvision, nvidia.dali
print("ok: torch", torch.__version__, "| torchvision", torchvision.__version__,
      "| dali", nvidia.dali.__version__, "| pillow", PIL.__version__,
      "| numpy", numpy.__version__, "| psutil", psutil.__version__)
PY
else
"$VENV/bin/python" - <<'PY'
import numpy, soundfile, soxr, torch, torchaudio, nvidia.dali
print("ok: torch", torch.__version__, "| torchaudio", torchaudio.__version__,
      "| dali", nvidia.dali.__version__, "| soundfile", soundfile.__version__,
      "| libsndfile", soundfile.__libsndfile_version__, "| soxr", soxr.__version__)
PY
fi
