"""What the dashboard subscribes to: the one seam between the UI and everything else.

The app never computes a verdict, never opens a connection and never reads a run file
itself. It consumes a `DashboardSource`:

- `reports()`       RunReports from the run's RunWatch (the same evaluation `--check` prints),
- `gpu_snapshots()` GpuSnapshots from the GPU stream,
- `follow(name)`    a line follower for "train.log" or "events.jsonl" (new complete lines per poll),
- `previous_run(exclude)`  the run dir's last set-aside run (run/history.PreviousRun) or None,
- `history()`       the runs in the run dir's history/ (run/history.HistoryRun), or None where
  the source has none (a run on several nodes, a replay, a history run itself),
- `resumable`, `newest_checkpoint()`  whether a relaunch may offer to resume, and from what,
- `read_only`       a source that takes no action (a history run): the keys are disabled,
- `bundle()`        an evidence bundle of the run (bundle/take.py), one line naming its file
  (raising `ActionError` when it could not be written); it signals nothing,
- `launch(request)/stop()/canary()`  the watch's actions (a launch as the view's LaunchRequest
  asks: a relaunch, with or without resume), each returning one line that says what happened
  (raising `ActionError` with a one-line message when it could not).

The live implementation is `watch_source.WatchSource`, over any RunWatch (one host or several
nodes: the watch merges the nodes' files and GPUs); tests and screenshots use
`replay.ReplaySource`, which plays back recorded dataclasses through the same interface.
"""

from __future__ import annotations

from typing import AsyncIterator, Protocol

from ...gpu.sample import GpuSnapshot
from ...run.history import HistoryRun, PreviousRun
from ...run.launch.request import LaunchRequest
from ...run.verdict.report import RunReport

TRAIN_LOG = "train.log"
EVENTS_LOG = "events.jsonl"
LOG_NAMES = (TRAIN_LOG, EVENTS_LOG)


class ActionError(Exception):
    """An action (launch, stop, relaunch, canary) could not be done; str() is one line."""


class LineFollower(Protocol):
    exists: bool   # whether the file was there at the last poll
    # The line still being written (a bar redrawn with carriage returns), "" when none.
    partial: str

    async def poll(self) -> list[str]:
        """New complete lines since the last poll (the tail of the file on the first)."""


async def run_action(source: "DashboardSource", name: str, request: LaunchRequest | None = None) -> str:
    """The source's launch, relaunch, stop or canary, by the name its key gives; a launch or
    relaunch as `request` asks (the view's: with or without resume), else a plain one."""
    if name in ("launch", "relaunch"):
        return await source.launch(request if request is not None else LaunchRequest(relaunch=name == "relaunch"))
    actions = {"stop": source.stop, "canary": source.canary}
    return await actions[name]()


class DashboardSource(Protocol):
    profile: str
    read_only: bool    # no action is taken through it (a history run)
    resumable: bool    # a relaunch may continue from a checkpoint (the bundled trainer's)

    def reports(self) -> AsyncIterator[RunReport]: ...

    def gpu_snapshots(self) -> AsyncIterator[GpuSnapshot]: ...

    def follow(self, name: str) -> LineFollower: ...

    async def previous_run(self, exclude: str | None) -> PreviousRun | None: ...

    async def history(self) -> list[HistoryRun] | None: ...

    async def newest_checkpoint(self) -> str | None:
        """What a resumed relaunch would continue from, in words; None: nothing to resume."""

    async def launch(self, request: LaunchRequest) -> str:
        """`request.resume` only where `resumable`."""

    async def stop(self) -> str: ...

    async def bundle(self) -> str:
        """An evidence bundle written; one line naming the file."""

    async def canary(self) -> str: ...

    async def close(self) -> None: ...
