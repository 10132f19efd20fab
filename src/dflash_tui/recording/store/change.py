"""VerdictChange: one recorded change of a run's state, made from the report that showed it.

A run's state is its verdict, or UNREACHABLE while its target does not answer
(dflash_tui/verdicts.py `State`); a change made of words (a test's, a tool's) is read to that
type once, when it is made. A change is a new state, or the same state of a new run (a
relaunch). Everything a change carries that came from the run (causes, tracebacks, frames)
passes through `inert` once, here: a run is not trusted to write what a terminal, a mail or
a chat message would act on.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ...contract.rundir import finite_number
from ...run.verdict.report import RunReport
from ...run.verdict.checklist import Checklist, CheckId, CheckState, Verdict
from ...run.verdict.rank_groups import odd_ones_out
from ...verdicts import State, TargetState, state_named

TRACEBACK_LINES = 6          # the last lines of a traceback a change keeps
TEXT_LIMIT = 400             # any one text field, after `inert`
RANK_GROUPS_KEPT = 4         # the odd-one-out rank groups a STALLED change keeps
# Checks that see a failure coming while the verdict stands: their turning warn or fail is a
# notice (`[notify] on` "warning"), never a recorded change.
FORESIGHT_CHECKS = frozenset({CheckId.DISK.value, CheckId.CHECKPOINT.value, CheckId.MEMORY.value})

_SEVERITY = {CheckState.FAIL: 0, CheckState.WARN: 1, CheckState.PENDING: 2, CheckState.OK: 3}


def inert(text: str | None, limit: int = TEXT_LIMIT) -> str:
    """`text` with every control character (escape sequences, NUL, bidi overrides, newlines)
    written out as an escape: printable, one line, at most `limit` characters. Wider than the
    contract's `inert_text` (which keeps a traceback's newlines and leaves format characters):
    a notification is one line, and a bidi override could make it read as something else."""
    if not text:
        return ""
    out = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
    return out if len(out) <= limit else out[: limit - 1] + "…"


@dataclass(frozen=True)
class Evidence:
    """The compact evidence a change keeps: enough to say what the run was doing."""

    step: int | None = None
    total: int | None = None
    loss: float | None = None
    rate: float | None = None
    rate_unit: str = ""
    stuck_at: str = ""                    # a stalled run's innermost frame of its main thread
    traceback: tuple[str, ...] = ()       # the last lines of the last traceback in the log
    pid: int | None = None
    exit_code: int | None = None
    eta_s: float | None = None            # seconds to the run's total at its recent rate
    # when `step` was reached, the step's own time (the log's write, the step event's time,
    # status.json's last step), on the watcher's clock: goodput counts progress from it
    step_at: float | None = None
    # the checkpoint saves' seconds the trainer reported for this run so far (its events)
    checkpoint_s: float | None = None
    # a stalled run of several ranks: where its ranks differ, the odd ones out first
    # ("rank 7: lock Queue.get (data.py:40)")
    ranks: tuple[str, ...] = ()
    # what the run's GPUs drew since its launch, and its cost so far and per hour at the
    # profile's prices (run/verdict/energy.py), as the report had them
    kwh: float | None = None
    cost: float | None = None
    cost_per_h: float | None = None

    def to_json(self) -> str:
        d = {k: v for k, v in asdict(self).items() if v not in (None, "", ())}
        return json.dumps(d, separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_json(cls, text: Any) -> "Evidence":
        """The evidence a stored JSON text holds; what is not of its field's kind (a string for
        a number, NaN, a number no int64 holds, a damaged text) is unknown, never an error."""
        try:
            d = json.loads(text or "{}")
        except (ValueError, TypeError, RecursionError):
            return cls()
        return sane_evidence(d) if isinstance(d, dict) else cls()


_INT_LIMIT = 2 ** 63


def whole(v: Any) -> int | None:
    """`v` if it is an int64 (not a bool), else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) and -_INT_LIMIT <= v < _INT_LIMIT else None



