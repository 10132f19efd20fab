#!/bin/sh
# On the GPU machine, from the repository root (issue 46 items 3 and 4): the node-health fields of
# every GPU (NVML directly, then the product's reader and its "gpu_health" check), the energy
# counter against power integrated at 10 Hz over a minute of matmuls (the ratio), and the
# product itself: `--launch` (its preflight's gpu_health on the real GPUs) and `--check --json`.
# Output: $OUT/health_energy.jsonl, $OUT/launch.json, $OUT/check.json, $OUT/log.txt.
set -u
export PYTHONPATH="$PWD/src:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 XDG_STATE_HOME=/tmp/dflash-state
D="$PWD/benchmarks/device"; C=/tmp/dflash-health.toml; R=/tmp/dflash-runs; PY=$(command -v python3)
SECONDS_OF_WORK=${SECONDS_OF_WORK:-60}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
echo "== health fields and energy ($SECONDS_OF_WORK s of matmuls) at $(date +%T)"
"$PY" "$D/gpu_health_energy.py" "$SECONDS_OF_WORK" | tee "$OUT/health_energy.jsonl"
nvidia-smi --query-gpu=index,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.aggregate.total,retired_pages.pending --format=csv >> "$OUT/log.txt" 2>&1
nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT >> "$OUT/log.txt" 2>&1
cat > "$C" <<TOML
[profile.matmul]
run_dir = "$R/health_matmul"
command = ["$PY", "$D/matmul_steps.py"]
TOML
tui() { "$PY" -m dflash_tui --config "$C" "$@"; }
echo "== launch with the preflight (gpu_health on the real GPUs) at $(date +%T)"
tui --profile matmul --launch --json > "$OUT/launch.json" 2>>"$OUT/log.txt"; echo "launch exit $?"
"$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["verdict"], "|", d["summary"][-200:]); print([c for c in d["checks"] if c["id"]=="gpu_health"])' "$OUT/launch.json"
sleep 15
tui --profile matmul --check --json > "$OUT/check.json" 2>>"$OUT/log.txt"; echo "check exit $?"
"$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["verdict"]); print([c for c in d["checks"] if c["id"] in ("gpu_health","gpus")])' "$OUT/check.json"
tui --profile matmul --stop --json >> "$OUT/log.txt" 2>&1
