"""A program killed by a signal in native code (tests/programs/segfault_after_steps.py: ctypes
reads address 0 after a few steps): no Python traceback exists, so the checklist must not send
the user to one. The wrapper turns faulthandler on, and the exit check says where native code
died and where in train.log the Python stacks are."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.config import Profile
from dflash_tui.contract.rundir import TRAIN_LOG
from dflash_tui.run.evidence.fault_dump import last_fault_dump
from dflash_tui.run.verdict.checklist import CheckId, Verdict

pytestmark = pytest.mark.timeout(60)

PROGRAMS = Path(__file__).resolve().parents[2] / "programs"


def profile(run_dir: Path, **kw) -> Profile:
    return Profile(name="prog", run_dir=str(run_dir), python=sys.executable,
                   command=(sys.executable, str(PROGRAMS / "segfault_after_steps.py"), "2"), train_args=(),
                   min_free_gb=0.0, **kw)


async def crashed(session):
    await session.launch(preflight=False)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 30:
        _, checklist = await session.check()
        if checklist.verdict.ended:
            return checklist
        await asyncio.sleep(0.3)
    raise AssertionError(f"still {checklist.verdict} after 30 s")


async def test_a_segfault_is_said_with_faulthandler_stacks_not_a_traceback(sessions, tmp_path, monkeypatch):
    monkeypatch.delenv("PYTHONFAULTHANDLER", raising=False)
    checklist = await crashed(sessions(profile(tmp_path / "run")))
    assert checklist.verdict is Verdict.CRASHED
    exit_check = next(c for c in checklist.checks if c.id == CheckId.EXIT)
    assert exit_check.cause.startswith("killed by SIGSEGV in native code under string_at (ctypes/__init__.py:"), \
        exit_check.cause
    assert "no traceback" in exit_check.cause
    assert "traceback" not in exit_check.hint.replace("no traceback", "")
    log = (tmp_path / "run" / TRAIN_LOG).read_text()
    dump = last_fault_dump(log)
    assert dump is not None and "Segmentation fault" in dump.error
    # the hint's line number points at faulthandler's first line
    n = int(exit_check.hint.split("at line ")[1].split()[0])
    assert log.splitlines()[-n].startswith("Fatal Python error: Segmentation fault")
    assert "crash_in_native_code" in "\n".join(log.splitlines()[-n:])


async def test_the_environment_may_turn_faulthandler_off(sessions, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONFAULTHANDLER", "")
    checklist = await crashed(sessions(profile(tmp_path / "run")))
    exit_check = next(c for c in checklist.checks if c.id == CheckId.EXIT)
    assert exit_check.cause == "killed by SIGSEGV, no traceback"
    assert "PYTHONFAULTHANDLER=1" in exit_check.hint
    assert "Fatal Python error" not in (tmp_path / "run" / TRAIN_LOG).read_text()
