"""The progress checks of any program: its log, events and metric files, how long a silence may
last (the "Silence limit"), and the words of what advanced and what is silent."""

from __future__ import annotations

from ....words import age_at as _age, duration as _duration, eta as eta_words, one_line as _one_line, progress
from ...evidence.activity import Activity
from ...evidence.metric_files.reader import MetricsView
from ...evidence.observe import Evidence
from ...evidence.step_clock import eta_s
from ..checklist import Check, CheckId, CheckState
from ..hang import ThreadView
from ..stall_limit import StallLimit
from .machine import cpu_words

OK, WARN, FAIL, PENDING = CheckState.OK, CheckState.WARN, CheckState.FAIL, CheckState.PENDING


def last_progress(ev: Evidence, *also: float | None) -> float | None:
    """The latest time anything advanced: log output, a step in the log or events.jsonl,
    a probe's step, or the times given (status.json's last step). Stacks are not in it: a
    stack that moves is progress that never reaches the log, and its check says so."""
    act = ev.activity
    times = list(also)
    if act is not None:
        # A metric file of this run that advanced (a TensorBoard event, a CSV row) is progress
        # too: a program silent on stdout may write nothing else.
        times += [act.log_grew_at if act.program_output else None, act.step_at, act.metrics_at]
    return max((t for t in times if t is not None), default=None)


def last_progress_words(ev: Evidence, now: float, last: float) -> str:
    """What advanced last, by what it was: "output 2 s ago" for the program's output, "last
    step 2 s ago" for a step from events or a probe, "metrics written just now" for a metric
    file: never "output" for a program that prints nothing."""
    act = ev.activity
    age = _age(now, last)
    if act is None or act.program_output and act.log_grew_at == last:
        return f"output {age}"
    if act.step_at == last:
        return f"last step {age}"
    if act.metrics_at == last:
        return f"metrics written {age}"
    return f"progress {age}"


def progress_words(ev: Evidence) -> str:
    """ "step 120/1000, loss 2.31, 3.2 it/s" from the log/events, "" when none was read; a
    step counted within an epoch (Lightning's bar) says its epoch: "epoch 2, 51/64"."""
    act = ev.activity
    if act is None or act.step is None and act.step_at is None and act.metrics_at is None:
        return ""
    mp = ev.metrics.progress if ev.metrics is not None else None
    if mp is not None and mp.total and act.total != mp.total:
        # The HF Trainer's trainer_state.json: global_step of max_steps, where the log has no
        # total of that count.
        step, total, epoch = mp.step, mp.total, None
        left = eta_s(mp.step, mp.total, act.steps_per_s)
    else:
        step, total, epoch = act.step, act.total, act.step_epoch
        # An ETA to the run's end: not to the end of an epoch (a bar counted within one).
        left = eta_s(step, total, act.steps_per_s, act.rate, act.rate_unit) if epoch is None else None
    loss = act.loss
    if step is None and mp is not None:
        # A program that says nothing of its steps but writes them to a metric file (TensorBoard).
        step, total, loss = mp.step, mp.total, ev.metrics.newest_loss()
    words = progress(step, total, loss, act.rate, act.rate_unit, epoch)
    if left is not None and step is not None and total and step < total:
        head = progress(step, total, epoch=epoch)
        words = f"{head}, ETA {eta_words(left)}{words[len(head):]}"
    if act.metrics_at is not None and (act.step_at is None or act.metrics_at > act.step_at):
        words += f"{', ' if words else ''}metrics written to {act.metrics_file} {_age(ev.now, act.metrics_at)}"
    return _one_line(words)


def silence_words(ev: Evidence, silent_for: float, heartbeat: str = "") -> str:
    """What is silent and what is not, in one line, when the stacks say nothing more."""
    act = ev.activity
    busy = act.cpu_busy if act is not None else None
    kind = "busy but silent" if busy else ("idle hang" if busy is False else "silent")
    quiet = ["no step", "no log output"] + ([heartbeat] if heartbeat else [])
    cpu = cpu_words(act)
    words = f"{kind}: {', '.join(quiet)} for {_duration(silent_for)}; " + (cpu if busy is None else f"process tree {cpu}")
    if act is not None and act.log_grew_at is not None and act.program_output:
        words += f"; last output {_age(ev.now, act.log_grew_at)}"
    fresh = fresh_file_words(ev)
    return f"{words}; {fresh}" if fresh else words


