"""Lightning's CSVLogger metrics.csv: a header of column names, then a row per logging step.

Columns appear as a program logs new names, and Lightning then rewrites the whole file under
the new header (rows already written gain empty cells); otherwise it appends rows. So the
reader keeps the header it parsed the rows by and the rows already taken: a new header (the
file's first line changed) means the file is read again from its start and only the rows past
those already taken give points. Each numeric cell is a point of its column at the row's
"step" (else its row number); "epoch" and "step" themselves are not series.
"""

from __future__ import annotations

import csv
import io
import math

from ..metric_point import MetricPoint

NAME = "metrics.csv"
_NOT_SERIES = frozenset({"step", "epoch", "created_at"})


def _number(cell: str) -> float | None:
    if not cell:
        return None
    try:
        v = float(cell)
    except ValueError:
        return None
    return v    # NaN and Inf kept: the divergence watch's (MetricFiles.take keeps them off the charts)


class CsvMetrics:
    """One metrics.csv: feed its bytes from offset 0 onwards; a new header restarts it."""

    def __init__(self) -> None:
        self.header: list[str] | None = None
        self.header_bytes = b""
        self.rows = 0              # data rows taken (across a rewrite: not taken twice)
        self._seen = 0             # data rows read since the header was last read
        self._partial = b""

    def restart(self) -> None:
        self.header, self.header_bytes, self._seen, self._partial = None, b"", 0, b""

    def feed(self, data: bytes) -> list[MetricPoint]:
        buf = self._partial + data
        cut = buf.rfind(b"\n") + 1
        self._partial, whole = buf[cut:], buf[:cut]
        if not whole:
            return []
        if self.header is None:
            first, _, whole = whole.partition(b"\n")
            self.header_bytes = first + b"\n"
            self.header = next(csv.reader([first.decode("utf-8", "replace").rstrip("\r")]), [])
        out: list[MetricPoint] = []
        cols = self.header
        step_col = cols.index("step") if "step" in cols else None
        for row in csv.reader(io.StringIO(whole.decode("utf-8", "replace"))):
            if not row:
                continue
            self._seen += 1
            if self._seen <= self.rows:
                continue           # taken before the file was rewritten under a new header
            self.rows = self._seen
            step = None
            if step_col is not None and step_col < len(row):
                v = _number(row[step_col])
                step = int(v) if v is not None and math.isfinite(v) and v >= 0 else None
            if step is None:
                step = self._seen
            for name, cell in zip(cols, row):
                if name in _NOT_SERIES:
                    continue
                v = _number(cell)
                if v is not None:
                    out.append(MetricPoint(name, step, v))
        return out