def sane_evidence(d: dict[str, Any]) -> Evidence:
    """Evidence from loose values (a stored record, a run's numbers), each of its own kind."""
    tb = d.get("traceback")
    lines = [line for line in tb if isinstance(line, str)] if isinstance(tb, (list, tuple)) else []
    text = {k: d.get(k) if isinstance(d.get(k), str) else "" for k in ("rate_unit", "stuck_at")}
    return Evidence(step=whole(d.get("step")), total=whole(d.get("total")), loss=finite_number(d.get("loss")),
                    rate=finite_number(d.get("rate")), rate_unit=inert(text["rate_unit"], 20),
                    stuck_at=inert(text["stuck_at"], 200),
                    traceback=tuple(inert(line, 200) for line in lines[-TRACEBACK_LINES:]),
                    pid=whole(d.get("pid")), exit_code=whole(d.get("exit_code")), eta_s=finite_number(d.get("eta_s")),
                    step_at=finite_number(d.get("step_at")), checkpoint_s=finite_number(d.get("checkpoint_s")),
                    ranks=tuple(inert(w, 200) for w in _strings(d.get("ranks"))[:RANK_GROUPS_KEPT]),
                    kwh=_not_negative(d.get("kwh")), cost=_not_negative(d.get("cost")),
                    cost_per_h=_not_negative(d.get("cost_per_h")))


def _not_negative(v: Any) -> float | None:
    n = finite_number(v)
    return n if n is not None and n >= 0 else None


def _strings(v: Any) -> list[str]:
    return [x for x in v if isinstance(x, str)] if isinstance(v, (list, tuple)) else []


@dataclass(frozen=True)
class VerdictChange:
    profile: str
    run_id: str                           # launch.json's run id ("" when there is none)
    time: float                           # local epoch seconds when the watcher observed it
    state: State                          # the verdict, or UNREACHABLE
    previous: State | None                # the state before (None for the first one recorded)
    cause: str                            # one line: the checklist's summary, or why unreachable
    check: str = ""                       # the id of the check that made the change
    evidence: Evidence = field(default_factory=Evidence)
    id: int | None = None                 # the store's row id, once recorded
    # Not stored: a run no watcher had recorded, in this watcher's first report of its profile
    # (what it shows happened before anyone watched; notify.py `news_event`).
    first_look: bool = False

    def __post_init__(self) -> None:
        # Words ("CRASHED", "" for no previous state) are read to their states here, once.
        object.__setattr__(self, "state", _state(self.state))
        object.__setattr__(self, "previous", _state(self.previous) if self.previous else None)


def recorded_state(word: object) -> State | None:
    """The state a recorded word names: a verdict, or UNREACHABLE (the only target state the
    watcher records); None for any other word."""
    state = word if isinstance(word, (Verdict, TargetState)) else state_named(word)
    return state if isinstance(state, Verdict) or state is TargetState.UNREACHABLE else None


def _state(word: State | str) -> State:
    state = recorded_state(word)
    if state is None:
        raise ValueError(f"{word!r} is no state the watcher records (a verdict, or UNREACHABLE)")
    return state


def state_of(report: RunReport) -> State:
    return report.checklist.verdict if report.connected else TargetState.UNREACHABLE


def run_id_of(report: RunReport) -> str:
    return inert(report.launch.run_id, 80) if report.launch is not None else ""


def deciding_check(now: Checklist, before: Checklist | None, unreachable: bool) -> str:
    """The check that made the change: of the checks whose state changed since `before`, the
    worst; without `before` (the watcher just started), the worst check that is not ok."""
    if unreachable:
        return "transport"
    old = {c.id: c.state for c in before.checks} if before is not None else None
    moved = [c for c in now.checks if old is None or old.get(c.id) != c.state]
    if old is None:
        moved = [c for c in moved if c.state is not CheckState.OK]
    moved.sort(key=lambda c: _SEVERITY[c.state])
    return moved[0].id if moved else ""


