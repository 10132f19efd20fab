#!/bin/sh
# On the GPU machine, from the repository root: each program launched through dflash-tui's real
# launcher and judged by its real engine; evidence.py's JSON and `--check --json` into $OUT.
set -u
W=${W:-1}   # divides the waits (a dry run of the harness without a GPU)
export PYTHONPATH="$PWD/src:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 XDG_STATE_HOME=/tmp/dflash-state
D="$PWD/benchmarks/device"; C=/tmp/dflash-device.toml; R=/tmp/dflash-runs
PY=$(command -v python3)
cat > "$C" <<TOML
[profile.gpu_hang]
run_dir = "$R/gpu_hang"
command = ["$PY", "$D/gpu_hang.py"]
stall_after_s = 10
[profile.flex]
run_dir = "$R/flex"
command = ["$PY", "$D/threaded_flex_compile.py"]
stall_after_s = 10
[profile.nccl]
run_dir = "$R/nccl"
command = ["$PY", "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=1", "$D/nccl_stuck.py"]
stall_after_s = 10
TOML
tui() { "$PY" -m dflash_tui --config "$C" "$@"; }
look() {  # look NAME LABEL START: evidence.py's JSON with `--check --json`'s inside it
  echo "== $1 $2 at +$(( $(date +%s) - $3 )) s"
  "$PY" "$D/evidence.py" "$C" "$1" > /tmp/ev.json 2>>"$OUT/log.txt"
  tui --profile "$1" --check --json > /tmp/check.json 2>>"$OUT/log.txt"; echo "check exit $?"
  "$PY" "$D/summarise.py" /tmp/ev.json /tmp/check.json "$OUT/$1.$2.json" "$(( $(date +%s) - $3 ))"
}
DFLASH_FR_DUMP_AFTER_S=5; export DFLASH_FR_DUMP_AFTER_S
NCCL_STUCK_TIMEOUT_S=45; export NCCL_STUCK_TIMEOUT_S
t0=$(date +%s); tui --profile gpu_hang --launch --no-preflight --json >> "$OUT/log.txt" 2>&1
t1=$(date +%s); tui --profile nccl --launch --no-preflight --json >> "$OUT/log.txt" 2>&1
sleep $((25 / W)); look gpu_hang a "$t0"; look nccl a "$t1"
tui --profile gpu_hang --stop --json >/dev/null 2>>"$OUT/log.txt"
sleep $((40 / W)); look nccl b "$t1"; ls -la "$R/nccl/probe" >> "$OUT/log.txt"
tui --profile nccl --stop --json >/dev/null 2>>"$OUT/log.txt"
t2=$(date +%s); tui --profile flex --launch --no-preflight --json >> "$OUT/log.txt" 2>&1
sleep $((60 / W)); look flex a "$t2"; sleep $((50 / W)); look flex b "$t2"
tail -n 30 "$R/flex/train.log" >> "$OUT/log.txt"
tui --profile flex --stop --json >/dev/null 2>>"$OUT/log.txt"
