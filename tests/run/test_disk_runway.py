"""Disk runway, for real: a real tmpfs mount (this test is root; unmounted after) filled by a real
program saving torch.save checkpoints. The `disk` check warns a checkpoint interval before a save
cannot fit and fails when the next one cannot, while the run still reads RUNNING; the watcher's
recorder and notify policy turn each into a `warning` notification. `--check --json` carries
"checkpoints" and "runway"; the preflight says the free space against min_free_gb in numbers."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.recording.notify.settings import NotifySettings
from dflash_tui.recording.notify.notify import NotifyPolicy
from dflash_tui.recording.store.recorder import Recorder
from dflash_tui.recording.store.store import ChangeStore
from dflash_tui.run.verdict.checklist import CheckState, Verdict
from dflash_tui.run.verdict.report import report_from
from tests.run.verdict.test_verdicts_programs import program_profile
from tests.test_cli_modes import write_config

pytestmark = pytest.mark.timeout(180)

SAVE_LOOP = str(Path(__file__).resolve().parents[1] / "programs" / "save_loop.py")
MIB = 1 << 20


@pytest.fixture
def tmpfs(tmp_path):
    """mount(size) -> a fresh tmpfs of that size ("56m"), unmounted after the test."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        where = tmp_path / f"disk{len(mounted)}"
        where.mkdir()
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "dflash-runway", str(where)],
                             capture_output=True, text=True)
        if res.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs: {res.stderr.strip()}")
        mounted.append(where)
        return where
    yield mount
    for where in mounted:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


async def test_a_filling_disk_warns_an_interval_ahead_then_fails_and_notifies(tmpfs, sessions, tmp_path):
    disk = tmpfs("56m")
    run = disk / "run"
    # 8 MiB checkpoints every 2 s on 56 MiB: the 5th leaves room for one more, the 6th for none,
    # and the 7th finds the disk full.
    s = sessions(program_profile(run, (sys.executable, SAVE_LOOP, str(run / "ckpt"), "100", "2", "1.0", "8192")))
    out = await s.launch()
    assert out.preflight.ok, out.preflight.checks
    recorder = Recorder(ChangeStore(tmp_path / "watch.sqlite3"))
    policy = NotifyPolicy(NotifySettings(urls=("json://127.0.0.1:9/",)))
    recorder.notice_listeners.append(policy.noticed)
    seen: list[tuple[float, Verdict, CheckState | None, str]] = []
    runways = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ev, cl = await s.check()
        report = report_from(ev, cl, profile="prog", target_label="local")
        recorder.observe(report)
        disk_check = next((c for c in cl.checks if c.id == "disk"), None)
        seen.append((time.monotonic(), cl.verdict, disk_check.state if disk_check else None,
                     disk_check.cause if disk_check else ""))
        if ev.runway is not None:
            runways.append(ev.runway)
        if cl.verdict.ended:
            break
        await asyncio.sleep(0.25)
    states = [(v, st) for _, v, st, _ in seen]
    # The 7th save ends it; exit.json may not fit either (KILLED, "the disk is full").
    assert seen[-1][1] in (Verdict.CRASHED, Verdict.KILLED), seen[-1]
    warns = [t for t, v, st, _ in seen if v is Verdict.RUNNING and st is CheckState.WARN]
    fails = [(t, why) for t, v, st, why in seen if v is Verdict.RUNNING and st is CheckState.FAIL]
    assert warns and fails, states
    assert warns[0] < fails[0][0] and fails[0][0] - warns[0] >= 1.0, (warns[0], fails[0])
    t_fail, why = fails[0]
    assert "the checkpoint at about step" in why and "needs 8.0 MiB" in why and f"free on {run / 'ckpt'}" in why, why
    assert "it will fail in ~" in why, why
    assert any(r.saves_left == 1 for r in runways) and any(r.saves_left == 0 for r in runways)
    r = runways[-1]
    assert 8 * MIB <= r.next_checkpoint_bytes < 8 * MIB + (64 << 10) and r.free_bytes < r.next_checkpoint_bytes
    notices = policy.due(time.time())
    assert [(n.event, n.change.check) for n in notices] == [("warning", "disk"), ("warning", "disk")], notices
    assert "disk warn" in notices[0].title and "disk fail" in notices[1].title
    assert "needs 8.0 MiB" in notices[1].body


async def test_check_json_has_the_checkpoints_and_the_runway(tmp_path):
    run = tmp_path / "run"
    cfg = write_config(tmp_path, p={"run_dir": str(run), "min_free_gb": 0, "stop_grace_s": 2,
                                    "checkpoints": ["~/../../no-such-dir", "ckpt/"],
                                    "command": [sys.executable, SAVE_LOOP, str(run / "ckpt"), "600", "2", "0.2", "64"]})
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}

    def cli(*args: str) -> dict:
        res = subprocess.run([sys.executable, "-m", "dflash_tui", "--config", str(cfg), *args], capture_output=True,
                             text=True, env=env, timeout=90)
        return json.loads(res.stdout)
    try:
        assert cli("--launch", "--json", "--wait", "20")["verdict"] in ("RUNNING", "STARTING")
        deadline = time.monotonic() + 60
        while True:
            out = cli("--check", "--json")
            last = (out.get("checkpoints") or {}).get("last_complete")
            if (last and out["checkpoints"]["interval_s"]) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert last is not None, out
        assert last["format"] == "torch.save" and last["step"] % 2 == 0 and last["bytes"] > 64 << 10, last
        assert last["path"].startswith(str(run / "ckpt" / "step-")) and last["age_s"] >= 0
        assert out["checkpoints"]["torn"] == [] and 0.2 < out["checkpoints"]["interval_s"] < 5
        disk = out["runway"]["disk"]
        assert disk["path"] == str(run / "ckpt") and disk["free_bytes"] > 0 and disk["saves_left"] > 10, disk
        assert disk["next_checkpoint_bytes"] == last["bytes"] and disk["next_checkpoint_in_s"] is not None
        checks = {c["id"]: c for c in out["checks"]}
        assert checks["checkpoint"]["state"] == "ok" and checks["checkpoint"]["cause"].startswith("step ")
        assert checks["disk"]["state"] == "ok" and "more checkpoints of" in checks["disk"]["cause"]
    finally:
        subprocess.run([sys.executable, "-m", "dflash_tui", "--config", str(cfg), "--stop", "--json"],
                       capture_output=True, env=env, timeout=60)


def test_the_preflight_says_the_free_space_against_the_limit_in_numbers(tmpfs, tmp_path):
    disk = tmpfs("1004m")     # 0.98 GiB: "1.0 GiB free" would read as enough
    cfg = write_config(tmp_path, p={"run_dir": str(disk / "run"), "min_free_gb": 1,
                                    "command": [sys.executable, "-c", "pass"]})
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    res = subprocess.run([sys.executable, "-m", "dflash_tui", "--config", str(cfg), "--launch", "--json"],
                         capture_output=True, text=True, env=env, timeout=90)
    out = json.loads(res.stdout)
    assert out["verdict"] == "NOT LAUNCHED", out
    pre = {c["id"]: c for c in out["checks"]}["pre_disk"]
    assert pre["state"] == "fail" and pre["cause"] == f"0.98 GiB free in {disk / 'run'}, below min_free_gb 1", pre
    assert pre["hint"] == "free space or lower min_free_gb (now 1)", pre
