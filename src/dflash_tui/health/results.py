"""Each node's earlier probe results: a JSON-lines file beside the watch store, bounded.

`health.jsonl` in the state dir ($XDG_STATE_HOME/dflash-tui/), one object a line:
{"node", "time", "backend", "world_size", "bytes", "seconds", "algbw_gbps", "busbw_gbps",
"devices"}. A node keeps its last KEEP_PER_NODE results. A result is compared only with the
node's results of the same backend, world size and size. A line that is not such an object is
skipped and counted (the caller notes it); a file that cannot be read or written is a note, and
the measurement is still reported.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass
from pathlib import Path

from ..config import state_dir
from .probe_run import ProbeFailed, ProbeResult, result_from

RESULTS_NAME = "health.jsonl"
KEEP_PER_NODE = 50
MAX_FILE_BYTES = 16 << 20


def default_results_path() -> Path:
    return state_dir() / RESULTS_NAME


@dataclass(frozen=True)
class Stored:
    node: str
    time: float
    result: ProbeResult


@dataclass
class Results:
    path: Path
    rows: list[Stored]
    skipped: int = 0          # lines that were not a result
    problem: str = ""         # why the file could not be read ("" when it could)

    def earlier(self, node: str, r: ProbeResult) -> list[float]:
        """The node's earlier figures (`compared_gbps`) for the same kind of measurement, oldest first."""
        return [s.result.compared_gbps for s in self.rows if s.node == node and
                (s.result.backend, s.result.world_size, s.result.bytes) == (r.backend, r.world_size, r.bytes)]


def load(path: Path) -> Results:
    try:
        if path.exists() and not path.is_file():
            return Results(path, [], problem=f"{path} is not a regular file; move it away")
        if path.exists() and path.stat().st_size > MAX_FILE_BYTES:
            return Results(path, [], problem=f"{path} is over {MAX_FILE_BYTES >> 20} MiB; move it away")
        text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    except OSError as exc:
        return Results(path, [], problem=f"cannot read {path}: {exc.strerror or exc}")
    rows, skipped = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            rows.append(Stored(str(obj["node"]), float(obj["time"]), result_from(obj)))
        except (ValueError, KeyError, TypeError, ProbeFailed):
            skipped += 1
    return Results(path, rows, skipped)


def record(results: Results, node: str, now: float, r: ProbeResult) -> str:
    """Add `r` and rewrite the file (temp + rename) with each node's last KEEP_PER_NODE; the
    problem in one line when it cannot be written, else ""."""
    if results.problem:
        return results.problem
    results.rows.append(Stored(node, now, r))
    counts: dict[str, int] = {}
    kept: list[Stored] = []
    for s in reversed(results.rows):
        counts[s.node] = counts.get(s.node, 0) + 1
        if counts[s.node] <= KEEP_PER_NODE:
            kept.append(s)
    kept.reverse()
    results.rows = kept
    text = "".join(json.dumps({"node": s.node, "time": s.time, **s.result.to_json()}) + "\n" for s in kept)
    tmp = results.path.with_name(f".{results.path.name}.{os.getpid()}.tmp")
    try:
        results.path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, results.path)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        return f"cannot write {results.path}: {exc.strerror or exc}"
    return ""


def median_of(values: list[float]) -> float | None:
    return statistics.median(values) if values else None
