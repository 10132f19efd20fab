"""The checkpoint a recovery resumes from (recording/recovery/rollback.py): the newest complete one at or
before the last good step, never a torn or half-written one, on any verdict."""

from __future__ import annotations

from dflash_tui.recording.recovery.rollback import choose, last_good_step, rollback_words
from dflash_tui.run.evidence.checkpoints import Checkpoint, CheckpointsView
from dflash_tui.run.evidence.divergence import Divergence


def ck(step: int, why: str = "", writing: bool = False) -> Checkpoint:
    return Checkpoint(f"/r/checkpoint-{step}", "hf", step, 100, 1000.0 + step, why, writing)


VIEW = CheckpointsView((ck(100), ck(200), ck(250, why="model.safetensors: cut"), ck(300), ck(350, writing=True)))


def test_a_divergence_rolls_back_to_the_newest_complete_checkpoint_at_or_before_its_last_good_step():
    nan = Divergence("non-finite", "train/loss", "train.log", 230, float("nan"), 1, (229, 0.61))
    assert last_good_step(nan) == 229
    assert choose(VIEW, last_good_step(nan)).step == 200
    assert choose(VIEW, 200).step == 200 and choose(VIEW, 199).step == 100 and choose(VIEW, 99) is None


def test_any_other_verdict_takes_the_newest_complete_one_skipping_torn_and_half_written():
    assert choose(VIEW, None).step == 300
    assert choose(CheckpointsView((ck(100), ck(200, why="cut"))), None).step == 100
    assert choose(None, None) is None


def test_the_notification_says_what_where_and_what_was_lost():
    detail = {"path": "/r/checkpoint-200", "step": 200, "format": "hf", "age_s": 120.0, "diverged_at": 230,
              "what": "train/loss NaN"}
    assert rollback_words(detail) == ("train/loss NaN at step 230; rolled back to checkpoint-200 "
                                      "(complete, 2 min old); lost 30 steps")
    plain = {"path": "/r/checkpoint-300", "step": 300, "format": "hf", "age_s": 30.0}
    assert rollback_words(plain) == "resumed from checkpoint-300 (complete, 30 s old)"
