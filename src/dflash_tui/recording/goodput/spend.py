"""What a profile's runs drew and cost, from the watcher's recorded changes alone (`--timeline`,
the timeline screen, the recovery's notifications). Pure.

Each change keeps its run's kWh since its launch and its cost rate as the watch had them at
that change (change.py `Evidence`: run/verdict/energy.py computes them); a run's energy here is
its newest recorded kWh, so it lags by the time since its last change. The cost prices the
goodput's wall since the first launch, and its lost seconds by cause, at the newest recorded
rate, as `--check` prices them at the rate now.
"""

from __future__ import annotations

from typing import Any, Sequence

from ...run.verdict.energy import RunCost, cost_at
from ..store.change import VerdictChange
from .goodput import Goodput


def recorded_kwh(changes: Sequence[VerdictChange]) -> dict[str, float]:
    """Run id -> its newest recorded kWh (runs without one left out), oldest run first."""
    out: dict[str, float] = {}
    for c in changes:
        if c.evidence.kwh is not None:
            out[c.run_id] = c.evidence.kwh
    return out


def recorded_cost(changes: Sequence[VerdictChange], good: Goodput) -> RunCost | None:
    """The goodput's wall and lost time priced at the newest recorded rate (`cost_per_h`), with
    that run's ETA where it is the newest run; None: no rate recorded (no price in the profile,
    or no GPU sampled)."""
    last = next((c for c in reversed(changes) if c.evidence.cost_per_h is not None), None)
    if last is None or good.wall_s <= 0:
        return None
    eta_s = changes[-1].evidence.eta_s if changes[-1].run_id == last.run_id else None
    return cost_at(last.evidence.cost_per_h, good.wall_s, "first_launch", eta_s=eta_s,
                   lost_s_by_cause=good.badput_s)


def priced_loss(changes: Sequence[VerdictChange], good: Goodput) -> str:
    """"41.00 of 310.00 lost to stalls and restarts" ("" when nothing is priced or lost)."""
    cost = recorded_cost(changes, good)
    return cost.lost_words() if cost is not None else ""


def spend_json(changes: Sequence[VerdictChange], good: Goodput) -> dict[str, Any]:
    """{"energy": {"kwh", "runs"} | None, "cost": RunCost.to_json() | None}."""
    runs = recorded_kwh(changes)
    cost = recorded_cost(changes, good)
    energy = {"kwh": round(sum(runs.values()), 6), "runs": runs} if runs else None
    return {"energy": energy, "cost": cost.to_json() if cost is not None else None}


def spend_words(changes: Sequence[VerdictChange], good: Goodput) -> str:
    """"energy 0.412 kWh over 2 runs (as of each run's last change); cost 310.00 so far ..."
    ("" when nothing was recorded)."""
    runs = recorded_kwh(changes)
    cost = recorded_cost(changes, good)
    parts = []
    if runs:
        n = len(runs)
        parts.append(f"energy {sum(runs.values()):.3f} kWh over {n} run{'s' if n != 1 else ''} "
                     "(as of each run's last recorded change)")
    if cost is not None:
        parts.append(cost.words())
    return "; ".join(parts)
