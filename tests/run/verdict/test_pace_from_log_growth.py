"""The pace read from when train.log grew (the wrapper's log_growth), on real programs.

A loop stepping every 0.5 s that hangs at step 20 is STALLED within 20 s of its last step, with
`stall_after_s` at 60: in one-shot `--check`s (each one look, one mtime) and in a watch that
looks every 3 s as the dashboard does (too seldom to see the steps one by one). Growths that hold
no step line are no pace.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.config import Profile
from dflash_tui.contract.rundir import LOG_GROWTH, TRAIN_LOG, parse_log_growth
from dflash_tui.run.evidence.pace import growth_step_times
from dflash_tui.run.verdict.checklist import Verdict
from dflash_tui.run.wrapper import render_wrapper
from tests.test_cli_modes import cli, write_config

pytestmark = pytest.mark.timeout(200)

PROGRAMS = Path(__file__).resolve().parents[2] / "programs"
PY = sys.executable
HANG = (PY, str(PROGRAMS / "steps_then_hang.py"), "20", "0.5")


def test_one_shot_checks_of_a_hang_at_step_20_say_stalled_within_20_s(tmp_path):
    run = tmp_path / "run"
    cfg = write_config(tmp_path, p={"run_dir": str(run), "command": list(HANG), "stall_after_s": 60,
                                    "stop_grace_s": 2, "min_free_gb": 0})
    res = cli(tmp_path, "--config", str(cfg), "--launch", "--json", "--no-preflight", timeout=120)
    assert res.returncode in (0, 4), res.stdout + res.stderr
    seen = []
    try:
        deadline = time.monotonic() + 100
        while time.monotonic() < deadline:
            out = json.loads(cli(tmp_path, "--config", str(cfg), "--check", "--json", timeout=60).stdout)
            seen.append((out["verdict"], out["stall_limit_s"], out["stall_limit_why"]))
            if out["verdict"] == "STALLED":
                break
            time.sleep(1.0)
        hung_at = (run / TRAIN_LOG).stat().st_mtime     # its last line: step 20
        stalled_at = time.time()
        assert seen[-1][0] == "STALLED", seen[-4:]
        assert seen[-1][1] is not None and seen[-1][1] <= 15, seen[-1]
        assert stalled_at - hung_at <= 20, (stalled_at - hung_at, seen[-4:])
    finally:
        cli(tmp_path, "--config", str(cfg), "--stop", timeout=60)


async def test_a_watch_looking_every_3_s_says_stalled_within_20_s_of_a_hang_at_step_20(sessions, tmp_path):
    s = sessions(Profile(name="pace", run_dir=str(tmp_path / "run"), python=PY, command=HANG, stall_after_s=60.0,
                         stop_grace_s=2.0, min_free_gb=0.0))
    await s.launch(preflight=False)
    looks = []
    deadline = time.monotonic() + 100
    while time.monotonic() < deadline:
        ev, cl = await s.check()
        looks.append((ev, cl))
        if cl.verdict is Verdict.STALLED or cl.verdict in (Verdict.FINISHED, Verdict.CRASHED):
            break
        await asyncio.sleep(3.0)
    ev, cl = looks[-1]
    assert cl.verdict is Verdict.STALLED, [(c.verdict, c.summary) for _, c in looks[-3:]]
    assert ev.now - ev.activity.step_at <= 20, (ev.now - ev.activity.step_at, cl.summary)
    assert cl.stall_limit_s is not None and cl.stall_limit_s <= 15, cl.stall_limit_why
    verdicts = [c.verdict for _, c in looks]
    assert Verdict.STALLED not in verdicts[:-1], verdicts


def test_growths_of_lines_that_name_no_step_are_no_pace(tmp_path):
    """The real wrapper around a program that prints a heartbeat every 0.3 s: its log grows,
    log_growth says when, and none of it is a step."""
    run = tmp_path / "run"
    run.mkdir()
    script = "for i in 1 2 3 4 5 6 7 8; do echo heartbeat; sleep 0.3; done"
    (run / "launch.sh").write_text(render_wrapper(str(run), "rid", ["sh", "-c", script]))
    import subprocess
    subprocess.run(["sh", str(run / "launch.sh"), "rid"], check=True, timeout=30)
    growths, note = parse_log_growth((run / LOG_GROWTH).read_text())
    assert len(growths) >= 6 and note == "", growths
    data = (run / TRAIN_LOG).read_bytes()
    assert growth_step_times(growths, data, 0) == []
    # the same growths, had they held step lines, are a pace
    steps = data.replace(b"heartbeat", b"step 1   ")
    assert len(growth_step_times(growths, steps, 0)) >= 6


def test_a_hostile_log_growth_file_is_a_note(tmp_path):
    text = "12.5 100\nnot a line\n-3 4\nnan 5\n13.0 90\n13.5 200\n\x1b[2J 1\n1e999 7\n"
    growths, note = parse_log_growth(text)
    assert growths == [(12.5, 100), (13.5, 200)]
    assert "6 line(s) skipped" in note
