"""The pace read from when train.log's step lines came (the wrapper's log_growth), on real programs.

A loop stepping every 0.5 s that hangs at step 20 is STALLED within 20 s of its last step, with
`stall_after_s` at 60 (before log_growth: 61 s, "no cadence yet"): in one-shot `--check`s (each
one look, one mtime), in a watch that looks every 3 s as the dashboard's steady look does (too
seldom to see the steps one by one), and under the `--watch` daemon; four gloo ranks under
torchrun, one stuck on a queue, too. A loop whose steps are genuinely uneven keeps the limit
its slowest step gives (5x), and is never STALLED. Growths that hold no step line are no pace.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.config import Profile
from dflash_tui.contract.rundir import LOG_GROWTH, TRAIN_LOG, parse_log_growth
from dflash_tui.recording.store.store import ChangeStore
from dflash_tui.run.evidence.log_growth import StepEnds
from dflash_tui.run.verdict.checklist import Verdict
from dflash_tui.run.wrapper import render_wrapper
from tests.support.ports import free_port
from tests.test_cli_modes import cli, toml_str, write_config

pytestmark = pytest.mark.timeout(240)

PROGRAMS = Path(__file__).resolve().parents[2] / "programs"
PY = sys.executable
HANG = (PY, str(PROGRAMS / "steps_then_hang.py"), "20", "0.5")
FROM_GROWTH = "learned from log_growth"


def one_shot_checks_until_stalled(tmp_path: Path, cfg: Path, run: Path, limit_s: float = 120) -> list[dict]:
    """`--check --json` about every second until STALLED (or an end): each look's answer."""
    seen = []
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        out = json.loads(cli(tmp_path, "--config", str(cfg), "--check", "--json", timeout=60).stdout)
        seen.append({**out, "at": time.time()})
        if out["verdict"] in ("STALLED", "FINISHED", "CRASHED", "KILLED"):
            break
        time.sleep(1.0)
    return seen


def assert_stalled_soon(seen: list[dict], hung_at: float) -> None:
    last = seen[-1]
    tail = [(s["verdict"], s["stall_limit_s"], s["stall_limit_why"]) for s in seen[-3:]]
    assert last["verdict"] == "STALLED", tail
    assert last["at"] - hung_at <= 20, (last["at"] - hung_at, tail)
    assert last["stall_limit_s"] is not None and last["stall_limit_s"] <= 15, tail
    assert FROM_GROWTH in last["stall_limit_why"], tail
    assert "STALLED" not in [s["verdict"] for s in seen[:-1]], [s["verdict"] for s in seen]


def test_one_shot_checks_of_a_hang_at_step_20_say_stalled_within_20_s(tmp_path):
    run = tmp_path / "run"
    cfg = write_config(tmp_path, p={"run_dir": str(run), "command": list(HANG), "stall_after_s": 60,
                                    "stop_grace_s": 2, "min_free_gb": 0})
    res = cli(tmp_path, "--config", str(cfg), "--launch", "--json", "--no-preflight", timeout=120)
    assert res.returncode in (0, 4), res.stdout + res.stderr
    try:
        seen = one_shot_checks_until_stalled(tmp_path, cfg, run)
        assert_stalled_soon(seen, (run / TRAIN_LOG).stat().st_mtime)    # its last line: step 20
    finally:
        cli(tmp_path, "--config", str(cfg), "--stop", timeout=60)


def test_one_shot_checks_of_four_gloo_ranks_one_stuck_say_stalled_within_20_s(tmp_path):
    pytest.importorskip("torch")
    run = tmp_path / "run"
    command = [PY, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=4", f"--master-port={free_port()}",
               str(PROGRAMS / "ranks_one_odd.py"), "20", "0.5", "2"]
    cfg = write_config(tmp_path, p={"run_dir": str(run), "command": command, "stall_after_s": 60,
                                    "stop_grace_s": 2, "min_free_gb": 0})
    res = cli(tmp_path, "--config", str(cfg), "--launch", "--json", "--no-preflight", timeout=120)
    assert res.returncode in (0, 4), res.stdout + res.stderr
    try:
        seen = one_shot_checks_until_stalled(tmp_path, cfg, run, limit_s=150)
        assert "step 20 " in (run / TRAIN_LOG).read_text()
        assert_stalled_soon(seen, (run / TRAIN_LOG).stat().st_mtime)
    finally:
        cli(tmp_path, "--config", str(cfg), "--stop", timeout=60)


async def test_a_watch_looking_every_3_s_says_stalled_within_20_s_of_a_hang_at_step_20(sessions, tmp_path):
    s = sessions(Profile(name="pace", run_dir=str(tmp_path / "run"), python=PY, command=HANG, stall_after_s=60.0,
                         stop_grace_s=2.0, min_free_gb=0.0))
    await s.launch(preflight=False)
    looks = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ev, cl = await s.check()
        looks.append((ev, cl))
        if cl.verdict in (Verdict.STALLED, Verdict.FINISHED, Verdict.CRASHED):
            break
        await asyncio.sleep(3.0)
    ev, cl = looks[-1]
    assert cl.verdict is Verdict.STALLED, [(c.verdict, c.summary) for _, c in looks[-3:]]
    assert ev.now - ev.activity.step_at <= 20, (ev.now - ev.activity.step_at, cl.summary)
    assert cl.stall_limit_s is not None and cl.stall_limit_s <= 15 and FROM_GROWTH in cl.stall_limit_why, \
        cl.stall_limit_why
    verdicts = [c.verdict for _, c in looks]
    assert Verdict.STALLED not in verdicts[:-1], verdicts


