"""Many ranks as one picture: the ranks' threads grouped by where they stand, odd ones first."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from dflash_tui.cli import _checklist_lines
from dflash_tui.config import Profile
from dflash_tui.run.verdict.checklist import Checklist, RankGroup, ThreadHealth, ThreadState, Verdict, rank_ranges
from dflash_tui.run.stacks.classify import ThreadClass
from dflash_tui.run.verdict.rank_groups import group_ranks, odd_ones_out
from tests.support.ports import free_port

PROGRAM = Path(__file__).resolve().parents[2] / "programs" / "ranks_one_odd.py"


def thread(rank: int | None, pid: int, cls: str, where: str, doing: str = "", name: str = "MainThread",
           state: ThreadState = ThreadState.OK) -> ThreadHealth:
    return ThreadHealth(name, state, pid=pid, rank=rank, cls=cls, where=where, doing=doing)


def test_the_rank_that_differs_comes_first_and_the_ranges_are_compact():
    threads = [thread(r, 100 + r, "collective", "step (train.py:88)", "all_reduce") for r in range(64) if r != 7]
    threads.append(thread(7, 107, "lock", "next_batch (data.py:40)", "Queue.get"))
    # a helper thread on every rank, idle: a group of its own, after the odd one
    threads += [thread(r, 100 + r, "sleep", "monitor (tqdm/_monitor.py:60)", name="TMonitor") for r in range(64)]
    groups = group_ranks(threads)
    assert [g.ranks for g in groups][:1] == [(7,)]
    assert groups[0].words() == "rank 7: lock Queue.get (data.py:40)"
    assert groups[1].words() == "ranks 0-6, 8-63: collective all_reduce (train.py:88)"
    assert [g.ranks for g in odd_ones_out(groups)] == [(7,), tuple(r for r in range(64) if r != 7)]
    assert groups[2].threads == 64 and groups[2].cls == "sleep"
    assert json.loads(json.dumps(groups[0].to_dict()))["ranks"] == [7]


def test_one_rank_is_no_grouping_and_processes_without_rank_are_numbered_in_order():
    assert group_ranks([thread(None, 5, "running", "f (a.py:1)"), thread(None, 5, "sleep", "g (a.py:2)",
                                                                         name="T2")]) == []
    groups = group_ranks([thread(None, 300, "running", "f (a.py:1)"), thread(None, 200, "lock", "g (a.py:2)")])
    assert [(g.ranks, g.cls) for g in groups] == [((0,), "lock"), ((1,), "running")]


def test_stuck_threads_lead_among_groups_on_every_rank_and_nodes_are_named():
    threads = [thread(r, r, "running", "step (t.py:1)") for r in range(4)]
    threads += [thread(r, r, "collective", "sync (t.py:9)", "barrier", name="T", state=ThreadState.STUCK)
                for r in range(4)]
    groups = group_ranks(threads, nodes=["h1", "h1", "h2", "h2"] * 2)
    assert groups[0].stuck and groups[0].cls == "collective"
    assert groups[0].words() == "ranks 0-3 (nodes h1, h2): collective barrier (t.py:9)"
    assert rank_ranges([5, 1, 2, 3, 9]) == "1-3, 5, 9"


def test_checklist_json_carries_the_groups():
    g = RankGroup(ranks=(1,), cls="lock", where="f (a.py:3)", doing="", threads=1)
    d = Checklist(Verdict.RUNNING, rank_groups=[g]).to_dict()
    assert d["rank_groups"] == [{"ranks": [1], "class": "lock", "where": "f (a.py:3)", "doing": "",
                                 "threads": 1, "stuck": False, "nodes": []}]


def test_a_groups_class_is_the_thread_class_and_its_json_the_same_word():
    groups = group_ranks([thread(0, 10, "collective", "f (a.py:1)"), thread(1, 11, "io", "g (a.py:2)")])
    assert [g.cls for g in groups] == [ThreadClass.COLLECTIVE, ThreadClass.IO]
    assert all(type(g.cls) is ThreadClass for g in groups)
    assert RankGroup(ranks=(1,), cls="lock", where="", doing="", threads=1).cls is ThreadClass.LOCK
    assert [json.loads(json.dumps(g.to_dict()))["class"] for g in groups] == ["collective", "io"]
    assert groups[0].words() == "rank 0: collective f (a.py:1)"


async def test_four_gloo_ranks_one_stuck_on_a_queue_is_the_first_group(sessions, tmp_path):
    """torchrun with 4 gloo ranks on CPU: rank 2 waits on a queue, the others in all_reduce.
    The real probe reports each rank's stacks; the engine groups them, rank 2 first."""
    command = (sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=4",
               f"--master-port={free_port()}", str(PROGRAM), "4", "0.3", "2")
    s = sessions(Profile(name="ranks", run_dir=str(tmp_path / "ranks"), python=sys.executable, command=command,
                         stall_after_s=600.0, stop_grace_s=2.0, min_free_gb=0.0))
    await s.launch(preflight=False)
    deadline = time.monotonic() + 150
    groups: list[RankGroup] = []
    while time.monotonic() < deadline:
        _, checklist = await s.check()
        groups = checklist.rank_groups
        # Rank 2 differs for a moment at each of its steps too (between its sleep and its
        # all_reduce): wait for it on the queue, where it stays.
        if groups and groups[0].ranks == (2,) and "next_batch" in groups[0].where and any(
                g.ranks == (0, 1, 3) and g.cls == "collective" for g in groups):
            break
        await asyncio.sleep(1.0)
    assert groups and groups[0].ranks == (2,), [g.words() for g in groups]
    assert "next_batch" in groups[0].where, groups[0]
    coll = next(g for g in groups if g.ranks == (0, 1, 3) and g.cls == "collective")
    assert coll.cls == "collective" and "all_reduce" in coll.doing, coll
    # text --check names them too, the odd one first
    text = [line for line in _checklist_lines(checklist, time.time()) if line.startswith("  ranks ")]
    assert text[0].startswith("  ranks   rank 2: ") and "ranks 0-1, 3: collective all_reduce" in "\n".join(text)


def test_a_launcher_beside_ranked_processes_is_not_a_rank():
    threads = [thread(None, 9, "library", "_invoke_run (api.py:923)", "_invoke_run (api.py:923)")]
    threads += [thread(r, 10 + r, "collective", "step (t.py:3)", "all_reduce") for r in range(3)]
    threads.append(thread(1, 11, "lock", "next_batch (t.py:9)", name="loader"))
    groups = group_ranks(threads)
    assert [g.words() for g in groups] == ["rank 1: lock next_batch (t.py:9)",
                                           "ranks 0-2: collective all_reduce (t.py:3)"]
