"""The silence limit learned from a run's pace: the rule as a table, known pauses from stacks
and phases, and the verdict it gives through the real `evaluate`.

Real programs under real time (torchrun with gloo ranks, a run that evaluates and saves, the
progress bars) are in test_stall_limit_programs.py.
"""

from __future__ import annotations

import json

import pytest

from dflash_tui.contract.rundir import EventKind, ProbeReport, ProbeThread, make_event, to_json
from dflash_tui.run.evidence.pace import Pace, step_times
from dflash_tui.run.stacks.pauses import pause_in
from dflash_tui.run.verdict.checklist import CheckState, Verdict
from dflash_tui.run.verdict.combine import combine
from dflash_tui.run.verdict.health import Limits, evaluate
from dflash_tui.run.verdict.stall_limit import learned_limit, stall_limit

from tests.run.verdict.test_health import NOW, act, by_id, plain, status, files
from tests.watch.test_node_plan import node

LIM = Limits(stall_after_s=60, compile_stall_after_s=600, launch_deadline_s=1.0)
SITE = "/opt/venv/lib/python3.11/site-packages"
SAVE = [f"{SITE}/torch/serialization.py:967 _save", f"{SITE}/torch/serialization.py:650 save",
        "/home/u/train.py:40 save_checkpoint", "/home/u/train.py:90 main"]
STEP = ["/home/u/train.py:20 step", "/home/u/train.py:90 main"]


@pytest.mark.parametrize("intervals, ceiling, seconds, rule", [
    ([0.5] * 9, 60, None, None),                  # 9 intervals: no cadence yet
    ([0.5] * 10, 60, 10.0, "learned"),            # 5 x 0.5 s is below the floor
    ([0.5] * 30 + [3.0], 60, 15.0, "learned"),    # the slowest counts
    ([2.0] * 9 + [1.0], 60, 10.0, "learned"),
    ([20.0] * 12, 60, 60.0, "stall_after_s"),     # past the ceiling: the ceiling
    ([0.5] * 12, 4, 4.0, "stall_after_s"),        # a ceiling below the floor stays the ceiling
])
def test_the_rule(intervals, ceiling, seconds, rule):
    got = learned_limit(intervals, ceiling)
    if seconds is None:
        assert got is None
        return
    assert (got.seconds, got.rule) == (seconds, rule), got


def test_the_words_say_the_limit_and_why():
    lim = learned_limit([1.5] * 10, 60)
    assert lim.words() == "10 s: 5x its slowest step of 1.5 s, at least 10 s"
    assert lim.stalled_words(9.0) == "STALLED after 9 s: 6x its slowest step of 1.5 s"
    assert learned_limit([3.0] * 10, 60).words() == "15 s: 5x its slowest step of 3.0 s"
    fixed = stall_limit(60, stall_after_s=60, learn=True, intervals=[1.0] * 3)
    assert fixed.to_words() == "stall_after_s 60 s: no cadence yet (3 of 10 steps)" and fixed.stalled_words(70) == ""


def test_known_pauses_and_learn_stall_keep_their_limits():
    pace = [1.0] * 20
    assert stall_limit(60, stall_after_s=60, learn=True, intervals=pace).seconds == 10
    assert stall_limit(600, stall_after_s=60, learn=True, intervals=pace).rule == "compile_stall_after_s"
    off = stall_limit(60, stall_after_s=60, learn=False, intervals=pace)
    assert (off.seconds, off.to_words()) == (60, "stall_after_s 60 s: learn_stall = false")
    ckpt = stall_limit(60, stall_after_s=60, learn=True, intervals=pace, pause="saving a checkpoint (torch.save)")
    assert (ckpt.seconds, ckpt.to_words()) == (60, "stall_after_s 60 s: saving a checkpoint (torch.save)")


@pytest.mark.parametrize("frames, words", [
    (SAVE, "saving a checkpoint (torch.save)"),
    ([f"{SITE}/torch/distributed/checkpoint/state_dict_saver.py:120 save", *STEP],
     "saving a checkpoint (save)"),
    (["/usr/lib/python3.11/shutil.py:200 copyfileobj", "/home/u/ckpt.py:8 save_model", *STEP],
     "saving a checkpoint (save_model)"),
    (["/home/u/train.py:30 forward", "/home/u/train.py:50 evaluate", "/home/u/train.py:90 main"],
     "evaluating (evaluate)"),
    ([f"{SITE}/torch/nn/modules/module.py:1500 _call_impl", "/home/u/t.py:9 run_validation"],
     "evaluating (run_validation)"),
    ([f"{SITE}/transformers/trainer.py:3000 evaluation_loop", f"{SITE}/transformers/trainer.py:2900 evaluate"],
     "evaluating (evaluation_loop)"),
    # activation checkpointing runs inside a step; torch.load is no save; a step is no pause
    ([f"{SITE}/torch/utils/checkpoint.py:400 checkpoint", *STEP], ""),
    ([f"{SITE}/torch/serialization.py:1000 load", *STEP], ""),
    (STEP, ""),
    (["/home/u/train.py:12 retrieve_values", *STEP], ""),
])
def test_pauses_from_the_stack(frames, words):
    assert pause_in(frames) == words


