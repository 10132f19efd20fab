"""The restart policy's decision, pure: given a run's failure, the restarts that led to it and
the profile's [recover] policy, restart (now or after the backoff), give up and why, or nothing.

Never loop on a bug (recording/recovery/README.md). Give up when:
- the failure is one a restart cannot fix (`give_up_on`): SyntaxError, ImportError and
  ModuleNotFoundError, a missing file (FileNotFoundError), at once; CUDA out of memory when the
  attempt before ran out of memory at the same step;
- `max_restarts` restarts were made within `window_s`;
- the same failure came back (same exception type and innermost own-code frame, or the same hang
  place) with no step past the previous attempt's best;
- `no_progress_restarts` restarts in a row ended with no step past the best before them;
- DIVERGED: the same divergence (same series, rule and first bad step) came back after the
  rollback, whatever the steps (resuming from the checkpoint before it only replays it).
A chain of restarts is the runs the watcher relaunched one from another: a run launched by a
person starts a new chain. A stop by a person is never a trigger (STOPPED is no failing verdict).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from .settings import RecoverPolicy
from ...run.evidence.divergence import Divergence
from ...verdicts import Verdict
from ...words import duration
from ..store.change import Evidence, VerdictChange

RESTART, GIVE_UP, NOTHING = "restart", "give_up", "nothing"

_FRAME = re.compile(r'^\s*File "(?P<path>[^"]*)", line (?P<line>\d+), in (?P<fn>.*)$')
_LIBRARY = ("site-packages", "dist-packages", "/lib/python", "<frozen")


@dataclass(frozen=True)
class Failure:
    """What a failed run was, as far as the policy cares."""

    run_id: str
    state: Verdict
    time: float                # when the watcher saw it
    best_step: int | None      # the highest step the run reached (None: it never showed one)
    where: str                 # the hang's place, or the traceback's last line, or the cause
    signature: str             # the failure's identity across attempts
    unfixable: str = ""        # a settings.UNFIXABLE word, or ""


@dataclass(frozen=True)
class Attempt:
    """One restart the watcher made: the failure it answered and the run it launched."""

    failure: Failure
    time: float                # when the restart was decided
    new_run_id: str = ""


@dataclass(frozen=True)
class Decision:
    kind: str                  # RESTART | GIVE_UP | NOTHING
    attempt: int = 0           # the restart's number (1 = the first restart)
    at: float = 0.0            # when the restart is due (local epoch)
    reason: str = ""


def _exception(last_line: str) -> str:
    """The exception's class name of a traceback's last line ("torch.OutOfMemoryError: ..." ->
    "OutOfMemoryError"), or ""."""
    head = last_line.split(":", 1)[0].strip()
    if not head or " " in head:
        return ""
    return head.rsplit(".", 1)[-1]


def _own_frame(lines: Sequence[str]) -> str:
    """The innermost frame of the traceback that is not a library's: "path:line in fn"."""
    own = ""
    for line in lines:
        m = _FRAME.match(line)
        if m and not any(mark in m["path"] for mark in _LIBRARY):
            own = f"{m['path']}:{m['line']} in {m['fn'].strip()}"
    return own


def unfixable(ev: Evidence) -> str:
    """The UNFIXABLE word of a failure whose traceback says a restart cannot fix it, or ""."""
    last = ev.traceback[-1] if ev.traceback else ""
    exc = _exception(last)
    if exc in ("SyntaxError", "IndentationError", "TabError"):
        return "syntax_error"
    if exc in ("ImportError", "ModuleNotFoundError"):
        return "import_error"
    if exc == "FileNotFoundError":
        return "missing_file"
    if exc == "OutOfMemoryError" or "CUDA out of memory" in last:
        return "cuda_oom"
    return ""


def failure_of(change: VerdictChange, best_step: int | None, divergence: Divergence | None = None) -> Failure:
    """The Failure a recorded failing change shows; `best_step`: the run's highest step seen;
    `divergence`: what a DIVERGED run's report found (its identity is where it began)."""
    ev = change.evidence
    last = ev.traceback[-1] if ev.traceback else ""
    if change.state is Verdict.DIVERGED and divergence is not None:
        where = divergence.words()
        signature = f"divergence of {divergence.series} ({divergence.rule}) at step {divergence.step}"
    elif change.state is Verdict.STALLED and ev.stuck_at:
        where, signature = f"stuck at {ev.stuck_at}", f"hang at {ev.stuck_at}"
    elif last:
        where, signature = last, f"{_exception(last) or last} at {_own_frame(ev.traceback) or '?'}"
    else:
        code = f" exit code {ev.exit_code}" if ev.exit_code is not None else ""
        where, signature = change.cause, f"{change.state}{code}"
    return Failure(change.run_id, change.state, change.time, best_step, where, signature, unfixable(ev))


def _advanced(step: int | None, best_before: int | None) -> bool:
    return step is not None and (best_before is None or step > best_before)


def _no_progress_streak(failures: Sequence[Failure]) -> int:
    """How many of the relaunched runs at the end (all but the first) reached no step past the
    best of every run before them."""
    streak, best = 0, failures[0].best_step
    for f in failures[1:]:
        streak = 0 if _advanced(f.best_step, best) else streak + 1
        if f.best_step is not None:
            best = f.best_step if best is None else max(best, f.best_step)
    return streak


def decide(policy: RecoverPolicy | None, failure: Failure, chain: Sequence[Attempt], now: float) -> Decision:
    """What to do about `failure`, after the restarts in `chain` (oldest first, the last one's
    new run being the run that failed now; empty when no restart led to it)."""
    if policy is None or failure.state not in policy.on:
        return Decision(NOTHING)
    prev = chain[-1].failure if chain else None

    def give_up(reason: str) -> Decision:
        return Decision(GIVE_UP, len(chain), now, reason)

    if failure.unfixable and failure.unfixable in policy.give_up_on:
        if failure.unfixable != "cuda_oom":
            return give_up(f"{failure.where}: a restart cannot fix it ({failure.unfixable})")
        if prev is not None and prev.unfixable == "cuda_oom" and prev.best_step == failure.best_step:
            return give_up(f"CUDA out of memory again at step {failure.best_step}: a restart cannot fix it (cuda_oom)")
    recent = [a for a in chain if a.time > now - policy.window_s]
    if len(recent) >= policy.max_restarts:
        return give_up(f"{len(recent)} restart{'s' if len(recent) != 1 else ''} within "
                       f"{duration(policy.window_s)} (max_restarts = {policy.max_restarts})")
    if failure.state is Verdict.DIVERGED and prev is not None and prev.signature == failure.signature:
        return give_up(f"the same divergence came back at the same step after the rollback: {failure.where}")
    if prev is not None and prev.signature == failure.signature and not _advanced(failure.best_step, prev.best_step):
        return give_up(f"the same failure came back with no progress: {failure.where}")
    streak = _no_progress_streak([a.failure for a in chain] + [failure]) if chain else 0
    if policy.no_progress_restarts and streak >= policy.no_progress_restarts:
        return give_up(f"{streak} restarts in a row reached no step past the best before them")
    return Decision(RESTART, len(chain) + 1, failure.time + policy.backoff(len(recent)))
