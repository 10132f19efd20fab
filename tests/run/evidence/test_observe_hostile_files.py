"""A FIFO, a directory or a device where a run file should be: --check answers within seconds
with a check that names the file, and no reader (agent or shell) is left blocked opening it."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import time
from pathlib import Path

import pytest

from dflash_tui.remote.agent import AgentOps
from dflash_tui.remote.base import TargetError
from dflash_tui.remote.local import LocalTarget
from dflash_tui.remote.shell_ops import ShellOps
from tests.test_cli_modes import cli, local, write_config

pytestmark = pytest.mark.timeout(240)

RUN_FILES = ("launch.json", "status.json", "exit.json", "stop.json", "launch.sh", "train.log")


def nobody_reads(fifo: Path) -> bool:
    """No process has the FIFO open for reading, or is blocked opening it (a non-blocking
    writer's open fails with ENXIO exactly then)."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        return exc.errno == errno.ENXIO
    os.close(fd)
    return False


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A real finished run: every run file exists and is real."""
    tmp = tmp_path_factory.mktemp("finished")
    cfg = write_config(tmp, fin=local(tmp / "run", "finish", "--steps=5"))
    res = cli(tmp, "--config", str(cfg), "--launch", "--wait", "30")
    assert res.returncode == 0, res.stdout + res.stderr
    deadline = time.monotonic() + 60
    while not (tmp / "run" / "exit.json").exists():
        assert time.monotonic() < deadline, "the finish stand-in never wrote exit.json"
        time.sleep(0.1)
    (tmp / "run" / "stop.json").write_text(json.dumps({"v": 1, "run_id": "x", "pid": 1, "requested_time": 1.0}))
    return tmp


@pytest.mark.parametrize("name", RUN_FILES)
def test_fifo_in_place_of_a_run_file(finished_run, tmp_path, name):
    run = tmp_path / "run"
    os.system(f"cp -a {finished_run / 'run'} {run}")  # noqa: S605 - fixed paths of this test
    (run / name).unlink()
    os.mkfifo(run / name)
    cfg = write_config(tmp_path, fin=local(run, "finish"))
    t0 = time.monotonic()
    res = cli(tmp_path, "--config", str(cfg), "--check", "--json", timeout=60)
    took = time.monotonic() - t0
    assert took < 10, (took, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "internal error" not in res.stdout + res.stderr, res.stderr
    assert res.returncode in (0, 1, 4), (res.returncode, res.stdout, res.stderr)
    out = json.loads(res.stdout)
    if name in ("launch.json", "exit.json"):   # what an ended run's verdict rests on
        assert "not a regular file" in json.dumps(out), out   # a check names the problem
    assert nobody_reads(run / name)


async def _reads_refused(ops, path: Path) -> list[str]:
    said = []
    for read in (lambda: ops.read(str(path)), lambda: ops.read_tail(str(path))):
        t0 = time.monotonic()
        with pytest.raises(TargetError) as err:
            await asyncio.wait_for(read(), 10)
        assert time.monotonic() - t0 < 5
        said.append(err.value.message)
    return said


async def test_both_ops_refuse_non_regular_files_without_blocking(tmp_path):
    fifo = tmp_path / "status.json"
    os.mkfifo(fifo)
    target = LocalTarget()
    agent = await AgentOps.start(target)
    shell = await ShellOps.start(target)
    try:
        for ops in (agent, shell):
            (st,) = await ops.stat([str(fifo)])
            assert st.exists and st.kind == "fifo" and not st.is_regular
            for message in await _reads_refused(ops, fifo):
                assert "it is a fifo, not a regular file" in message, message
            (dev,) = await ops.stat(["/dev/zero"])
            assert dev.kind == "char-device"
            for message in await _reads_refused(ops, Path("/dev/zero")):
                assert "it is a char-device, not a regular file" in message, message
        assert nobody_reads(fifo)
        # The agent is still serving after the refusals.
        (again,) = await agent.stat([str(tmp_path)])
        assert again.kind == "dir"
    finally:
        await agent.close()