def test_the_watch_daemon_records_stalled_within_20_s_of_a_hang_at_step_20(tmp_path):
    run = tmp_path / "run"
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[profile.p]\nrun_dir = {toml_str(str(run))}\n'
                   f'command = [{", ".join(toml_str(a) for a in HANG)}]\n'
                   'stall_after_s = 60\nstop_grace_s = 2\nmin_free_gb = 0\n'
                   f'[watch]\nstore = {toml_str(str(tmp_path / "watch.sqlite3"))}\n')
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    watcher = subprocess.Popen([PY, "-m", "dflash_tui", "--config", str(cfg), "--watch"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        res = cli(tmp_path, "--config", str(cfg), "--launch", "--no-preflight", timeout=120)
        assert res.returncode in (0, 4), res.stdout + res.stderr
        stalled = []
        deadline = time.monotonic() + 120
        while not stalled and time.monotonic() < deadline and watcher.poll() is None:
            time.sleep(1.0)
            if (tmp_path / "watch.sqlite3").exists():
                with ChangeStore(tmp_path / "watch.sqlite3", readonly=True) as store:
                    changes = store.changes("p")
                stalled = [c for c in changes if c.state is Verdict.STALLED]
        assert stalled, [(c.state, c.cause) for c in changes]
        hung_at = (run / TRAIN_LOG).stat().st_mtime
        assert stalled[0].time - hung_at <= 20, (stalled[0].time - hung_at, stalled[0].cause)
    finally:
        watcher.terminate()
        watcher.communicate(timeout=15)
        cli(tmp_path, "--config", str(cfg), "--stop", timeout=60)


def test_uneven_steps_keep_the_limit_their_slowest_step_gives_and_are_never_stalled(tmp_path):
    """Steps 0.4 s apart with one 5 s gap, then a 20 s gap: a one-shot look learns 5x the 5 s
    gap (25 s) from the log's history, and the 20 s silence stays RUNNING."""
    run = tmp_path / "run"
    command = [PY, str(PROGRAMS / "uneven_steps.py"), "0.4x12", "5", "0.4x12", "20", "0.4x3"]
    cfg = write_config(tmp_path, p={"run_dir": str(run), "command": command, "stall_after_s": 60,
                                    "stop_grace_s": 2, "min_free_gb": 0})
    res = cli(tmp_path, "--config", str(cfg), "--launch", "--json", "--no-preflight", timeout=120)
    assert res.returncode in (0, 4), res.stdout + res.stderr
    try:
        seen = one_shot_checks_until_stalled(tmp_path, cfg, run, limit_s=120)
    finally:
        cli(tmp_path, "--config", str(cfg), "--stop", timeout=60)
    verdicts = [s["verdict"] for s in seen]
    assert "STALLED" not in verdicts and verdicts[-1] == "FINISHED", [(s["verdict"], s["summary"]) for s in seen]
    learned = [s["stall_limit_s"] for s in seen if FROM_GROWTH in s["stall_limit_why"]]
    assert learned and min(learned[-3:]) >= 25, [(s["stall_limit_s"], s["stall_limit_why"]) for s in seen]


def test_growths_of_lines_that_name_no_step_are_no_pace(tmp_path):
    """The real wrapper around a program that prints a heartbeat every 0.6 s: its log grows,
    log_growth says when, and none of it is a step."""
    run = tmp_path / "run"
    run.mkdir()
    script = "for i in 1 2 3 4 5 6 7 8; do echo heartbeat; sleep 0.6; done"
    (run / "launch.sh").write_text(render_wrapper(str(run), "rid", ["sh", "-c", script]))
    subprocess.run(["sh", str(run / "launch.sh"), "rid"], check=True, timeout=30)
    growths, note = parse_log_growth((run / LOG_GROWTH).read_text())
    assert len(growths) >= 6 and note == "", growths
    data = (run / TRAIN_LOG).read_bytes()
    ends = StepEnds()
    ends.feed(data, 0)
    assert ends.times(growths) == []
    # the same growths, had they held step lines, are a pace
    steps = StepEnds()
    steps.feed(data.replace(b"heartbeat", b"step 1   "), 0)
    assert len(steps.times(growths)) >= 6


def test_a_step_line_read_before_the_sampler_saw_it_is_timed_by_a_later_growth():
    ends = StepEnds()
    ends.feed(b"step 1 loss 1\nstep 2 lo", 0)
    assert ends.times([(10.0, 0), (10.5, 14)]) == [10.5] and not ends.pending
    ends.feed(b"ss 1\nstep 3 loss 1\n", 23)     # the rest of step 2's line, and step 3
    assert ends.times([(10.0, 0), (10.5, 14)]) == [] and ends.pending
    assert ends.times([(10.0, 0), (10.5, 14), (11.0, 28), (11.5, 42)]) == [11.0, 11.5] and not ends.pending


def test_a_hostile_log_growth_file_is_a_note(tmp_path):
    text = "12.5 100\nnot a line\n-3 4\nnan 5\n13.0 90\n13.5 200\n\x1b[2J 1\n1e999 7\n"
    growths, note = parse_log_growth(text)
    assert growths == [(12.5, 100), (13.5, 200)]
    assert "6 line(s) skipped" in note
