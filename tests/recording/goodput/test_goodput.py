"""Goodput from outside (recording/goodput/goodput.py), from scripted verdict changes: each band lands
in its cause, the silence before a STALLED verdict is stalled time, and the steps a failure
threw away are lost progress at the run's own step time."""

from __future__ import annotations

import pytest

from dflash_tui.recording.store.change import Evidence, VerdictChange
from dflash_tui.recording.goodput.goodput import goodput

T0 = 1_000_000.0


def ch(t: float, run: str, state: str, step: int | None = None, *, step_at: float | None = None,
       checkpoint_s: float | None = None) -> VerdictChange:
    return VerdictChange("p", run, T0 + t, state, "", "", evidence=Evidence(
        step=step, step_at=None if step_at is None else T0 + step_at, checkpoint_s=checkpoint_s))


def test_a_hang_stopped_and_resumed_from_its_checkpoint():
    changes = [ch(0, "r1", "STARTING"), ch(2, "r1", "RUNNING", 1), ch(12, "r1", "STALLED", 6),
               ch(15, "r1", "STOPPED", 6), ch(20, "r2", "STARTING"), ch(21, "r2", "RUNNING", 7),
               ch(31, "r2", "FINISHED", 20)]
    g = goodput(changes, T0 + 500, stall_after_s=2)
    assert g.wall_s == 31                             # to the FINISHED change, not to now
    assert g.badput_s == {"queued": 0, "starting": 3, "stalled": 2 + 3, "down": 5, "lost_progress": 0,
                          "rollback": 0, "checkpoint": 0, "unreachable": 0}
    assert g.good_s == 8 + 10 and g.percent == pytest.approx(100 * 18 / 31)
    assert g.runs["r1"]["good"] == 8 and g.runs["r1"]["down"] == 5 and g.runs["r2"]["good"] == 10
    assert g.words() == "goodput 58 % of 31 s since the first launch; lost 13 s: 3 s starting, 5 s stalled, 5 s down"
    assert g.to_json()["badput_s"]["stalled"] == 5.0


def test_a_crash_with_no_checkpoint_loses_its_steps():
    # 10 s of RUNNING from step 1 to step 11: 1 s a step; the next run starts again at step 1.
    changes = [ch(0, "r1", "RUNNING", 1), ch(10, "r1", "CRASHED", 11), ch(12, "r2", "RUNNING", 1)]
    g = goodput(changes, T0 + 20, stall_after_s=60)
    assert g.wall_s == 20                             # the newest run still runs: to now
    assert g.badput_s["lost_progress"] == 10 and g.badput_s["down"] == 2
    assert g.good_s == 8 and g.runs["r1"]["good"] == 0
    assert g.lost_words() == "lost 12 s: 2 s down, 10 s lost progress"


def test_a_diverged_run_rolled_back_counts_its_thrown_away_steps_and_its_garbage_as_rollback():
    # RUNNING steps 1..21 at 1 s a step; NaN from step 21 (DIVERGED, 5 s of garbage steps); the
    # relaunch resumes from checkpoint-10 at step 11: 11 steps thrown away.
    changes = [ch(0, "r1", "RUNNING", 1), ch(20, "r1", "DIVERGED", 21), ch(25, "r1", "STOPPED", 21),
               ch(27, "r2", "RUNNING", 11), ch(56, "r2", "FINISHED", 40)]
    g = goodput(changes, T0 + 100, stall_after_s=60)
    assert g.badput_s["rollback"] == 11 + 5 and g.badput_s["lost_progress"] == 0 and g.badput_s["down"] == 2
    assert g.runs["r1"]["good"] == 9 and g.good_s == 9 + 29
    assert "16 s rollback" in g.lost_words()
    # It went on stepping until the stop (steps 22..25): those are its DIVERGED band's, not
    # counted again at the good steps' pace.
    changes[2] = ch(25, "r1", "STOPPED", 25)
    assert goodput(changes, T0 + 100, stall_after_s=60).badput_s["rollback"] == 11 + 5


def test_a_stalled_run_is_down_from_the_recoverys_stop():
    # The STOPPED change came late (the watcher was restarted): the stop's own time counts.
    changes = [ch(0, "r1", "RUNNING", 1), ch(10, "r1", "STALLED", 5), ch(30, "r1", "STOPPED", 5),
               ch(31, "r2", "RUNNING", 6), ch(41, "r2", "FINISHED", 16)]
    g = goodput(changes, T0 + 100, stall_after_s=2, stops={"r1": T0 + 12})
    assert g.badput_s["stalled"] == 2 + 2 and g.badput_s["down"] == 18 + 1 and g.good_s == 8 + 10


