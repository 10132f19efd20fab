"""A FIFO, a directory or a device where a run file should be: --check answers within seconds
with a check that names the file, and no reader (agent or shell) is left blocked opening it.
Probe files the run (or anyone who can write its run dir) forges, with numbers int() or float()
refuse and shapes torch never writes: --check gives the verdict and a note naming the file."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import pickle
import re
import time
from pathlib import Path

import pytest

from dflash_tui.remote.agent import AgentOps
from dflash_tui.remote.base import TargetError
from dflash_tui.remote.local import LocalTarget
from dflash_tui.remote.shell_ops import ShellOps
from tests.run.evidence.test_flight_recorder import HOSTILE_DUMPS
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


@pytest.fixture(scope="module")
def live_run(tmp_path_factory):
    """A real live run (the beat stand-in under the run probe), its probe directory to forge into."""
    tmp = tmp_path_factory.mktemp("live")
    cfg = write_config(tmp, p=local(tmp / "run", "beat", stall_after_s=60))
    res = cli(tmp, "--config", str(cfg), "--launch", "--json", "--wait", "30")
    assert res.returncode == 0, res.stdout + res.stderr
    pid = json.loads(res.stdout)["pid"]
    probe = tmp / "run" / "probe"
    deadline = time.monotonic() + 30
    while not any(probe.glob("[0-9]*.json")):
        assert time.monotonic() < deadline, "the run probe wrote no report"
        time.sleep(0.1)
    yield tmp, cfg, probe, json.loads((tmp / "run" / "launch.json").read_text())["run_id"]
    os.killpg(pid, 9)


def forged_report(run_id: str) -> str:
    return json.dumps({"v": 1, "run_id": run_id, "pid": 4194111, "time": time.time(), "threads": [
        {"name": "MainThread", "ident": 1, "frames": ["/srv/t.py:" + "9" * 5000 + " main"]}]})


# (file in probe/, its bytes from the run id, what the note says: a pattern)
FORGED = {
    **{f"fr_rank_0: {case}": ("fr_rank_0", lambda rid, d=data: d, words) for case, (data, words) in HOSTILE_DUMPS.items()},
    "error.json: a 320-digit timestamp": (
        "error.json", lambda rid: ('{"message": {"message": "x", "extraInfo": {"timestamp": %s}}}' % ("9" * 320)).encode(),
        re.escape("probe/error.json: its timestamp is an integer of more than 19 digits")),
    "a probe report: a 5,000-digit frame line": (
        "4194111.json", lambda rid: forged_report(rid).encode(),
        re.escape("probe/4194111.json: threads[0].frames[0] has a line number of 5000 digits")),
}


def check_with(tmp: Path, cfg: Path, probe: Path, name: str, data: bytes, limit_s: float = 10) -> tuple[dict, str]:
    """--check --json and text --check with `name` forged into probe/: both a verdict, in time."""
    (probe / name).write_bytes(data)
    try:
        t0 = time.monotonic()
        res = cli(tmp, "--config", str(cfg), "--check", "--json", timeout=120)
        took = time.monotonic() - t0
        text = cli(tmp, "--config", str(cfg), "--check", timeout=120)
    finally:
        (probe / name).unlink()
    for r in (res, text):
        assert "Traceback" not in r.stderr and "internal error" not in r.stdout + r.stderr, r.stdout + r.stderr
        assert r.returncode == 0 and r.stderr == "", (r.returncode, r.stdout, r.stderr)   # RUNNING
    assert took < limit_s, took
    out = json.loads(res.stdout)
    assert out["verdict"] == "RUNNING", out
    return out, text.stdout


@pytest.mark.parametrize("case", FORGED)
def test_forged_probe_files_are_a_note_beside_the_verdict(live_run, case):
    tmp, cfg, probe, run_id = live_run
    name, make, words = FORGED[case]
    out, text = check_with(tmp, cfg, probe, name, make(run_id))
    (note,) = [c for c in out["checks"] if c["id"] == "probe_files"]
    assert note["state"] == "warn" and f"probe/{name}" in note["cause"], note
    assert re.search(words, note["cause"]), (words, note)
    assert "Probe files" in text and f"probe/{name}" in text, text


def test_a_620_kb_dump_is_read_in_bounded_time(live_run):
    """30k process groups, 30k entries: --check once ran past 45 s on it (quadratic)."""
    tmp, cfg, probe, _ = live_run
    n = 30_000
    status = {"last_enqueued_collective": 1, "last_completed_collective": 0}
    dump = {"pg_status": {i: status for i in range(n)},
            "entries": [{"pg_id": i, "collective_seq_id": 1, "state": "scheduled"} for i in range(n)]}
    data = pickle.dumps(dump, protocol=4)
    assert 550_000 < len(data) < 700_000, len(data)
    out, text = check_with(tmp, cfg, probe, "fr_rank_0", data, limit_s=10)
    (note,) = [c for c in out["checks"] if c["id"] == "probe_files"]
    assert "probe/fr_rank_0 holds 30000 entries; the newest 20000 were read" in note["cause"], note
    assert "holds 30000 process groups; 32 were read" in note["cause"], note
