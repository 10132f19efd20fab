"""The bundled trainer relaunched by a rollback (DFLASH_RESUME_FROM, DFLASH_DIVERGED_AT): it loads
the checkpoint the recovery chose, not its newest, and passes over the batches of the diverged
window; a later resume keeps them passed over."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from dflash_train.checkpoint import CheckpointError
from dflash_train.data import BatchSource, SyntheticCorpus
from dflash_train.rollback import Rollback, from_env
from dflash_tui.contract import rundir

FAST = ["--compile", "off", "--eval-every", "0", "--log-every", "1", "--batch-size", "2", "--checkpoint-every", "4"]


def test_a_source_skipping_batches_yields_the_later_ones_and_keeps_its_skip_in_its_state():
    stream = SyntheticCorpus().stream(20_000, seed=0)
    plain = BatchSource(stream, 2, (64, 128), seed=3)
    skipping = BatchSource(stream, 2, (64, 128), seed=3, skip=4)
    assert torch.equal(skipping.batch_at(1).input_ids, plain.batch_at(5).input_ids)
    again = BatchSource.from_state(stream, json.loads(json.dumps(skipping.state())))
    assert again.skip == 4 and torch.equal(again.batch_at(0).input_ids, plain.batch_at(4).input_ids)


def test_the_diverged_window_is_the_steps_from_the_checkpoint_to_the_first_bad_one():
    assert from_env({"DFLASH_RESUME_FROM": "/r/c", "DFLASH_DIVERGED_AT": "230"}) == Rollback("/r/c", 230)
    assert Rollback("/r/c", 230).window(200) == 30 and Rollback("/r/c", 230).window(240) == 0
    assert from_env({"DFLASH_RESUME_FROM": "/r/c"}).window(200) == 0 and from_env({}) == Rollback()
    with pytest.raises(CheckpointError, match=r"DFLASH_DIVERGED_AT='x' is no step number; unset it"):
        from_env({"DFLASH_DIVERGED_AT": "x"})


def _train(run_dir, *args, **env):
    proc = subprocess.run([sys.executable, "-m", "dflash_train", "--run-dir", str(run_dir), *args, *FAST],
                          env={**os.environ, "DFLASH_RUN_ID": "r", "PYTHONUNBUFFERED": "1", **env},
                          capture_output=True, text=True, timeout=300)
    return proc


def _losses(run_dir, after: int = 0) -> dict[int, float]:
    """The step events' losses, from the `after`-th event on (a resumed run appends)."""
    with open(os.path.join(run_dir, rundir.EVENTS_JSONL)) as fh:
        events = rundir.parse_events(fh).events
    return {e["step"]: e["loss"] for e in events[after:] if e["kind"] == "step"}


def _events_count(run_dir) -> int:
    with open(os.path.join(run_dir, rundir.EVENTS_JSONL)) as fh:
        return len(rundir.parse_events(fh).events)


def test_a_rollback_resume_loads_the_chosen_checkpoint_and_passes_over_the_diverged_window(tmp_path):
    run, control = tmp_path / "run", tmp_path / "control"
    proc = _train(run, "--steps", "6")                       # checkpoints at steps 4 and 6
    assert proc.returncode == 0, proc.stderr[-2000:]
    first = _losses(run)
    shutil.copytree(run, control)
    chosen = str(run / rundir.CHECKPOINTS_DIR / "step-00000004")
    n = _events_count(run)

    # Rolled back to step 4 after a divergence first seen at step 6: steps 5 and 6 train on the
    # batches of steps 7 and 8.
    proc = _train(run, "--steps", "8", "--resume", DFLASH_RESUME_FROM=chosen, DFLASH_RESUME_STEP="4",
                  DFLASH_DIVERGED_AT="6")
    assert proc.returncode == 0, proc.stderr[-2000:]
    log = (run / rundir.TRAIN_LOG).read_text()
    assert f"resume: loaded checkpoint at step 4 of run r from {chosen}" in log, log[-3000:]
    assert "resume: passing over the batches of steps 5..6 (the diverged window; 2 batches skipped in all)" in log
    rolled = _losses(run, n)
    assert sorted(rolled) == [5, 6, 7, 8] and rolled[5] != first[5], (rolled, first)
    saved = torch.load(run / rundir.CHECKPOINTS_DIR / "step-00000008" / "state.pt", weights_only=True)
    assert saved["data"]["skip"] == 2        # a later resume goes on past the window too

    # The control: the same chosen checkpoint with no divergence trains on the same batches again.
    n = _events_count(control)
    proc = _train(control, "--steps", "8", "--resume",
                  DFLASH_RESUME_FROM=str(control / rundir.CHECKPOINTS_DIR / "step-00000004"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _losses(control, n)[5] == first[5]
    assert "passing over" not in (control / rundir.TRAIN_LOG).read_text()

    proc = _train(control, "--steps", "10", "--resume", DFLASH_DIVERGED_AT="soon")
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "DFLASH_DIVERGED_AT='soon' is no step number" in proc.stderr


def test_a_poisoned_batch_is_logged_its_update_skipped_and_the_patience_stops_the_run(tmp_path):
    run = tmp_path / "run"
    proc = _train(run, "--steps", "6", "--inject-nan-at", "3")
    assert proc.returncode == 0, proc.stderr[-2000:]
    log = (run / rundir.TRAIN_LOG).read_text()
    assert "step 3/6 loss nan" in log and "step 3: loss nan, update skipped (1 in a row of --nonfinite-patience 3)" in log
    losses = _losses(run)
    assert losses[3] is None and all(isinstance(losses[s], float) for s in (1, 2, 4, 5, 6)), losses
    # The skipped update left the weights finite: the last checkpoint holds no NaN.
    saved = torch.load(run / rundir.CHECKPOINTS_DIR / "step-00000006" / "state.pt", weights_only=True)
    assert all(torch.isfinite(t).all() for t in saved["drafter"].values())

    proc = _train(tmp_path / "stops", "--steps", "6", "--inject-nan-at", "2", "--nonfinite-patience", "1")
    assert proc.returncode != 0
    assert "FloatingPointError: loss nan for 1 steps in a row, to step 2: lower --lr" in proc.stderr + \
        (tmp_path / "stops" / rundir.TRAIN_LOG).read_text(), proc.stderr[-2000:]
