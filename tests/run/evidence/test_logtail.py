"""LogFollower over real RemoteOps on real files: growth, partial lines, truncation, rotation,
bursts bigger than the window, and bounded memory."""

from __future__ import annotations

import os

import pytest

from dflash_tui.remote import open_ops
from dflash_tui.remote.local import LocalTarget
from dflash_tui.run.evidence import logtail
from dflash_tui.run.evidence.activity import ProgressTracker
from dflash_tui.run.evidence.logtail import LogFollower

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def ops():
    o = await open_ops(LocalTarget())
    yield o
    await o.close()


async def test_follow_growth_partial_truncate_rotate(ops, tmp_path):
    log = tmp_path / "train.log"
    log.write_text("old 1\nold 2\n")
    f = LogFollower(ops, str(log))
    assert await f.poll() == ["old 1", "old 2"]          # first poll: the tail
    with log.open("a") as fh:
        fh.write("step 1\nstep 2 part")
    assert await f.poll() == ["step 1"]
    with log.open("a") as fh:
        fh.write("ial\n")
    assert await f.poll() == ["step 2 partial"]
    assert await f.poll() == []

    log.write_text("fresh\n")                              # truncated (same inode, smaller)
    lines = await f.poll()
    assert lines[-1] == "fresh" and "truncated" in lines[0]

    os.rename(log, tmp_path / "train.log.1")               # rotated: new inode
    log.write_text("rotated a\nrotated b\n")
    lines = await f.poll()
    assert "rotated" in lines[0] and lines[1:] == ["rotated a", "rotated b"]
    assert f.resets == 2


async def test_missing_then_created(ops, tmp_path):
    log = tmp_path / "train.log"
    f = LogFollower(ops, str(log))
    assert await f.poll() == [] and not f.exists
    log.write_text("hello\n")
    assert await f.poll() == ["hello"]


async def test_burst_bigger_than_window_is_skipped_with_a_marker(ops, tmp_path):
    log = tmp_path / "train.log"
    log.write_text("")
    f = LogFollower(ops, str(log), window=4096)
    assert await f.poll() == []
    with log.open("a") as fh:
        for i in range(20000):
            fh.write(f"line {i:06d}\n")
    lines = await f.poll()
    assert "skipped" in lines[0]
    assert lines[-1] == "line 019999"
    assert sum(len(l) + 1 for l in lines[1:]) <= 4096
    assert f.skipped_bytes > 200_000


async def test_line_without_newline_is_bounded(ops, tmp_path):
    log = tmp_path / "train.log"
    log.write_text("")
    f = LogFollower(ops, str(log), window=64 << 10)
    await f.poll()
    with log.open("a") as fh:
        fh.write("x" * 40_000)
    lines = await f.poll()
    assert len(lines) == 1 and lines[0].endswith("[dflash-tui: line cut]")
    assert len(f._partial) == 0


async def test_broken_utf8_and_carriage_returns_read_line_by_line(ops, tmp_path):
    # A poll's lines are decoded in one call; each must read as its own bytes would alone:
    # a broken sequence at a line's end is one replacement, and a "\r\n" ending is dropped.
    log = tmp_path / "train.log"
    log.write_bytes(b"")
    f = LogFollower(ops, str(log))
    assert await f.poll() == []
    raw = [b"ok \xe2\x82", b"\xac euro", b"crlf\r", b"\xf0\x9f\x98\x80 \xff\xfe", b"", b"\xed\xa0\x80 surrogate"]
    with log.open("ab") as fh:
        fh.write(b"\n".join(raw) + b"\n")
    assert await f.poll() == [line.rstrip(b"\r").decode("utf-8", "replace") for line in raw]


class CountingOps:
    """The ops underneath, counting the bytes each reader asked the target for."""

    def __init__(self, ops) -> None:
        self.ops, self.bytes = ops, 0

    def __getattr__(self, name):
        return getattr(self.ops, name)

    async def read(self, path, offset=0, max_bytes=1 << 20):
        chunk = await self.ops.read(path, offset, max_bytes)
        self.bytes += len(chunk.data)
        return chunk


