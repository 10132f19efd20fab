# Sourced by the device scripts, from the repository root: the environment, a config with one
# profile per hang program, `tui` (dflash-tui on that config) and `look NAME LABEL START`
# (evidence.py's JSON with `--check --json`'s inside it, into $OUT/NAME.LABEL.json).
# LOG: the file under $OUT the commands' own output goes to; FLEX_ARGS: threaded_flex_compile.py's mode.
set -u
export PYTHONPATH="$PWD/src:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 XDG_STATE_HOME=/tmp/dflash-state
D="$PWD/benchmarks/device"; C=/tmp/dflash-device.toml; R=/tmp/dflash-runs
PY=$(command -v python3)
LOG=${LOG:-log.txt}
FLEX_ARGS=${FLEX_ARGS:-}
cat > "$C" <<TOML
[profile.gpu_hang]
run_dir = "$R/gpu_hang"
command = ["$PY", "$D/gpu_hang.py"]
stall_after_s = 10
[profile.flex]
run_dir = "$R/flex"
command = ["$PY", "$D/threaded_flex_compile.py"${FLEX_ARGS:+, \"$FLEX_ARGS\"}]
stall_after_s = 10
[profile.nccl]
run_dir = "$R/nccl"
command = ["$PY", "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=1", "$D/nccl_stuck.py"]
stall_after_s = 10
TOML
tui() { "$PY" -m dflash_tui --config "$C" "$@"; }
look() {
  echo "== $1 $2 at +$(( $(date +%s) - $3 )) s"
  "$PY" "$D/evidence.py" "$C" "$1" > /tmp/ev.json 2>>"$OUT/$LOG"
  tui --profile "$1" --check --json > /tmp/check.json 2>>"$OUT/$LOG"; echo "check exit $?"
  "$PY" "$D/summarise.py" /tmp/ev.json /tmp/check.json "$OUT/$1.$2.json" "$(( $(date +%s) - $3 ))"
}
