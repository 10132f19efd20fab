"""The run's host memory on the target (run/evidence/host_memory.py): the cgroup files that bind a
process, their values, and real reads of procfs through the agent and the shell ops (whose
files say 0 bytes and hold text)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from dflash_tui.remote.agent import open_ops
from dflash_tui.remote.local import LocalTarget
from dflash_tui.run.evidence.host_memory import host_limit, kb_field, limit_files, limit_value, tree_memory
from dflash_tui.run.evidence import memory_runway
from dflash_tui.run.evidence.activity import ProgressTracker
from dflash_tui.run.evidence.memory_runway import MemoryLooks
from dflash_tui.run.evidence.observe import gather

from tests.run.evidence.test_first_look import CountingAgent, live_run  # noqa: F401 (a fixture)

MB = 1 << 20


def test_the_limit_files_of_cgroup_v2_and_v1_innermost_first():
    assert limit_files("0::/user.slice/job-7\n") == [
        ("/sys/fs/cgroup/user.slice/job-7/memory.max", "cgroup memory.max"),
        ("/sys/fs/cgroup/user.slice/memory.max", "cgroup memory.max"),
        ("/sys/fs/cgroup/memory.max", "cgroup memory.max")]
    v1 = "9:pids:/\n4:memory:/docker/abc\n1:cpu,cpuacct:/docker/abc\n0::/\n"
    assert [p for p, _ in limit_files(v1)] == [
        "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "/sys/fs/cgroup/memory/docker/memory.limit_in_bytes",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max"]
    assert limit_files("garbage\n\n") == [] and limit_files("0::/../..\n") == [
        ("/sys/fs/cgroup/memory.max", "cgroup memory.max")]


def test_limit_values_and_kb_fields():
    assert limit_value("1073741824\n") == 1 << 30
    assert limit_value("max\n") is None and limit_value("9223372036854771712\n") is None
    assert limit_value("") is None and limit_value("-1") is None
    assert kb_field("Rss:  2048 kB\nPss:   1024 kB\n", "Pss") == 1 << 20
    assert kb_field("MemTotal:       16318748 kB\n", "MemTotal") == 16318748 * 1024
    assert kb_field("Pss: lots kB\n", "Pss") is None and kb_field("", "Pss") is None


@pytest.mark.parametrize("prefer", ["agent", "shell"])
async def test_a_real_tree_memory_grows_with_what_it_holds_and_the_limit_reads(prefer):
    ops = await open_ops(LocalTarget(), python=sys.executable, prefer=prefer)
    # The child says when its 64 MiB are in place: while bytearray copies the bytes it is built
    # from, the tree holds both, and a measure then is not the one the sum is compared with.
    child = subprocess.Popen([sys.executable, "-c", "import sys; b = bytearray(b'1' * (64 << 20)); "
                              "print('held', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    small = subprocess.Popen([sys.executable, "-c", "import sys; print('held', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        for p in (child, small):
            assert (await asyncio.to_thread(p.stdout.readline)) == b"held\n"
        big = await tree_memory(ops, (child.pid,))
        base = await tree_memory(ops, (small.pid,))
        assert base is not None and big is not None and big - base >= 60 * MB, (big, base)
        both = await tree_memory(ops, (child.pid, small.pid, 999_999_999))   # a gone pid counts nothing
        assert abs(both - (big + base)) < 8 * MB
        assert await tree_memory(ops, (999_999_999,)) is None
        limit = await host_limit(ops, os.getpid())
        assert limit is not None and limit.bytes > 64 * MB
        assert limit.source in ("host MemTotal", "cgroup memory.max", "cgroup memory.limit_in_bytes")
    finally:
        for p in (child, small):
            p.kill()
            p.wait()
        await ops.close()


class _CountedReads:
    """The real ops, with the paths read counted (the agent's and the shell's reads alike)."""

    def __init__(self, ops) -> None:
        self.ops, self.paths = ops, []

    async def read(self, path, offset=0, max_bytes=1 << 20):
        self.paths.append(path)
        return await self.ops.read(path, offset, max_bytes)


@pytest.mark.parametrize("prefer", ["agent", "shell"])
async def test_the_pss_is_sampled_when_the_tree_s_rss_moves_else_once_a_minute(prefer):
    """The tree's RSS comes with the process tree (agent and shell alike); a flat tree costs no
    read between PSS samples a minute apart, and a tree that grows (64 MiB here, then 1 MiB:
    under the bar) is sampled at the first look past the cadence; so is a tree of other
    processes."""
    ops = _CountedReads(await open_ops(LocalTarget(), python=sys.executable, prefer=prefer))
    code = ("import sys\nheld = []\nprint('held', flush=True)\n"
            "for line in sys.stdin:\n    held.append(bytearray(b'1' * (int(line) << 20)))\n"
            "    print('held', flush=True)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    async def grow(mb: int) -> None:
        child.stdin.write(b"%d\n" % mb)
        child.stdin.flush()
        assert (await asyncio.to_thread(child.stdout.readline)) == b"held\n"

    async def look(t: float, step: int, also: tuple[int, ...] = ()) -> None:
        tree = await ops.ops.proc_tree(child.pid)
        assert tree.rss_bytes is not None and tree.rss_bytes > 4 * MB, tree
        ev = SimpleNamespace(now=t, status=None, activity=SimpleNamespace(step=step), metrics=None,
                             tree=SimpleNamespace(pid=child.pid, pids=tree.pids + also, rss_bytes=tree.rss_bytes))
        await mem.look(ops, ev, "run-1")

    def pss_reads() -> int:
        return sum(p.endswith("/smaps_rollup") for p in ops.paths)

    mem = MemoryLooks(every_s=5.0, limit_bytes=1 << 40)
    try:
        assert (await asyncio.to_thread(child.stdout.readline)) == b"held\n"
        t = 1000.0
        await look(t, 1)
        assert pss_reads() == 1 and len(mem.host.samples) == 1       # the first look samples
        for i in range(1, 12):                                       # 55 s flat, a look each 5 s
            await look(t + 5 * i, 1 + i)
        assert ops.paths == [f"/proc/{child.pid}/smaps_rollup"], ops.paths
        await look(t + 60, 13)                                       # a minute on: sampled again
        assert pss_reads() == 2 and len(mem.host.samples) == 2
        await grow(64)
        await look(t + 62, 14)                                       # moved, within the cadence
        assert pss_reads() == 2
        await look(t + 65, 15)                                       # past it: sampled
        assert pss_reads() == 3 and mem.host.samples[-1].used - mem.host.samples[-2].used >= 60 * MB
        await grow(1)
        await look(t + 70, 16)                                       # 1 MiB: under the bar
        assert pss_reads() == 3
        await look(t + 75, 17, also=(os.getpid(),))                  # another process in the tree
        assert pss_reads() == 5
    finally:
        child.kill()
        child.wait()
        await ops.ops.close()


class _ReadPathsAgent(CountingAgent):
    """The real agent; remembers the path of every read it was asked on its own."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.read_paths: list[str] = []

    async def call(self, op, timeout=None, **args):
        if op == "read":
            self.read_paths.append(args["path"])
        return await super().call(op, timeout, **args)


