"""A one-shot `--check` learns the pace of a program that only writes a log, from the times its
log lines carry (run/evidence/pace.py `line_intervals`): one look has no look before it, but
Python's logging stamps every line."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.run.evidence.pace import line_intervals
from tests.test_cli_modes import cli, write_config

pytestmark = pytest.mark.timeout(200)

PROGRAMS = Path(__file__).resolve().parents[2] / "programs"
PY = sys.executable


def test_a_one_shot_check_of_a_log_only_program_learns_the_pace_from_its_line_times(tmp_path):
    run = tmp_path / "logging"
    cfg = write_config(tmp_path, p={"run_dir": str(run), "command": [PY, str(PROGRAMS / "logging_then_hang.py"), "14", "0.3"],
                                    "stall_after_s": 60, "stop_grace_s": 2, "min_free_gb": 0})
    res = cli(tmp_path, "--config", str(cfg), "--launch", "--json", "--no-preflight", timeout=120)
    assert res.returncode in (0, 4), res.stdout + res.stderr
    try:
        log = run / "train.log"
        deadline = time.monotonic() + 60
        while b"step 14 " not in (log.read_bytes() if log.exists() else b""):
            assert time.monotonic() < deadline, "the program never logged its 14 steps"
            time.sleep(0.5)
        time.sleep(max(0.0, log.stat().st_mtime + 12 - time.time()))   # past the 10 s floor, far under 60 s
        out = json.loads(cli(tmp_path, "--config", str(cfg), "--check", "--json", timeout=60).stdout)
        assert out["verdict"] == "STALLED", (out["verdict"], out["summary"], out["stall_limit_why"])
        assert out["stall_limit_s"] == 10.0 and "its slowest step of" in out["stall_limit_why"], out["stall_limit_why"]
    finally:
        cli(tmp_path, "--config", str(cfg), "--stop", timeout=60)


def test_line_intervals_read_the_step_lines_own_times():
    window = (b"2026-12-05 04:30:59,900 INFO loading data\n"
              + b"".join(f"2026-12-05 04:31:{i // 2:02d},{i % 2 * 500:03d} INFO step {i} loss 0.5\n".encode()
                         for i in range(12))
              + b"2026-12-05 04:31:30,000 INFO saving a checkpoint\n"        # no step: no time of a step
              + b"[2026-12-05 04:31:40] iteration       12/     500 | lm loss: 1.0E+01 |\n"
              + b"2026-13-45 04:31:41,000 step 13\n"                          # no date
              + b"04:31:42 step 14 loss 0.4\n")                               # no date either
    assert line_intervals(window) == [0.5] * 11 + [34.5]
    assert line_intervals(b"step 1\nstep 2\n") == []
    # a clock set back adds no interval
    assert line_intervals(b"2026-12-05 04:31:05 step 1\n2026-12-05 04:31:01 step 2\n2026-12-05 04:31:03 step 3\n") == [2.0]
