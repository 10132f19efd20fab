"""Lightning's CSVLogger metrics.csv: a header of column names, then a row per logging step.

Columns appear as a program logs new names, and Lightning then rewrites the whole file under
the new header (rows already written gain empty cells); otherwise it appends rows. So the
reader keeps the header it parsed the rows by and the rows already taken: a new header (the
file's first line changed) means the file is read again from its start and only the rows past
those already taken give points. Each numeric cell is a point of its column at the row's
"step" (else its row number); "epoch" and "step" themselves are not series. A file csv cannot
read (a field over csv's field limit: an unterminated quote) or a line over MAX_LINE sets
`broken` (the rows before it give their points): it is read no further until it is replaced or
rewritten.
"""

from __future__ import annotations

import csv
import io
import math

from ..metric_point import MetricPoint

NAME = "metrics.csv"
# A line longer than this is no row of metrics (an unterminated quote, a binary file): bounds
# the bytes held while waiting for a line's end.
MAX_LINE = 1 << 20

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
        self.broken = ""           # why it cannot be read past here

    def restart(self) -> None:
        self.header, self.header_bytes, self._seen, self._partial, self.broken = None, b"", 0, b"", ""

    def feed(self, data: bytes) -> list[MetricPoint]:
        buf = self._partial + data
        cut = buf.rfind(b"\n") + 1
        self._partial, whole = buf[cut:], buf[:cut]
        out: list[MetricPoint] = []
        if self.broken:
            return out
        try:
            for point in self._rows(whole):
                out.append(point)
        except csv.Error as exc:
            self.broken = f"row {self._seen + 1}: {exc}"
        if not self.broken and len(self._partial) > MAX_LINE:
            self.broken = f"row {self._seen + 1}: a line over {MAX_LINE >> 20} MiB"
        if self.broken:
            self._partial = b""
        return out

    def _rows(self, whole: bytes):
        if not whole:
            return
        if self.header is None:
            first, _, whole = whole.partition(b"\n")
            self.header_bytes = first + b"\n"
            self.header = next(csv.reader([first.decode("utf-8", "replace").rstrip("\r")]), [])
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
                    yield MetricPoint(name, step, v)
