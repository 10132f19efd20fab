#!/bin/sh
# On the GPU machine, from the repository root (issue 37 item 5: power and SM clock beside
# utilisation). Each program launched through dflash-tui's real launcher and judged by
# `--check --json` with the real NVML: a spinning kernel that steps (spin_steps.py), a bf16
# matmul loop that steps (matmul_steps.py), a spinning kernel never returning (gpu_hang.py,
# STALLED), the bundled trainer; an nvidia-smi series beside them (the remote path's fields).
# Then NVML against nvidia-smi with fresh fixtures, and the tests skipped without a GPU.
set -u
export PYTHONPATH="$PWD/src:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 XDG_STATE_HOME=/tmp/dflash-state
D="$PWD/benchmarks/device"; C=/tmp/dflash-power.toml; R=/tmp/dflash-runs; PY=$(command -v python3)
TRAIN_ARGS=${TRAIN_ARGS:-'"--preset", "small", "--target-devices", "cuda:0", "--drafter-devices", "cuda:0", "--batch-size", "8", "--buckets", "1024,2048", "--eval-every", "0", "--compile", "off", "--steps", "1000000", "--log-every", "20"'}
cat > "$C" <<TOML
[profile.spin]
run_dir = "$R/spin"
command = ["$PY", "$D/spin_steps.py"]
[profile.matmul]
run_dir = "$R/matmul"
command = ["$PY", "$D/matmul_steps.py"]
[profile.gpu_hang]
run_dir = "$R/gpu_hang"
command = ["$PY", "$D/gpu_hang.py"]
stall_after_s = 10
[profile.trainer]
run_dir = "$R/trainer"
python = "$PY"
train_args = [$TRAIN_ARGS]
TOML
tui() { "$PY" -m dflash_tui --config "$C" "$@"; }
mark() { echo "== $* at $(date +%T)"; }
judge() {  # NAME LABEL: --check --json into $OUT/checks.jsonl, one line per look
  tui --profile "$1" --check --json > /tmp/c.json 2>>"$OUT/log.txt"; rc=$?
  "$PY" -c 'import json,sys; d=json.load(open("/tmp/c.json")); d["look"]=sys.argv[1]; d["rc"]=int(sys.argv[2]); print(json.dumps(d))' "$1.$2" "$rc" >> "$OUT/checks.jsonl"
  "$PY" -c 'import json,sys; d=json.load(open("/tmp/c.json")); g=[c for c in d["checks"] if c["id"]=="gpus"]; print(sys.argv[1], d["verdict"], "|", d["summary"][-260:]); print("   gpus:", g and g[0]["cause"]); print("   facts:", d.get("gpus"))' "$1.$2"
}
nvidia-smi --query-gpu=timestamp,utilization.gpu,power.draw,enforced.power.limit,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader,nounits -l 1 > "$OUT/smi_series.csv" 2>&1 &
SMI=$!
for prog in spin matmul; do
  mark launch $prog; tui --profile $prog --launch --no-preflight --json >> "$OUT/log.txt" 2>&1
  sleep 12; mark look $prog; judge $prog a; sleep 4; judge $prog b
  tui --profile $prog --stop --json >> "$OUT/log.txt" 2>&1; sleep 3
done
mark launch gpu_hang; tui --profile gpu_hang --launch --no-preflight --json >> "$OUT/log.txt" 2>&1
sleep 22; mark look gpu_hang; judge gpu_hang a
tui --profile gpu_hang --stop --json >> "$OUT/log.txt" 2>&1; sleep 2
mark launch trainer; tui --profile trainer --launch --json >> "$OUT/log.txt" 2>&1
for k in 1 2 3 4; do sleep ${TRAIN_LOOK_S:-25}; mark look trainer $k; judge trainer $k; done
tail -n 15 "$R/trainer/train.log" >> "$OUT/log.txt"
tui --profile trainer --stop --json >> "$OUT/log.txt" 2>&1
kill $SMI
mark nvml vs smi
"$PY" benchmarks/gpu_nvml_vs_smi.py --seconds 12 --rounds 6 --fixtures /tmp/fx > "$OUT/nvml_vs_smi.txt" 2>&1; echo "nvml_vs_smi exit $?"
tar -C /tmp -czf "$OUT/fixtures.tgz" fx
mark tests
"$PY" -m pytest -q -p no:cacheprovider -o addopts="" tests/train/test_attention.py tests/train/test_objective_step.py \
  tests/gpu/test_nvml_reader.py -rs > "$OUT/tests.txt" 2>&1; echo "tests exit $?"; tail -n 5 "$OUT/tests.txt"
mark done
