"""Small real programs that behave like the trainer in one way each, for the run/ tests.

`python3 run_standins.py MODE [--arg...]`, run by launch.sh like any trainer:
  beat      heartbeat + advance steps forever (RUNNING)
  finish    a few steps, then exit 0 (FINISHED)
  crash     print a traceback and exit 1 at once (CRASHED)
  stall     beat for --beats beats, then stay alive in silence (STALLED)
  thread    the process beats, but thread "drafter1" stops beating, stuck "compiling" (STALLED)
  ignoreterm  beat, and ignore SIGTERM (stop must escalate to SIGKILL)
  argv      write its argv as JSON to $DFLASH_RUN_DIR/argv.json, then behave like `beat`
`--device=cuda:0` makes every thread report that device instead of "cpu" (the GPU check);
`--tokens-per-s=N` reports that rate in status.json, as the trainer reports its tokens.
Uses the real run-dir schema (dflash_tui.contract.rundir), stdlib only.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
SRC = HERE.parents[2] / "src"
sys.path.insert(0, str(SRC))

from dflash_tui.contract.rundir import (STATUS_JSON, ThreadStatus, TrainStatus, atomic_write_text,  # noqa: E402
                                 to_json)

PROGRAM = str(HERE)


def _status(run_id: str, step: int, threads: list[ThreadStatus], now: float, phase: str = "training",
            tokens_per_s: float | None = None) -> str:
    return to_json(TrainStatus(run_id=run_id, pid=os.getpid(), time=now, phase=phase, step=step, total_steps=0,
                               loss=2.0 / (1 + step), heartbeat_time=now, threads=threads,
                               tokens_per_s=tokens_per_s))


def main(argv: list[str]) -> int:
    mode = argv[0] if argv else "beat"
    opts = dict(a.split("=", 1) for a in argv[1:] if a.startswith("--") and "=" in a)
    run_dir = Path(os.environ["DFLASH_RUN_DIR"])
    run_id = os.environ["DFLASH_RUN_ID"]
    interval = float(opts.get("--interval", "0.1"))
    device = opts.get("--device", "cpu")
    tokens = float(opts["--tokens-per-s"]) if "--tokens-per-s" in opts else None
    print(f"standin {mode} pid {os.getpid()} run {run_id}", flush=True)

    if mode == "argv":
        atomic_write_text(run_dir / "argv.json", json.dumps(argv))
        mode = "beat"
    if mode == "crash":
        def build_model():
            raise RuntimeError("CUDA error: device-side assert triggered (stand-in)")
        build_model()
    if mode == "ignoreterm":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    beats = int(opts.get("--beats", "1000000000"))
    steps = int(opts.get("--steps", "1000000000"))
    step = 0
    names = ["main", "drafter0", "drafter1"]
    last_beat = {n: None for n in names}
    for i in range(10 ** 9):
        now = time.time()
        if mode == "stall" and i >= beats:
            while True:          # alive, silent
                time.sleep(1)
        step += 1
        for n in names:
            if not (mode == "thread" and n == "drafter1" and i >= beats):
                last_beat[n] = now
        threads = [ThreadStatus(name=n, role="main" if n == "main" else "drafter", device=device,
                                compile_state="compiling" if (mode == "thread" and n == "drafter1") else "compiled",
                                step=step, last_step_time=now, last_beat_time=last_beat[n]) for n in names]
        atomic_write_text(run_dir / STATUS_JSON, _status(run_id, step, threads, now, tokens_per_s=tokens))
        print(f"step {step} loss {2.0 / (1 + step):.4f}", flush=True)
        if mode == "finish" and step >= steps:
            return 0
        time.sleep(interval)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
