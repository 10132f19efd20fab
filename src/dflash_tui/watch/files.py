"""The files of a watched run, followed: new complete lines of a run-dir file at each poll.

A follower rides along when the session reconnects (a new transport, the same file). train.log
and events.jsonl are read by the session's progress tracker too, at every look: both record and
take bytes through the tracker's memo of recent reads (LogFollower's `shared`), so a byte of the
file is asked of the target once. A run on several nodes follows every node's copy, each line
prefixed with its node's name.
"""

from __future__ import annotations

import asyncio
import posixpath
from typing import AsyncIterator, Callable, Protocol

from ..run.evidence.logtail import LogFollower
from .session import Session


class LineFollower(Protocol):
    @property
    def exists(self) -> bool: ...

    @property
    def partial(self) -> str: ...

    async def poll(self) -> list[str]: ...


class RunFileFollower:
    """A LogFollower of one file of a session's target that survives its reconnects."""

    def __init__(self, session: Session, path: str) -> None:
        self.session = session
        self.path = path
        self._follower: LogFollower | None = None

    @property
    def exists(self) -> bool:
        return self._follower is not None and self._follower.exists

    @property
    def partial(self) -> str:
        return self._follower.partial if self._follower is not None else ""

    async def poll(self) -> list[str]:
        ops = await self.session.ops()
        if self._follower is None:
            # A run dir's log is replaced only by a launch, which sets the previous run's aside.
            name = posixpath.basename(self.path)
            self._follower = LogFollower(ops, self.path, shared=self.session.progress.reads,
                                         replaced=f"new run: the previous run's {name} was set aside "
                                                  f"(history/); following the new {name}")
        elif self._follower.ops is not ops:
            self._follower.set_ops(ops)
        return await self._follower.poll()


class PrefixedFollower:
    """Every node's follower of one file, its lines prefixed with the node's name."""

    def __init__(self, followers: list[tuple[str, LineFollower]]) -> None:
        self.followers = followers

    @property
    def exists(self) -> bool:
        return any(f.exists for _, f in self.followers)

    @property
    def partial(self) -> str:
        """The line each node is still writing, one per node that has one."""
        return " ".join(f"[{node}] {f.partial}" for node, f in self.followers if f.partial)

    async def poll(self) -> list[str]:
        batches = await asyncio.gather(*(f.poll() for _, f in self.followers))
        return [f"[{node}] {line}" for (node, _), lines in zip(self.followers, batches) for line in lines]


async def merged(streams: list[AsyncIterator], on_item: Callable) -> AsyncIterator:
    """Items from every stream as they come; `on_item(i, item)` returns what to yield (or None)."""
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(i: int, stream: AsyncIterator) -> None:
        async for item in stream:
            await queue.put((i, item))
    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        while True:
            i, item = await queue.get()
            out = on_item(i, item)
            if out is not None:
                yield out
    finally:
        for t in tasks:
            t.cancel()
