"""The bundled trainer, as `make run` starts it, held RUNNING for 90 s by `--check`.

The incident this pins: about a minute into every healthy run, `dflash-tui --check` said
STALLED "threads stopped: main [compiled]" (the main thread's role ends with the warm-up, and
its silence was judged as a stall). Here the stall limit is shortened to 12 s (the limit learned
from its pace is 10 s) and the run is checked every 6 s, one-shot, for 36 s after it first reads
RUNNING (past the stall limit three times over, and past the trainer's eval and checkpoint cycles
of 100 steps, about 12 s each on 2 CPU cores); then
`--stop` ends it and the verdict is STOPPED, exit 0.
"""

from __future__ import annotations

import json
import sys
import time

import pytest

from dflash_tui.config import LOCAL_TRAIN_ARGS
from tests.test_cli_modes import cli, write_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

HOLD_S = 36.0
EVERY_S = 6.0


def test_bundled_trainer_stays_running_past_the_stall_limit(tmp_path):
    args = list(LOCAL_TRAIN_ARGS)
    args[args.index("--steps") + 1] = "1000000"
    cfg = write_config(tmp_path, local={"run_dir": str(tmp_path / "run"), "python": sys.executable,
                                        "train_args": args, "stall_after_s": 12, "min_free_gb": 0})
    res = cli(tmp_path, "--config", str(cfg), "--launch", "--json", "--wait", "240", timeout=300)
    out = json.loads(res.stdout)
    assert res.returncode == 0 and out["verdict"] == "RUNNING", res.stdout + res.stderr
    try:
        seen = []
        t0 = time.monotonic()
        for k in range(1, int(HOLD_S // EVERY_S) + 1):
            time.sleep(max(0.0, t0 + k * EVERY_S - time.monotonic()))   # a check every 6 s
            res = cli(tmp_path, "--config", str(cfg), "--check", "--json", timeout=60)
            out = json.loads(res.stdout)
            seen.append((round(time.monotonic() - t0), out["verdict"], out["summary"]))
            assert res.returncode == 0 and out["verdict"] == "RUNNING", seen
        main = next(t for t in out["threads"] if t["name"] == "main")
        assert main["state"] == "done", out["threads"]       # its role ended with the warm-up
        assert seen[-1][0] >= HOLD_S - 1 and len(seen) == HOLD_S // EVERY_S
    finally:
        res = cli(tmp_path, "--config", str(cfg), "--stop", timeout=120)
    assert res.returncode == 0 and "STOPPED: stopped by" in res.stdout, res.stdout + res.stderr
