#!/usr/bin/env bash
# A study end to end on the lent GPU machine (benchmarks/device_study.py; docs/benchmarks.md, "A
# study on the device"). The same command for every call, run from the repository root there,
# each call carrying one part of the stage (carry=['.device-study/partK']): it keeps the part,
# says which are still to send, and once all are there runs search_spaces/quickstart_gpu.yaml
# (resuming it if an earlier call was stopped at its budget); results in $OUT.
#   benchmarks/device_study.sh [--budget-s S] [--study FILE] [-- harness run options]
# Uses the machine's own python (the first that has torch); installs nothing with pip.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for c in python3 python; do
    if command -v "$c" >/dev/null && "$c" -c 'import torch' 2>/dev/null; then PY=$c; break; fi
  done
  PY=${PY:-python3}
fi
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
exec env PYTHONUNBUFFERED=1 "$PY" benchmarks/device_study.py --out "$OUT" "$@"
