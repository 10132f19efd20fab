"""The words every view speaks: ages, durations, CPU use, byte counts and one-line causes.

One module, so `--check`, the checklist's causes (run/verdict/health.py) and the dashboard's panes
(ui/fmt.py) never phrase the same fact two ways. Pure functions, stdlib only.

Two registers:
- prose, for causes and summaries: `ago(12)` "12 s ago", `duration(300)` "5 min";
- compact, for columns and badges: `compact(192)` "3m12s".
"""

from __future__ import annotations

import difflib
import signal as _signal
from typing import Iterable

NA = "n/a"


def duration(seconds: float) -> str:
    """A length of time in prose: "12 s", "5 min", "1.5 h". Negative (clock skew) reads 0 s."""
    s = max(0.0, seconds)
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def seconds_words(seconds: float) -> str:
    """A short length of time to a tenth below 10 s ("1.5 s", a step's time), else `duration`."""
    s = max(0.0, seconds)
    return f"{s:.1f} s" if s < 9.95 else duration(s)


def eta(seconds: float) -> str:
    """Time left, in prose: "40 s", "12 min", "1 h 20 min", "3 d 4 h"."""
    s = max(0.0, seconds)
    if s < 90:
        return f"{s:.0f} s"
    minutes = round(s / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def ago(seconds: float | None) -> str:
    """How long ago, in prose: "just now", "12 s ago", "5 min ago"; None is "never"."""
    if seconds is None:
        return "never"
    if max(0.0, seconds) < 1:
        return "just now"
    return duration(seconds) + " ago"


def age_at(now: float, t: float | None) -> str:
    """`ago` of an event at time `t`, seen at `now` (both on one clock)."""
    return ago(None if t is None else now - t)


def compact(seconds: float | None) -> str:
    """A short age for a column: 4s, 3m12s, 2h05m, 3d4h. None reads n/a."""
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


def cpu_use(cores: float | None) -> str:
    """CPU use of a process tree as a share of one core: "0 % CPU", "180 % CPU"."""
    if cores is None:
        return "CPU not measured"
    return f"{cores * 100:.0f} % CPU"


def size(n_bytes: int | None) -> str:
    """A byte count a person reads: "512 B", "3.2 KiB", "1.5 GiB"."""
    if n_bytes is None:
        return NA
    n = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"   # pragma: no cover - the loop returns at GiB


def signame(num: int | None) -> str:
    """SIGTERM for 15; "signal 77" for a number with no name; "?" for None."""
    if num is None:
        return "?"
    try:
        return _signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def one_line(text: str | None, limit: int = 160) -> str:
    """A cause on one line: every run of whitespace (newlines too) is one space, and a text
    longer than `limit` ends in an ellipsis. Causes, not essays."""
    if not text:
        return ""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def did_you_mean(word: object, known: Iterable[str]) -> str:
    """"; did you mean 'command'?" where `word` (a misspelt key or name) is close to one of
    `known`, else "". A word longer than any real key is not compared (no quadratic work on a
    hostile one)."""
    if not isinstance(word, str) or not word or len(word) > 64:
        return ""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def progress(step: int | None, total: int | None = None, loss: float | None = None, rate: float | None = None,
             rate_unit: str = "", epoch: float | None = None) -> str:
    """ "step 120/1000, loss 2.31, 3.2 it/s"; a step counted within an epoch (Lightning's bar)
    says its epoch: "epoch 2, 51/64". What is not known is left out; "" when nothing is."""
    parts = []
    if step is not None:
        n = f"{step}" + (f"/{total}" if total else "")
        parts.append(f"epoch {epoch:g}, {n}" if epoch is not None else f"step {n}")
    if loss is not None:
        parts.append(f"loss {loss:.4g}")
    if rate is not None:
        parts.append(f"{rate:.3g} {rate_unit}".strip())
    return ", ".join(parts)


def gpu_draw(power_w: float | None, limit_w: float | None, sm_mhz: int | None = None,
             sm_max_mhz: int | None = None) -> str:
    """What a GPU draws and how fast its SMs run: "655 W of 700 W, SM 1755 of 1980 MHz".
    What the driver does not give is left out; "" when it gives neither."""
    parts = []
    if power_w is not None:
        parts.append(f"{power_w:.0f} W" + (f" of {limit_w:.0f} W" if limit_w else ""))
    if sm_mhz is not None:
        parts.append(f"SM {sm_mhz}" + (f" of {sm_max_mhz}" if sm_max_mhz else "") + " MHz")
    return ", ".join(parts)


SPINS = "a kernel that spins, not compute"


def gpu_use(pct: float, whose: str, power_w: float | None, limit_w: float | None, sm_mhz: int | None,
            sm_max_mhz: int | None, spinning: bool) -> str:
    """A GPU's use for a check's cause: "100 % SM (the run's processes), 655 W of 700 W, SM 1755
    of 1980 MHz"; busy on too little power: "100 % SM (the whole device) but drawing 80 W of
    700 W: a kernel that spins, not compute"."""
    head = f"{pct:.0f} % SM ({whose})"
    if spinning and pct >= 5:
        return f"{head} but drawing {gpu_draw(power_w, limit_w)}: {SPINS}"
    draw = gpu_draw(power_w, limit_w, sm_mhz, sm_max_mhz)
    return f"{head}, {draw}" if draw else head


def gpu_busy(index: int, pct: float, whose: str, power_w: float | None, limit_w: float | None,
             sm_mhz: int | None, sm_max_mhz: int | None, spinning: bool) -> str:
    """A GPU in a summary: "GPU 0 100 % busy (the run's processes), 655 W of 700 W, SM 1755 of
    1980 MHz", "GPU 0 100 % busy (the run's processes) but drawing 80 W of 700 W: a kernel that
    spins, not compute", "GPU 0 idle (0 % SM, the whole device), 75 W of 700 W"."""
    draw = gpu_draw(power_w, limit_w, sm_mhz, sm_max_mhz)
    if pct < 5:
        return f"GPU {index} idle ({pct:.0f} % SM, {whose})" + (f", {draw}" if draw else "")
    head = f"GPU {index} {pct:.0f} % busy ({whose})"
    if spinning:
        return f"{head} but drawing {gpu_draw(power_w, limit_w)}: {SPINS}"
    return f"{head}, {draw}" if draw else head
