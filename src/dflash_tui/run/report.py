"""One observation of a run, as handed to `--check` output and to the dashboard.

`run/monitor.py` produces these once per poll; the UI renders them and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..contract.rundir import ExitRecord, LaunchRecord, StopRecord, TrainStatus

from .observe import Evidence, process_matches
from .verdict import Checklist


@dataclass
class RunReport:
    time: float                       # target clock when observed (epoch seconds)
    profile: str
    target_label: str                 # e.g. "local", "root@gpu1 · pct:200"
    run_dir: str
    checklist: Checklist              # verdict + checks (+ summary line)
    launch: LaunchRecord | None = None
    exit: ExitRecord | None = None
    stop: StopRecord | None = None
    status: TrainStatus | None = None  # latest status.json, if any parsed
    pid_alive: bool | None = None
    uptime_s: float | None = None
    connected: bool = True            # False: the transport is down, fields are the last known
    stale_since: float | None = None  # local epoch seconds when the data stopped being fresh
    error: str | None = None          # transport/read error of this poll, one line
    last_traceback: str | None = None  # last Python traceback found in train.log, if any


def report_from(ev: Evidence, checklist: Checklist, *, profile: str, target_label: str) -> RunReport:
    """The report of one fresh observation: what `--check` prints and a pane renders."""
    alive = process_matches(ev.launch, ev.proc) if ev.launch is not None else None
    return RunReport(
        time=ev.now, profile=profile, target_label=target_label, run_dir=ev.run_dir,
        checklist=checklist, launch=ev.launch, exit=ev.exit, stop=ev.stop, status=ev.status,
        pid_alive=alive,
        uptime_s=(ev.now - ev.launch.start_time) if ev.launch is not None and alive else None,
        connected=True, stale_since=None, error=None, last_traceback=ev.last_traceback)
