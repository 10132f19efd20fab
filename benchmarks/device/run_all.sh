#!/bin/sh
# On the GPU machine, from the repository root: each program launched through dflash-tui's real
# launcher and judged by its real engine; evidence.py's JSON and `--check --json` into $OUT.
LOG=log.txt . benchmarks/device/common.sh
W=${W:-1}   # divides the waits (a dry run of the harness without a GPU)
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
