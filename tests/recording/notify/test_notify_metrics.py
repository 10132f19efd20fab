"""A notification carries the run's newest loss and its ETA, also for a program whose only
numbers are in its metric files (a TensorBoard writer that prints nothing)."""

from __future__ import annotations

import sys

from dflash_tui.contract.rundir import LaunchRecord
from dflash_tui.recording.store.change import change_of
from dflash_tui.recording.notify.notify import message
from dflash_tui.remote.agent import open_ops
from dflash_tui.remote.local import LocalTarget
from dflash_tui.run.evidence.metric_files.reader import MetricFiles
from dflash_tui.run.verdict.checklist import Checklist, Verdict
from dflash_tui.run.verdict.report import RunProgress, RunReport


def _report(verdict: Verdict, **kw) -> RunReport:
    launch = LaunchRecord(run_id="r1", pid=123, pgid=123, start_ticks=1, start_time=1.0, argv=["x"])
    return RunReport(time=0.0, profile="p", target_label="local", run_dir="/d",
                     checklist=Checklist(verdict, [], "why"), launch=launch, **kw)


async def test_the_loss_of_a_tensorboard_file_and_the_eta_reach_the_notification(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path / "runs"))
    for step in range(1, 41):
        w.add_scalar("train/loss", 2.0 / step, step)
    w.close()
    files = MetricFiles()
    ops = await open_ops(LocalTarget(), python=sys.executable, prefer="agent")
    try:
        await files.poll(ops, str(tmp_path), 0.0)
    finally:
        await ops.close()
    quiet = change_of(_report(Verdict.STALLED, metrics=files.view()), previous="RUNNING", before=None, now=0.0)
    assert abs(quiet.evidence.loss - 0.05) < 1e-6      # float32 in the file
    assert "loss 0.05" in message(quiet, "failed", None)[1]

    ahead = _report(Verdict.RUNNING, progress=RunProgress("log", 40, 200, 1.2, eta_s=4800.0))
    body = message(change_of(ahead, previous="STARTING", before=None, now=0.0), "recovered", None)[1]
    assert "step 40/200, loss 1.2, ETA 1 h 20 min" in body, body
