"""The checkpoints' checks: the last complete checkpoint (`checkpoint`) and whether the next
ones fit on their disk (`disk`). Neither changes the verdict: a torn checkpoint or a disk that
fills is a warn or a failing check beside it, and the watcher notifies its change."""

from __future__ import annotations

from ....words import age_at as _age, duration as _duration, one_line as _one_line, size
from ...evidence.checkpoints import STALE_INTERVALS, CheckpointsView
from ...evidence.runway import DiskRunway
from ..checklist import Check, CheckId, CheckState

OK, WARN, FAIL = CheckState.OK, CheckState.WARN, CheckState.FAIL

TORN_HINT = "a resume must not load it: delete it or resume from the last complete one"
RUNWAY_HINT = "free space where the checkpoints go (older checkpoints, history/), or save fewer (save_total_limit)"


def checkpoint_check(view: CheckpointsView | None, now: float, live: bool) -> Check | None:
    """ok "step 300, 12 min ago, 3.2 GiB (hf checkpoint-300)"; a warn when the newest is torn
    or, while the run lives, no new one came for STALE_INTERVALS intervals. None: none found."""
    if view is None or not view.found:
        return None
    last, interval = view.last_complete, view.interval_s
    age = _age(now, last.mtime) if last is not None else ""
    stale = live and last is not None and interval is not None and now - last.mtime > STALE_INTERVALS * interval
    # Made again only when its words would change (the age's words), not at every look.
    key = (age, stale, _duration(now - last.mtime) if stale else "")
    held = view.memo.get("checkpoint_check")
    if held is None or held[0] != key:
        held = view.memo["checkpoint_check"] = (key, _checkpoint_check(view, age, stale, now))
    return held[1]


def _checkpoint_check(view: CheckpointsView, age: str, stale: bool, now: float) -> Check | None:
    last, newest = view.last_complete, view.newest
    said = ""
    if last is not None:
        step = f"step {last.step}, " if last.step is not None else ""
        said = f"{step}{age}, {size(last.bytes)} ({last.format} {last.path})"
    if newest is not None and newest.why:
        cause = f"the newest checkpoint {newest.path} is torn: {newest.why}"
        cause += f"; last complete: {said}" if said else "; none is complete"
        return Check.of(CheckId.CHECKPOINT, WARN, _one_line(cause, 300), TORN_HINT, newest.mtime)
    if last is None:
        writing = newest is not None and newest.writing
        return (Check.of(CheckId.CHECKPOINT, OK, _one_line(f"the first checkpoint is being written: {newest.path}"))
                if writing else None)
    interval = view.interval_s
    if stale:
        cause = (f"no new checkpoint for {_duration(now - last.mtime)}, {STALE_INTERVALS}x the interval "
                 f"of {_duration(interval)}; last: {said}")
        return Check.of(CheckId.CHECKPOINT, WARN, _one_line(cause, 300),
                        "the saves stopped: a full disk, a failing save, or a run that no longer reaches them",
                        last.mtime)
    return Check.of(CheckId.CHECKPOINT, OK, _one_line(said, 300), "", last.mtime)


def runway_words(r: DiskRunway) -> tuple[CheckState, str]:
    """The runway's state and words: fail "the checkpoint at about step 48 needs 300 MB, 100 MB
    free on /data: it will fail in ~6 s"; warn when this one fits and the one after does not."""
    at = f" at about step {r.next_step}" if r.next_step is not None else ""
    need, free, where = size(r.next_checkpoint_bytes), size(r.free_bytes), r.path
    when = r.next_checkpoint_in_s
    if r.saves_left <= 0:
        fails = f"it will fail in ~{_duration(when)}" if when else "it will fail when it is saved"
        return FAIL, f"the checkpoint{at} needs {need}, {free} free on {where}: {fails}"
    if r.saves_left == 1:
        after = f" in ~{_duration(when + r.interval_s)}" if when is not None and r.interval_s else ""
        return WARN, (f"the next checkpoint{at} fits ({need} of {free} free on {where}); "
                      f"the one after it will fail{after}")
    return OK, f"room for {r.saves_left} more checkpoints of {need} on {where} ({free} free)"


def runway_check(r: DiskRunway | None) -> Check | None:
    if r is None:
        return None
    state, words = runway_words(r)
    return Check.of(CheckId.DISK, state, _one_line(words, 300), RUNWAY_HINT if state is not OK else "")
