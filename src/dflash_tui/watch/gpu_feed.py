"""GpuFeed: one host watch's GPU samples, with one owner.

Two kinds of sampler can know a host's GPUs: the fleet's, which asks each host once per period for
all its runs (fleet/poller.py, lent here with `lend`), and a stream of the watch's own, started by
whoever shows the GPUs live (the dashboard's run view, through `snapshots()`). The watch's "gpus"
check (GPU LOST) reads `latest()`: the own stream's sample while one runs, else the lent one.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, Callable

from ..gpu.sample import GpuError, GpuErrorKind, GpuSnapshot
from ..gpu.sources import RunRef, open_gpu_source, run_ref_from_launch
from ..gpu.stream import GpuStream
from ..remote.base import TargetError
from ..run.verdict.report import RunReport
from .session import Session

GPU_RETRY_MAX_S = 30.0


class GpuFeed:
    def __init__(self, session: Session, interval: float = 1.0) -> None:
        self.session = session
        self.interval = interval
        self._lent: Callable[[], GpuSnapshot | None] | None = None
        self._stream: GpuStream | None = None
        self._run: RunRef | None = None
        # How the stream's sampler is opened: on the session's host (NVML through its agent, or
        # nvidia-smi); replaceable where the GPUs are another's (a benchmark's fake NVML).
        self.open_source = self._open_on_host

    async def _open_on_host(self):
        return await open_gpu_source(self.session.host, python=self.session.profile.python)

    def lend(self, sample: Callable[[], GpuSnapshot | None] | None) -> None:
        """The fleet's sample of this host, read while no stream of the watch's own runs."""
        self._lent = sample

    @property
    def known(self) -> bool:
        """Somebody samples this host's GPUs: the checklist carries the "gpus" check."""
        return self._stream is not None or self._lent is not None

    def latest(self) -> GpuSnapshot | None:
        if self._stream is not None:
            return self._stream.latest
        return self._lent() if self._lent is not None else None

    def follow(self, report: RunReport) -> None:
        """Mark the run's own processes on the GPUs (the run of the newest report, while alive)."""
        ref = run_ref_from_launch(report.launch) if report.pid_alive else None
        if ref != self._run:
            self._run = ref
            if self._stream is not None:
                self._stream.set_run(ref)

    async def snapshots(self) -> AsyncIterator[GpuSnapshot]:
        """The host's samples, live, from a stream of this feed's own (started on the first call;
        a host whose GPUs cannot be sampled yields that as a snapshot and is asked again)."""
        delay = 1.0
        while self._stream is None:
            try:
                source = await self.open_source()
            except (TargetError, OSError) as exc:
                # No GPU data is a state the pane shows, not a reason to stop the dashboard.
                yield GpuSnapshot(time=0.0, source="none", error=GpuError(
                    GpuErrorKind.PROBE_FAILED, f"cannot start GPU sampling on "
                    f"{self.session.host.label}: {exc}; retrying in {delay:.0f} s"))
                await asyncio.sleep(delay)
                delay = min(delay * 2, GPU_RETRY_MAX_S)
                continue
            self._stream = GpuStream(source, interval=self.interval, run=self._run)
            self._stream.start()
        async for snap in self._stream:
            yield snap

    async def close(self) -> None:
        """Stop the own stream; the lent sample (if any) serves the check again."""
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.stop()
