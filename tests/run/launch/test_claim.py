"""One launch per run dir: two real `dflash-tui --launch` processes at once start ONE trainer,
and the other is refused with who holds the run dir and since when; a dead launcher's claim is
broken, a live one's is not."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.support.run_standins import PROGRAM
from tests.test_cli_modes import cli, local, write_config

pytestmark = pytest.mark.timeout(240)

CLAIM = ".launch-claim"


def trainers(tag: str) -> list[int]:
    """This machine's stand-in trainers started with `tag` among their arguments."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if state != "Z" and PROGRAM.encode() in argv and tag.encode() in argv:
            pids.append(int(entry.name))
    return pids


def kill_each(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def env_for(tmp_path: Path) -> dict:
    return {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}


def test_two_concurrent_launches_start_one_trainer(tmp_path):
    tag = f"--tag={uuid.uuid4().hex}"
    cfg = write_config(tmp_path, race=local(tmp_path / "run", "beat", tag))
    argv = [sys.executable, "-m", "dflash_tui", "--config", str(cfg), "--launch", "--json", "--wait", "20"]
    try:
        for attempt in range(4):
            procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env=env_for(tmp_path)) for _ in range(2)]
            outs = [p.communicate(timeout=90) for p in procs]
            codes = sorted(p.returncode for p in procs)
            running = trainers(tag)
            assert len(running) == 1, (attempt, running, outs)
            assert codes == [0, 1], (attempt, outs)
            loser = outs[[p.returncode for p in procs].index(1)]
            said = loser[0] + loser[1]
            assert ("another launch of this run dir is in progress" in said
                    or "is still running in" in said), said
            # The winner's run is the one the run dir describes, and it is the live trainer.
            res = cli(tmp_path, "--config", str(cfg), "--check", "--json")
            assert res.returncode == 0 and json.loads(res.stdout)["verdict"] == "RUNNING", res.stdout
            res = cli(tmp_path, "--config", str(cfg), "--stop")
            assert res.returncode == 0, res.stdout + res.stderr
            deadline = time.monotonic() + 20
            while trainers(tag) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert trainers(tag) == []
            assert not (tmp_path / "run" / CLAIM).exists()
    finally:
        kill_each(trainers(tag))


def _craft_claim(run_dir: Path, *, pid: int, machine: str, age_s: float = 0.0, start_ticks=None) -> Path:
    from dflash_tui.run.launch.claim import _own_start_ticks
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / CLAIM
    ticks = _own_start_ticks(pid) if start_ticks is None else start_ticks
    path.write_text(json.dumps({"v": 1, "token": uuid.uuid4().hex, "launcher": "ops@elsewhere", "pid": pid,
                                "start_ticks": ticks, "machine": machine, "action": "launch"}) + "\n")
    if age_s:
        t = time.time() - age_s
        os.utime(path, (t, t))
    return path


def test_claim_of_a_live_launcher_refuses_launch_and_relaunch(tmp_path):
    from dflash_tui.run.launch.claim import machine_id
    tag = f"--tag={uuid.uuid4().hex}"
    cfg = write_config(tmp_path, p=local(tmp_path / "run", "beat", tag))
    holder = subprocess.Popen(["sleep", "60"])
    try:
        claim = _craft_claim(tmp_path / "run", pid=holder.pid, machine=machine_id())
        for mode in ("--launch", "--relaunch"):
            res = cli(tmp_path, "--config", str(cfg), mode)
            assert res.returncode == 1, (mode, res.stdout, res.stderr)
            line = res.stderr.strip()
            assert len(line.splitlines()) == 1 and "Traceback" not in res.stderr, res.stderr
            assert "another launch of this run dir is in progress, started by ops@elsewhere " \
                   f"(pid {holder.pid}, launch) at " in line and str(claim) in line, line
            assert trainers(tag) == [] and claim.exists()
    finally:
        holder.kill()
        holder.wait()
    # The same claim, now of a dead launcher on this machine: broken, and the launch goes on.
    res = cli(tmp_path, "--config", str(cfg), "--launch", "--wait", "20")
    try:
        assert res.returncode == 0, res.stdout + res.stderr
        assert len(trainers(tag)) == 1 and not claim.exists()
    finally:
        kill_each(trainers(tag))


def test_claim_from_another_machine_is_held_until_older_than_any_launch(tmp_path):
    from dflash_tui.run.launch.claim import CLAIM_STALE_AFTER_S
    tag = f"--tag={uuid.uuid4().hex}"
    cfg = write_config(tmp_path, p=local(tmp_path / "run", "beat", tag))
    claim = _craft_claim(tmp_path / "run", pid=4242, machine="gpu-laptop|boot|pid:[1]", age_s=120, start_ticks=7)
    res = cli(tmp_path, "--config", str(cfg), "--launch")
    assert res.returncode == 1 and "another launch of this run dir is in progress" in res.stderr, res.stderr
    import re
    ago = re.search(r", (\d+) s ago", res.stderr)
    assert ago and 120 <= int(ago.group(1)) < 180, res.stderr     # the claim's age, however slow this machine
    t = time.time() - CLAIM_STALE_AFTER_S - 5
    os.utime(claim, (t, t))
    res = cli(tmp_path, "--config", str(cfg), "--launch", "--wait", "20")
    try:
        assert res.returncode == 0, res.stdout + res.stderr
        assert len(trainers(tag)) == 1 and not claim.exists()
    finally:
        kill_each(trainers(tag))


