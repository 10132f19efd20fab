"""The Hugging Face Trainer's trainer_state.json: its log_history, and how far the run is.

The Trainer writes it whole into every checkpoint directory (out/checkpoint-40/) and at the
end into its output_dir; the newest one found is the source. Its `log_history` holds a dict
per logging step ({"loss": 2.1, "learning_rate": ..., "epoch": 0.5, "step": 40}, and the eval
dicts with "eval_loss"); `global_step` of `max_steps` is the run's exact progress. A file that
does not parse (the Trainer rewriting it while it was read) is read again at the next poll.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ....contract.rundir import finite_number
from ..metric_point import MetricPoint

NAME = "trainer_state.json"
MAX_BYTES = 8 << 20
_NOT_SERIES = frozenset({"step", "epoch", "total_flos"})


@dataclass(frozen=True)
class TrainerState:
    points: list[MetricPoint]
    global_step: int | None
    max_steps: int | None
    epoch: float | None



def _count(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def parse(data: bytes) -> TrainerState:
    """Raises ValueError when the text is not a whole trainer_state.json."""
    obj = json.loads(data)
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    points = []
    history = obj.get("log_history")
    for entry in history if isinstance(history, list) else ():
        if not isinstance(entry, dict):
            continue
        step = _count(entry.get("step"))
        if step is None:
            continue
        for key, raw in entry.items():
            # NaN and Inf kept (json reads them): the divergence watch's; never charted.
            v = raw if type(raw) is float else finite_number(raw)
            if v is not None and key not in _NOT_SERIES and isinstance(key, str):
                points.append(MetricPoint(key[:80], step, v))
    epoch = finite_number(obj.get("epoch"))
    return TrainerState(points, _count(obj.get("global_step")), _count(obj.get("max_steps")) or None, epoch)
