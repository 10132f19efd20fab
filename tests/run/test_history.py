"""History for real: runs launched, stopped and relaunched through the product, then read back
from RUN_DIR/history/<id>/ by run/history.py (the real gather -> evaluate over the archived
files), read-only; and a relaunch that resumes from the newest checkpoint.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.config import ConfigError, Profile
from dflash_tui.run.history import HistoryError, run_path
from dflash_tui.run.launch.launch import LaunchRefused
from dflash_tui.run.verdict.checklist import Verdict
from dflash_tui.watch.session import Session

from tests.support.run_standins import PROGRAM
from tests.support.runs import standin_profile

pytestmark = [pytest.mark.timeout(120)]


async def wait_verdict(session: Session, verdicts, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        ev, cl = await session.check()
        if cl.verdict in verdicts:
            return ev, cl
        assert time.monotonic() < deadline, cl
        await asyncio.sleep(0.1)


def tree(path: Path) -> dict[str, tuple[int, float]]:
    return {str(p.relative_to(path)): (p.stat().st_size, p.stat().st_mtime)
            for p in sorted(path.rglob("*")) if p.is_file()}


async def test_history_lists_each_run_as_it_ended_and_reads_nothing_into_it(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    run_dir = tmp_path / "run"
    finish = standin_profile(run_dir, "finish", "--steps=5", "--interval=0.05")
    beat = standin_profile(run_dir, "beat", "--interval=0.1")

    async with Session(finish) as s:
        first = await s.launch()
        await wait_verdict(s, {Verdict.FINISHED})
    async with Session(beat) as s:
        second = await s.launch(relaunch=True)
        await wait_verdict(s, {Verdict.RUNNING})
        stopped = await s.stop()
        assert stopped.ok, stopped.message
    async with Session(finish) as s:
        third = await s.launch(relaunch=True)   # moves the stopped run aside too
        await wait_verdict(s, {Verdict.FINISHED})
        assert len(await s.history()) == 2

        before = tree(run_dir / "history")
        runs = await s.history()
        assert tree(run_dir / "history") == before, "reading history changed it"

    assert [r.run_id for r in runs] == [second.run_id, first.run_id], "newest first"
    stopped_run, finished_run = runs
    assert finished_run.verdict is Verdict.FINISHED and finished_run.steps == 5
    assert finished_run.loss == pytest.approx(2.0 / 6) and finished_run.stopped_by is None
    assert finished_run.start_time and finished_run.end_time >= finished_run.start_time
    # The stopped run: whatever evaluate() calls a run that ended after a stop request, said
    # by who asked.
    assert stopped_run.stopped_by and "@" in stopped_run.stopped_by
    assert stopped_run.verdict is not Verdict.RUNNING and stopped_run.steps and stopped_run.steps > 0
    assert stopped_run.checklist.verdict is stopped_run.verdict and stopped_run.checklist.checks

    async with Session(finish) as s:
        one = await s.history_run(first.run_id)
        assert one.verdict is Verdict.FINISHED and one.path == str(run_dir / "history" / first.run_id)
        rep = one.report("t", s.label)
        assert rep.pid_alive is False and rep.run_dir == one.path and rep.checklist.verdict is Verdict.FINISHED
        with pytest.raises(HistoryError, match="no run nope"):
            await s.history_run("nope")
    with pytest.raises(HistoryError, match="is not a run id"):
        run_path(str(run_dir), "../../etc")
    assert third.run_id not in [r.run_id for r in runs]   # the live run is not history


async def test_history_of_a_run_dir_without_one_is_empty(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    async with Session(standin_profile(tmp_path / "fresh", "beat")) as s:
        assert await s.history() == []
        assert await s.newest_checkpoint() is None


def fake_checkpoint(run_dir: Path, step: int, complete: bool = True, **meta) -> Path:
    """A checkpoint as the bundled trainer leaves it; `meta`: its run_id, line, time."""
    d = run_dir / "checkpoints" / f"step-{step:08d}"
    d.mkdir(parents=True)
    (d / "state.pt").write_bytes(b"x")
    if complete:
        (d / "meta.json").write_text(json.dumps({"v": 1, "step": step, **meta}))
    return d


async def test_relaunch_resume_passes_resume_to_the_bundled_trainer(tmp_path, monkeypatch):
    """The argv the wrapper really runs, recorded by a stand-in put where `python` is."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    run_dir = tmp_path / "run"
    python = tmp_path / "python-standin"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {PROGRAM} argv \"$@\"\n")
    python.chmod(0o755)
    bundled = Profile(name="b", run_dir=str(run_dir), python=str(python), stall_after_s=5,
                      stop_grace_s=2, min_free_gb=0)
    assert bundled.uses_bundled_trainer
    async with Session(bundled) as s:
        with pytest.raises(LaunchRefused, match="no checkpoint"):
            await s.launch(resume=True)
        fake_checkpoint(run_dir, 40)
        fake_checkpoint(run_dir, 120)
        fake_checkpoint(run_dir, 160, complete=False)   # a torn save is not resumed from
        ref = await s.newest_checkpoint()
        assert ref is not None and ref.step == 120
        # The newest is the one saved last, as the trainer's --resume has it: a relaunch from
        # scratch's step 30 after an older run's 120, named with its run.
        fake_checkpoint(run_dir, 30, run_id="r-new", time=time.time())
        fake_checkpoint(run_dir, 200, run_id="r-\x1b[2Jold", time=time.time() - 3600)
        ref = await s.newest_checkpoint()
        assert (ref.step, ref.run_id) == (30, "r-new") and ref.words() == "step 30 (step-00000030) of run r-new"
        # The stand-in is no python, so the preflight (which asks that python about torch) is skipped.
        out = await s.launch(relaunch=True, resume=True, preflight=False)
        assert out.run_id, out.checklist
        for _ in range(100):
            if (run_dir / "argv.json").exists():
                break
            await asyncio.sleep(0.1)
        argv = json.loads((run_dir / "argv.json").read_text())
        assert argv[1:5] == ["-m", "dflash_train", "--run-dir", str(run_dir)] and argv[-1] == "--resume", argv
        await s.stop()

    command = standin_profile(tmp_path / "own", "beat")
    async with Session(command) as s:
        with pytest.raises(ConfigError, match="runs its own command"):
            await s.launch(resume=True)


def test_cli_relaunch_resume_headless(tmp_path):
    import subprocess
    run_dir = tmp_path / "run"
    python = tmp_path / "python-standin"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {PROGRAM} argv \"$@\"\n")
    python.chmod(0o755)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[profile.b]\nrun_dir = "{run_dir}"\npython = "{python}"\nmin_free_gb = 0\nstop_grace_s = 2\n')
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "dflash_tui", "--config", str(cfg), *args],
                              capture_output=True, text=True, env=env, timeout=60)

    r = cli("--relaunch", "--resume", "--no-preflight")
    assert r.returncode == 1 and "no checkpoint" in r.stderr and "Traceback" not in r.stderr, r
    r = cli("--check", "--resume")
    assert r.returncode == 2 and "--resume goes with --launch or --relaunch" in r.stderr, r
    fake_checkpoint(run_dir, 7, run_id="r-7", time=time.time())
    r = cli("--relaunch", "--resume", "--no-preflight", "--json", "--wait", "10")
    try:
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert json.loads(r.stdout)["resume_from"] == "step 7 (step-00000007) of run r-7", r.stdout
        argv = json.loads((run_dir / "argv.json").read_text())
        assert argv[-1] == "--resume"
    finally:
        cli("--stop")