async def test_the_look_and_the_follower_read_each_byte_once(ops, tmp_path, monkeypatch):
    # The dashboard's follower and the progress tracker read the same train.log through one
    # memo: a poll right behind a look reads nothing itself, a look right behind a poll asks
    # only for the bytes past it; each sees what it would have seen alone (the same lines, the
    # same progress), across bursts, a partial line, a stale look, a rotation and a truncation.
    log = tmp_path / "train.log"
    log.write_text("start\n")
    tracker, lone_tracker = ProgressTracker(), ProgressTracker()
    look_ops, poll_ops = CountingOps(ops), CountingOps(ops)
    shared = LogFollower(poll_ops, str(log), shared=tracker.reads)
    alone = LogFollower(ops, str(log))

    async def look() -> None:
        (st,) = await ops.stat([str(log)])
        await tracker.read_files(look_ops, str(tmp_path), "r1", st.mtime, {"train.log": st})
        await lone_tracker.read_files(ops, str(tmp_path), "r1", st.mtime, {"train.log": st})
        assert tracker.progress == lone_tracker.progress

    async def both() -> list[str]:
        lines = await shared.poll()
        assert lines == await alone.poll()
        return lines

    def write(text: str) -> None:
        with log.open("a") as fh:
            fh.write(text)

    assert await both() == ["start"]
    await look()
    n = 0
    for burst in (3, 1, 500):
        write("".join(f"step {n + k}/9000 loss 2.3\n" for k in range(burst)) + "step partial")
        n += burst
        await look()
        before, asked = shared.shared_polls, poll_ops.bytes
        assert (await both())[-1] == f"step {n - 1}/9000 loss 2.3"
        assert shared.shared_polls == before + 1 and poll_ops.bytes == asked   # behind the look
        write(" done\n")
        # The follower's own poll, then a look behind it: the look asks for nothing the poll read.
        assert await both() == ["step partial done"]
        asked = look_ops.bytes
        assert tracker.cursors(str(tmp_path)) == {str(log): log.stat().st_size}
        await look()
        assert look_ops.bytes == asked
    assert tracker.progress.step == n - 1
    write("more 1/9000\n")
    await both()
    write("more 2/9000\n")
    asked = look_ops.bytes
    await look()                                    # half held, half new: asks for the new half
    assert look_ops.bytes - asked == len("more 2/9000\n")

    # The look's prefetch is asked (cursors) before its stat; a poll that reads more before the
    # look's read does not move where the look reads from: the prefetch still answers it.
    write("asked 3/9000\n")
    monkeypatch.setattr(logtail, "SHARED_MAX_AGE_S", 0.0)   # the polls read what is new
    await both()                                            # held past the look's offset now
    (asked,) = tracker.cursors(str(tmp_path)).values()
    assert asked == log.stat().st_size
    write("between 4/9000\n")
    (st,) = await ops.stat([str(log)])
    write("after the stat\n")
    await both()                                            # held past the look's stat now
    monkeypatch.undo()
    reads = []
    counting_read = look_ops.read

    async def read(path, offset=0, max_bytes=1 << 20):
        reads.append(offset)
        return await counting_read(path, offset, max_bytes)
    look_ops.read = read
    await tracker.read_files(look_ops, str(tmp_path), "r1", st.mtime, {"train.log": st})
    await lone_tracker.read_files(ops, str(tmp_path), "r1", st.mtime, {"train.log": st})
    del look_ops.read
    assert reads == [asked] and tracker.progress == lone_tracker.progress

    write("late\n")
    await look()
    monkeypatch.setattr(logtail, "SHARED_MAX_AGE_S", 0.0)   # the look is old now: what came
    write("later\n")                                        # after it is read, the rest taken
    asked = poll_ops.bytes
    assert await both() == ["late", "later"] and poll_ops.bytes - asked == len("later\n")
    monkeypatch.undo()

    os.rename(log, tmp_path / "train.log.1")                # rotated after the look: read
    log.write_text("rotated\n")
    await look()
    lines = await both()
    assert "rotated" in lines[0] and lines[-1] == "rotated"

    write("a\n" * 50)
    await look()
    await both()
    log.write_text("step 7/9000 loss 1.0\n")               # truncated after both read it
    await look()
    assert tracker.progress.step == 7
    lines = await both()
    assert "truncated" in lines[0] and lines[-1] == "step 7/9000 loss 1.0"
