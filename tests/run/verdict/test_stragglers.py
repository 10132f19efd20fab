"""Stragglers: the rank the others wait for, scored against the best rank (threshold 0.7)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from dflash_tui.config import Profile
from dflash_tui.contract.rundir import ProbeReport
from dflash_tui.run.evidence.activity import WaitShare
from dflash_tui.run.verdict.stragglers import MIN_SAMPLES, RankPace, paces, stragglers
from tests.support import scenarios as R
from tests.support.ports import free_port

PROGRAM = Path(__file__).resolve().parents[2] / "programs" / "gloo_straggler.py"


def test_the_rank_the_others_wait_for_is_named_with_its_node():
    ranks = [RankPace(r, "h1" if r < 2 else "h2", 30, 2 if r == 1 else 17, "all_reduce") for r in range(4)]
    (s,) = stragglers(ranks)
    assert (s.rank, s.node) == (1, "h1")
    assert s.why == "rank 1 (node h1) is slow: the other ranks wait for it in all_reduce 57 % of the time"


def test_a_balanced_run_and_too_few_samples_name_nobody():
    # one-a-second samples of balanced ranks: noise of a few samples either way is not a straggler
    assert stragglers([RankPace(r, "", 30, w, "all_reduce") for r, w in enumerate((3, 9, 6, 12))]) == []
    # ranks that all wait a lot (a run bound by its network), a little unevenly
    assert stragglers([RankPace(r, "", 60, w, "all_reduce") for r, w in enumerate((30, 38, 42, 36))]) == []
    assert stragglers([RankPace(r, "", MIN_SAMPLES - 1, 0 if r == 1 else MIN_SAMPLES - 1) for r in range(4)]) == []
    assert stragglers([RankPace(0, "", 30, 0)]) == []


def test_a_rank_whose_own_step_time_is_slow_is_named_by_it():
    ranks = [RankPace(r, "", step_time=1.4 if r == 3 else 0.8) for r in range(4)]
    (s,) = stragglers(ranks)
    assert s.rank == 3 and s.why == "rank 3 is slow: its step takes 1.4 s, the best rank's 0.8 s"
    assert stragglers([RankPace(r, "", step_time=0.8 + 0.1 * r) for r in range(3)]) == []   # 0.8/1.0 = 0.8


def test_paces_number_the_ranks_and_leave_the_launcher_and_ended_ones_out():
    probes = [("", ProbeReport(run_id="r", pid=10, time=1.0)),
              ("", ProbeReport(run_id="r", pid=11, time=1.0, rank=0, node="a", step_time=0.5)),
              ("", ProbeReport(run_id="r", pid=12, time=1.0, rank=1, node="b", ended=True))]
    got = paces(probes, {("", 11): WaitShare(20, 5, "barrier")})
    assert got == [RankPace(0, "a", 20, 5, "barrier", 0.5)]


def test_the_engine_names_the_straggler_while_running_and_check_json_carries_it():
    report = R.ranks(64, slow=9)
    assert report.checklist.verdict.value == "RUNNING"
    check = next(c for c in report.checklist.checks if c.id == "stragglers")
    assert check.state.value == "warn" and check.cause.startswith("rank 9 (node h2) is slow")
    d = json.loads(json.dumps(report.checklist.to_dict()))
    assert d["stragglers"][0]["rank"] == 9 and d["stragglers"][0]["node"] == "h2"
    # a stalled run names its odd rank in the groups, never a straggler
    assert R.ranks(64, stuck=7).checklist.stragglers == []


async def test_four_gloo_ranks_one_slower_by_0_6_s_a_step_is_named_while_running(sessions, tmp_path):
    """torchrun with 4 gloo ranks on CPU, rank 1 working 0.6 s a step more: the real probe's stacks
    show the others waiting in all_reduce; the engine names rank 1 while the run is RUNNING."""
    command = (sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=4",
               f"--master-port={free_port()}", str(PROGRAM), "0.2", "0.6", "1")
    s = sessions(Profile(name="straggler", run_dir=str(tmp_path / "straggler"), python=sys.executable,
                         command=command, stop_grace_s=2.0, min_free_gb=0.0))
    await s.launch(preflight=False)
    deadline = time.monotonic() + 55
    checklist = None
    while time.monotonic() < deadline:
        _, checklist = await s.check()
        if checklist.stragglers:
            break
        await asyncio.sleep(1.0)
    assert checklist is not None and checklist.stragglers, (checklist.verdict, checklist.summary,
                                                            [c.cause for c in checklist.checks])
    assert checklist.verdict.value == "RUNNING"
    assert [s.rank for s in checklist.stragglers] == [1], checklist.stragglers
    assert "the other ranks wait for it in all_reduce" in checklist.stragglers[0].why
    assert next(c for c in checklist.checks if c.id == "stragglers").state.value == "warn"
