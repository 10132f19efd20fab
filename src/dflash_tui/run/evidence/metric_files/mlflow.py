"""MLflow: the metrics of the newest run, from mlflow.db (SQLite) or mlruns/ files.

mlflow.db (MLflow's default store since 3.x, SQLAlchemy's schema): table `metrics` (key,
value, timestamp, step, is_nan, run_uuid), table `runs` (run_uuid, start_time, ...). Opened
read-only on the target (the agent's `metric_read`, stdlib sqlite3 with mode=ro); its rows
are read by rowid, so each poll asks only for the rows added since the last. A database locked
by its writer answers at once with a note; the next poll asks again.

mlruns/<experiment>/<run>/metrics/<key> (the file store): a line per logged value,
"timestamp value step"; a key with slashes is a path below metrics/.
"""

from __future__ import annotations

import math

from ..metric_point import MetricPoint

DB_NAME = "mlflow.db"
MLRUNS = "mlruns"
MAX_ROWS = 20_000
# The newest run's rows past a rowid, in rowid order (a poll's new rows).
ROWS_QUERY = ("SELECT m.rowid, m.key, m.step, m.value, m.is_nan, m.run_uuid FROM metrics m "
              "WHERE m.run_uuid = (SELECT run_uuid FROM runs ORDER BY start_time DESC LIMIT 1) "
              "AND m.rowid > ? ORDER BY m.rowid LIMIT ?")


def points_of_rows(rows: list[list]) -> tuple[list[MetricPoint], int | None, str]:
    """(points, the last rowid, the run) of ROWS_QUERY's rows."""
    out, last, run = [], None, ""
    for row in rows:
        if len(row) != 6:
            continue
        rowid, key, step, value, is_nan, run = row
        last = rowid if isinstance(rowid, int) else last
        if is_nan or not isinstance(key, str) or not isinstance(step, int) or step < 0:
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out.append(MetricPoint(key[:80], step, float(value)))
    return out, last, run if isinstance(run, str) else ""


class MlrunsFile:
    """One mlruns metric file, fed its bytes in order."""

    def __init__(self, key: str) -> None:
        self.key = key[:80]
        self._partial = b""

    def restart(self) -> None:
        self._partial = b""

    def feed(self, data: bytes) -> list[MetricPoint]:
        buf = self._partial + data
        cut = buf.rfind(b"\n") + 1
        self._partial = buf[cut:]
        out = []
        for line in buf[:cut].decode("utf-8", "replace").splitlines():
            parts = line.split()
            if len(parts) < 2:
                continue
            try:
                value = float(parts[1])
                step = int(parts[2]) if len(parts) > 2 else 0
            except ValueError:
                continue
            if math.isfinite(value) and step >= 0:
                out.append(MetricPoint(self.key, step, value))
        return out
