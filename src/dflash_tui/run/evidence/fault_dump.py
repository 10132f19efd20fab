"""Find the stacks Python's faulthandler wrote when native code killed the process (SIGSEGV,
SIGABRT, SIGBUS, SIGFPE, SIGILL): the only record of where a signal struck, since a signal
leaves no traceback. The wrapper turns faulthandler on (PYTHONFAULTHANDLER=1, run/wrapper.py).

What faulthandler writes to stderr (so train.log):

    Fatal Python error: Segmentation fault

    Current thread 0x00007f52968f86c0 (most recent call first):
      File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at
      File "/work/train.py", line 12 in step
    ...
    Thread 0x00007f5297473b80 (most recent call first):
      ...
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

_FATAL = re.compile(r"^Fatal Python error: (.+?)\s*$")
_CURRENT = re.compile(r"^Current thread 0x[0-9a-f]+")
_FRAME = re.compile(r'^\s+File "(.+)", line (\d+) in (.+?)\s*$')


@dataclass(frozen=True)
class FaultDump:
    error: str              # "Segmentation fault"
    lines_from_end: int     # the "Fatal Python error" line is this many lines from the end of the text
    where: str              # the innermost frame of the thread that died: "string_at (ctypes/__init__.py:519)"


def last_fault_dump(text: str) -> FaultDump | None:
    """The last faulthandler dump in `text` (a log's tail), or None."""
    lines = text.splitlines()
    start = next((i for i in range(len(lines) - 1, -1, -1) if _FATAL.match(lines[i])), None)
    if start is None:
        return None
    where = ""
    for i in range(start + 1, len(lines)):
        if _CURRENT.match(lines[i]):
            frame = _FRAME.match(lines[i + 1]) if i + 1 < len(lines) else None
            if frame:
                path, line, func = frame.groups()
                short = posixpath.join(posixpath.basename(posixpath.dirname(path)), posixpath.basename(path))
                where = f"{func} ({short.lstrip('/')}:{line})"
            break
    return FaultDump(_FATAL.match(lines[start]).group(1), len(lines) - start, where)
