"""The bundled trainer's checks, from its status.json: its heartbeat, threads, steps and errors."""

from __future__ import annotations

from ....contract.rundir import TrainStatus
from ....words import age_at as _age, duration as _duration, one_line as _one_line
from ..checklist import Check, CheckId, CheckState, ThreadHealth, ThreadState
from ..stall_limit import StallLimit
from .progress import limit_words

OK, WARN, FAIL, PENDING = CheckState.OK, CheckState.WARN, CheckState.FAIL, CheckState.PENDING


def heartbeat_check(now: float, hb: float, limit: float) -> Check:
    """The process beats (alive, not progress): failing past `limit`."""
    if now - hb > limit:
        return Check.of(CheckId.HEARTBEAT, FAIL, f"last heartbeat {_age(now, hb)} (limit {limit:.0f} s)",
                        "the process is alive but not beating: look for a deadlock or a stuck compile", hb)
    return Check.of(CheckId.HEARTBEAT, OK, f"last heartbeat {_age(now, hb)}", "", hb)


def threads_check(st: TrainStatus, judged: list[ThreadHealth], started: float) -> Check | None:
    """Its threads as judged (health.py `thread_states`): failing names the stuck or failed ones."""
    by_name = {t.name: t for t in st.threads}
    trouble = [j for j in judged if j.trouble]
    if trouble:
        parts = [f"{j.name} ({by_name[j.name].device}) failed: {j.why}" if j.state is ThreadState.FAILED
                 else f"{j.name} ({by_name[j.name].device}, {by_name[j.name].compile_state}) {j.why}"
                 for j in trouble]
        went_silent = min((by_name[j.name].last_beat_time for j in trouble
                           if by_name[j.name].last_beat_time is not None), default=None)
        return Check.of(CheckId.THREADS, FAIL, _one_line("; ".join(parts)),
                        "the named threads stopped; their compile state says where", went_silent)
    if not st.threads:
        return None
    states = sorted({t.compile_state for t in st.threads})
    waiting = any(j.state is ThreadState.WAITING for j in judged)
    what = "waiting for the warm-up" if waiting else "beating"
    return Check.of(CheckId.THREADS, OK, f"{len(st.threads)} threads {what} ({', '.join(states)})", "", started)


def steps_check(st: TrainStatus, now: float, step_at: float, last_step: float | None) -> Check:
    total = f"/{st.total_steps}" if st.total_steps else ""
    return Check.of(CheckId.STEPS, OK, f"step {st.step}{total}, last {_age(now, step_at)}", "", last_step)


def steps_stalled_check(st: TrainStatus, now: float, step_at: float, last_step: float | None,
                        stall: StallLimit) -> Check:
    """No step past the limit while training: a worker is stuck."""
    unchanged = f"step {st.step} unchanged since {_age(now, step_at)}"
    return Check.of(CheckId.STEPS, FAIL, limit_words(unchanged, stall) if stall.from_pace else unchanged,
                    "heartbeats without steps: a worker is stuck (the threads check names it)", last_step)


def no_step_check(st: TrainStatus, uptime: float, compile_stall_after_s: float, started: float) -> Check:
    """No step yet: pending within compile_stall_after_s, failing past it (heartbeats alone do
    not make progress: a warm-up that never ends is a stall too)."""
    if uptime > compile_stall_after_s:
        return Check.of(CheckId.STEPS, FAIL, f"phase {st.phase}, no step in {_duration(uptime)}",
                        f"longer than compile_stall_after_s ({compile_stall_after_s:.0f} s): see the log",
                        started + compile_stall_after_s)
    return Check.of(CheckId.STEPS, PENDING, f"phase {st.phase}, no step yet", "", started)


def trainer_errors_check(st: TrainStatus) -> Check | None:
    if not st.last_error:
        return None
    return Check.of(CheckId.ERRORS, WARN, _one_line(st.last_error), "see the log", st.time)
