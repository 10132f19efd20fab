"""The `memory` check: the run's host memory and each GPU's memory held by its processes, and
whether a steady growth reaches its limit soon (run/evidence/memory_runway.py). Never changes
the verdict: a forecast within MEMORY_WARN_S is a warn beside it, and the watcher notifies it."""

from __future__ import annotations

from ....words import duration as _duration, one_line as _one_line, size
from ...evidence.memory_runway import MemoryRunway, MemoryUse
from ..checklist import Check, CheckId, CheckState

OK, WARN = CheckState.OK, CheckState.WARN

MEMORY_WARN_S = 3600.0    # a forecast of a full memory within this long is a warn
MEMORY_HINT = ("its memory grows with every step and will run out: a leak (tensors kept in a list, a cache "
               "that only grows, DataLoader workers' copies); fix it, or checkpoint and restart before then")


def growth_words(u: MemoryUse) -> str:
    """"GPU 3: +12.0 MiB per 100 steps since step 2,000; full at about step 61,000, in 5.0 h"."""
    t = u.trend
    assert t is not None
    words = f"{u.name}: +{size(round(t.bytes_per_step * 100))} per 100 steps since step {t.since_step:,}"
    if t.full_at_step is not None:
        words += f"; full at about step {t.full_at_step:,}"
        if t.full_in_s is not None:
            words += f", in {_duration(t.full_in_s)}"
        words += f" ({size(u.used)} of {size(u.limit)}, {u.limit_source})"
    return words


def level_words(u: MemoryUse) -> str:
    """"host 1.2 GiB of 15.6 GiB (host MemTotal)"."""
    of = f" of {size(u.limit)} ({u.limit_source})" if u.limit else ""
    return f"{u.name} {size(u.used)}{of}"


def soon(u: MemoryUse, within_s: float = MEMORY_WARN_S) -> bool:
    t = u.trend
    return t is not None and t.full_in_s is not None and t.full_in_s <= within_s


def memory_check(r: MemoryRunway | None) -> Check | None:
    """warn: a growth full within MEMORY_WARN_S (the soonest first); ok: the growths and levels.
    Worked out once per runway: a look that sampled nothing holds the same one."""
    if r is None:
        return None
    if "check" not in r.memo:
        r.memo["check"] = _check([("", u) for u in r.uses])
    return r.memo["check"]


def nodes_memory_check(runways: list[tuple[str, MemoryRunway | None]]) -> Check | None:
    """The run's `memory` on several nodes, from each node's runway: warn with the soonest
    forecast across the nodes first, each named by its node ("node gpu2: host: +200 MiB per 100
    steps ..."); ok with every node's growths and levels. None when no node has a runway."""
    return _check([(f"node {node}: ", u) for node, r in runways if r is not None for u in r.uses])


def _check(uses: list[tuple[str, MemoryUse]]) -> Check | None:
    if not uses:
        return None
    warns = sorted(((who, u) for who, u in uses if soon(u)), key=lambda wu: wu[1].trend.full_in_s)
    if warns:
        return Check.of(CheckId.MEMORY, WARN, _one_line("; ".join(who + growth_words(u) for who, u in warns), 300),
                        MEMORY_HINT)
    parts: list[str] = []
    for who in dict.fromkeys(w for w, _ in uses):      # each node (or the one host) in turn
        mine = [u for w, u in uses if w == who]
        growing = [growth_words(u) for u in mine if u.trend is not None]
        steady = [level_words(u) for u in mine if u.trend is None]
        words = "; ".join(growing + ([", ".join(steady) + ": no steady growth"] if steady else []))
        parts.append(who + words)
    return Check.of(CheckId.MEMORY, OK, _one_line("; ".join(parts), 300))
