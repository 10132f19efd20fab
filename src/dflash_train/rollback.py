"""The checkpoint a watcher's recovery chose for this relaunch, read from the environment its
wrapper sets (src/dflash_tui/recording/recovery/README.md):

- DFLASH_RESUME_FROM: the checkpoint's path (unset: none chosen; --resume takes the newest);
- DFLASH_DIVERGED_AT: after a DIVERGED run, its first bad step.

With --resume the trainer loads that checkpoint, not its newest (which may hold the diverged
run's weights), and passes over the batches of the steps from it to the first bad one: the
window that led to the divergence is not trained on again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from dflash_train.checkpoint import CheckpointError

RESUME_FROM = "DFLASH_RESUME_FROM"
DIVERGED_AT = "DFLASH_DIVERGED_AT"


@dataclass(frozen=True)
class Rollback:
    path: str = ""                  # "": no checkpoint was chosen
    diverged_at: int | None = None  # the first bad step; None: no divergence led here

    def window(self, step: int) -> int:
        """How many steps' batches a resume from `step` passes over: those of steps step+1 to
        the first bad one (0 when nothing diverged after `step`)."""
        return max(0, self.diverged_at - step) if self.diverged_at is not None else 0


def from_env(env: Mapping[str, str] = os.environ) -> Rollback:
    """The recovery's choice; CheckpointError names a DFLASH_DIVERGED_AT that is no step."""
    word = env.get(DIVERGED_AT, "").strip()
    if not word:
        return Rollback(env.get(RESUME_FROM, ""))
    try:
        at = int(word)
    except ValueError:
        at = -1
    if at < 1:
        raise CheckpointError(f"{DIVERGED_AT}={word!r} is no step number; unset it to resume without "
                              "passing over the diverged window")
    return Rollback(env.get(RESUME_FROM, ""), at)
