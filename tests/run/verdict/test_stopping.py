"""A stop under way is STOPPING, not RUNNING: a real STALLED run whose program talks on SIGTERM
(tests/programs/talks_on_sigterm.py prints "Received SIGTERM: 15" and saves for a few seconds,
as Lightning does) is stopped for real while a `--watch` process with a real HTTP receiver
records it. Its output after the stop request is no progress: every look during the save reads
STOPPING (`--check --json`: exit 4, a warn "stop" check), then STOPPED with the checkpoint it
saved; the watcher records STALLED -> STOPPING -> STOPPED and notifies STALLED and STOPPED,
never "recovered"."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.config import Profile
from dflash_tui.recording.store.store import ChangeStore
from dflash_tui.run.verdict.checklist import Verdict
from tests.recording.test_daemon import env_for, titles, wait_title
from tests.support.receivers import HttpReceiver
from tests.test_cli_modes import cli

pytestmark = pytest.mark.timeout(150)

PROGRAM = Path(__file__).resolve().parents[2] / "programs" / "talks_on_sigterm.py"
PY = sys.executable
SAVE_S = 8.0        # how long it saves after SIGTERM: looks of the session, the watcher and a `--check` under load
GRACE_S = 20.0      # well past SAVE_S: SIGTERM ends it, never SIGKILL


def write_config(tmp_path: Path, port: int) -> Path:
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        f'[profile.p]\nrun_dir = "{tmp_path / "p"}"\ncommand = ["{PY}", "{PROGRAM}", "{SAVE_S}"]\n'
        f'stall_after_s = 2\nstop_grace_s = {GRACE_S}\nmin_free_gb = 0\n'
        f'[watch]\ninterval_s = 0.5\nstore = "{tmp_path / "watch.sqlite3"}"\n'
        f'[notify]\nhold_s = 1\nurls = ["json://127.0.0.1:{port}/hook"]\n')
    return cfg


async def test_a_stalled_run_that_saves_on_sigterm_reads_stopping_until_it_has_stopped(tmp_path, sessions):
    http = HttpReceiver()
    cfg = write_config(tmp_path, http.port)
    watcher = subprocess.Popen([PY, "-m", "dflash_tui", "--config", str(cfg), "--watch"], env=env_for(tmp_path),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        s = sessions(Profile(name="p", run_dir=str(tmp_path / "p"), python=PY, command=(PY, str(PROGRAM), str(SAVE_S)),
                             train_args=(), stall_after_s=2.0, stop_grace_s=GRACE_S, min_free_gb=0.0))
        out = await s.launch(preflight=False)
        assert out.run_id, out.checklist
        wait_title(http, "dflash-tui: p STALLED", 40)
        _, cl = await s.check()
        assert cl.verdict is Verdict.STALLED, cl

        stop = asyncio.create_task(s.stop())
        seen: list[tuple[Verdict, str, dict]] = []
        json_check = None
        while not stop.done():
            _, cl = await s.check()
            seen.append((cl.verdict, cl.summary, {c.id: c for c in cl.checks}))
            if json_check is None and cl.verdict is Verdict.STOPPING:
                json_check = await asyncio.to_thread(cli, tmp_path, "--config", str(cfg), "--profile", "p",
                                                     "--check", "--json")
            await asyncio.sleep(0.3)
        res = await stop
        assert res.outcome == "terminated", res
        _, cl = await s.check()
        seen.append((cl.verdict, cl.summary, {c.id: c for c in cl.checks}))

        # The stop request is written before SIGTERM: STALLED until it is (a look that came
        # first), then STOPPING until the process is gone, whatever it printed meanwhile.
        verdicts = [v for v, _, _ in seen]
        first = verdicts.index(Verdict.STOPPING)
        assert set(verdicts[:first]) <= {Verdict.STALLED}, verdicts
        end = verdicts.index(Verdict.STOPPED)
        assert set(verdicts[first:end]) == {Verdict.STOPPING} and set(verdicts[end:]) == {Verdict.STOPPED}, verdicts
        assert verdicts.count(Verdict.STOPPING) >= 3, verdicts
        stopping = next((sm, checks) for v, sm, checks in seen if v is Verdict.STOPPING)
        assert stopping[0].startswith("stopping: SIGTERM sent by "), stopping[0]
        assert stopping[1]["stop"].state.value == "warn", stopping[1]["stop"]
        assert "last checkpoint" in seen[-1][1] and "step-3.ckpt" in seen[-1][1] and "exit code 0" in seen[-1][1], seen[-1][1]
        assert (tmp_path / "p" / "checkpoints" / "step-3.ckpt").exists()

        assert json_check is not None, "no look during the save"
        doc = json.loads(json_check.stdout)
        assert json_check.returncode == 4 and doc["exit_code"] == 4, (json_check.stdout, json_check.stderr)
        assert doc["verdict"] == "STOPPING" and doc["summary"].startswith("stopping: SIGTERM"), doc
        assert {c["id"]: c["state"] for c in doc["checks"]}["stop"] == "warn", doc["checks"]

        wait_title(http, "dflash-tui: p STOPPED", 20)
        time.sleep(1.5)     # past the hold: anything else due would have gone out by now
    finally:
        watcher.terminate()
        _, err = watcher.communicate(timeout=15)
        http.close()
    assert titles(http) == ["dflash-tui: p STALLED", "dflash-tui: p STOPPED"], err
    with ChangeStore(tmp_path / "watch.sqlite3", readonly=True) as store:
        states = [c.state for c in store.changes("p") if c.run_id]
    assert "STALLED" in states and states[states.index("STALLED"):] == ["STALLED", "STOPPING", "STOPPED"], (states, err)


class StopDuringTheLook:
    """The run's own ops; the person's stop lands inside one look, after its read of the run's
    records and before it reads the process tree, the log and the stacks (`act`, once, just
    before the first of those asks)."""

    def __init__(self, ops, act) -> None:
        self._ops, self._act = ops, act

    def __getattr__(self, name):
        return getattr(self._ops, name)

    async def _first(self):
        if self._act is not None:
            act, self._act = self._act, None
            await act()

    async def proc_tree(self, pid, run_dir=None):
        await self._first()
        return await self._ops.proc_tree(pid, run_dir=run_dir)

    async def dump_stacks(self, *args, **kwargs):
        await self._first()
        return await self._ops.dump_stacks(*args, **kwargs)

    async def py_spy_dump(self, *args, **kwargs):
        await self._first()
        return await self._ops.py_spy_dump(*args, **kwargs)


async def test_a_stop_that_lands_inside_one_look_reads_stopping_never_running(tmp_path, sessions):
    from dflash_tui.contract.rundir import STOP_JSON, StopRecord, to_json
    from dflash_tui.run.evidence.observe import gather
    from dflash_tui.run.verdict.health import Limits, evaluate
    import os
    import signal

    s = sessions(Profile(name="p", run_dir=str(tmp_path / "p"), python=PY, command=(PY, str(PROGRAM), str(SAVE_S)),
                         train_args=(), stall_after_s=2.0, stop_grace_s=GRACE_S, min_free_gb=0.0))
    out = await s.launch(preflight=False)
    assert out.run_id, out.checklist
    deadline = time.monotonic() + 30
    while (await s.check())[1].verdict is not Verdict.STALLED:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.3)
    launch = json.loads((tmp_path / "p" / "launch.json").read_text())

    async def person_stops():
        # As run/launch/stop.py does it: stop.json first, then SIGTERM to the group; the
        # program's handler talks ("Received SIGTERM", saving lines) before the look goes on.
        record = StopRecord(run_id=launch["run_id"], pid=launch["pid"], requested_time=time.time(),
                            requested_by="someone@host", signal_sent="SIGTERM")
        (tmp_path / "p" / STOP_JSON).write_text(to_json(record) + "\n")
        os.killpg(launch["pgid"], signal.SIGTERM)
        await asyncio.sleep(1.0)

    try:
        # A one-shot look (`--check`): none of its reads is held from a look before.
        ev = await gather(StopDuringTheLook(await s.ops(), person_stops), str(tmp_path / "p"))
        assert "Received SIGTERM" in (tmp_path / "p" / "train.log").read_text()   # it did land inside
        cl = evaluate(ev, Limits(stall_after_s=2.0))
        assert cl.verdict is Verdict.STOPPING, (cl.verdict, cl.summary)
    finally:
        await s.stop()