def fresh_file_words(ev: Evidence) -> str:
    """ "TensorBoard runs/exp1 written 2 s ago, no new step for 3 min": a metric file that
    changed after its last new step (a monitoring thread that keeps it fresh while the loop is
    hung), "" when none did."""
    act = ev.activity
    if act is None or act.metrics_changed_at is None or not act.metrics_changed_file:
        return ""
    if act.metrics_at is not None and act.metrics_changed_at <= act.metrics_at:
        return ""
    since = act.metrics_at if act.metrics_file == act.metrics_changed_file else None
    no_step = f"no new step for {_duration(max(0.0, ev.now - since))}" if since is not None else "no new step"
    return f"{act.metrics_changed_file} written {_age(ev.now, act.metrics_changed_at)}, {no_step}"


def unlogged_progress_words(ev: Evidence, views: list[ThreadView]) -> str:
    """Why a run whose own code moves prints nothing, as far as a log can tell."""
    return "it prints nothing, or only to a terminal (a rich or tqdm bar without one)"


def limit_words(silent: str, stall: StallLimit) -> str:
    """A progress check's cause past the limit: "no output for 12 s (limit 10 s: 5x ...)"."""
    return f"{silent} (limit {stall.words()})"


def stall_limit_check(stall: StallLimit) -> Check | None:
    """A "Silence limit" check once the pace (or a known pause) sets the limit; the fixed rule
    alone needs no line (`--check --json` carries it as stall_limit_s always)."""
    return Check.of(CheckId.STALL_LIMIT, OK, _one_line(stall.to_words()), "") if stall.from_pace else None


def status_problem_check(problem: str) -> Check:
    """status.json there but unreadable: the run is judged as any program's."""
    return Check.of(CheckId.STATUS, WARN, _one_line(problem), "judged from the log and CPU", None)


def no_output_check(uptime: float) -> Check:
    return Check.of(CheckId.PROGRESS, PENDING, f"no output from the program yet (up {_duration(uptime)})", "")


def no_progress_line_check(now: float, last: float, uptime: float) -> Check:
    return Check.of(CheckId.PROGRESS, PENDING, f"output {_age(now, last)}, no progress line yet (up {_duration(uptime)})",
                    "", last)


def progress_check(parsed: str, now: float, last: float) -> Check:
    return Check.of(CheckId.PROGRESS, OK, f"{parsed or 'log output'}, last {_age(now, last)}", "", last)


def compiling_check(silent: str, what: str, where: str, threads: int, act: Activity | None,
                    compile_stall_after_s: float, last: float | None) -> Check:
    """Silent while compiling (or importing) with CPU: the long limit."""
    return Check.of(CheckId.PROGRESS, WARN, f"{silent}: {what} ({threads} thread(s) in {where}), {cpu_words(act)}",
                    f"STALLED after compile_stall_after_s ({compile_stall_after_s:.0f} s) of this", last)


def stack_moves_check(silent: str, moves: str, hint: str, now: float, act: Activity) -> Check:
    """Silent, but its stack moves: work whose progress never reaches the log."""
    return Check.of(CheckId.PROGRESS, WARN, f"{silent}, but {moves} {_age(now, act.stack_moved_at)}", hint,
                    act.stack_moved_at)


def busy_silent_check(silent: str, act: Activity | None, compile_stall_after_s: float, last: float | None) -> Check:
    """Silent and busy with no stacks to tell what it is: within the compile limit."""
    return Check.of(CheckId.PROGRESS, WARN, f"{silent}, but the process tree is {cpu_words(act)}",
                    f"a compile or data preparation? STALLED after compile_stall_after_s "
                    f"({compile_stall_after_s:.0f} s) of this", last)


def silent_check(silent: str, stall: StallLimit, hint: str, last: float | None) -> Check:
    """Nothing advanced past the limit (STALLED)."""
    return Check.of(CheckId.PROGRESS, FAIL, _one_line(limit_words(silent, stall)), hint, last)


def metric_files_check(view: MetricsView | None) -> Check | None:
    """The metric files that could not be read, or not all of them (a field over csv's limit,
    JSON nested too deep, a store that does not answer in time, a search stopped early), each
    with its source: the other sources are read, and the verdict is judged without them."""
    if view is None:
        return None
    bad = [f"{s.where}: {s.note}" for s in view.sources if s.note] + list(view.notes)
    if not bad:
        return None
    return Check.of(CheckId.METRIC_FILES, WARN, _one_line("; ".join(bad), 600),
                    "the other sources are read; the verdict is judged without what is named")
