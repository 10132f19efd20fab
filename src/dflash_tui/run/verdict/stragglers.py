"""Stragglers: the ranks the others wait for, named while the run is still healthy.

In a run that synchronises every step (data parallel: an all_reduce of the gradients), the ranks
go at the pace of the slowest; the others spend the difference waiting in the collective. Two
pieces of evidence say which rank that is, both read from outside:

- each rank's share of its time waiting in a collective (the run probe's stacks, one sample a
  beat, counted across polls by run/evidence/activity.py `WaitShare`): the slow rank waits least;
- each rank's own step time, where ranks log theirs (the probe's `dflash_probe.log(step_time=)`).

Scored as nvidia-resiliency-ext scores ranks, relative to the best one: a rank's score is the
best rank's work per step over its own (its work per step: the share of time it does not wait;
or its step time), and a rank scoring below THRESHOLD is a straggler. A share of waiting needs
MIN_SAMPLES beats of the rank before it counts, and the others must wait for it by MIN_GAP
more than it waits itself, so the noise of one-a-second samples never names a rank of a
balanced run. Pure.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Mapping

from ...contract.rundir import ProbeReport
from ..evidence.activity import WaitShare
from ...words import one_line
from .checklist import Check, CheckId, CheckState, Checklist, Straggler, Verdict
from .rank_groups import rank_numbers

THRESHOLD = 0.7       # nvidia-resiliency-ext's relative score below which a rank straggles
MIN_SAMPLES = 10      # beats of a rank before its share of waiting counts (about 10 s)
MIN_GAP = 0.3         # how much more the others wait (their median share) than the rank itself


@dataclass(frozen=True)
class RankPace:
    """One rank's evidence of pace: its waiting (beats sampled, of which waiting in a
    collective, and which) and its own step time (None: it logs none)."""
    rank: int
    node: str = ""
    samples: int = 0
    waiting: int = 0
    doing: str = ""
    step_time: float | None = None

    @property
    def share(self) -> float:
        return self.waiting / self.samples if self.samples else 0.0


def paces(probes: Iterable[tuple[str, ProbeReport]], waits: Mapping[tuple[str, int], WaitShare]) -> list[RankPace]:
    """The pace of each rank of the run from its processes' reports ((node, report): the node
    that watched it, "" on one host) and their WaitShare by (node, pid). Numbered by
    rank_groups.rank_numbers; an ended process has no pace."""
    live = [(node, p) for node, p in probes if not p.ended]
    out = []
    for node in dict.fromkeys(n for n, _ in live):
        mine = [p for n, p in live if n == node]
        numbers = rank_numbers((p.pid, p.rank) for p in mine)
        for p in mine:
            if p.pid not in numbers:
                continue
            w = waits.get((node, p.pid))
            out.append(RankPace(numbers[p.pid], p.node or node, w.samples if w else 0, w.waiting if w else 0,
                                w.doing if w else "", p.step_time))
    return out


def stragglers(ranks: list[RankPace]) -> list[Straggler]:
    """The ranks scoring below THRESHOLD against the best rank, the slowest first."""
    found: dict[int, tuple[float, RankPace, list[str]]] = {}

    def name(r: RankPace, score: float, why: str) -> None:
        prev = found.get(r.rank)
        found[r.rank] = (min(score, prev[0]) if prev else score, r, (prev[2] if prev else []) + [why])

    sampled = [r for r in ranks if r.samples >= MIN_SAMPLES]
    if len(sampled) >= 2:
        best = min(1.0 - r.share for r in sampled)        # the rank that waits the most works the least
        shares = sorted(r.share for r in sampled)         # the others' median, without a copy per rank
        doings = Counter(r.doing for r in sampled if r.doing)
        for r in sampled:
            work = 1.0 - r.share
            score = best / work if work > 0 else 1.0
            if score >= THRESHOLD:
                continue
            others_wait = _median_without(shares, bisect.bisect_left(shares, r.share))
            if others_wait - r.share < MIN_GAP:
                continue
            others_doing = doings.copy()
            if r.doing:
                others_doing[r.doing] -= 1
            doing = [d for d, n in others_doing.most_common(1) if n > 0]
            where = f" in {doing[0]}" if doing else " in collectives"
            name(r, score, f"the other ranks wait for it{where} {others_wait * 100:.0f} % of the time")
    timed = [r for r in ranks if r.step_time is not None and r.step_time > 0]
    if len(timed) >= 2:
        best_t = min(r.step_time for r in timed)
        for r in timed:
            score = best_t / r.step_time
            if score < THRESHOLD:
                name(r, score, f"its step takes {r.step_time:.3g} s, the best rank's {best_t:.3g} s")
    out = []
    for score, r, whys in sorted(found.values(), key=lambda f: (f[0], f[1].rank)):
        who = f"rank {r.rank}" + (f" (node {r.node})" if r.node else "")
        out.append(Straggler(r.rank, r.node, f"{who} is slow: {'; '.join(whys)}"))
    return out


def _median_without(values: list[float], i: int) -> float:
    """The median of sorted `values` without its element at index `i`."""
    n = len(values) - 1

    def at(k: int) -> float:
        return values[k if k < i else k + 1]
    return at(n // 2) if n % 2 else (at(n // 2 - 1) + at(n // 2)) / 2


STRAGGLER_HINT = "the other ranks wait for it every step: look at its node (CPU, GPU clocks and power, data loading)"


def with_stragglers(cl: Checklist, found: list[Straggler]) -> Checklist:
    """A RUNNING checklist with its stragglers and a warn check naming them (a straggler is
    named while the run is healthy; a stalled run's odd rank is the rank groups' to show)."""
    if cl.verdict is not Verdict.RUNNING or not found:
        return cl
    check = Check.of(CheckId.STRAGGLERS, CheckState.WARN, one_line("; ".join(s.why for s in found[:4])),
                  STRAGGLER_HINT)
    return cl.with_parts(checks=[*cl.checks, check], stragglers=found)
