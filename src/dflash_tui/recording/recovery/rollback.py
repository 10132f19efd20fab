"""Where a recovery resumes from: the newest COMPLETE checkpoint at or before the failed run's
last good step, never a torn one or one still being written (recording/recovery/README.md).
Pure: the failed run's report in, the choice out.

The last good step: on DIVERGED, the last finite (or in-band) value's step before the
divergence (the first bad step - 1 when none was seen); on any other verdict, none (the newest
complete checkpoint).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from ...run.evidence.checkpoints import Checkpoint, CheckpointsView
from ...run.evidence.divergence import Divergence
from ...run.verdict.report import RunReport
from ...words import duration


@dataclass(frozen=True)
class Rollback:
    """The checkpoint chosen, and the divergence that made it a rollback (None: none)."""

    path: str
    step: int | None
    format: str
    age_s: float
    divergence: Divergence | None = None

    def detail(self) -> dict:
        """What the recovery log's action records (its `resume_from` detail)."""
        d = {"path": self.path, "step": self.step, "format": self.format, "age_s": round(self.age_s, 1)}
        if self.divergence is not None:
            d.update(diverged_at=self.divergence.step, what=f"{self.divergence.series} {self.divergence.what()}")
        return d


def divergence_of(report: RunReport | None) -> Divergence | None:
    act = report.activity if report is not None else None
    return act.loss_finding.divergence if act is not None else None


def last_good_step(d: Divergence | None) -> int | None:
    if d is None:
        return None
    return d.last_finite[0] if d.last_finite is not None else d.step - 1


def choose(view: CheckpointsView | None, good_step: int | None) -> Checkpoint | None:
    """The newest complete checkpoint at or before `good_step` (any step when None); one with
    no step counts only when no step bounds the choice."""
    for c in reversed(view.complete if view is not None else []):
        if good_step is None or (c.step is not None and c.step <= good_step):
            return c
    return None


def rollback_of(report: RunReport | None) -> Rollback | None:
    """The checkpoint a relaunch after `report`'s failure resumes from; None: none fits."""
    if report is None:
        return None
    d = divergence_of(report)
    c = choose(report.checkpoints, last_good_step(d))
    if c is None:
        return None
    return Rollback(c.path, c.step, c.format, max(0.0, report.time - c.mtime), d)


def nothing_fits(report: RunReport | None) -> str:
    """Why a DIVERGED run's relaunch starts from scratch: no complete checkpoint at or before its
    last good step (a newer one holds the diverged weights); "" when it was no divergence, or one
    fits."""
    d = divergence_of(report)
    if d is None or rollback_of(report) is not None:
        return ""
    return f"no complete checkpoint at or before step {last_good_step(d)}, the last good one"


def rollback_words(detail: dict) -> str:
    """"train/loss NaN at step 230; rolled back to checkpoint-200 (complete, 2 min old); lost 30
    steps" from a `resume_from` detail (only "resumed from ..." when no divergence led to it)."""
    name = posixpath.basename(str(detail.get("path", "")).rstrip("/")) or str(detail.get("path", ""))
    age = detail.get("age_s")
    age_words = f", {duration(float(age))} old" if isinstance(age, (int, float)) else ""
    at, step, what = detail.get("diverged_at"), detail.get("step"), detail.get("what")
    if not what or not isinstance(at, int):
        return f"resumed from {name} (complete{age_words})"
    back = f"rolled back to {name} (complete{age_words})"
    lost = f"; lost {at - step} steps" if isinstance(step, int) else ""
    return f"{what} at step {at}; {back}{lost}"
