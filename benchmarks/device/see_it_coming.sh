#!/bin/sh
# On the GPU machine, from the repository root (issue 46's cost target): what node health and
# energy add to a GPU sample on the real GPUs (benchmarks/gpu_health_cost.py --real: this tree
# against BEFORE, the tree before them, each in its own process, alternating), and what the
# runways add to a look there (benchmarks/see_it_coming_cost.py): both against a look's cost on
# the same machine. BEFORE: a copy of the older tree's src/ (`git archive 98b77d4 src | tar -x
# -C .device/before-98b77d4`, carried). Output: $OUT/see_it_coming.txt.
set -u
export PYTHONUNBUFFERED=1 XDG_STATE_HOME=/tmp/dflash-state
PY=$(command -v python3)
BEFORE=${BEFORE:-.device/before-98b77d4}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{
  echo "== $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader) / $(nproc) CPUs / $("$PY" -V)"
  echo "== health and energy per GPU sample at $(date +%T)"
  PYTHONPATH="$PWD/src" "$PY" benchmarks/gpu_health_cost.py --real --trees "$BEFORE,$PWD" --samples 300 --rounds 3
  echo "== the runways per look at $(date +%T)"
  PYTHONPATH="$PWD/src" "$PY" benchmarks/see_it_coming_cost.py ${LOOK_ARGS:---cycles 300}
  echo "== done at $(date +%T)"
} 2>&1 | tee "$OUT/see_it_coming.txt"
