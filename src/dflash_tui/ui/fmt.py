"""Small, pure formatting helpers shared by the panes (no Textual imports: easy to test).

Ages and one-line causes are dflash_tui/words.py's, the words `--check` speaks too.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from ..run.verdict.checklist import CheckState, Verdict
from ..words import NA, compact as age, one_line

__all__ = ("NA", "STATE_SYMBOL", "age", "alarm_style", "gib", "num", "one_line", "sparkline", "verdict_class")

# Symbols as well as colours, so a check's state still reads under NO_COLOR.
STATE_SYMBOL = {
    CheckState.OK: "✓ ok",
    CheckState.WARN: "! warn",
    CheckState.FAIL: "✗ fail",
    CheckState.PENDING: "… pending",
}

_BARS = "▁▂▃▄▅▆▇█"


def alarm_style(no_color: bool = False) -> str:
    """Bad news: bold and reversed, the loudest text on screen. Under NO_COLOR, Textual turns
    red into a dark grey, so there it is plain reverse (light on dark's opposite) instead."""
    return "bold reverse" if no_color else "bold reverse red"


def verdict_class(verdict: Verdict) -> str:
    """The CSS class a verdict badge gets: -ok, -fail or -wait."""
    if verdict.healthy:
        return "-ok"
    if verdict.failing:
        return "-fail"
    return "-wait"


def gib(n_bytes: int | None) -> str:
    if n_bytes is None:
        return NA
    return f"{n_bytes / 2**30:.1f}G"


def num(value: float | int | None, fmt: str = "{:.0f}", unit: str = "") -> str:
    if value is None:
        return NA
    return fmt.format(value) + unit


def sparkline(values: Iterable[float | None], width: int, lo: float = 0.0, hi: float | None = None) -> str:
    """The last `width` values as block characters; a None (unsupported/lost) is a blank cell.

    `hi` fixes the scale (100 for percentages) so bars compare across GPUs and over time;
    without it the series' own maximum is used.
    """
    tail: Sequence[float | None] = list(values)[-width:] if width > 0 else []
    real = [v for v in tail if v is not None]
    if not real:
        return " " * len(tail)
    top = hi if hi is not None else max(real)
    span = (top - lo) or 1.0
    out = []
    for v in tail:
        if v is None:
            out.append(" ")
            continue
        frac = min(1.0, max(0.0, (v - lo) / span))
        out.append(_BARS[min(len(_BARS) - 1, int(frac * (len(_BARS) - 1) + 0.5))])
    return "".join(out)
