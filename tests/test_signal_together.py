"""The nodes of one run send their SIGTERM together (watch/nodes_session.py SignalTogether): a node whose
stop is proven first waits for the others, but never for a node that ends its stop without a
signal, and never longer than its bound. The nodes here are stand-ins for Session.stop that take
their own time to prove the pid; the real nodes are tests/watch/test_nodes_session.py's."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from dflash_tui.watch.nodes_session import SignalTogether
from dflash_tui.remote.base import TargetError
from dflash_tui.run.launch.stop import StopResult


class Node:
    def __init__(self, prove_s: float, outcome: str = "terminated", fails: bool = False) -> None:
        self.prove_s, self.outcome, self.fails = prove_s, outcome, fails
        self.signalled_at: float | None = None

    async def stop(self, *, before_signal=None, requested_by=None) -> StopResult:
        await asyncio.sleep(self.prove_s)   # launch.json, the proof, stop.json
        if self.fails:
            raise TargetError("the node stopped answering")
        if self.outcome != "terminated":
            return StopResult(self.outcome, None, None, 0.0, "not running")
        await before_signal()
        self.signalled_at = time.monotonic()
        return StopResult("terminated", 1, "r", 0.0, "ended after SIGTERM")


async def test_a_node_proven_first_signals_with_the_slowest():
    fast, slow = Node(0.0), Node(0.3)
    together = SignalTogether(2)
    t0 = time.monotonic()
    results = await asyncio.gather(together.stop(fast), together.stop(slow))
    assert [r.outcome for r in results] == ["terminated", "terminated"]
    assert fast.signalled_at - t0 >= 0.29
    assert abs(fast.signalled_at - slow.signalled_at) < 0.05


@pytest.mark.parametrize("other", [Node(0.2, outcome="not-running"), Node(0.2, fails=True)],
                         ids=["ended-without-a-signal", "raised"])
async def test_a_node_that_will_not_signal_does_not_hold_the_others(other):
    node = Node(0.0)
    together = SignalTogether(2)
    t0 = time.monotonic()
    results = await asyncio.gather(together.stop(node), together.stop(other), return_exceptions=True)
    assert results[0].outcome == "terminated"
    assert node.signalled_at - t0 < 1.0   # released when the other ended, not after the bound
    assert isinstance(results[1], TargetError) == other.fails


async def test_a_node_still_unproven_does_not_hold_the_others_past_the_bound():
    node, stuck = Node(0.0), Node(30.0)
    together = SignalTogether(2, wait_s=0.3)
    t0 = time.monotonic()
    task = asyncio.ensure_future(together.stop(stuck))
    result = await together.stop(node)
    assert result.outcome == "terminated"
    assert 0.29 <= node.signalled_at - t0 < 2.0
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
