"""The Ranks tab's step of a program of one's own (it logs no step through the probe): the
step its log shows, on its first rank's row, not "-"."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from dflash_tui.run.verdict.rank_rows import rank_rows
from dflash_tui.run.verdict.report import report_from

from tests.run.verdict.test_verdicts_programs import program_profile

pytestmark = pytest.mark.timeout(120)
PRINT_LOOP = str(Path(__file__).resolve().parents[2] / "programs" / "print_loop.py")


async def test_a_programs_rank_row_has_the_step_its_log_shows(sessions, tmp_path, monkeypatch):
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    s = sessions(program_profile(tmp_path / "run", (sys.executable, PRINT_LOOP, "100000", "0.2"), stall_after_s=30.0))
    await s.launch(preflight=False)
    for _ in range(60):
        ev, cl = await s.check()
        report = report_from(ev, cl, profile="prog", target_label="local")
        rows = rank_rows(report)
        if rows and report.progress is not None and report.progress.step:
            break
        await asyncio.sleep(0.5)
    assert rows and report.progress.step, (rows, report.progress)
    assert rows[0].rank == 0 and rows[0].step == report.progress.step, (rows, report.progress)
    assert rows[0].cells()[3] == str(report.progress.step)
