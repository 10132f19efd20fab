"""GPU snapshots for a headless command (`dflash-tui --check`), each bounded in time.

The dashboard's GpuStream samples forever and shows "not answering" while NVML hangs. A
one-shot command must instead give up after a few seconds, say why, and still exit, so:
- the source comes from the same `open_gpu_source` as the dashboard's, with `isolate=True`:
  NVML is read in a child process even on this machine, because an NVML call hung on one of
  our own threads would hold the interpreter's exit until it returns;
- opening the source and each sample have short deadlines; a miss is an error snapshot with a
  one-line reason (the "gpus" check then warns), never an exception;
- a sample still hung from an earlier call (`--wait` loops) is waited on again, not stacked.
"""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable, Sequence

from ..remote.base import Target
from .sample import GpuErrorKind, GpuSnapshot
from .sources import GpuSource, RunRef, error_snapshot, listed, open_gpu_source

# Starting the host's probe is one more channel on the SSH connection the command already has,
# plus a python start-up; a sample is milliseconds on a healthy GPU.
OPEN_TIMEOUT_S = 5.0
SAMPLE_TIMEOUT_S = 3.0
CLOSE_TIMEOUT_S = 3.0

Opener = Callable[..., Awaitable[GpuSource]]


class OneShotGpuProbe:
    """The host's GPU source for one command: opened on first use, closed by `close()`."""

    def __init__(self, host: Target, *, python: str = "python3",
                 open_timeout: float = OPEN_TIMEOUT_S, sample_timeout: float = SAMPLE_TIMEOUT_S,
                 opener: Opener = open_gpu_source) -> None:
        self.host = host
        self.python = python
        self.open_timeout = open_timeout
        self.sample_timeout = sample_timeout
        self._opener = opener
        self._source: GpuSource | None = None
        self._open_failed: GpuSnapshot | None = None
        # The sample in flight: the runs it was asked for, and its answer to come.
        self._pending: tuple[tuple[RunRef | None, ...], asyncio.Future] | None = None
        self._pending_since = 0.0

    async def _open(self) -> GpuSource | None:
        if self._source is None and self._open_failed is None:
            try:
                self._source = await asyncio.wait_for(
                    self._opener(self.host, python=self.python, isolate=True), self.open_timeout)
            except asyncio.TimeoutError:
                self._fail_open(f"GPU sampling on {self.host.label} did not start within "
                                f"{self.open_timeout:.0f} s: is the host overloaded?")
            except Exception as exc:   # unreachable host, bad NVML spec: a reason, not a crash
                self._fail_open(f"cannot start GPU sampling on {self.host.label}: {exc}")
        return self._source

    def _fail_open(self, message: str) -> None:
        # Not retried within one command: each retry could cost the whole open timeout again.
        self._open_failed = error_snapshot(GpuErrorKind.PROBE_FAILED, message, "none")

    async def sample(self, run: RunRef | None = None) -> GpuSnapshot:
        """One snapshot of the host's GPUs, in at most about open_timeout + sample_timeout."""
        return (await self._bounded((run,), lambda source: listed(source.sample(run))))[0]

    async def sample_runs(self, runs: Sequence[RunRef | None]) -> list[GpuSnapshot]:
        """One snapshot per run of `runs` (one read of the host's GPUs serves them all, each run's
        processes marked in its own), in the same time as `sample`."""
        runs = tuple(runs)
        return await self._bounded(runs, lambda source: source.sample_runs(runs))

    async def _bounded(self, runs: tuple[RunRef | None, ...],
                       ask: Callable[[GpuSource], Awaitable[list[GpuSnapshot]]]) -> list[GpuSnapshot]:
        source = await self._open()
        if source is None:
            return [self._open_failed] * len(runs)
        name = source.name
        deadline = time.monotonic() + self.sample_timeout
        while True:
            if self._pending is None:
                self._pending = (runs, asyncio.ensure_future(ask(source)))
                self._pending_since = time.monotonic()
            asked, pending = self._pending
            try:
                snaps = await asyncio.wait_for(asyncio.shield(pending), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                waited = time.monotonic() - self._pending_since
                return [error_snapshot(GpuErrorKind.PROBE_FAILED,
                                       f"the GPU probe on {self.host.label} has not answered for "
                                       f"{waited:.0f} s: a GPU may be failing (check dmesg for Xid errors)",
                                       name)] * len(runs)
            except Exception as exc:   # sources promise not to raise; keep the promise for them
                self._pending = None
                return [error_snapshot(GpuErrorKind.PROBE_FAILED,
                                       f"GPU source failed: {type(exc).__name__}: {exc}", name)] * len(runs)
            self._pending = None
            if asked == runs:
                return snaps
            # The late answer to an earlier ask, whose caller stopped waiting: it marks other
            # runs' processes, so these runs are asked for now, within what is left of the wait.

    async def close(self) -> None:
        """Stop the probe (it may be an agent process on the host), hung or not, quickly."""
        pending = self._pending[1] if self._pending is not None else None
        self._pending = None
        if pending is not None and not pending.done():
            pending.cancel()
            try:
                await pending
            except (asyncio.CancelledError, Exception):   # cancelled or failed: it is over
                pass
        source, self._source = self._source, None
        if source is not None:
            try:
                await asyncio.wait_for(source.close(), CLOSE_TIMEOUT_S)
            except Exception:
                pass   # a probe that will not close is abandoned; the command still ends
