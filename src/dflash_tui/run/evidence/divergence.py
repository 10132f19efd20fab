"""Whether the training loss diverged: the rules, over the watched series' points in order.

The watched series are the training loss by name (WATCHED: `loss`, `train/loss`, `train_loss`,
`lm loss`, ...; a source prefix such as `tb:` aside), or the names a profile's `watch_series`
lists; an evaluation's series (`eval_loss`, `val/loss`, `validate_loss`) never. Each is judged
on its own, value by value in step order (a step not after the last one judged is a repeat, and
is skipped), by three rules:

- non-finite: a NaN or Inf value; `nan_patience` in a row (default 1) is a divergence.
- sustained spike: a value above the series' own band for `spike_patience` values in a row
  (default 3) is a divergence. The band is learned from the series' last WINDOW accepted
  values: its median plus the larger of SPREAD_K robust deviations (MAD x 1.4826) and
  (FLOOR_RATIO - 1) x |median|; so noise, a warm-up bump or a 2x blip stays inside it, and a
  value is a spike only at FLOOR_RATIO x the median or more. No band before MIN_VALUES values.
  Values above the band are never learned into it.
- a lone spike: values above the band that come back inside it before `spike_patience`: a warn,
  never a divergence ("spike at step 4,210: 8.2x the running median, back at 4,211").

A divergence stands once found: the series has left its band or its numbers, and what comes
after is no evidence that it recovered. Pure and bounded: a series keeps WINDOW values, a batch
of more than MAX_BATCH values is judged from its newest MAX_BATCH (the older ones are only
searched for a non-finite value, at C speed), and a value costs an insertion into a sorted list
of WINDOW values; the band's spread is refreshed every REFRESH accepted values.

The findings are facts for the verdict engine (run/verdict/health.py decides DIVERGED).
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass
from typing import Iterable

WINDOW = 100
MIN_VALUES = 10
FLOOR_RATIO = 3.0
SPREAD_K = 10.0
REFRESH = 8
MAX_BATCH = 20_000
MAX_SPIKES = 5          # lone spikes kept per series (the newest)
MAX_SERIES = 16         # watched series judged at once (the first ones seen)
_MAD_SIGMA = 1.4826

# The training loss by name, normalised (`_key`): a source prefix dropped, lower case, "/", " ",
# "-" and "." as "_".
WATCHED = frozenset({"loss", "train_loss", "lm_loss", "training_loss", "loss_train", "train_loss_step",
                     "train_lm_loss", "train_loss_iter", "trainer_loss"})
# Words of an evaluation's series: never watched, whatever a profile lists.
_EVAL_WORDS = ("eval", "val", "valid", "validate", "validation", "test", "dev")


def _key(name: str) -> str:
    base = name.rsplit(":", 1)[-1]
    return base.strip().lower().replace("/", "_").replace(" ", "_").replace("-", "_").replace(".", "_")


def same_series(a: str, b: str) -> bool:
    """Two names of one series (`tb:train/loss` and `train/loss`, `train loss` and `train_loss`)."""
    return a == b or _key(a) == _key(b)


def is_eval(name: str) -> bool:
    parts = _key(name).split("_")
    return any(w in parts for w in _EVAL_WORDS) or any(p.startswith(("eval", "valid")) for p in parts)


@dataclass(frozen=True)
class DivergenceRules:
    """The rules' settings: a profile's `watch_series`, `nan_patience`, `spike_patience`."""

    watch_series: tuple[str, ...] = ()     # empty: the training loss by name (WATCHED)
    nan_patience: int = 1
    spike_patience: int = 3

    def watches(self, name: str) -> bool:
        if is_eval(name):
            return False
        key = _key(name)
        if self.watch_series:
            return key in {_key(n) for n in self.watch_series} or name in self.watch_series
        return key in WATCHED


@dataclass(frozen=True)
class LoneSpike:
    """Values above the band that came back inside it."""

    series: str
    source: str
    step: int
    ratio: float            # the highest value of the spike over the median of the band
    back_step: int

    def words(self) -> str:
        return f"spike at step {self.step:,}: {self.ratio:.1f}x the running median, back at {self.back_step:,}"


@dataclass(frozen=True)
class Divergence:
    """A series that diverged: by which rule, where it began, and the last finite value before."""

    rule: str               # "non-finite" | "spike"
    series: str
    source: str             # where its values come from: "train.log", "TensorBoard runs/exp1"
    step: int               # the first bad value's step
    value: float            # the first bad value
    count: int              # bad values in a row when it was found
    last_finite: tuple[int, float] | None = None   # (step, value) before the first bad one
    ratio: float | None = None                      # spike: the first bad value over the median
    median: float | None = None

    def what(self) -> str:
        """"NaN", "Inf", "-Inf" or "spiked": what the first bad value was."""
        if self.rule != "non-finite":
            return "spiked"
        return "NaN" if math.isnan(self.value) else ("Inf" if self.value > 0 else "-Inf")

    def words(self) -> str:
        """"train/loss NaN since step 20 (train.log), last finite 0.61 at step 19"."""
        src = f" ({self.source})" if self.source else ""
        if self.rule == "non-finite":
            what = "NaN" if math.isnan(self.value) else ("Inf" if self.value > 0 else "-Inf")
            head = f"{self.series} {what} since step {self.step:,}{src}"
        else:
            head = (f"{self.series} spiked to {self.value:.4g} ({self.ratio:.1f}x its running median "
                    f"{self.median:.4g}) since step {self.step:,}, {self.count} values in a row{src}")
        if self.last_finite is not None:
            step, value = self.last_finite
            head += f", last {'finite' if self.rule == 'non-finite' else 'in its band'} {value:.4g} at step {step:,}"
        return head


@dataclass(frozen=True)
class LossFinding:
    """What the watched series showed, as of one look."""

    series: tuple[str, ...] = ()            # the watched series seen
    values: int = 0                         # values judged, all series
    divergence: Divergence | None = None    # the earliest divergence of any watched series
    spikes: tuple[LoneSpike, ...] = ()      # lone spikes, newest last
    last_finite: tuple[str, int, float] | None = None    # (series, step, value), the newest
    skipped: int = 0                        # values of oversized batches judged for NaN only


class _Series:
    """One watched series' state."""

    def __init__(self, name: str, source: str) -> None:
        self.name, self.source = name, source
        self.last_step: int | None = None
        self.band: deque[float] = deque()
        self.sorted: list[float] = []
        self.upper: float | None = None
        self.median: float | None = None
        self.since_refresh = REFRESH
        self.bad: list[tuple[int, float]] = []           # non-finite values in a row
        self.high: list[tuple[int, float]] = []          # values above the band in a row
        self.last_finite: tuple[int, float] | None = None
        self.good: tuple[int, float] | None = None       # the last value inside the band
        self.diverged: Divergence | None = None
        self.spikes: deque[LoneSpike] = deque(maxlen=MAX_SPIKES)
        self.values = 0

    def feed(self, step: int, value: float, rules: DivergenceRules) -> None:
        if self.last_step is not None and step <= self.last_step:
            return
        self.last_step = step
        self.values += 1
        if self.diverged is not None:
            if value - value == 0.0:
                self.last_finite = self.last_finite if self.diverged.rule == "non-finite" else (step, value)
            return
        if value - value != 0.0:     # NaN or +-Inf
            self.bad.append((step, value))
            if len(self.bad) >= rules.nan_patience:
                s, v = self.bad[0]
                self.diverged = Divergence("non-finite", self.name, self.source, s, v, len(self.bad),
                                           self.last_finite)
            return
        self.bad.clear()
        if self.upper is not None and value > self.upper:
            self.high.append((step, value))
            if len(self.high) >= rules.spike_patience:
                s, v = self.high[0]
                self.diverged = Divergence("spike", self.name, self.source, s, v, len(self.high), self.good,
                                           v / self.median if self.median else None, self.median)
            self.last_finite = (step, value)
            return
        if self.high:
            peak = max(v for _, v in self.high)
            self.spikes.append(LoneSpike(self.name, self.source, self.high[0][0],
                                         peak / self.median if self.median else float("inf"), step))
            self.high.clear()
        self.last_finite = self.good = (step, value)
        self._learn(value)

    def _learn(self, value: float) -> None:
        if len(self.band) == WINDOW:
            old = self.band.popleft()
            del self.sorted[bisect.bisect_left(self.sorted, old)]
        self.band.append(value)
        bisect.insort(self.sorted, value)
        n = len(self.sorted)
        if n < MIN_VALUES:
            return
        self.since_refresh += 1
        if self.since_refresh < REFRESH and self.upper is not None:
            return
        self.since_refresh = 0
        s = self.sorted
        med = (s[n // 2] + s[(n - 1) // 2]) / 2
        dev = sorted(abs(v - med) for v in s)
        mad = (dev[n // 2] + dev[(n - 1) // 2]) / 2
        reach = max(SPREAD_K * _MAD_SIGMA * mad, (FLOOR_RATIO - 1.0) * abs(med))
        self.median = med
        # A flat series of zeros has no scale to judge a spike by.
        self.upper = med + reach if reach > 0 else None


class DivergenceWatch:
    """The watched series of one run, fed in order across looks; `finding()` says what they show."""

    def __init__(self, rules: DivergenceRules = DivergenceRules()) -> None:
        self.rules = rules
        self._series: dict[str, _Series] = {}
        self._watched: dict[str, bool] = {}
        self._skipped = 0

    def watches(self, name: str) -> bool:
        got = self._watched.get(name)
        if got is None:
            if len(self._watched) > 4096:
                self._watched.clear()
            got = self._watched[name] = self.rules.watches(name)
        return got

    def feed(self, name: str, source: str, points: Iterable[tuple[int, float]]) -> None:
        """`points`: (step, value) of series `name` in the order they were written."""
        if not self.watches(name):
            return
        s = self._series.get(name)
        if s is None:
            if len(self._series) >= MAX_SERIES:
                return
            s = self._series[name] = _Series(name, source)
        points = points if isinstance(points, list) else list(points)
        if len(points) > MAX_BATCH:
            older, points = points[:-MAX_BATCH], points[-MAX_BATCH:]
            self._skipped += len(older)
            values = [v for _, v in older]
            total = sum(values)
            if total - total != 0.0:     # a NaN or Inf among them (or a sum that overflowed)
                first = next(((st, v) for st, v in older if v - v != 0.0), None)
                if first is not None:
                    s.feed(first[0], first[1], self.rules)
        for step, value in points:
            s.feed(step, value, self.rules)

    def finding(self) -> LossFinding:
        if not self._series:
            return LossFinding(skipped=self._skipped)
        series = list(self._series.values())
        diverged = [s.diverged for s in series if s.diverged is not None]
        spikes = sorted((sp for s in series for sp in s.spikes), key=lambda sp: sp.back_step)[-MAX_SPIKES:]
        finite = [(s.last_finite, s.name) for s in series if s.last_finite is not None]
        last = max(finite, key=lambda f: f[0][0]) if finite else None
        return LossFinding(
            tuple(s.name for s in series), sum(s.values for s in series),
            min(diverged, key=lambda d: d.step) if diverged else None, tuple(spikes),
            (last[1], last[0][0], last[0][1]) if last else None, self._skipped)
