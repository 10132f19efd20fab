"""What a recovery's records say: who stopped a run, and what a give-up leaves running."""

from __future__ import annotations

from dflash_tui.recording.recovery.recovery import left_running, recovery_stopper
from dflash_tui.recording.store.change import run_id_of
from tests.support import scenarios as R


def test_a_give_up_on_a_live_hang_says_it_is_left_running_and_what_to_do():
    report = R.stalled()
    words = left_running("gpu1", report, run_id_of(report))
    assert words.startswith(f"; the run is left running (pid {report.launch.pid}, STALLED): "), words
    assert "dflash-tui --stop -p gpu1" in words
    assert left_running("gpu1", R.crashed(), run_id_of(R.crashed())) == ""     # nothing is left
    assert left_running("gpu1", report, "another-run") == ""                    # not this run's report


def test_a_recoverys_stop_names_the_policy_and_the_attempt():
    assert recovery_stopper(1, 3) == "the recovery policy, attempt 1/3"
