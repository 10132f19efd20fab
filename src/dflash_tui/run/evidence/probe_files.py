"""Read the run probe's reports (RUN_DIR/probe/<pid>.json) through RemoteOps.

One listing of the probe directory, then small reads of at most MAX_REPORTS reports, the
most recently written first (a process that ended stops rewriting its report, so live ones
come first). A report that cannot be read or parsed is a problem string, never an exception;
one of another run (left behind in the directory) is not evidence about this one.
"""

from __future__ import annotations

import posixpath
import re

from ...contract.rundir import PROBE_DIR, ProbeReport, SchemaError, parse_probe
from ...remote.base import TargetError, is_transport_failure
from ...remote.ops import FileStat, PreflightOps
from ..eager import gather_eager

MAX_REPORTS = 32
REPORT_MAX_BYTES = 256 << 10     # a report of 256 threads with six frames each is ~100 KiB
_REPORT_NAME = re.compile(r"^[1-9][0-9]{0,9}\.json$")


class ProbeReports(list):
    """The reports found (a list of ProbeReport, by rank then pid), plus what went wrong."""

    def __init__(self, reports=(), problems=(), skipped: int = 0, listing=(), read=()) -> None:
        super().__init__(reports)
        self.problems: list[str] = list(problems)   # one line per unreadable report
        self.skipped = skipped                      # reports beyond MAX_REPORTS, not read
        # Every entry of the probe directory (stack dumps, Flight Recorder dumps, error files).
        self.listing: list[FileStat] = list(listing)
        self.read: list[str] = list(read)            # the reports' paths read this time


async def _read_one(ops: PreflightOps, st: FileStat) -> tuple[ProbeReport | None, str | None]:
    name = f"{PROBE_DIR}/{posixpath.basename(st.path)}"
    try:
        chunk = await ops.read(st.path, 0, REPORT_MAX_BYTES)
    except TargetError as exc:
        if is_transport_failure(exc):
            raise
        return None, f"{name}: {exc}"
    if not chunk.exists:
        return None, None             # the process's last report was replaced or removed
    if chunk.size > REPORT_MAX_BYTES:
        return None, f"{name} is {chunk.size} bytes, too big to be a probe report"
    try:
        return parse_probe(chunk.data.decode("utf-8"), name), None
    except UnicodeDecodeError:
        return None, f"{name} is not UTF-8 text"
    except SchemaError as exc:
        return None, str(exc)


async def gather_probes(ops: PreflightOps, run_dir: str, run_id: str | None) -> ProbeReports:
    """The probe reports of run `run_id` (any run's when None) in `run_dir`."""
    probe_dir = posixpath.join(run_dir, PROBE_DIR)
    try:
        listing = await ops.list_dir(probe_dir)
    except TargetError as exc:
        if is_transport_failure(exc):
            raise
        return ProbeReports(problems=[f"{probe_dir}: {exc}"])
    candidates = [st for st in listing
                  if st.exists and not st.is_dir and _REPORT_NAME.match(posixpath.basename(st.path))]
    candidates.sort(key=lambda st: st.mtime, reverse=True)
    read = candidates[:MAX_REPORTS]
    results = await gather_eager(*(_read_one(ops, st) for st in read))
    reports = [r for r, _ in results if r is not None and (run_id is None or r.run_id == run_id)]
    reports.sort(key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.pid))
    return ProbeReports(reports, [p for _, p in results if p], skipped=len(candidates) - len(read),
                        listing=listing, read=[st.path for st in read])
