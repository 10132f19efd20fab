"""`GpuStream`: one sampling loop per host, shared by the checklist and the dashboard.

A single task asks the source for a snapshot every `interval` seconds (1 Hz by default) and
hands the same GpuSnapshot object to every subscriber, so the Health pane and the GPU pane can
never disagree about what was seen. A slow subscriber only ever misses intermediate
snapshots (its queue holds the latest one), it never slows the sampler or the others. Each GPU
keeps a bounded history (a deque) for sparklines.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import AsyncIterator, Callable

from .sample import GpuError, GpuErrorKind, GpuSample, GpuSnapshot
from .sources import GpuSource, RunRef

DEFAULT_INTERVAL_S = 1.0
DEFAULT_HISTORY = 300   # five minutes at 1 Hz


class Subscription:
    """Async iterator over snapshots; holds at most the latest unread one."""

    def __init__(self, stream: "GpuStream") -> None:
        self._stream = stream
        self._queue: asyncio.Queue[GpuSnapshot | None] = asyncio.Queue(maxsize=1)

    def _offer(self, snap: GpuSnapshot | None) -> None:
        if self._queue.full():
            self._queue.get_nowait()   # drop the stale one: subscribers want the newest
        self._queue.put_nowait(snap)

    def __aiter__(self) -> "Subscription":
        return self

    async def __anext__(self) -> GpuSnapshot:
        snap = await self._queue.get()
        if snap is None:
            raise StopAsyncIteration
        return snap

    def close(self) -> None:
        self._stream._subs.discard(self)


class GpuStream:
    def __init__(self, source: GpuSource, *, interval: float = DEFAULT_INTERVAL_S,
                 history: int = DEFAULT_HISTORY, run: RunRef | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if interval <= 0 or history < 1:
            raise ValueError("interval must be > 0 and history >= 1")
        self.source = source
        self.interval = interval
        self.history_len = history
        self.run = run
        self.latest: GpuSnapshot | None = None
        self.samples_taken = 0
        self._clock = clock
        # Keyed by UUID, not index: when a GPU falls off the bus the driver renumbers the
        # others, and a lost GPU is still reported at its old index next to its successor.
        self._history: dict[str, deque[GpuSample]] = {}
        self._subs: set[Subscription] = set()
        self._task: asyncio.Task | None = None

    # -- the run whose processes are marked -------------------------------------------------

    def set_run(self, run: RunRef | None) -> None:
        """Follow another run (after a relaunch): takes effect at the next sample."""
        self.run = run

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop(), name="gpu-stream")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        for sub in list(self._subs):
            sub._offer(None)
        await self.source.close()

    async def __aenter__(self) -> "GpuStream":
        self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    def subscribe(self) -> Subscription:
        """A new subscriber; it first gets the latest snapshot, if there is one."""
        sub = Subscription(self)
        self._subs.add(sub)
        if self.latest is not None:
            sub._offer(self.latest)
        return sub

    async def __aiter__(self) -> AsyncIterator[GpuSnapshot]:
        sub = self.subscribe()
        try:
            async for snap in sub:
                yield snap
        finally:
            sub.close()

    # -- sampling ---------------------------------------------------------------------------

    async def sample_once(self) -> GpuSnapshot:
        """Take one sample now and publish it (the loop calls this; tests may too)."""
        try:
            snap = await self.source.sample(self.run)
        except Exception as exc:   # sources promise not to raise; this keeps the promise for them
            snap = GpuSnapshot(time=time.time(), source=self.source.name,
                               error=GpuError(GpuErrorKind.PROBE_FAILED,
                                              f"GPU source failed: {type(exc).__name__}: {exc}"))
        self._publish(snap)
        return snap

    def _publish(self, snap: GpuSnapshot) -> None:
        self.latest = snap
        self.samples_taken += 1
        for g in snap.gpus:
            hist = self._history.get(g.uuid)
            if hist is None:
                hist = self._history[g.uuid] = deque(maxlen=self.history_len)
            hist.append(g)
        for sub in list(self._subs):
            sub._offer(snap)

    async def _loop(self) -> None:
        # Ticks on a fixed grid: a slow sample delays the next one, never shifts all later ones,
        # and missed ticks are skipped rather than bunched.
        next_tick = self._clock()
        while True:
            await self.sample_once()
            next_tick += self.interval
            now = self._clock()
            if next_tick < now:
                next_tick = now + self.interval - ((now - next_tick) % self.interval)
            await asyncio.sleep(next_tick - now)

    # -- history for sparklines -------------------------------------------------------------

    def _uuid_at(self, index: int) -> str | None:
        if self.latest is None:
            return None
        at = [g for g in self.latest.gpus if g.index == index]
        at.sort(key=lambda g: g.lost)          # the GPU present at that index, before a lost one
        return at[0].uuid if at else None

    def history(self, index: int) -> list[GpuSample]:
        """Samples of the GPU now at `index`, oldest first (at most `history` of them)."""
        return list(self._history.get(self._uuid_at(index) or "", ()))

    def history_of(self, uuid: str) -> list[GpuSample]:
        return list(self._history.get(uuid, ()))

    def series(self, index: int, field: str) -> list[float | None]:
        """One field of the GPU now at `index` over time, oldest first (None where n/a)."""
        return [getattr(g, field) for g in self.history(index)]
