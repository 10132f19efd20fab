"""A one-shot look's ETA (run/verdict/report.py `RunProgress.of`): one look sees one step, so its
pace is the trainer's own step time, else the steps since the launch; a step that counts within
an epoch (Lightning's bar, "Epoch 2: ... 51/64") is no run's progress and makes no ETA."""

from __future__ import annotations

from dflash_tui.contract.rundir import LaunchRecord
from dflash_tui.run.evidence.activity import Activity, ProgressTracker
from dflash_tui.run.evidence.observe import Evidence
from dflash_tui.run.verdict.report import RunProgress

T0 = 1_700_000_000.0


def _evidence(text: str, now: float) -> Evidence:
    tracker = ProgressTracker()
    tracker.parser.feed(text)
    act = tracker.activity(now, None)
    # The look saw the log's step advance just now (as read_files records it).
    act = Activity(**{**act.__dict__, "step_at": now, "step_source": "log",
                      "step_epoch": tracker.parser.progress.step_epoch})
    launch = LaunchRecord(run_id="r", pid=100, pgid=100, start_ticks=None, start_time=T0, argv=["x"])
    return Evidence(now=now, run_dir="/r", launch=launch, activity=act)


def test_a_step_n_of_m_log_has_an_eta_from_the_pace_since_the_launch():
    p = RunProgress.of(_evidence("step 40/200 loss 2.1\n", T0 + 20.0))
    assert (p.step, p.total) == (40, 200)
    assert p.eta_s == 80.0      # 160 steps left at 2 steps a second


def test_lightnings_per_epoch_bar_makes_no_run_eta():
    bar = "Epoch 2:  80%|████████  | 51/64 [00:10<00:02, 5.10it/s, v_num=0, train_loss=2.10]\n"
    p = RunProgress.of(_evidence(bar, T0 + 30.0))
    assert p.step == 51 and p.eta_s is None, p
