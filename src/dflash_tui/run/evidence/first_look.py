"""FirstLook: the first round of one look at a run dir answered by ONE agent request.

`gather` (observe.py) asks a run dir's clock and a stat of its files, then reads the records
that changed, lists the probe directory and takes the wrapper's process tree: three round
trips in a row, each waiting on the one before. The agent's `observe` op answers all of them
at once: the stat first, then, in the same request, the reads of the records whose (inode,
size, mtime) differs from what this client already holds, the listing and the tree of the pid
the run dir's launch.json named at the last look, and the bytes train.log and events.jsonl
grew by since the progress tracker's last read. Its stat may name more paths than the run
files (the folders that hold the run's checkpoints): each stat asked of paths it holds is
answered from it, once. FirstLook hands each of those answers out
once, to the same call gather would have made, and passes every other call (a second stat, a
read at an offset, a tree of another pid) to the ops underneath; so gather's questions and
Evidence stay what they were, and a fleet's poll of N run dirs on one target is N requests
in one write, one round trip.
"""

from __future__ import annotations

from typing import Any

from ...remote.answers import chunk_from, proctree_from
from ...remote.base import OpRefused
from ...remote.ops import FileChunk, FileStat, ProcTree, RemoteOps, look_ops
from .memory import LookMemory


# The ops whose answers are evidence of the run's progress (free space, say, is not).
_EVIDENCE_OPS = frozenset({"read_tail", "pid_info", "dump_stacks", "py_spy_dump", "proc_tree", "stat", "read",
                           "list_dir"})


class FirstLook:
    """RemoteOps over `ops` whose first now/stat/read/list_dir/proc_tree come from `answer`."""

    def __init__(self, ops: Any, answer: dict, paths: list[str], reads: dict[str, int],
                 grown: dict[str, tuple[int, int]], proc_tree: tuple[int, str | None] | None) -> None:
        self._ops = ops
        self._label = ops.label
        self._now: float | None = float(answer["now"])
        self._stats: dict[str, FileStat] = dict(zip(paths, answer["stats"]))
        # path -> (offset, max_bytes, answer): records from 0, grown files from their cursor
        asked = {**{p: (0, n) for p, n in reads.items()}, **{p: tuple(g) for p, g in grown.items()}}
        self._reads = {path: (*asked[path], item) for path, item in (answer.get("reads") or {}).items()
                       if path in asked}
        self._lists = dict(answer.get("listings") or {})
        tree = answer.get("proc_tree")
        self._tree = (proc_tree, tree) if proc_tree is not None and tree is not None else None
        self.asked_after = False   # evidence asked for past the one answer (another instant)

    def __getattr__(self, name: str) -> Any:
        if name in _EVIDENCE_OPS:
            self.asked_after = True
        return getattr(self._ops, name)   # every op not answered here, as it is

    def _result(self, op: str, item: dict) -> Any:
        if not item.get("ok"):
            raise OpRefused(f"{op} on {self._label}: {item.get('error', 'failed')}")
        return item.get("result")

    async def now(self) -> float:
        now, self._now = self._now, None
        return now if now is not None else await self._ops.now()

    async def stat(self, paths: list[str]) -> list[FileStat]:
        # The run files, then (another caller) the checkpoint folders: each stat handed out once.
        held = [self._stats.get(p) for p in paths]
        if paths and None not in held:
            for p in paths:
                self._stats.pop(p, None)
            return held
        self.asked_after = True
        return await self._ops.stat(paths)

    async def read(self, path: str, offset: int = 0, max_bytes: int = 1 << 20) -> FileChunk:
        held = self._reads.pop(path, None)
        if held is not None and (offset, max_bytes) == held[:2]:
            return chunk_from(self._result("read", held[2]))
        self.asked_after = True
        return await self._ops.read(path, offset, max_bytes)

    async def list_dir(self, path: str) -> list[FileStat]:
        held = self._lists.pop(path, None)
        if held is not None:
            return list(self._result("list_dir", held))
        self.asked_after = True
        return await self._ops.list_dir(path)

    async def proc_tree(self, pid: int, run_dir: str | None = None) -> ProcTree:
        held, self._tree = self._tree, None
        if held is not None and held[0] == (int(pid), run_dir):
            tree = self._result("proc_tree", held[1])
            return tree if isinstance(tree, ProcTree) else proctree_from(tree)
        self.asked_after = True
        return await self._ops.proc_tree(pid, run_dir=run_dir)


async def first_look(ops: RemoteOps, paths: list[str], *, reads: dict[str, int], grown: dict[str, tuple[int, int]],
                     list_dirs: list[str], proc_tree: tuple[int, str | None] | None,
                     memory: LookMemory | None = None) -> RemoteOps:
    """`ops`, or a FirstLook over it when its target answers `observe` (the agent does; ShellOps,
    one sh command per question, gains nothing from it and asks as before). `memory`: what this
    watch holds parsed already (the agent skips those reads); none for a one-shot look."""
    agent = look_ops(ops)
    if agent is None:
        return ops
    known = {p: memory.known[p] for p in reads if p in memory.known} if memory is not None else {}
    try:
        answer = await agent.observe(paths, reads=reads, known=known, grown=grown, list_dirs=list_dirs,
                               proc_tree=proc_tree)
    except OpRefused:
        return ops   # an agent that cannot answer it: the single questions, as before
    return FirstLook(ops, answer, paths, reads, grown, proc_tree)


def fresh_ops(ops: Any) -> RemoteOps:
    """The ops under a FirstLook (its held answers are of the look's first instant), else `ops`."""
    return ops._ops if isinstance(ops, FirstLook) else ops


def one_answer(ops: Any) -> bool:
    """The look's evidence is all of one instant: the agent's `observe` answered every question."""
    return isinstance(ops, FirstLook) and not ops.asked_after
