"""The restart policy's decisions (recording/recovery/recover_policy.py), from recorded changes as the
watcher records them: restart after the backoff, and each give-up rule."""

from __future__ import annotations

from dflash_tui.recording.store.change import Evidence, VerdictChange
from dflash_tui.recording.recovery.recover_policy import (GIVE_UP, NOTHING, RESTART, Attempt, decide, failure_of,
                                                 unfixable)
from dflash_tui.recording.recovery.settings import RecoverPolicy

POLICY = RecoverPolicy(max_restarts=3, window_s=3600, backoff_s=10, no_progress_restarts=2)
T0 = 1_000_000.0


def tb(exc: str, *, frame: str = "/home/me/train.py", line: int = 42) -> tuple[str, ...]:
    return ("Traceback (most recent call last):",
            f'  File "{frame}", line {line}, in step',
            '  File "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1500, in _call_impl',
            exc)


def crashed(run_id: str, t: float, step: int | None, exc: str = "ValueError: shape mismatch", **kw) -> VerdictChange:
    return VerdictChange("p", run_id, t, "CRASHED", "RUNNING", f"exit code 1: {exc}",
                         evidence=Evidence(step=step, traceback=tb(exc, **kw), exit_code=1))


def stalled(run_id: str, t: float, step: int, at: str = "loader.py:88 in next_batch") -> VerdictChange:
    return VerdictChange("p", run_id, t, "STALLED", "RUNNING", "no progress for 30 s",
                         evidence=Evidence(step=step, stuck_at=at))


def attempt(change: VerdictChange, new_run: str) -> Attempt:
    return Attempt(failure_of(change, change.evidence.step), change.time, new_run)


def test_a_first_failure_restarts_after_the_backoff_doubled_each_time():
    first = crashed("r0", T0, 100)
    d = decide(POLICY, failure_of(first, 100), [], T0)
    assert (d.kind, d.attempt, d.at) == (RESTART, 1, T0 + 10)
    # A different failure after progress: restart 2, after twice the backoff.
    second = stalled("r1", T0 + 100, 180)
    d = decide(POLICY, failure_of(second, 180), [attempt(first, "r1")], T0 + 100)
    assert (d.kind, d.attempt, d.at) == (RESTART, 2, T0 + 100 + 20)


def test_off_or_not_a_trigger_is_nothing():
    f = failure_of(crashed("r0", T0, 1), 1)
    assert decide(None, f, [], T0).kind == NOTHING
    assert decide(RecoverPolicy(on=("STALLED",)), f, [], T0).kind == NOTHING


def test_the_same_failure_with_no_progress_gives_up():
    first = crashed("r0", T0, 5)
    again = crashed("r1", T0 + 50, 5)
    d = decide(POLICY, failure_of(again, 5), [attempt(first, "r1")], T0 + 50)
    assert d.kind == GIVE_UP and d.reason == "the same failure came back with no progress: ValueError: shape mismatch"
    # The same exception with progress between is a new chance; one from another frame is another failure.
    assert decide(POLICY, failure_of(crashed("r1", T0 + 50, 9), 9), [attempt(first, "r1")], T0 + 50).kind == RESTART
    other = crashed("r1", T0 + 50, 5, line=43)
    assert decide(POLICY, failure_of(other, 5), [attempt(first, "r1")], T0 + 50).kind == RESTART
    # A program that never shows a step: the same failure twice is no progress.
    nostep = [crashed("r0", T0, None), crashed("r1", T0 + 5, None)]
    d = decide(POLICY, failure_of(nostep[1], None), [attempt(nostep[0], "r1")], T0 + 5)
    assert d.kind == GIVE_UP
    # The same hang place twice, no step further: give up too.
    h0, h1 = stalled("r0", T0, 7), stalled("r1", T0 + 60, 7)
    assert decide(POLICY, failure_of(h1, 7), [attempt(h0, "r1")], T0 + 60).reason.startswith(
        "the same failure came back with no progress: stuck at loader.py:88")


def test_max_restarts_within_the_window():
    chain = [attempt(crashed(f"r{i}", T0 + i * 100, 10 * (i + 1), exc=f"E{i}: x"), f"r{i + 1}") for i in range(3)]
    last = crashed("r3", T0 + 300, 40, exc="E3: x")
    d = decide(POLICY, failure_of(last, 40), chain, T0 + 300)
    assert d.kind == GIVE_UP and d.reason == "3 restarts within 60 min (max_restarts = 3)"
    # Restarts older than the window do not count.
    assert decide(POLICY, failure_of(last, 40), chain, T0 + 3650).kind == RESTART
    assert decide(RecoverPolicy(max_restarts=0), failure_of(crashed("r0", T0, 1), 1), [], T0).kind == GIVE_UP


def test_restarts_in_a_row_without_a_new_best_step_give_up():
    # Different failures each time, none past step 50 (the first run's best).
    c0 = crashed("r0", T0, 50, exc="A: a")
    c1 = crashed("r1", T0 + 10, 30, exc="B: b")
    c2 = crashed("r2", T0 + 20, 45, exc="C: c")
    chain = [attempt(c0, "r1")]
    assert decide(POLICY, failure_of(c1, 30), chain, T0 + 10).kind == RESTART
    chain.append(Attempt(failure_of(c1, 30), T0 + 10, "r2"))
    d = decide(POLICY, failure_of(c2, 45), chain, T0 + 20)
    assert d.kind == GIVE_UP and d.reason == "2 restarts in a row reached no step past the best before them"


def test_failures_a_restart_cannot_fix():
    for exc, word in [("SyntaxError: invalid syntax", "syntax_error"),
                      ("ModuleNotFoundError: No module named 'flash_attn'", "import_error"),
                      ("ImportError: cannot import name 'x'", "import_error"),
                      ("FileNotFoundError: [Errno 2] No such file or directory: '/data/train.bin'", "missing_file")]:
        f = failure_of(crashed("r0", T0, 3, exc=exc), 3)
        assert f.unfixable == word
        d = decide(POLICY, f, [], T0)
        assert d.kind == GIVE_UP and d.reason == f"{exc}: a restart cannot fix it ({word})"
        # Each is overridable.
        assert decide(RecoverPolicy(give_up_on=()), f, [], T0).kind == RESTART
    # CUDA out of memory: one restart (fragmentation, a neighbour's memory), not at the same step again.
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert unfixable(Evidence(traceback=(oom,))) == "cuda_oom"
    o0, o1 = crashed("r0", T0, 120, exc=oom), crashed("r1", T0 + 30, 120, exc=oom)
    assert decide(POLICY, failure_of(o0, 120), [], T0).kind == RESTART
    d = decide(RecoverPolicy(no_progress_restarts=0), failure_of(o1, 120), [attempt(o0, "r1")], T0 + 30)
    assert d.reason == "CUDA out of memory again at step 120: a restart cannot fix it (cuda_oom)"


def test_a_stop_by_a_person_is_never_a_trigger():
    stop = VerdictChange("p", "r0", T0, "STOPPED", "RUNNING", "stopped by request")
    assert decide(RecoverPolicy(), failure_of(stop, 5), [], T0).kind == NOTHING
