"""Named series from the metric lines well-known trainers print: every value, not only the loss.

run/evidence/progress.py reads the step, loss and rate any program prints; the lines below carry
more, and each of their values is a series of its own here:

    step: 10  loss:  7.1234  grad_norm: 1.2  memory: 36.86GiB(46.55%)  tps: 6,543  tflops: 321.0  mfu: 32.4%
    validate step: 10  loss:  6.5000  memory: 36.86GiB(46.55%)  tps: 6,543             TorchTitan
    [2025-01-01 10:00:00] iteration       10/     500 | consumed samples: 640 | elapsed time per
    iteration (ms): 1234.5 | learning rate: 1.5E-04 | ... | lm loss: 1.036860E+01 | ... |
    throughput per GPU (TFLOP/s/GPU): 123.4 |                                           Megatron-LM
    {'loss': 1.23, 'grad_norm': 0.9, 'learning_rate': 5e-05, 'epoch': 0.5}   transformers Trainer

Each line becomes (name, step, value) points (run/verdict/series.Point). A Megatron line gives
its step and total ("iteration N/ M"); a TorchTitan line its step; a Trainer dict carries no
step of its own, so it is put at the newest step a progress bar ("| 40/200 [") or the dict
itself showed, else at its own count (the n-th dict printed).

Pure and bounded like progress.py: a segment is read up to MAX_SEGMENT characters, a dict only
when short, and every regular expression here is possessive (no backtracking).
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from ...contract.rundir import finite_number
from .metric_point import MetricPoint as Point
from .progress import metrics_dict

MAX_SEGMENT = 4096
# Points kept between two takes (a poll's worth); a burst beyond it keeps the newest.
MAX_PENDING = 20_000

_NUM = r"[-+]?+(?:\d[\d,]*+(?:\.\d*+)?+|\.\d++)(?:[eE][-+]?+\d++)?+"
_ANSI = re.compile(r"\x1b\[[0-?]*+[ -/]*+[@-~]")
_SPLIT = re.compile(r"[\r\n]")
# TorchTitan: "step: 10  loss: 7.1234 ... mfu: 32.4%" (colours dropped first); its validation
# line "validate step: 10  loss: 6.5 ..." gives series of their own ("validate_loss").
_TITAN_STEP = re.compile(r"\b(validate\s++)?+step:\s*+(\d++)\s++loss:")
_TITAN_PAIR = re.compile(r"\b([a-z][a-z_]*+):\s*+(" + _NUM + r")")
# Megatron-LM: "iteration 10/ 500 | name: value | ...".
_MEGATRON = re.compile(r"\biteration\s++(\d++)\s*+/\s*+(\d++)\s*+\|")
_MEGATRON_PAIR = re.compile(r"\|\s*+([^|:]{1,80}+):\s*+(" + _NUM + r")\s*+(?=\|)")
_BAR = re.compile(r"(?:\|\s*+|\s)(\d++)/(\d++)\s*+\[")
# Megatron's own wordings, shortened to names a chart can title.
MEGATRON_NAMES = {
    "lm loss": "lm_loss",
    "throughput per GPU (TFLOP/s/GPU)": "tflops_per_gpu",
    "elapsed time per iteration (ms)": "iteration_ms",
}
# Megatron fields that count or describe, not measure.
_MEGATRON_SKIP = frozenset({"global batch size", "number of skipped iterations", "number of nan iterations",
                            "consumed samples", "skipped samples"})
_TITAN_SKIP = frozenset({"step"})
_DICT_STEP_KEYS = ("step", "global_step")
_DICT_SKIP = frozenset({"step", "global_step", "total_flos"})


class LineSeries(NamedTuple):
    """What one line said: its form, its step (None: it names none) and total, its values."""

    form: str                      # "torchtitan" | "megatron" | "transformers"
    step: int | None
    total: int | None
    values: dict[str, float]


def _number(text: str) -> float | None:
    try:
        v = float(text.replace(",", ""))
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _name(text: str) -> str:
    """A field's words as a series name: "learning rate" -> "learning_rate"."""
    words = MEGATRON_NAMES.get(text.strip())
    if words:
        return words
    return re.sub(r"[^0-9A-Za-z]++", "_", text.strip()).strip("_").lower()


