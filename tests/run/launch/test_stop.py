"""--stop signals only a process it has verified by its start time: a launch.json without one,
or a pid now owned by another process, is refused (exit 1) and the process is left alone,
even when its command line says "launch.sh"."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from dflash_tui.run.launch.claim import _own_start_ticks
from tests.support.runs import alive
from tests.test_cli_modes import cli, local, write_config

pytestmark = pytest.mark.timeout(120)


def foreign_process() -> subprocess.Popen:
    """Not a run of ours, but a group leader whose argv contains "launch.sh"."""
    return subprocess.Popen(["sh", "-c", "sleep 60", "launch.sh"], start_new_session=True)


def fake_launch(run_dir: Path, pid: int, start_ticks) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "train.log").write_text("")
    (run_dir / "launch.json").write_text(json.dumps({
        "v": 1, "run_id": "20261201-000000-abcdef", "pid": pid, "pgid": pid, "start_ticks": start_ticks,
        "start_time": time.time() - 5, "argv": ["sh", "./launch.sh"]}))


@pytest.mark.parametrize("case", ["no start time", "reused pid"])
def test_stop_never_signals_an_unverified_process(tmp_path, case):
    proc = foreign_process()
    try:
        ticks = None if case == "no start time" else _own_start_ticks(proc.pid) + 1
        fake_launch(tmp_path / "run", proc.pid, ticks)
        cfg = write_config(tmp_path, p=local(tmp_path / "run", "beat"))
        res = cli(tmp_path, "--config", str(cfg), "--stop", "--json")
        out = json.loads(res.stdout)
        assert res.returncode == 1 and out["exit_code"] == 1, (res.stdout, res.stderr)
        if case == "no start time":
            assert out["stop"]["outcome"] == "unverified"
            assert "no start time" in out["stop"]["message"] and "nothing was signalled" in out["stop"]["message"]
        else:
            assert out["stop"]["outcome"] == "mismatch"
            assert "another process" in out["stop"]["message"]
        time.sleep(0.5)
        assert alive(proc.pid) and proc.poll() is None, "an unverified process was signalled"
        assert not (tmp_path / "run" / "stop.json").exists()
    finally:
        proc.kill()
        proc.wait()


async def test_both_ops_refuse_to_signal_without_a_start_time():
    import signal as sig

    from dflash_tui.remote.agent import AgentOps
    from dflash_tui.remote.local import LocalTarget
    from dflash_tui.remote.shell_ops import ShellOps
    proc = foreign_process()
    target = LocalTarget()
    agent = await AgentOps.start(target)
    try:
        for ops in (agent, await ShellOps.start(target)):
            assert await ops.signal(proc.pid, sig.SIGTERM, start_ticks=None, cmdline=["sh", "./launch.sh"],
                                    group=True) == "mismatch"
        time.sleep(0.3)
        assert proc.poll() is None and alive(proc.pid)
    finally:
        await agent.close()
        proc.kill()
        proc.wait()