def test_the_pace_counts_intervals_between_newer_progress_only():
    pace = Pace(recent=3)
    for t in (None, 10.0, 10.0, 11.0, 10.5, 13.0, 14.0, 16.0):
        pace.saw(t)
    assert pace.intervals == (2.0, 1.0, 2.0)      # the newest 3: 11->13, 13->14, 14->16


def paced(silent_s: float, **kw) -> dict:
    """A plain program that printed a step every second for a minute, silent for `silent_s`."""
    a = act(log_grew_at=NOW - silent_s, program_output=True, output_polls=60, step=60, step_at=NOW - silent_s,
            step_source="log", cpu_cores=0.0, cpu_window_s=1.0, intervals=(1.0,) * 60)
    return dict(activity=a, **kw)


def test_a_paced_program_silent_past_its_learned_limit_is_stalled():
    assert evaluate(plain(**paced(9.0)), LIM).verdict is Verdict.RUNNING
    cl = evaluate(plain(**paced(12.0)), LIM)
    assert cl.verdict is Verdict.STALLED, cl
    assert cl.summary.endswith("STALLED after 12 s: 12x its slowest step of 1.0 s"), cl.summary
    assert by_id(cl)["progress"].cause.endswith("(limit 10 s: 5x its slowest step of 1.0 s, at least 10 s)")
    assert by_id(cl)["stall_limit"].state is CheckState.OK
    d = json.loads(json.dumps(cl.to_dict()))
    assert d["stall_limit_s"] == 10.0 and d["stall_limit_why"].startswith("10 s: 5x its slowest step")


def test_learn_stall_false_keeps_the_fixed_limit():
    cl = evaluate(plain(**paced(12.0)), Limits(stall_after_s=60, learn_stall=False))
    assert cl.verdict is Verdict.RUNNING and cl.stall_limit_s == 60, cl


def test_a_save_or_an_eval_on_the_stacks_keeps_stall_after_s():
    saving = ProbeReport(run_id="r1", pid=200, time=NOW - 0.5, ppid=100, cpu_s=1.0,
                         threads=[ProbeThread(name="MainThread", ident=1, frames=SAVE)])
    cl = evaluate(plain(probes=[saving], **paced(30.0)), LIM)
    assert cl.verdict is Verdict.RUNNING and cl.stall_limit_s == 60, cl
    assert "saving a checkpoint (torch.save)" in by_id(cl)["stall_limit"].cause


def test_the_trainers_phases_keep_stall_after_s_and_its_steps_learn():
    fs = files("launch.sh", "launch.json", "train.log", "status.json")
    quiet = dict(time=NOW - 1, heartbeat_time=NOW - 1)

    def judged(phase: str):
        st = status(phase=phase, **quiet)
        st.threads[0].last_step_time = NOW - 20
        a = act(intervals=(0.5,) * 40, samples=40)
        return evaluate(plain(files=fs, status=st, activity=a), LIM)
    cl = judged("training")
    assert cl.verdict is Verdict.STALLED and "(limit 10 s: 5x its slowest step of 0.5 s" in by_id(cl)["steps"].cause
    for phase in ("evaluating", "checkpointing"):
        cl = judged(phase)
        assert cl.verdict is Verdict.RUNNING and cl.stall_limit_s == 60, (phase, cl)


def test_an_interval_a_look_saw_paused_is_no_step():
    pace = Pace()
    pace.saw(1.0)
    pace.saw(2.0)
    pace.pausing()          # an evaluation seen: the next interval is left out
    pace.saw(12.0)
    pace.saw(13.0)
    assert pace.intervals == (1.0, 1.0)


def test_a_run_of_nodes_stalls_at_the_limit_of_the_node_that_trips_first():
    a, b = node("gpu1", 0, Verdict.RUNNING), node("gpu2", 1, Verdict.RUNNING)
    a.report.checklist.stall_limit_s, a.report.checklist.stall_limit_why = 60.0, "stall_after_s 60 s: no cadence yet"
    b.report.checklist.stall_limit_s, b.report.checklist.stall_limit_why = 12.0, "12 s: 5x its slowest step of 2.4 s"
    cl = combine([a, b]).checklist()
    assert (cl.stall_limit_s, cl.stall_limit_why) == (12.0, "node gpu2: 12 s: 5x its slowest step of 2.4 s")


def test_a_first_look_takes_the_pace_of_the_step_events_it_reads():
    lines = [to_json(make_event(EventKind.STEP, 1000.0 + 2 * i, step=i, loss=1.0)) for i in range(12)]
    data = ("cut-off tail of a line}\n" + "\n".join(lines) + '\n{"v": 1, "kind": "st').encode()
    assert step_times(data) == [1000.0 + 2 * i for i in range(12)]
    assert learned_limit(pace_of(step_times(data)), 60).words() == "10 s: 5x its slowest step of 2.0 s"


def pace_of(times):
    pace = Pace()
    for t in times:
        pace.saw(t)
    return pace.intervals
