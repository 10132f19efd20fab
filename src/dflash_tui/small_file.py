"""The one check for a small local file a user names (the config file, an SSH file).

A regular file, not too big, readable, UTF-8 where it is text. Its type and size are checked
before it is opened, and the open never waits: a FIFO, /dev/zero or a 6 GB file is refused
without reading a byte. What is wrong is `SmallFileRefused.problem`; each caller says it in its
own words (config.py for the config file, remote/ssh.py for a profile's SSH files).
"""

from __future__ import annotations

import os
import stat


class SmallFileRefused(Exception):
    """`problem`: "directory", "special" (a FIFO, device or socket), "changed" (it stopped being
    a regular file between the stat and the open), "too_big" (`size`: its size from the stat,
    None when it grew past the limit while read), "unreadable" (permission), "os_error"
    (`detail`: the system's words) or "not_utf8" (`at`: the first bad byte)."""

    def __init__(self, problem: str, *, detail: str = "", size: int | None = None, at: int | None = None) -> None:
        super().__init__(problem)
        self.problem, self.detail, self.size, self.at = problem, detail, size, at


def read_small_file(path: str | os.PathLike[str], max_bytes: int, *, text: bool = True) -> str | None:
    """The UTF-8 text of `path` (None without `text`: only its type, size and access are
    checked). Raises SmallFileRefused; FileNotFoundError passes through, for the caller to say
    what a missing file means."""
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise SmallFileRefused("directory")
        if not stat.S_ISREG(st.st_mode):
            raise SmallFileRefused("special")
        if st.st_size > max_bytes:
            raise SmallFileRefused("too_big", size=st.st_size)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):   # swapped since the stat
                raise SmallFileRefused("changed")
            data = f.read(max_bytes + 1) if text else b""
    except FileNotFoundError:
        raise
    except PermissionError:
        raise SmallFileRefused("unreadable") from None
    except OSError as exc:
        raise SmallFileRefused("os_error", detail=str(exc.strerror or exc)) from None
    if len(data) > max_bytes:
        raise SmallFileRefused("too_big")
    if not text:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SmallFileRefused("not_utf8", at=exc.start) from None
