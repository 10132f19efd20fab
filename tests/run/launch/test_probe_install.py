"""The run probe through the product: the launcher installs it, launch.sh loads it, gather()
reads every process's report into Evidence.probes; locally and over the loopback sshd into
the pct stand-in. A bad report is a problem line; `probe = false` leaves a program untouched."""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dflash_tui.config import ConfigError, Profile, parse_config
from dflash_tui.contract.rundir import PROBE_DIR, probe_report_name, to_json
from dflash_tui.run.evidence.probe_files import MAX_REPORTS, gather_probes
from dflash_tui.run.verdict.checklist import CheckState
from dflash_tui.watch.session import Session

from tests.support.probe import thread

pytestmark = pytest.mark.timeout(180)

PROGRAM = """\
    import os, sys, threading, time
    print("PYTHONPATH", os.environ.get("PYTHONPATH"), flush=True)

    def feed_batches():
        while True:
            time.sleep(0.05)

    threading.Thread(target=feed_batches, name="loader", daemon=True).start()
    time.sleep(float(sys.argv[1]))
"""


def program_profile(tmp_path: Path, seconds: str = "60", **kw) -> Profile:
    prog = tmp_path / "user_train.py"
    prog.write_text(textwrap.dedent(PROGRAM))
    base = dict(name="p", run_dir=str(tmp_path / "run"), python=sys.executable,
                command=(sys.executable, str(prog), seconds), stall_after_s=30.0, stop_grace_s=2.0,
                min_free_gb=0.0)
    base.update(kw)
    return Profile(**base)


async def wait_probes(session: Session, ok, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        ev = await session.evidence()
        if ok(ev.probes) or time.monotonic() > deadline:
            return ev
        await asyncio.sleep(0.2)


def loader_seen(probes) -> bool:
    return any((t := thread(p, "loader")) is not None and t.frames for p in probes)


async def test_launched_program_reports_through_gather(sessions, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/user/own/path")
    s = sessions(program_profile(tmp_path))
    out = await s.launch(preflight=False)
    assert out.notes == [], out.notes
    ev = await wait_probes(s, loader_seen)
    (p,) = ev.probes
    assert p.run_id == out.run_id and p.argv[0].endswith("user_train.py") and not p.ended
    assert thread(p, "loader").frames[0].endswith(" feed_batches")
    log = (tmp_path / "run" / "train.log").read_text()
    assert f"PYTHONPATH {tmp_path / 'run' / PROBE_DIR}:/user/own/path" in log   # prepended, theirs kept
    _, checklist = await s.check()                  # the engine reads the same reports
    probe_check = next(c for c in checklist.checks if c.id == "probe")
    assert probe_check.state is CheckState.OK and "1 of 1 process(es) beating" in probe_check.cause, probe_check
    # Relaunch: the last run's probe directory goes to history/ with its other files.
    out2 = await s.launch(preflight=False, relaunch=True)
    ev = await wait_probes(s, lambda ps: loader_seen(ps) and all(x.run_id == out2.run_id for x in ps))
    assert [x.run_id for x in ev.probes] == [out2.run_id]
    aside = list((tmp_path / "run" / "history").glob(f"*/{PROBE_DIR}/{probe_report_name(p.pid)}"))
    assert len(aside) == 1, aside


async def test_probe_false_leaves_the_program_alone(sessions, tmp_path, monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    s = sessions(program_profile(tmp_path, "3", probe=False))
    await s.launch(preflight=False)
    log = tmp_path / "run" / "train.log"
    deadline = time.monotonic() + 60
    while "PYTHONPATH" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert "PYTHONPATH None" in log.read_text()
    ev = await s.evidence()
    assert ev.probes == [] and not (tmp_path / "run" / PROBE_DIR).exists()


def test_probe_key_is_validated():
    text = '[profile.a]\nrun_dir = "/tmp/a"\nprobe = false\n'
    assert parse_config(text, "c.toml").profiles["a"].probe is False
    assert parse_config('[profile.a]\nrun_dir = "/tmp/a"\n', "c.toml").profiles["a"].probe is True
    with pytest.raises(ConfigError, match=r"c.toml: \[profile.a\]: probe = 'no' is not true or false"):
        parse_config('[profile.a]\nrun_dir = "/tmp/a"\nprobe = "no"\n', "c.toml")
    with pytest.raises(ConfigError, match="is not a port number"):   # booleans stay refused elsewhere
        parse_config('[profile.a]\nhost = "h"\nrun_dir = "/tmp/a"\nport = true\n', "c.toml")


async def test_bad_reports_are_problems_never_exceptions(sessions, tmp_path):
    s = sessions(program_profile(tmp_path))
    ops = await s.ops()
    probe_dir = tmp_path / "run" / PROBE_DIR
    probe_dir.mkdir(parents=True)
    good = {"v": 1, "run_id": "r1", "pid": 11, "time": 1.0, "rank": 1, "threads": [
        {"name": "MainThread", "ident": 5, "frames": ["/x/train.py:3 <module>"]}]}
    (probe_dir / "11.json").write_text(to_json(good))
    (probe_dir / "12.json").write_text(to_json({**good, "pid": "abc"}))
    (probe_dir / "13.json").write_text("{half a record")
    (probe_dir / "14.json").write_text(to_json({**good, "run_id": "an-older-run", "pid": 14}))
    (probe_dir / "15.json").write_bytes(b'{"v": 1, "run_id": "\xff"}')
    (probe_dir / "16.json").mkdir()
    (probe_dir / "17.json").write_text("[" * 5000)
    (probe_dir / "notes.txt").write_text("not a report")
    got = await gather_probes(ops, str(tmp_path / "run"), "r1")
    assert [(r.pid, r.rank, r.threads[0].frames) for r in got] == [(11, 1, ["/x/train.py:3 <module>"])]
    problems = " | ".join(got.problems)
    assert "probe/12.json: field 'pid' is 'abc', expected an integer" in problems
    assert "probe/13.json is not valid JSON" in problems and "probe/15.json is not UTF-8" in problems
    assert "probe/17.json is nested more than" in problems and len(got.problems) == 4
    # Hundreds of processes: the newest MAX_REPORTS are read, the rest counted.
    for pid in range(100, 100 + MAX_REPORTS + 8):
        (probe_dir / f"{pid}.json").write_text(to_json({**good, "pid": pid}))
    got = await gather_probes(ops, str(tmp_path / "run"), "r1")
    assert got.skipped == 14 and len(got) + len(got.problems) <= MAX_REPORTS
    assert await gather_probes(ops, str(tmp_path / "nowhere"), "r1") == []


@pytest.mark.sshd
async def test_probe_over_ssh_into_pct_standin(sshd, standin, sessions, tmp_path):
    standin.container("pct:200", mode="ok")
    s = sessions(program_profile(tmp_path, **sshd.profile(), container="pct:200"))
    out = await s.launch()
    assert out.preflight.ok and out.notes == [], (out.preflight.checks, out.notes)
    ev = await wait_probes(s, loader_seen, timeout=90)
    (p,) = ev.probes
    assert p.run_id == out.run_id and p.pid < 1000 and p.pid != os.getpid()   # the container's pid namespace
    assert thread(p, "loader").frames[0].endswith(" feed_batches") and p.errors == 0
    assert p.argv[0].endswith("user_train.py")
