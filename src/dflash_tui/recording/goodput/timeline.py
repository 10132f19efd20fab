"""A run's states over time, from the recorded changes: bands, as text and as JSON.

A band is one state from the change that began it to the next change of the same profile
(or `now` for the newest one, which is still open). Runs are told apart by run id, so the
runs a relaunch moved to history/ keep their own bands. Pure: what `--timeline` prints and
the dashboard's Timeline screen (ui/screens/timeline.py) draws.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

from ...verdicts import State
from ...words import compact, progress
from ..store.change import VerdictChange


@dataclass(frozen=True)
class Band:
    change: VerdictChange            # the change that began it (state, cause, check, evidence)
    start: float
    end: float
    open: bool                       # the newest band: the state holds still (as last recorded)

    @property
    def state(self) -> State:
        return self.change.state

    @property
    def seconds(self) -> float:
        return max(0.0, self.end - self.start)


def bands(changes: Sequence[VerdictChange], now: float | None = None) -> list[Band]:
    """`changes` (one profile's, oldest first) as consecutive bands."""
    now = time.time() if now is None else now
    out = []
    for i, c in enumerate(changes):
        last = i == len(changes) - 1
        end = max(c.time, now) if last else changes[i + 1].time
        out.append(Band(c, c.time, end, last))
    return out


def runs(all_bands: Sequence[Band]) -> list[tuple[str, list[Band]]]:
    """The bands grouped by run id, in order of first appearance."""
    groups: dict[str, list[Band]] = {}
    for b in all_bands:
        groups.setdefault(b.change.run_id, []).append(b)
    return list(groups.items())


def _clock(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _evidence_words(c: VerdictChange) -> str:
    e = c.evidence
    bits = [words] if (words := progress(e.step, e.total, e.loss, e.rate, e.rate_unit)) else []
    if e.stuck_at:
        bits.append(f"stuck at {e.stuck_at}")
    return ", ".join(bits)


def render_text(profile: str, all_bands: Sequence[Band], store: str, skipped: int = 0) -> str:
    """`skipped`: the store's damaged rows left out (said, so a gap is not read as calm)."""
    damaged = f" · {skipped} damaged rows skipped" if skipped else ""
    if not all_bands:
        return (f"{profile}: no changes recorded in {store}{damaged}; start the watcher "
                "(dflash-tui --watch) to record them")
    lines = [f"{profile} · {len(all_bands)} changes recorded since {_clock(all_bands[0].start)} · {store}"
             + damaged]
    for run_id, group in runs(all_bands):
        lines.append(f"run {run_id or '(no launch.json)'}")
        for b in group:
            c = b.change
            held = compact(b.seconds) + ("+" if b.open else "")
            lines.append(f"  {_clock(b.start)}  {c.state:<13} {held:>7}  {c.cause or '-'}"
                         + (f"  [{c.check}]" if c.check else ""))
            ev = _evidence_words(c)
            if ev:
                lines.append(f"  {'':19}  {'':13} {'':>7}  {ev}")
            for tb in c.evidence.traceback:
                lines.append(f"  {'':19}  {'':13} {'':>7}  | {tb}")
    return "\n".join(lines)


def band_json(b: Band) -> dict[str, Any]:
    c, e = b.change, b.change.evidence
    return {"run_id": c.run_id, "state": c.state.value, "previous": c.previous.value if c.previous else "",
            "start": b.start, "end": b.end,
            "seconds": round(b.seconds, 3), "open": b.open, "cause": c.cause, "check": c.check,
            "evidence": {"step": e.step, "total": e.total, "loss": e.loss, "rate": e.rate,
                         "rate_unit": e.rate_unit, "stuck_at": e.stuck_at, "traceback": list(e.traceback),
                         "pid": e.pid, "exit_code": e.exit_code}}


def timeline_json(profile: str, all_bands: Sequence[Band], store: str, skipped: int = 0) -> dict[str, Any]:
    return {"profile": profile, "store": store, "skipped": skipped, "bands": [band_json(b) for b in all_bands]}
