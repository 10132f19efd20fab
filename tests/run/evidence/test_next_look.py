"""NextLook (run/evidence/next_look.py): whether the next look comes past a step's cadence, from
the spacing of the looks so far. Pure."""

from __future__ import annotations

from dflash_tui.run.evidence.next_look import MIN_AHEAD_S, NextLook


def test_before_any_look_or_run_the_next_look_is_due():
    n = NextLook()
    assert n.due(None, 5.0) and n.due(100.0, 5.0)
    n.saw(100.0)
    assert n.due(None, 5.0) and not n.due(100.0, 5.0)


def test_the_longest_recent_gap_says_when_the_next_look_comes():
    n = NextLook()
    for t in (0.0, 3.0, 6.0):             # a steady run looked at every 3 s
        n.saw(t)
    assert n.ahead_s() == 3.0
    assert n.due(4.0, 5.0) and not n.due(5.0, 5.0)
    n.saw(6.2)                            # a look woken early by an action keeps the 3 s
    assert n.ahead_s() == 3.0
    for t in (7.0, 8.0, 9.0, 10.0):       # four looks a second apart: back to a second
        n.saw(t)
    assert n.ahead_s() == MIN_AHEAD_S


def test_looks_faster_than_a_second_still_look_a_second_ahead():
    n = NextLook()
    for t in (0.0, 0.25, 0.5):
        n.saw(t)
    assert n.ahead_s() == MIN_AHEAD_S and n.due(0.0, 1.5) and not n.due(0.0, 1.6)


def test_a_clock_that_went_back_forgets_the_gaps_and_a_step_ahead_of_it_is_due():
    n = NextLook()
    for t in (100.0, 110.0):
        n.saw(t)
    n.saw(50.0)
    assert n.ahead_s() == MIN_AHEAD_S
    assert n.due(100.0, 5.0)              # the step's last run lies in this clock's future