def test_claim_that_is_not_a_regular_file_is_refused_by_name(tmp_path):
    cfg = write_config(tmp_path, p=local(tmp_path / "run", "beat"))
    (tmp_path / "run").mkdir()
    os.mkfifo(tmp_path / "run" / CLAIM)
    t0 = time.monotonic()
    res = cli(tmp_path, "--config", str(cfg), "--launch", timeout=30)
    assert time.monotonic() - t0 < 20
    assert res.returncode == 1 and f"{tmp_path / 'run' / CLAIM} is not a regular file" in res.stderr, res.stderr


async def test_the_dashboards_r_and_a_script_at_once_start_one_trainer(tmp_path, monkeypatch):
    """The dashboard's `r` (WatchSource.relaunch, as the key calls it) racing a script's
    `--launch` of the same profile: one trainer; the loser is told why."""
    import asyncio

    from dflash_tui.config import load_config
    from dflash_tui.ui.sources.source import ActionError
    from dflash_tui.ui.sources.watch_source import WatchSource
    from dflash_tui.watch import LaunchRequest, open_watch
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    tag = f"--tag={uuid.uuid4().hex}"
    cfg = write_config(tmp_path, race=local(tmp_path / "run", "beat", tag))
    argv = [sys.executable, "-m", "dflash_tui", "--config", str(cfg), "--launch", "--wait", "20"]
    source = WatchSource(open_watch(load_config(cfg).profile("race")))
    try:
        for attempt in range(3):
            script = await asyncio.create_subprocess_exec(*argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                          env=env_for(tmp_path))
            try:
                said = await source.launch(LaunchRequest(relaunch=True))
            except ActionError as exc:
                said = f"refused: {exc}"
            out, err = await script.communicate()
            assert len(trainers(tag)) == 1, (attempt, said, out, err)
            if said.startswith("refused"):
                assert "another launch of this run dir is in progress" in said or "still running" in said, said
            else:
                assert script.returncode == 1, (said, out, err)   # the script lost
            await source.watch.session.stop(grace_s=2)
            deadline = time.monotonic() + 20
            while trainers(tag) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
    finally:
        kill_each(trainers(tag))
        await source.close()


def test_a_launcher_killed_inside_its_claim_leaves_no_lasting_lock(tmp_path):
    """SIGKILL a real launcher while it holds the claim: the next launch breaks the claim
    (its holder is dead) and launches, instead of being refused for ever."""
    tag = f"--tag={uuid.uuid4().hex}"
    cfg = write_config(tmp_path, k=local(tmp_path / "run", "beat", tag))
    claim = tmp_path / "run" / CLAIM
    argv = [sys.executable, "-m", "dflash_tui", "--config", str(cfg), "--launch", "--no-preflight"]
    try:
        for attempt in range(5):
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env_for(tmp_path))
            deadline = time.monotonic() + 30
            while not claim.exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.002)
            proc.kill()
            proc.wait()
            if claim.exists():
                break
            kill_each(trainers(tag))
        assert claim.exists(), "never caught the launcher inside its claim"
        res = cli(tmp_path, "--config", str(cfg), "--relaunch", "--wait", "20")
        assert res.returncode == 0, res.stdout + res.stderr
        assert len(trainers(tag)) == 1 and not claim.exists()
    finally:
        kill_each(trainers(tag))


def test_a_wrapper_slower_than_the_deadline_keeps_the_claim(tmp_path):
    """A launch deadline shorter than the wrapper needs: the launch keeps its claim while its
    wrapper is alive and reports the run it started (not NEVER STARTED), and a launch at the
    same moment is refused, not let in beside it."""
    tag = f"--tag={uuid.uuid4().hex}"
    cfg = write_config(tmp_path, slow=local(tmp_path / "run", "beat", tag, launch_deadline_s=0.001))
    argv = [sys.executable, "-m", "dflash_tui", "--config", str(cfg), "--launch", "--no-preflight", "--json"]
    try:
        for attempt in range(3):
            procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env=env_for(tmp_path)) for _ in range(2)]
            outs = [p.communicate(timeout=90) for p in procs]
            assert len(trainers(tag)) == 1, (attempt, outs)
            verdicts = sorted(json.loads(o[0])["verdict"] or "refused" for o in outs)
            assert verdicts[0] in ("RUNNING", "STARTING") and verdicts[1] == "refused", (attempt, outs)
            res = cli(tmp_path, "--config", str(cfg), "--stop")
            assert res.returncode == 0, res.stdout + res.stderr
            kill_each(trainers(tag))
    finally:
        kill_each(trainers(tag))
