"""The run's energy and cost as the dashboard header and the fleet table draw them: the
report's numbers (run/verdict/energy.py computes them), a GPU without a counter named, never 0 kWh."""

from __future__ import annotations

from dataclasses import replace

from dflash_tui.config import Profile
from dflash_tui.fleet.row import FleetRow, row_from_report
from dflash_tui.run.verdict.checklist import Verdict
from dflash_tui.run.verdict.energy import run_cost, run_energy
from dflash_tui.ui.screens.fleet import COLUMNS, row_cells
from tests.support import scenarios as R
from tests.ui.test_views import app_with, screen_text, until

SPEND = [k for k, _ in COLUMNS].index("spend")


def priced(baseline, now_mj):
    energy = run_energy(baseline, now_mj, step=100)
    return energy, run_cost(run_s=3600.0, gpus=len(now_mj), energy=energy, per_gpu_hour=2.0, per_kwh=0.5)


async def test_the_header_shows_the_runs_energy_and_cost():
    energy, cost = priced({"0": 0, "1": 1_000}, {0: 720_000_000, 1: 720_001_000})    # 2 x 720 kJ
    app, _ = app_with(report=replace(R.healthy(), energy=energy, cost=cost))
    async with app.run_test(size=(160, 30)) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        await pilot.pause()
        text = " ".join(screen_text(app).split())
        # 0.4 kWh at 0.5 plus 2 GPU-hours at 2.0: 4.20 in the hour.
        assert "energy 0.400 kWh" in text and "cost 4.20 (4.20/h)" in text, text


async def test_the_header_names_a_gpu_without_a_counter():
    energy, cost = priced({"0": None}, {0: None})
    app, _ = app_with(report=replace(R.healthy(), energy=energy, cost=cost))
    async with app.run_test(size=(160, 30)) as pilot:
        await until(pilot, lambda: app.run_view.report is not None)
        await pilot.pause()
        text = " ".join(screen_text(app).split())
        assert "energy n/a (no counter)" in text and "0.000 kWh" not in text, text
        assert "cost 2.00 (2.00/h)" in text, text      # the GPU-hour alone: the energy is not priced


def test_the_fleet_cell_shows_kwh_and_cost_and_says_when_a_counter_is_missing():
    energy, cost = priced({"0": 0}, {0: 360_000_000})                           # 0.1 kWh
    row = row_from_report(Profile(name="p", run_dir="/d"), replace(R.healthy(), energy=energy, cost=cost))
    assert row_cells(row, 0.0)[SPEND][0] == "0.1·2.05", row
    energy, cost = priced({"0": None}, {0: None})
    row = row_from_report(Profile(name="p", run_dir="/d"), replace(R.healthy(), energy=energy, cost=cost))
    assert row_cells(row, 0.0)[SPEND][0] == "no counter·2.00", row
    bare = FleetRow(profile="p", host="local", container="", state="RUNNING", verdict=Verdict.RUNNING, cause="")
    assert row_cells(bare, 0.0)[SPEND][0] == "-"
