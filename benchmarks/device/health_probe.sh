#!/bin/sh
# On the GPU machine, from the repository root (issue 46 item 3): `dflash-tui --health` on the
# real GPUs, three times, so the third is compared with the median of the first two. With CUDA
# the probe runs one NCCL process per GPU (one GPU: a world of 1, no link, compared by its algorithm bandwidth;
# nvidia-h100-x2 or larger gives a real NCCL ring). Also the probe alone, as a job step runs it:
#   python3 -c "$(python3 -c 'import dflash_tui.health.allreduce_probe as a; print(a.BOOTSTRAP)')" \
#       < src/dflash_tui/health/allreduce_probe.py
# Output: $OUT/health.{1,2,3}.json, $OUT/health.txt, $OUT/health.jsonl (the results file).
set -u
export PYTHONPATH="$PWD/src:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 XDG_STATE_HOME=/tmp/dflash-state
C=/tmp/dflash-health-probe.toml; PY=$(command -v python3)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
printf '[profile.gpu]\nrun_dir = "/tmp/dflash-runs/health"\npython = "%s"\n' "$PY" > "$C"
for i in 1 2 3; do
  "$PY" -m dflash_tui --config "$C" --profile gpu --health --json > "$OUT/health.$i.json" 2>>"$OUT/health.txt"
  echo "health run $i exit $?" | tee -a "$OUT/health.txt"
done
"$PY" -m dflash_tui --config "$C" --profile gpu --health | tee -a "$OUT/health.txt"
cp "$XDG_STATE_HOME/dflash-tui/health.jsonl" "$OUT/health.jsonl"
