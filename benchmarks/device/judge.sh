#!/bin/sh
# On the GPU machine, from the repository root: the GPU kernel that never returns and the stuck
# NCCL rank, launched through dflash-tui and judged by the engine with the stack diagnosis
# (the words `--check --json` prints, and the evidence behind them) into $OUT.
set -u
export PYTHONPATH="$PWD/src:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 XDG_STATE_HOME=/tmp/dflash-state
D="$PWD/benchmarks/device"; C=/tmp/dflash-device.toml; R=/tmp/dflash-runs
PY=$(command -v python3)
cat > "$C" <<TOML
[profile.gpu_hang]
run_dir = "$R/gpu_hang"
command = ["$PY", "$D/gpu_hang.py"]
stall_after_s = 10
[profile.nccl]
run_dir = "$R/nccl"
command = ["$PY", "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=1", "$D/nccl_stuck.py"]
stall_after_s = 10
TOML
tui() { "$PY" -m dflash_tui --config "$C" "$@"; }
look() {
  echo "== $1 $2 at +$(( $(date +%s) - $3 )) s"
  "$PY" "$D/evidence.py" "$C" "$1" > /tmp/ev.json 2>>"$OUT/log3.txt"
  tui --profile "$1" --check --json > /tmp/check.json 2>>"$OUT/log3.txt"; echo "check exit $?"
  "$PY" "$D/summarise.py" /tmp/ev.json /tmp/check.json "$OUT/$1.$2.json" "$(( $(date +%s) - $3 ))"
  tui --profile "$1" --check; echo
}
DFLASH_FR_DUMP_AFTER_S=5 NCCL_STUCK_TIMEOUT_S=120; export DFLASH_FR_DUMP_AFTER_S NCCL_STUCK_TIMEOUT_S
t0=$(date +%s); tui --profile gpu_hang --launch --no-preflight --json >> "$OUT/log3.txt" 2>&1
t1=$(date +%s); tui --profile nccl --launch --no-preflight --json >> "$OUT/log3.txt" 2>&1
sleep 24; look gpu_hang m "$t0"; look nccl m "$t1"
tui --profile gpu_hang --stop --json >/dev/null 2>>"$OUT/log3.txt"
tui --profile nccl --stop --json >/dev/null 2>>"$OUT/log3.txt"