def _dict_number(v) -> float | None:
    """A number of a dict line; transformers 5 prints its values as strings ('3.917')."""
    if isinstance(v, str):
        return _number(v) if len(v) <= 40 else None
    return finite_number(v)


def parse_line(seg: str) -> LineSeries | None:
    """The series of one line (a segment of the log, colours dropped), or None."""
    seg = seg[:MAX_SEGMENT]
    if "\x1b" in seg:
        seg = _ANSI.sub("", seg)
    if "iteration" in seg:
        m = _MEGATRON.search(seg)
        if m:
            values = {}
            for key, num in _MEGATRON_PAIR.findall(seg[m.start():] + "|"):
                key = key.strip()
                v = _number(num)
                if v is not None and key not in _MEGATRON_SKIP:
                    values[_name(key)] = v
            return LineSeries("megatron", int(m.group(1)), int(m.group(2)) or None, values)
    if "step:" in seg:
        m = _TITAN_STEP.search(seg)
        if m:
            values = {}
            prefix = "validate_" if m.group(1) else ""
            for key, num in _TITAN_PAIR.findall(seg[m.end(1) if m.group(1) else m.start():]):
                v = _number(num)
                if v is not None and key not in _TITAN_SKIP:
                    values[prefix + key] = v
            return LineSeries("torchtitan", int(m.group(2)), None, values)
    if seg.lstrip().startswith("{"):
        d = metrics_dict(seg)
        if d:
            step = next((v for v in (d.get(k) for k in _DICT_STEP_KEYS)
                         if isinstance(v, int) and not isinstance(v, bool) and v >= 0), None)
            values = {str(k)[:80]: v for k, v in ((k, _dict_number(x)) for k, x in d.items())
                      if v is not None and k not in _DICT_SKIP and isinstance(k, str)}
            if values:
                return LineSeries("transformers", step, None, values)
    return None


def may_hold_series(text: str) -> bool:
    """False only when no line of `text` can give a point or move a bar's step: every form
    needs one of its literal words ("iteration", "step:", a dict's "{", a bar's "/" and "["),
    and a colour escape, dropped before a line is read, could be hiding one. A test over the
    whole chunk, at C speed: a log of other lines (a thousand a second) is not read line by line."""
    return ("\x1b" in text or "iteration" in text or "step:" in text or "{" in text
            or ("[" in text and "/" in text))


class LogSeries:
    """Feed it a log's bytes in order; `take()` gives the points of the lines read since the
    last take. Forms: see the module's docstring."""

    def __init__(self) -> None:
        self._partial = ""
        self._bar_step: int | None = None
        self._bar_total = 0
        self._dicts = 0
        self._pending: list[Point] = []
        self.forms: set[str] = set()
        self.step: int | None = None          # the newest step a metric line named
        self.total: int | None = None         # the total a Megatron line named

    def reset(self) -> None:
        self._partial = ""

    def feed(self, data: bytes | str) -> None:
        text = self._partial + (data.decode("utf-8", "replace") if isinstance(data, bytes) else data)
        end = max(text.rfind("\n"), text.rfind("\r"))
        self._partial = text[end + 1:][-MAX_SEGMENT:]
        done = text[:max(end, 0)]
        if not may_hold_series(done):
            return
        for seg in (_SPLIT.split(done) if "\r" in done else done.split("\n")):
            if not seg or seg.isspace():
                continue
            if "/" in seg and "[" in seg:
                bar = _BAR.search(seg[:MAX_SEGMENT])
                # The training bar is the longest one: a "Writing model shards 1/1" bar, or an
                # eval bar of fewer steps, does not move the dicts' step.
                if bar and int(bar.group(2)) >= max(2, self._bar_total):
                    self._bar_step, self._bar_total = int(bar.group(1)), int(bar.group(2))
            got = parse_line(seg)
            if got is not None:
                self._add(got)

    def _add(self, got: LineSeries) -> None:
        step = got.step
        if got.form == "transformers":
            self._dicts += 1
            if step is None:
                step = self._bar_step if self._bar_step is not None else self._dicts
        else:
            self.step = step
            if got.total:
                self.total = got.total
        self.forms.add(got.form)
        self._pending.extend(Point(name, step, value) for name, value in got.values.items())
        if len(self._pending) > MAX_PENDING:
            del self._pending[:len(self._pending) - MAX_PENDING]

    def take(self) -> list[Point]:
        out, self._pending = self._pending, []
        return out