def test_a_stop_under_way_is_down_and_still_live():
    # STALLED, then the stop's 4 s while it saves (STOPPING, not progress), then STOPPED.
    changes = [ch(0, "r1", "RUNNING", 1), ch(10, "r1", "STALLED", 5), ch(12, "r1", "STOPPING", 5)]
    g = goodput(changes, T0 + 16, stall_after_s=2)
    assert g.wall_s == 16 and g.badput_s["down"] == 4 and g.good_s == 8   # still going: to now
    g = goodput([*changes, ch(16, "r1", "STOPPED", 5)], T0 + 100, stall_after_s=2)
    assert g.wall_s == 16 and g.badput_s["stalled"] == 2 + 2 and g.badput_s["down"] == 4


def test_progress_counts_from_the_steps_own_times():
    # r1's last step was at 9.5 s, its STALLED verdict came at 12 s: 2.5 s of silence, whatever
    # stall_after_s says. r2 resumed after step 6: RUNNING recorded at 23 s showing step 9 made
    # at 22.5 s, step 19 at 27.5 s (0.5 s a step), so its first step (7) was made at 21.5 s,
    # 1.5 s into the STARTING band that began at 20 s.
    changes = [ch(0, "r1", "RUNNING", 1, step_at=0), ch(12, "r1", "STALLED", 6, step_at=9.5),
               ch(15, "r1", "STOPPED", 6), ch(20, "r2", "STARTING"), ch(23, "r2", "RUNNING", 9, step_at=22.5),
               ch(28, "r2", "FINISHED", 19, step_at=27.5)]
    g = goodput(changes, T0 + 100, stall_after_s=60)
    assert g.runs["r1"]["good"] == 9.5 and g.runs["r1"]["stalled"] == 2.5 + 3
    assert g.runs["r2"]["starting"] == pytest.approx(1.5) and g.runs["r2"]["good"] == pytest.approx(6.5)
    assert g.good_s + sum(g.badput_s.values()) == pytest.approx(g.wall_s)


def test_a_relaunch_from_step_zero_counts_from_its_first_seen_step():
    # Its steps do not continue past the run before: no way to tell its first step, so the
    # shown step's own time.
    changes = [ch(0, "r1", "RUNNING", 1), ch(10, "r1", "CRASHED", 11), ch(12, "r2", "STARTING"),
               ch(16, "r2", "RUNNING", 2, step_at=15), ch(20, "r2", "RUNNING", 6, step_at=19)]
    g = goodput(changes, T0 + 20, stall_after_s=60)
    assert g.runs["r2"]["starting"] == 3 and g.runs["r2"]["good"] == 5


def test_checkpoint_saves_the_trainer_reported_are_their_own_cause():
    changes = [ch(0, "r1", "STARTING"), ch(1, "r1", "RUNNING", 1, checkpoint_s=0.0),
               ch(31, "r1", "FINISHED", 30, checkpoint_s=4.0)]
    g = goodput(changes, T0 + 100, stall_after_s=60)
    assert g.badput_s["checkpoint"] == 4 and g.good_s == 26 and g.runs["r1"]["checkpoint"] == 4
    assert g.to_json()["badput_s"]["checkpoint"] == 4.0
    assert g.lost_words() == "lost 5 s: 1 s starting, 4 s checkpoint"


def test_nothing_recorded():
    assert goodput([], T0, 60).percent is None
    assert goodput([], T0, 60).words() == "goodput: nothing recorded yet"


def test_goodput_starts_at_the_first_launch_not_when_the_watcher_started():
    # The watcher looked at t=0 (nothing launched; the run before it had finished), the run was
    # launched 120 s later and ran for 3 minutes.
    for before in (ch(0, "", "NO RUN"), ch(0, "r0", "FINISHED", 50)):
        changes = [before, ch(120, "r1", "STARTING"), ch(122, "r1", "RUNNING", 1)]
        g = goodput(changes, T0 + 300, stall_after_s=60)
        assert g.wall_s == 180 and g.badput_s["down"] == 0 and g.good_s == 178, g.to_json()
        assert g.words().startswith("goodput 99 % of 3 min since the first launch")
    assert goodput([ch(0, "", "NO RUN")], T0 + 300, stall_after_s=60).words() == "goodput: nothing recorded yet"
