"""gather_eager: asyncio.gather that gives a task only to what has to wait.

A steady look at a run dir asks its questions of a FirstLook (run/evidence/first_look.py), which
already holds the answers, or reads records it holds parsed: nearly every coroutine a look
starts finishes without waiting once. `asyncio.gather` still wraps each in a Task (a
schedule, a callback, a wake-up each), which was most of a look's event-loop cost. Here each
coroutine runs at once until it first waits; one that finishes before that costs a function
call, and one that waits goes on in a Task of its own, so what really waits on the target
still waits concurrently, as under gather. (Python 3.12's `asyncio.eager_task_factory` does
the same for every task of a loop; the project runs on 3.11, and only a look's questions want it.)

A coroutine's first step runs in the caller's task and the rest in a task of its own: nothing
given to it may bind to the current task before it first waits (`asyncio.timeout`,
`current_task()`); the poll's deadline sits around the whole look instead (watch/host.py).
"""

from __future__ import annotations

import asyncio
import types
from typing import Any, Awaitable, Coroutine


@types.coroutine
def _carry_on(coro: Coroutine, waiting_on: Any):
    """Drive `coro`, which already ran to its first suspension (where it yielded
    `waiting_on` to its driver), to its end for the Task that awaits this."""
    while True:
        try:
            sent = yield waiting_on
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:   # a cancellation (or a throw) goes on into the coroutine
            try:
                waiting_on = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                waiting_on = coro.send(sent)
            except StopIteration as stop:
                return stop.value


async def _rest(coro: Coroutine, waiting_on: Any) -> Any:
    return await _carry_on(coro, waiting_on)


def _retrieve(task: asyncio.Task) -> None:
    if not task.cancelled():
        task.exception()   # an exception after the first one was raised: seen, not logged


async def gather_eager(*aws: Awaitable) -> list[Any]:
    """The results of `aws` in order, like `asyncio.gather(*aws)`: every one is started, the
    first exception is raised (the others still run to their end)."""
    results: list[Any] = [None] * len(aws)
    waiting: list[tuple[int, asyncio.Future]] = []
    error: BaseException | None = None
    for i, aw in enumerate(aws):
        if not asyncio.iscoroutine(aw):
            waiting.append((i, asyncio.ensure_future(aw)))
            continue
        try:
            first = aw.send(None)
        except StopIteration as stop:
            results[i] = stop.value
            continue
        except BaseException as exc:   # noqa: BLE001 - raised below, as gather would
            error = error or exc
            continue
        waiting.append((i, asyncio.ensure_future(_rest(aw, first))))
    if error is not None:
        for _, task in waiting:
            task.add_done_callback(_retrieve)
        raise error
    if waiting:
        done = await asyncio.gather(*(t for _, t in waiting))
        for (i, _), value in zip(waiting, done):
            results[i] = value
    return results
