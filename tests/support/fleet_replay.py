"""Recorded fleets for the fleet screen: the test double of fleet/poller.py `FleetPoller`.

Rows are made by the real `fleet.row.row_from_report` from the reports of
tests/support/scenarios.py (evidence through the real engine) on its fixed clock (`T0`), so
snapshot tests show exactly what the live poller would make of those states, and no
wall-clock age reaches an image.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import AsyncIterator

from dflash_tui.config import Profile
from dflash_tui.fleet.row import FleetRow, row_from_report
from dflash_tui.run.verdict.report import RunReport
from dflash_tui.run.verdict.checklist import Check, CheckState, Checklist, Verdict

from tests.support import scenarios as R


class ReplayFleet:
    def __init__(self, rows: list[tuple[Profile, RunReport | None, dict]]) -> None:
        """`rows`: (profile, report, extra row_from_report keywords) per profile."""
        self.profiles = {p.name: p for p, _, _ in rows}
        self.rows: dict[str, FleetRow] = {p.name: row_from_report(p, rep, **kw) for p, rep, kw in rows}
        self.watches: dict = {}
        self._changed = asyncio.Event()
        self.poked: list[str | None] = []

    def start(self) -> None:
        """Nothing to poll: the rows are recorded."""

    async def close(self) -> None:
        """Nothing to close."""

    def snapshot(self) -> list[FleetRow]:
        return [self.rows[n] for n in self.profiles]

    def push(self, row: FleetRow) -> None:
        self.rows[row.profile] = row
        self._changed.set()

    async def changes(self) -> AsyncIterator[set[str]]:
        while True:
            await self._changed.wait()
            self._changed.clear()
            yield set(self.rows)

    def poke(self, name: str | None = None) -> None:
        self.poked.append(name)


def _profile(name: str, host: str | None, container: str | None = None) -> Profile:
    return Profile(name=name, run_dir=f"/srv/runs/{name}", host=host, user="root" if host else None,
                   container=container)


def unreachable(error: str) -> RunReport:
    """What a RunWatch reports about a target it never reached."""
    check = Check("transport", "Target reachable", CheckState.FAIL, error, "retrying in 8 s", R.T0 - 30)
    return RunReport(time=R.T0, profile="", target_label="", run_dir="", connected=False,
                     stale_since=R.T0 - 30, error=f"{error} (retrying in 8 s)",
                     checklist=Checklist(Verdict.NO_RUN, [check], "cannot reach"))


def mixed() -> ReplayFleet:
    """Six profiles on three hosts: running, crashed, stalled, never started, one host down."""
    gpu = R.gpu_snapshot()
    at = dict(polled_at=R.T0 - 0.4, poll_s=0.012, fresh_at=R.T0 - 0.4)
    stale = R.stale()
    return ReplayFleet([
        (_profile("h200-main", "gpu1", "pct:200"), R.healthy(), dict(gpu=gpu, **at)),
        (_profile("h200-abl", "gpu1", "pct:201"), R.crashed(), at),
        (_profile("h200-long", "gpu1", "pct:202"), R.stalled(), dict(gpu=R.gpu_snapshot(util=40.0), **at)),
        (_profile("a100-sweep", "gpu2"), R.never_started(), at),
        (_profile("a100-base", "gpu2"), replace(R.healthy(), uptime_s=86_000), dict(gpu=R.gpu_snapshot(4, run_gpus=4), **at)),
        (_profile("l40-edge", "gpu3", "docker:train"),
         unreachable("root@gpu3: no answer from gpu3:22 within 10s"),
         dict(polled_at=R.T0 - 0.2, retry_in_s=8.0)),
        (_profile("h200-old", "gpu4"), stale,
         dict(polled_at=R.T0 - 0.3, fresh_at=R.T0 - 42, retry_in_s=4.0)),
    ])
