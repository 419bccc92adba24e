#!/usr/bin/env bash
# The GPU run as one command (benchmarks/device.py; docs/benchmarks.md, "The device run").
# Run from the repository root on the lent GPU machine, with the stage carried beside the tree:
#   benchmarks/device_run.sh                 # results in $OUT (the run tool's output folder)
#   benchmarks/device_run.sh --rehearse      # the CPU rehearsal, anywhere
# Uses the machine's own python, torch and transformers; installs nothing. Extra arguments go to
# benchmarks/device.py (e.g. --budget-s 420).
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-}
if [ -z "$PY" ]; then  # the first python that has torch
  for c in python3 python; do
    if command -v "$c" >/dev/null && "$c" -c 'import torch' 2>/dev/null; then PY=$c; break; fi
  done
  PY=${PY:-python3}
fi
STAGE=${HARNESS_BENCH_STAGE:-$PWD/.device-stage}
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  TRANSFORMERS_NO_ADVISORY_WARNINGS=1 TOKENIZERS_PARALLELISM=false HARNESS_BENCH_STAGE="$STAGE"
# The stage (benchmarks/staged.py) is carried to a lent machine; where the packages are, write it here.
if [ ! -f "$STAGE/manifest.json" ]; then
  "$PY" benchmarks/device.py --stage "$STAGE" || exit 2
fi
# What the machine has, first: if anything below fails, this much still comes back.
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  "$PY" - <<'EOF' 2>&1
import sys, torch, transformers
print(sys.version.split()[0], torch.__version__, torch.version.cuda, transformers.__version__, flush=True)
sys.path.insert(0, "benchmarks")
import staged  # what the machine has is what this file is for: the rows' packages, from metadata
for name, version in staged.versions().items():
    print(name, version or "not installed")
EOF
  echo "C compiler (inductor, triton): $(command -v gcc || command -v cc || echo none)"
} > "$OUT/env.txt"
"$PY" benchmarks/device.py --stage-dir "$STAGE" --out "$OUT" "$@" 2> >(tee "$OUT/log.txt" >&2)
rc=$?
echo "device.py exit $rc" >> "$OUT/log.txt"
exit $rc
