"""LocalTarget.run: a command past its timeout, or given up by its caller, ends with what it
started; the wait for it is bounded even when a process it detached holds its output open."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from dflash_tui.remote.base import CommandTimeout
from dflash_tui.remote.local import LocalTarget


def pids_of(*argv: str) -> list[int]:
    """Live processes whose argv is exactly `argv`."""
    want = "\0".join(argv).encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes() == want and (entry / "stat").read_text().split()[2] != "Z":
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


async def gone(*argv: str, within: float = 2.0) -> bool:
    deadline = time.monotonic() + within
    while pids_of(*argv):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def test_a_timeout_kills_the_child_that_holds_the_pipes():
    # sh waits on its child: killing sh alone leaves `sleep` holding stdout, and the wait on
    # the pipes would last the whole sleep.
    t0 = time.monotonic()
    with pytest.raises(CommandTimeout, match="did not finish within 1s"):
        await LocalTarget().run(["sh", "-c", "sleep 41.7; echo never"], timeout=1)
    assert time.monotonic() - t0 < 4
    assert await gone("sleep", "41.7")


async def test_a_cancelled_command_is_ended_with_its_children():
    task = asyncio.create_task(LocalTarget().run(["sh", "-c", "sleep 41.8; echo never"], timeout=60))
    deadline = time.monotonic() + 5
    while not pids_of("sleep", "41.8"):
        assert time.monotonic() < deadline, "the command never started"
        await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await gone("sleep", "41.8")


async def test_a_detached_process_holding_the_output_does_not_hold_the_timeout():
    t0 = time.monotonic()
    try:
        with pytest.raises(CommandTimeout):
            await LocalTarget().run(["sh", "-c", "setsid sleep 41.9 & sleep 42.0"], timeout=1)
        assert time.monotonic() - t0 < 5
        assert await gone("sleep", "42.0")
    finally:
        for pid in pids_of("sleep", "41.9"):   # in a session of its own: ours to end here
            os.kill(pid, signal.SIGKILL)
