#!/usr/bin/env bash
# The GPU issue's one prepared run, on a machine with a CUDA GPU, torch, torchvision and
# psutil and no network: installs the nostall wheel, makes the datasets from the 12 source
# photographs (bench/gpu_data.py), and runs bench/gpu_train.py, which writes one JSON file.
#
# Usage: bash bench/gpu_run.sh WHEEL_AND_PHOTOS OUT_DIR
#   WHEEL_AND_PHOTOS holds nostall-*.whl and photos/ (the 12 photographs of
#   bench/photo_sources.py); what travels is under 40 MB.
# Extra arguments after OUT_DIR go to gpu_train.py.
set -uo pipefail
carried=$1
out=$2
shift 2
started=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/nostall-site \
  "$carried"/nostall-*.whl || exit 1
export PYTHONPATH=/tmp/nostall-site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.used,clocks.sm --format=csv,noheader
python3 bench/gpu_data.py "$carried/photos" /tmp/nostall-gpu-data | tee "$out/gpu_data.json" || exit 1
echo "data made in $(( $(date +%s) - started )) s"
python3 bench/gpu_train.py /tmp/nostall-gpu-data --json "$out/gpu_train.json" "$@" 2>&1 |
  tee "$out/gpu_train.log" | grep -v '^ '
echo "done in $(( $(date +%s) - started )) s"
