"""Small, pure formatting helpers shared by the panes (no Textual imports: easy to test)."""

from __future__ import annotations

from typing import Iterable, Sequence

from ..run.verdict import CheckState, Verdict

NA = "n/a"

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


def age(seconds: float | None) -> str:
    """A short age: 4s, 3m12s, 2h05m, 3d4h. None or negative clock skew reads sensibly."""
    if seconds is None:
        return NA
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600}h"


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


def one_line(text: str | None, limit: int = 200) -> str:
    """First line of a message, trimmed: panes show causes, not essays."""
    if not text:
        return ""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"
