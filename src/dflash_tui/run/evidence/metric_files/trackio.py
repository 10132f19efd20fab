"""trackio: the metrics of a project's newest run, from the project's SQLite file.

trackio keeps each project in `{TRACKIO_DIR}/{project}.db` (TRACKIO_DIR, else $HF_HOME/trackio,
else ~/.cache/huggingface/trackio), in WAL mode. Schema read in gradio-app/trackio 0.36.0
(commit 2a027522, trackio/sqlite_storage.py `SQLiteStorage.init_db`, docs/source/storage_schema.md)
and checked against a real 0.43.0 writer: table `metrics` (id INTEGER PRIMARY KEY AUTOINCREMENT,
run_id, timestamp, run_name, step, metrics, log_id, space_id), one row per `trackio.log`. Its
`metrics` cell is a JSON object written by orjson as bytes (so stored as a BLOB: the query
casts it to text, the agent ships no bytes of a row); grouped values are nested objects
(`{"train": {"acc": 0.5}}` is the series `train/acc`), non-finite numbers are the strings
"NaN"/"Infinity", media are objects with a "_type". Older releases have no run_id column:
the newest run is named by run_name, which every release has.

Rows are read by id, read-only, so each poll asks only for the rows added since the last; a
database locked by its writer answers at once with a note, and the next poll asks again.
"""

from __future__ import annotations

import json
import math
import posixpath

from ..metric_point import MetricPoint

# A profile's `metrics` directory of this name is a trackio directory (its *.db are projects);
# the default one the agent finds from its own TRACKIO_DIR / HF_HOME (remote/agent_server.py).
DIR_NAME = "trackio"
SUFFIX = ".db"
MAX_ROWS = 20_000
MAX_NAMES = 256                     # series one row may add (a row of thousands of keys is cut)
# The newest run's rows past an id, in id order (a poll's new rows). The id range comes first
# so SQLite walks the primary key from the cursor on (0.43's indexes lead with run_id).
ROWS_QUERY = ("SELECT m.id, m.run_name, m.step, CAST(m.metrics AS TEXT) FROM metrics m "
              "WHERE m.id > ? AND m.run_name = (SELECT run_name FROM metrics ORDER BY id DESC LIMIT 1) "
              "ORDER BY m.id LIMIT ?")


def is_project_file(name: str) -> bool:
    """A project's database, not its WAL, shared-memory or lock file."""
    return name.endswith(SUFFIX) and not name.startswith(".")


def project_of(path: str) -> str:
    return posixpath.basename(path)[: -len(SUFFIX)]


MAX_NESTING = 8                     # groups within groups read (deeper ones are no metrics)


def _numbers(obj: dict, prefix: str = "", depth: int = 0):
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            if "_type" not in value and depth < MAX_NESTING:     # a media object is no number
                yield from _numbers(value, name + "/", depth + 1)
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            yield name, float(value)


def points_of_rows(rows: list[list]) -> tuple[list[MetricPoint], int | None, str]:
    """(points, the last id, the run) of ROWS_QUERY's rows."""
    out, last, run = [], None, ""
    for row in rows:
        if len(row) != 4:
            continue
        rowid, name, step, text = row
        last = rowid if isinstance(rowid, int) else last
        if isinstance(name, str):
            run = name
        if not isinstance(step, int) or step < 0 or not isinstance(text, str):
            continue
        try:
            values = json.loads(text)
        except (ValueError, RecursionError):      # not JSON, or nested past the parser's depth
            continue
        if not isinstance(values, dict):
            continue
        for i, (key, value) in enumerate(_numbers(values)):
            if i >= MAX_NAMES:
                break
            out.append(MetricPoint(key[:80], step, value))
    return out, last, run