async def test_the_limit_s_files_ride_in_the_look_s_first_request_when_it_is_due(live_run, monkeypatch):
    """The memory limit is read again every LIMIT_EVERY_S (2 s here, looks 1 s apart): the look
    due for it carries the files it was read from last time in its one request, so none of
    them is asked on its own past the first reading."""
    monkeypatch.setattr(memory_runway, "LIMIT_EVERY_S", 2.0)
    run_dir = live_run.profile.run_dir
    agent = await _ReadPathsAgent.start(LocalTarget())
    try:
        tracker = ProgressTracker()
        ev = await gather(agent, run_dir, tracker=tracker)  # the first look reads the limit on its own
        first = [p for p in agent.read_paths if p.endswith(("/cgroup", "memory.max", "memory.limit_in_bytes", "/meminfo"))]
        assert first and first[0].endswith("/cgroup"), agent.read_paths
        assert ev.memory is not None and ev.memory.host.limit, ev.memory
        agent.read_paths.clear()
        reads_at = []
        for _ in range(8):
            await asyncio.sleep(1.0)
            before = tracker.memory._limit_at
            await gather(agent, run_dir, tracker=tracker)
            reads_at.append(tracker.memory._limit_at != before)
        assert sum(reads_at) >= 2, reads_at                  # read again, every other look or so
        limit_reads = [p for p in agent.read_paths if p.endswith(("/cgroup", "memory.max", "memory.limit_in_bytes", "/meminfo"))]
        assert limit_reads == [], agent.read_paths
    finally:
        await agent.close()
