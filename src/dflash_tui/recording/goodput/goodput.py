"""Goodput from outside: how much of a profile's wall time since its first recorded launch went
into making progress, and where the rest went, from the recorded verdict changes and their step
evidence alone (no recorder calls in the trainer). Pure.

Badput causes (seconds), each band of the timeline counted once:
- queued: a job in a scheduler's queue (`Verdict.queued`: QUEUED, BLOCKED);
- starting: STARTING (launch to the first step: imports, compile, data), until the first
  step's own time: the watcher records RUNNING a look or two after the step, so the RUNNING
  change's step time (`step_at`), taken back to the run's first step at the run's own pace,
  is where progress began;
- stalled: a live run that makes no progress (`Verdict.stuck`: STALLED, GPU LOST; from the
  verdict to the action: the recovery's stop, or the next change), and the silence before a
  STALLED verdict (from the last step's own time, the STALLED change's `step_at`; without one,
  the last `stall_after_s` of the RUNNING band);
- down: a stop under way (STOPPING), and from a run's end (CRASHED, KILLED, STOPPED, ...) to
  the next run's first change (the backoff included);
- lost_progress: the steps a failure threw away (the failed run's best step minus the step
  the next run started from), at the failed run's own step time, taken out of its RUNNING time;
- rollback: a diverged run's (DIVERGED) steps thrown away by the rollback to a checkpoint
  before them, up to the step its divergence was seen at, counted as lost_progress is, and its
  DIVERGED band (the steps it took after, garbage);
- checkpoint: the checkpoint saves' seconds the trainer reported (its checkpoint events'
  `seconds`, summed in each change's evidence as `checkpoint_s`), taken out of its RUNNING time;
- unreachable: while the target did not answer (what the run did then is unknown).
Goodput = the rest of the RUNNING time; percent = goodput / wall. The wall starts at the first
launch (the first band of a live run: what was recorded before it, NO RUN or the end of a run
before the watcher started, is nobody's time); it ends at the start
of the last band when that band is an end (`Verdict.final`: FINISHED, or a failure nothing
followed), else now.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ...verdicts import State, TargetState, Verdict
from ...words import duration
from ..store.change import VerdictChange
from .timeline import Band, bands, runs

CAUSES = ("queued", "starting", "stalled", "down", "lost_progress", "rollback", "checkpoint", "unreachable")


def _an_end(state: State) -> bool:
    """A band after which the run makes no more time of its own (`Verdict.final`): the wall ends
    where it begins when nothing followed it. A target that did not answer may still run."""
    return isinstance(state, Verdict) and state.final


def _launched(state: State) -> bool:
    """A band of a run that was launched while watched, or was live when first seen."""
    return isinstance(state, Verdict) and state is not Verdict.NO_RUN and not state.ended


@dataclass
class Goodput:
    wall_s: float = 0.0
    good_s: float = 0.0
    badput_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0.0))
    runs: dict[str, dict[str, float]] = field(default_factory=dict)   # run id -> {"good", cause...}

    @property
    def percent(self) -> float | None:
        return None if self.wall_s <= 0 else 100.0 * self.good_s / self.wall_s

    @property
    def lost_s(self) -> float:
        return sum(self.badput_s.values())

    def _add(self, run_id: str, cause: str, seconds: float) -> None:
        if seconds <= 0:
            return
        per = self.runs.setdefault(run_id, dict.fromkeys(("good", *CAUSES), 0.0))
        per[cause] += seconds
        if cause == "good":
            self.good_s += seconds
        else:
            self.badput_s[cause] += seconds

    def to_json(self) -> dict[str, Any]:
        pct = self.percent
        return {"percent": None if pct is None else round(pct, 1), "wall_s": round(self.wall_s, 1),
                "good_s": round(self.good_s, 1), "badput_s": {k: round(v, 1) for k, v in self.badput_s.items()},
                "runs": {r: {k: round(v, 1) for k, v in per.items()} for r, per in self.runs.items()}}

    def words(self) -> str:
        """"goodput 71 % of 5 min; lost 1 min 30 s: 40 s stalled, 50 s down"."""
        pct = self.percent
        if pct is None:
            return "goodput: nothing recorded yet"
        parts = [f"{duration(v)} {k.replace('_', ' ')}" for k, v in self.badput_s.items() if v >= 0.5]
        lost = f"; lost {duration(self.lost_s)}: {', '.join(parts)}" if parts else "; nothing lost"
        return f"goodput {pct:.0f} % of {duration(self.wall_s)} since the first launch{lost}"

    def lost_words(self) -> str:
        """"lost 1 min 30 s: 40 s stalled, 50 s down" (for a notification)."""
        parts = [f"{duration(v)} {k.replace('_', ' ')}" for k, v in self.badput_s.items() if v >= 0.5]
        return f"lost {duration(self.lost_s)}" + (f": {', '.join(parts)}" if parts else "")


def _steps(group: Sequence[Band]) -> list[int]:
    return [b.change.evidence.step for b in group if b.change.evidence.step is not None]


def goodput(changes: Sequence[VerdictChange], now: float, stall_after_s: float,
            stops: Mapping[str, float] | None = None) -> Goodput:
    """`changes`: one profile's, oldest first. `stops`: run id -> when the watcher's recovery
    stopped that run (its log's `stopped`): a stalled run is down from then, although its
    STOPPED change was recorded later (by a watcher started again, say)."""
    stops = stops or {}
    out = Goodput()
    all_bands = bands(changes, now)
    # The wall starts at the first launch: the looks before it (NO RUN, the last run's end, an
    # unreachable target) are no time of a run.
    first = next((i for i, b in enumerate(all_bands) if _launched(b.state)), None)
    if first is None:
        return out
    all_bands = all_bands[first:]
    last = all_bands[-1]
    ended = _an_end(last.state)
    end = last.start if ended else max(last.end, now)
    out.wall_s = max(0.0, end - all_bands[0].start)
    early = _progress_began(all_bands)
    for i, b in enumerate(all_bands):
        if ended and b is last:
            break
        run, state, secs = b.change.run_id, b.state, b.seconds
        nxt = all_bands[i + 1] if i + 1 < len(all_bands) else None
        if state is Verdict.RUNNING:
            silent = 0.0
            if nxt is not None and nxt.state is Verdict.STALLED and nxt.change.run_id == run:
                last_step = nxt.change.evidence.step_at
                silent = nxt.start - last_step if last_step is not None else stall_after_s
            silent = min(max(0.0, silent), secs)
            out._add(run, "stalled", silent)
            out._add(run, "good", secs - silent + early.get(i, 0.0))
        elif isinstance(state, TargetState):   # UNREACHABLE: the only one recorded
            out._add(run, "unreachable", secs)
        elif state.queued:
            out._add(run, "queued", secs)
        elif state is Verdict.STARTING:
            out._add(run, "starting", secs - early.get(i + 1, 0.0))
        elif state is Verdict.DIVERGED:
            out._add(run, "rollback", secs)
        elif state.stuck:
            cut = stops.get(run)
            cut = min(max(cut, b.start), b.end) if cut is not None else b.end
            out._add(run, "stalled", cut - b.start)
            out._add(run, "down", b.end - cut)
        else:
            out._add(run, "down", secs)   # an end, until the next run's first change
    _checkpoints(out, all_bands)
    _lost_progress(out, all_bands)
    return out


def _progress_began(all_bands: Sequence[Band]) -> dict[int, float]:
    """{index of a RUNNING band that follows its run's STARTING band: how long before the band
    the run's first step was made}. From the run's step times: the first RUNNING change's step
    (`step_at`), taken back to the first step of the run at its own pace (the steps and their
    times of its later changes), where the run continues past the steps of the run before it;
    never before the STARTING band began."""
    out: dict[int, float] = {}
    points: dict[str, list[tuple[int, float]]] = {}   # run id -> (step, its own time) of its changes
    best: dict[str, int] = {}                         # run id -> its best step
    for x in all_bands:
        e = x.change.evidence
        if e.step is not None:
            best[x.change.run_id] = max(e.step, best.get(x.change.run_id, e.step))
            if e.step_at is not None:
                points.setdefault(x.change.run_id, []).append((e.step, e.step_at))
    best_before: int | None = None
    for i, b in enumerate(all_bands):
        run, e = b.change.run_id, b.change.evidence
        prev = all_bands[i - 1] if i else None
        if prev is not None and prev.change.run_id != run:
            best_before = best.get(prev.change.run_id, best_before)
        if (b.state is Verdict.RUNNING and prev is not None and prev.state is Verdict.STARTING
                and prev.change.run_id == run and e.step_at is not None):
            first_at = e.step_at
            if e.step is not None:
                later = [pt for pt in points.get(run, ()) if pt[1] >= e.step_at]
                first = best_before + 1 if best_before is not None and best_before < e.step else e.step
                (s0, t0), (s1, t1) = later[0], later[-1]
                if first < e.step and s1 > s0 and t1 > t0:
                    first_at -= (e.step - first) * (t1 - t0) / (s1 - s0)
            out[i] = min(max(0.0, b.start - max(first_at, prev.start)), prev.seconds)
    return out


def _checkpoints(out: Goodput, all_bands: Sequence[Band]) -> None:
    """Move each run's reported checkpoint-save time from its goodput to checkpoint."""
    for run, group in runs(all_bands):
        saved = max((b.change.evidence.checkpoint_s or 0.0 for b in group), default=0.0)
        per = out.runs.get(run)
        if per is None or saved <= 0:
            continue
        moved = min(per["good"], saved)
        per["good"] -= moved
        out.good_s -= moved
        out._add(run, "checkpoint", moved)


def _lost_progress(out: Goodput, all_bands: Sequence[Band]) -> None:
    """Move the thrown-away steps' time from each failed run's goodput to lost_progress."""
    groups: list[tuple[str, list[Band]]] = []
    for b in all_bands:
        if groups and groups[-1][0] == b.change.run_id:
            groups[-1][1].append(b)
        else:
            groups.append((b.change.run_id, [b]))
    for (run, group), (_, following) in zip(groups, groups[1:]):
        before, after = _steps(group), _steps(following)
        diverged = next((b for b in group if b.state is Verdict.DIVERGED), None)
        if diverged is not None and diverged.change.evidence.step is not None:
            # the steps it took once diverged are its DIVERGED band's time, counted already
            before = [s for s in before if s <= diverged.change.evidence.step]
        per = out.runs.get(run)
        if not before or not after or per is None or per["good"] <= 0:
            continue
        advanced = max(before) - min(before)
        lost_steps = max(0, max(before) - (min(after) - 1))
        if lost_steps == 0 or advanced <= 0:
            continue
        lost = min(per["good"], lost_steps * per["good"] / advanced)
        per["good"] -= lost
        out.good_s -= lost
        out._add(run, "rollback" if diverged is not None else "lost_progress", lost)
