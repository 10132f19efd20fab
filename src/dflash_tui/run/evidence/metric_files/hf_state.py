"""The Hugging Face Trainer's trainer_state.json: its log_history, and how far the run is.

The Trainer writes it whole into every checkpoint directory (out/checkpoint-40/) and at the
end into its output_dir; the newest one found is the source. Its `log_history` holds a dict
per logging step ({"loss": 2.1, "learning_rate": ..., "epoch": 0.5, "step": 40}, and the eval
dicts with "eval_loss"); `global_step` of `max_steps` is the run's exact progress. A file that
does not parse (the Trainer rewriting it while it was read) is read again at the next poll;
one nested deeper than the JSON parser goes is `Unreadable` (not read again until it changes).
A step or total beyond 2^53 is ignored and counted (`beyond`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ....contract.rundir import finite_number
from ..metric_point import MetricPoint, is_step

NAME = "trainer_state.json"
MAX_BYTES = 8 << 20
_NOT_SERIES = frozenset({"step", "epoch", "total_flos"})


class Unreadable(ValueError):
    """A whole file that cannot be read as it is (rewriting it is the only cure)."""


@dataclass(frozen=True)
class TrainerState:
    points: list[MetricPoint]
    global_step: int | None
    max_steps: int | None
    epoch: float | None
    beyond: int = 0            # steps and totals beyond 2^53, ignored


def _count(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _huge(v) -> bool:
    return _count(v) is not None and not is_step(v)


def parse(data: bytes) -> TrainerState:
    """Raises ValueError when the text is not a whole trainer_state.json (Unreadable when it
    is whole but nested deeper than Python's JSON parser goes)."""
    try:
        obj = json.loads(data)
    except RecursionError:
        raise Unreadable("nested too deep to parse") from None
    except json.JSONDecodeError:
        raise                  # cut short: being rewritten
    except ValueError:         # an integer of more digits than int() takes
        raise Unreadable("holds a number too long to parse") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    points = []
    beyond = 0
    history = obj.get("log_history")
    for entry in history if isinstance(history, list) else ():
        if not isinstance(entry, dict):
            continue
        step = _count(entry.get("step"))
        if step is None or not is_step(step):
            beyond += step is not None
            continue
        for key, raw in entry.items():
            # NaN and Inf kept (json reads them): the divergence watch's; never charted.
            v = raw if type(raw) is float else finite_number(raw)
            if v is not None and key not in _NOT_SERIES and isinstance(key, str):
                points.append(MetricPoint(key[:80], step, v))
    epoch = finite_number(obj.get("epoch"))
    step, total = obj.get("global_step"), obj.get("max_steps")
    beyond += _huge(step) + _huge(total)
    return TrainerState(points, step if is_step(step) else None, (total if is_step(total) else None) or None,
                        epoch, beyond)
