#!/bin/sh
# On the GPU machine, from the repository root: the GPU kernel that never returns and the stuck
# NCCL rank, launched through dflash-tui and judged by the engine with the stack diagnosis
# (the words `--check --json` prints, and the evidence behind them) into $OUT.
LOG=log3.txt . benchmarks/device/common.sh
DFLASH_FR_DUMP_AFTER_S=5 NCCL_STUCK_TIMEOUT_S=120; export DFLASH_FR_DUMP_AFTER_S NCCL_STUCK_TIMEOUT_S
t0=$(date +%s); tui --profile gpu_hang --launch --no-preflight --json >> "$OUT/log3.txt" 2>&1
t1=$(date +%s); tui --profile nccl --launch --no-preflight --json >> "$OUT/log3.txt" 2>&1
sleep 24; look gpu_hang m "$t0"; look nccl m "$t1"
tui --profile gpu_hang --stop --json >/dev/null 2>>"$OUT/log3.txt"
tui --profile nccl --stop --json >/dev/null 2>>"$OUT/log3.txt"
