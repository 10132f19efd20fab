#!/bin/sh
# The second device call: the raw per-process utilisation NVML gives, the threaded compile looked
# at while it compiles, and the NCCL rank past its watchdog timeout.
FLEX_ARGS=varied LOG=log2.txt . benchmarks/device/common.sh
export DFLASH_FR_DUMP_AFTER_S=5 NCCL_STUCK_TIMEOUT_S=30
t1=$(date +%s); tui --profile nccl --launch --no-preflight --json >> "$OUT/log2.txt" 2>&1
"$PY" "$D/nvml_process_util.py" > "$OUT/nvml_process_util.json" 2>>"$OUT/log2.txt"; cat "$OUT/nvml_process_util.json"
t2=$(date +%s); tui --profile flex --launch --no-preflight --json >> "$OUT/log2.txt" 2>&1
sleep 6; look flex c "$t2"; sleep 4; look flex d "$t2"
look nccl c "$t1"
sleep 30; look flex e "$t2"; look nccl d "$t1"; ls -la --time-style=+%T "$R/nccl/probe" >> "$OUT/log2.txt"
tail -n 40 "$R/nccl/train.log" >> "$OUT/log2.txt"; tail -n 20 "$R/flex/train.log" >> "$OUT/log2.txt"
tui --profile flex --stop --json >/dev/null 2>&1; tui --profile nccl --stop --json >/dev/null 2>&1