def stuck_at(report: RunReport) -> str:
    """Where a silent run sits: the innermost frame of its main thread, from the run probe."""
    for probe in report.probes:
        main = next((t for t in probe.threads if t.name == "MainThread"), None)
        if main is not None and main.frames:
            return inert(main.frames[0], 200)
    return ""


def evidence_of(report: RunReport, now: float | None = None) -> Evidence:
    """`now`: the watcher's clock when it saw `report` (the step's time is moved onto it)."""
    p = report.progress
    skew = 0.0 if now is None else now - report.time
    act = report.activity
    tb = report.last_traceback.strip().splitlines()[-TRACEBACK_LINES:] if report.last_traceback else []
    stalled = report.checklist.verdict is Verdict.STALLED
    return sane_evidence({
        "step": p.step if p else None, "total": p.total if p else None,
        # The loss its progress gave, else its metric files' (a program that prints nothing).
        "loss": p.loss if p and p.loss is not None else (report.metrics.newest_loss() if report.metrics else None),
        "eta_s": round(p.eta_s, 1) if p and p.eta_s is not None else None,
        "step_at": round(p.time + skew, 3) if p and p.time is not None else None,
        "checkpoint_s": round(act.checkpoint_s, 3) if act is not None and act.checkpoint_s else None,
        "rate": p.rate if p else None, "rate_unit": p.rate_unit if p else "",
        "stuck_at": stuck_at(report) if stalled else "", "traceback": tb,
        "pid": report.launch.pid if report.launch is not None else None,
        "exit_code": report.exit.exit_code if report.exit is not None else None,
        "ranks": [g.words() for g in odd_ones_out(report.checklist.rank_groups)[:RANK_GROUPS_KEPT]]
        if stalled else [],
        "kwh": round(report.energy.kwh, 6) if report.energy is not None and report.energy.kwh is not None else None,
        "cost": round(report.cost.so_far, 4) if report.cost is not None else None,
        "cost_per_h": round(report.cost.per_hour, 4) if report.cost is not None else None})


def change_of(report: RunReport, *, previous: State | None, before: Checklist | None, now: float,
              first_look: bool = False) -> VerdictChange:
    state = state_of(report)
    cause = report.checklist.summary if report.connected else (report.error or "no answer")
    return VerdictChange(profile=report.profile, run_id=run_id_of(report), time=now, state=state,
                         previous=previous, cause=inert(cause),
                         check=deciding_check(report.checklist, before, not report.connected),
                         evidence=evidence_of(report, now), first_look=first_look)


@dataclass(frozen=True)
class CheckNotice:
    """A check of FORESIGHT_CHECKS that turned warn or fail while the verdict stood: `change`
    is the run as it stands (not recorded: its state did not change), with the check's id as
    its `check` and the check's words as its `cause`."""

    change: VerdictChange
    check_state: CheckState


def notices_of(report: RunReport, before: Checklist | None, *, previous: State | None,
               now: float) -> list[CheckNotice]:
    """The foresight checks of `report` that are warn or fail and were not so in `before`
    (without `before`, the watcher's first look: every one that is), worst first. A run on
    several nodes names its nodes' checks "n1:disk": those count too."""
    if not report.connected:
        return []
    old = {c.id: c.state for c in before.checks} if before is not None else {}
    out = []
    for c in report.checklist.checks:
        if c.id.rpartition(":")[2] not in FORESIGHT_CHECKS or c.state not in (CheckState.WARN, CheckState.FAIL):
            continue
        if old.get(c.id) is c.state:
            continue
        base = change_of(report, previous=previous, before=before, now=now)
        notice = VerdictChange(profile=base.profile, run_id=base.run_id, time=now, state=base.state,
                               previous=previous, cause=inert(c.cause), check=c.id, evidence=base.evidence)
        out.append(CheckNotice(notice, c.state))
    out.sort(key=lambda n: _SEVERITY[n.check_state])
    return out
