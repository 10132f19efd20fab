"""gather_eager: gather's answers, a task only for what waits."""

from __future__ import annotations

import asyncio

import pytest

from dflash_tui.run.eager import gather_eager


async def _now(value):
    return value


async def _later(value, delay, log):
    await asyncio.sleep(delay)
    log.append(value)
    return value


def test_results_in_order_and_what_waits_still_runs_concurrently():
    async def main():
        log: list[str] = []
        before = len(asyncio.all_tasks())
        t0 = asyncio.get_running_loop().time()
        coros = [_now("a"), _later("b", 0.2, log), _now("c"), _later("d", 0.2, log)]
        task_counts = []

        async def watch_tasks():
            await asyncio.sleep(0.05)
            task_counts.append(len(asyncio.all_tasks()) - before)
        watcher = asyncio.ensure_future(watch_tasks())
        out = await gather_eager(*coros)
        took = asyncio.get_running_loop().time() - t0
        await watcher
        return out, took, sorted(log), task_counts
    out, took, log, task_counts = asyncio.run(main())
    assert out == ["a", "b", "c", "d"]
    assert log == ["b", "d"]
    assert took < 0.35            # the two waits overlapped (0.4 s one after another)
    assert task_counts == [1 + 2]   # the watcher, and one task per coroutine that waited


def test_nothing_waits_no_task_is_made(monkeypatch):
    made = []
    real = asyncio.ensure_future
    monkeypatch.setattr(asyncio, "ensure_future", lambda *a, **k: made.append(a) or real(*a, **k))
    assert asyncio.run(gather_eager(_now(1), _now(2))) == [1, 2]
    assert made == []


def test_the_first_exception_is_raised_and_the_rest_still_run():
    async def boom():
        raise ValueError("bad record")

    async def late_boom():
        await asyncio.sleep(0.05)
        raise KeyError("later")

    async def main():
        log: list[str] = []
        with pytest.raises(ValueError, match="bad record"):
            await gather_eager(_later("x", 0.05, log), boom(), late_boom())
        await asyncio.sleep(0.15)
        return log
    assert asyncio.run(main()) == ["x"]


def test_a_waiting_coroutine_is_cancelled_with_its_caller():
    async def main():
        cleaned = []

        async def waits():
            try:
                await asyncio.sleep(10)
            finally:
                cleaned.append(True)
        outer = asyncio.ensure_future(gather_eager(waits(), _now(1)))
        await asyncio.sleep(0.05)
        outer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await outer
        await asyncio.sleep(0)
        return cleaned
    assert asyncio.run(main()) == [True]


def test_futures_and_sleep_zero_are_awaited_like_gather():
    async def yields_once():
        await asyncio.sleep(0)
        return "after a bare yield"

    async def main():
        fut = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.01, fut.set_result, "fut")
        return await gather_eager(yields_once(), fut)
    assert asyncio.run(main()) == ["after a bare yield", "fut"]
