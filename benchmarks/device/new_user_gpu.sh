#!/bin/sh
# On the GPU machine, from the repository root (issue 48, item 9), with the Lightning wheels in
# .whl/lightning: (1) a healthy Lightning fit on the GPU whose DataLoader workers end every epoch,
# looked at with `--check --json` every 20 s for 3 min: its probe check must never name a worker
# silent; (2) a light run beside another program that spins on the same GPU: the run's `gpus`
# check must say the GPU is shared and not call the run spinning; then spin_steps.py as the run
# itself, which must be called spinning. Output: $OUT/new_user_gpu.jsonl, $OUT/log.txt.
set -u
export PYTHONPATH="$PWD/src:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 XDG_STATE_HOME=/tmp/dflash-state
D="$PWD/benchmarks/device"; C=/tmp/dflash-item9.toml; R=/tmp/dflash-runs; PY=$(command -v python3)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; J="$OUT/new_user_gpu.jsonl"; : > "$J"
"$PY" -m pip install -q --no-index --find-links .whl/lightning lightning >> "$OUT/log.txt" 2>&1
cat > "$C" <<TOML
[profile.lightning]
run_dir = "$R/lightning"
command = ["$PY", "$D/lightning_workers.py"]
stall_after_s = 30
[profile.light]
run_dir = "$R/light"
command = ["$PY", "$D/light_steps.py"]
[profile.spin]
run_dir = "$R/spin"
command = ["$PY", "$D/spin_steps.py"]
TOML
tui() { "$PY" -m dflash_tui --config "$C" "$@"; }
look() {   # PROFILE LABEL: one --check --json, its verdict and the probe and gpus checks, a line in $J
  tui --profile "$1" --check --json > /tmp/check.json 2>>"$OUT/log.txt"
  "$PY" - "$1" "$2" /tmp/check.json >> "$J" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[3]))
checks = {c["id"]: {"state": c["state"], "cause": c["cause"]} for c in d["checks"] if c["id"] in ("probe", "gpus", "progress")}
print(json.dumps({"profile": sys.argv[1], "look": sys.argv[2], "verdict": d["verdict"], "summary": d["summary"][:200],
                  "checks": checks, "gpu_facts": [{k: g.get(k) for k in ("index", "util_sm_pct", "run_sm_util_pct", "power_w", "spinning", "shared")} for g in d.get("gpus", [])]}))
PYEOF
  tail -1 "$J"
}
PARTS=${PARTS:-lightning shared}   # which parts to run
case " $PARTS " in *" lightning "*)
echo "== lightning at $(date +%T)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
tui --profile lightning --launch --no-preflight --json > /dev/null 2>>"$OUT/log.txt"
for i in $(seq 1 "${LOOKS:-9}"); do sleep 20; look lightning "+$((i * 20))s"; done
tail -5 "$R/lightning/train.log" >> "$OUT/log.txt" 2>&1
tui --profile lightning --stop --json >> "$OUT/log.txt" 2>&1 ;;
esac
case " $PARTS " in *" shared "*)
echo "== light run beside another program's spinning kernel at $(date +%T)"
"$PY" "$D/spin_steps.py" > /tmp/other_spin.log 2>&1 &
OTHER=$!
sleep 5
tui --profile light --launch --no-preflight --json > /dev/null 2>>"$OUT/log.txt"
for i in 1 2 3; do sleep 10; look light "shared+$((i * 10))s"; done
tui --profile light --stop --json >> "$OUT/log.txt" 2>&1
kill "$OTHER"; wait "$OTHER" 2>/dev/null
echo "== spin_steps as the run itself at $(date +%T)"
tui --profile spin --launch --no-preflight --json > /dev/null 2>>"$OUT/log.txt"
for i in 1 2; do sleep 10; look spin "alone+$((i * 10))s"; done
tui --profile spin --stop --json >> "$OUT/log.txt" 2>&1 ;;
esac
echo "== done at $(date +%T)"
