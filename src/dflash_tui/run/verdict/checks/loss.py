"""The "loss" check: what the divergence watch found in the watched training-loss series
(run/evidence/divergence.py); run/verdict/health.py decides DIVERGED from the same finding."""

from __future__ import annotations

from ...evidence.divergence import LossFinding
from ..checklist import Check, CheckId, CheckState

OK, WARN, FAIL = CheckState.OK, CheckState.WARN, CheckState.FAIL

DIVERGED_HINT = ("lower the learning rate or check the data at that step; restart from a checkpoint "
                 "before it (nan_patience, spike_patience and watch_series tune the rules)")


def loss_check(finding: LossFinding | None) -> Check | None:
    """Failing on a divergence; a warn naming the newest lone spike; ok with the last finite
    value; None while no watched series was seen."""
    if finding is None or not finding.series:
        return None
    d = finding.divergence
    if d is not None:
        return Check.of(CheckId.LOSS, FAIL, d.words(), DIVERGED_HINT)
    if finding.spikes:
        sp = finding.spikes[-1]
        more = f" (and {len(finding.spikes) - 1} more)" if len(finding.spikes) > 1 else ""
        return Check.of(CheckId.LOSS, WARN, f"{sp.series}: {sp.words()}{more}",
                        "a lone spike that came back is no divergence; watch for more")
    last = finding.last_finite
    cause = f"{last[0]} {last[2]:.4g} at step {last[1]:,}, in its band" if last else "no finite value yet"
    return Check.of(CheckId.LOSS, OK, cause)
