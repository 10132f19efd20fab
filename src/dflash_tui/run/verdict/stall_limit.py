"""How long a live run may be silent before it is STALLED: learned from its own pace.

Pure. The rule (run/verdict/README.md, "The silence limit learned from the pace"):
- Before a cadence is known (fewer than MIN_INTERVALS intervals between progress seen: the
  first step, a start-up), the limit is `stall_after_s`.
- Once it is known, the limit is the larger of FLOOR_S and FACTOR x the slowest of its recent
  intervals (run/evidence/pace.py), never above `stall_after_s`: `stall_after_s` stays the
  ceiling. FACTOR is nvidia-resiliency-ext's (5x the longest interval seen).
- Known pauses keep their own limits: while compiling, `compile_stall_after_s` (the caller's
  fixed limit says so); while evaluating or saving a checkpoint (the bundled trainer's phase,
  or a thread's stack: run/stacks/pauses.py), `stall_after_s`.
- `learn_stall = false` in the profile keeps `stall_after_s` always.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ...words import duration, seconds_words
from ..evidence.memory import LookMemory
from ..evidence.observe import Evidence
from ..stacks.pauses import known_pause

FLOOR_S = 10.0
FACTOR = 5.0
MIN_INTERVALS = 10


@dataclass(frozen=True)
class StallLimit:
    seconds: float
    rule: str           # "learned", "stall_after_s" or "compile_stall_after_s"
    why: str            # why this limit: "5x its slowest step of 1.5 s", "no cadence yet (3 of 10 steps)"
    slowest: float | None = None   # the slowest recent interval, when learned
    # "learned", "ceiling" (the pace reaches stall_after_s), "pause", "no_cadence", "off"
    # (learn_stall = false) or "compiling"
    kind: str = "no_cadence"

    @property
    def learned(self) -> bool:
        return self.rule == "learned"

    @property
    def from_pace(self) -> bool:
        """The pace or a known pause decided it (not the fixed rule alone): worth a line."""
        return self.kind in ("learned", "ceiling", "pause")

    def words(self) -> str:
        """The limit as a check's cause says it: "10 s: 5x its slowest step of 1.5 s, at least
        10 s" (learned), "stall_after_s 60 s" (fixed: the rule names it)."""
        if self.learned:
            return f"{duration(self.seconds)}: {self.why}"
        return f"{self.rule} {self.seconds:.0f} s"

    def to_words(self) -> str:
        """The limit and why, for the checklist: "10 s: 5x its ...", "stall_after_s 60 s: no
        cadence yet (3 of 10 steps)"."""
        return self.words() if self.learned else f"{self.words()}: {self.why}"

    def stalled_words(self, silent_for: float) -> str:
        """What a STALLED summary says of the limit: "STALLED after 9 s: 6x its slowest step
        of 1.5 s" for a learned one; "" for a fixed one (the summary says how long already)."""
        if not self.learned or not self.slowest:
            return ""
        return (f"STALLED after {duration(silent_for)}: {silent_for / self.slowest:.0f}x its slowest step "
                f"of {seconds_words(self.slowest)}")


def learned_limit(intervals: Sequence[float], ceiling: float, *, floor: float = FLOOR_S,
                  factor: float = FACTOR, min_intervals: int = MIN_INTERVALS, source: str = "") -> StallLimit | None:
    """The limit the pace gives (None: no cadence known yet, fewer than `min_intervals`):
    max(floor, factor x the slowest interval), never above `ceiling`. `source`: where the
    slowest was learned (run/evidence/pace.py Pace.source), named at the end of why."""
    if len(intervals) < min_intervals:
        return None
    slowest = max(intervals)
    seconds = max(floor, factor * slowest)
    why = f"{factor:g}x its slowest step of {seconds_words(slowest)}"
    if factor * slowest < floor:
        why = f"{why}, at least {duration(floor)}"
    if source:
        why = f"{why}; learned from {source}"
    if seconds >= ceiling:
        return StallLimit(ceiling, "stall_after_s", f"the ceiling; {why} reaches it", kind="ceiling")
    return StallLimit(seconds, "learned", why, slowest, kind="learned")


def run_pause(ev: Evidence, memory: LookMemory) -> str:
    """The known pause the run is in now (run/stacks/pauses.py), "" for none."""
    return known_pause(ev.status.phase if ev.status is not None else None, ev.probes,
                       ev.hang.stack_dumps, memory.pauses)


def stall_limit(fixed: float, *, stall_after_s: float, learn: bool, intervals: Sequence[float],
                pause: str = "", source: str = "") -> StallLimit:
    """The silence limit in force. `fixed`: the limit without a pace (compile_stall_after_s
    while compiling, else stall_after_s: run/verdict/health.py `_silence_limit`); `pause`: the
    known pause the run is in ("evaluating (evaluate)", ""); `intervals`: its pace, learned
    from `source`."""
    if fixed != stall_after_s:
        return StallLimit(fixed, "compile_stall_after_s", "compiling, or busy with no stacks to tell", kind="compiling")
    if not learn:
        return StallLimit(fixed, "stall_after_s", "learn_stall = false", kind="off")
    if pause:
        return StallLimit(fixed, "stall_after_s", pause, kind="pause")
    learned = learned_limit(intervals, stall_after_s, source=source)
    if learned is None:
        return StallLimit(fixed, "stall_after_s", f"no cadence yet ({len(intervals)} of {MIN_INTERVALS} steps)"
                          if intervals else "no cadence yet")
    return learned
