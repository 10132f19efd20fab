"""Look plans (remote/look_plans.py, agent_server `observe_planned`): a look sends only the
arguments that changed and is answered only with the stats, listing entries and tree fields
that changed, and what each side holds never goes stale: not after a change on the target, a
look the agent did not apply, nor an agent killed mid-watch (a real sshd, a real run)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest

from dflash_tui.config import Profile
from dflash_tui.remote.agent import AgentOps
from dflash_tui.remote.local import LocalTarget
from dflash_tui.remote.look_plans import LookPlans, OutOfStep
from dflash_tui.run.evidence.first_look import first_look
from dflash_tui.run.verdict.checklist import Verdict
from dflash_tui.watch.session import Session
from dflash_tui.watch import HostWatch

from tests.support.run_standins import PROGRAM

pytestmark = pytest.mark.timeout(90)


class WireAgent(AgentOps):
    """The real agent; keeps every observe request's looks and the agent's raw answer to it."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.wire: list[tuple[list[dict], list]] = []

    async def call(self, op, timeout=None, **args):
        items = await super().call(op, timeout, **args)
        if op == "observe":
            self.wire.append((args["looks"], items))
        return items


async def look(agent, paths, probe_dir, pid):
    held = await first_look(agent, paths, reads={}, grown={}, list_dirs=[probe_dir], proc_tree=(pid, None))
    return await held.stat(paths), await held.list_dir(probe_dir), await held.proc_tree(pid)


async def test_a_plan_sends_what_changed_and_its_answers_stay_those_of_the_single_ops(tmp_path):
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "1.json").write_text("{}")
    (probe / "2.stack").write_text("")
    record, log = tmp_path / "launch.json", tmp_path / "train.log"
    record.write_text("{}")
    paths = [str(record), str(log), str(tmp_path / "exit.json")]
    sleeper = subprocess.Popen(["sleep", "60"])    # a process tree that stands still
    agent = await WireAgent.start(LocalTarget())
    try:
        async def same_as_single_ops():
            stats, listing, tree = await look(agent, paths, str(probe), sleeper.pid)
            assert stats == await agent.stat(paths)
            assert listing == await agent.list_dir(str(probe))
            assert tree == await agent.proc_tree(sleeper.pid)

        await same_as_single_ops()
        (entry,), (item,) = agent.wire[-1]
        assert entry["reset"] and entry["args"]["paths"] == paths          # the first look: whole
        assert all(st is not None for st in item["result"]["stats"])

        await same_as_single_ops()                                          # nothing changed
        (entry,), (item,) = agent.wire[-1]
        assert "reset" not in entry and "args" not in entry and entry["seq"] == 2
        answer = item["result"]
        assert answer["stats"] == [None, None, None]
        assert answer["listings"][str(probe)]["result"] == [None, None]
        assert "delta" in answer["proc_tree"] and "root" not in answer["proc_tree"]["delta"]

        # the target changes: a record rewritten, a file made, a report added, one removed
        record.write_text('{"a": 1}')
        log.write_text("step 1\n")
        (probe / "0.json").write_text("{}")
        (probe / "2.stack").unlink()
        await same_as_single_ops()
        (entry,), (item,) = agent.wire[-1]
        stats = item["result"]["stats"]
        assert stats[0] is not None and stats[1] is not None and stats[2] is None
        await same_as_single_ops()
    finally:
        sleeper.kill()
        sleeper.wait()
        await agent.close()


async def test_a_look_the_agent_did_not_apply_is_sent_again_whole(tmp_path):
    (tmp_path / "launch.json").write_text("{}")
    paths = [str(tmp_path / "launch.json")]
    agent = await WireAgent.start(LocalTarget())
    try:
        await look(agent, paths, str(tmp_path), os.getpid())
        agent._plans._plans[1].seq += 1      # as if a look of this plan had been lost on the way
        agent.wire.clear()
        stats, _, _ = await look(agent, paths, str(tmp_path), os.getpid())
        assert stats == await agent.stat(paths)
        ((first,), (refused,)), ((again,), (item,)) = agent.wire
        assert refused["resend"] and not refused["ok"]
        assert again["reset"] and item["ok"]
    finally:
        await agent.close()


def test_an_answer_that_does_not_follow_the_last_is_refused_and_the_plan_resent():
    plans = LookPlans()
    look = {"paths": ["/x"], "reads": {}, "known": {}, "grown": {}, "list_dirs": [], "proc_tree": None}
    stat = {"path": "/x", "exists": True, "size": 1, "mtime": 1.0, "inode": 7, "is_dir": False, "kind": "file",
            "error": ""}
    plan, seq, _ = plans.entry(look)
    assert plans.decode(plan, seq, {"seq": 1, "now": 0, "stats": [stat]})["stats"][0].inode == 7
    plan, seq, entry = plans.entry(look)
    assert entry == {"plan": plan, "seq": 2}
    with pytest.raises(OutOfStep):          # an answer 3 on top of answer 1: not decodable
        plans.decode(plan, seq, {"seq": 3, "now": 0, "stats": [None]})
    assert plans.entry(look)[2]["reset"]    # so the next look sends the plan whole


@pytest.mark.sshd
async def test_an_agent_killed_mid_watch_is_replaced_and_its_next_look_is_whole_and_right(sshd, tmp_path,
                                                                                          monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    profile = Profile(name="mon", run_dir=str(tmp_path / "run"), host=sshd.host, port=sshd.port, user=sshd.user,
                      identity_file=str(sshd.client_key), known_hosts=str(sshd.known_hosts),
                      command=(sys.executable, PROGRAM, "beat"), train_args=("--interval=0.2",),
                      stall_after_s=5, stop_grace_s=2, min_free_gb=0)
    session = Session(profile)
    watch = HostWatch(session, interval=0.2)
    try:
        await watch.launch()
        deadline = time.monotonic() + 20
        while (rep := await watch.poll()).checklist.verdict is not Verdict.RUNNING:
            assert time.monotonic() < deadline, rep.checklist.summary
            await asyncio.sleep(0.2)
        ops = await session.ops()
        assert isinstance(ops, AgentOps)
        wire: list[list[dict]] = []
        call = ops.call

        async def watching(op, timeout=None, **args):
            if op == "observe":
                wire.append(args["looks"])
            return await call(op, timeout, **args)

        ops.call = watching
        for _ in range(3):                         # steady looks: plans, no resets
            await asyncio.sleep(0.25)
            assert (await watch.poll()).checklist.verdict is Verdict.RUNNING
        assert wire and not any(e.get("reset") for looks in wire for e in looks)
        starts, pid = ops.starts, rep.launch.pid
        os.kill(ops.info["pid"], signal.SIGKILL)  # the agent dies; the run, sshd and the connection live on
        deadline = time.monotonic() + 10
        while ops._proc is not None:               # its channel's end is seen
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        wire.clear()
        rep = await watch.poll()
        deadline = time.monotonic() + 20
        while not rep.connected:                   # a poll that saw it die is stale; the next starts another
            assert time.monotonic() < deadline, rep.error
            await asyncio.sleep(0.2)
            rep = await watch.poll()
        assert await session.ops() is ops and ops.starts == starts + 1
        assert rep.checklist.verdict is Verdict.RUNNING and rep.launch.pid == pid and rep.pid_alive
        # the new agent's first request sent the look whole (not refused first as out of step)
        assert [(e.get("reset"), e["seq"], bool(e["args"]["paths"])) for e in wire[0]] == [(True, 1, True)]
        ev = await session.evidence()
        stable = [n for n in ("launch.json", "launch.sh", "exit.json", "stop.json")]
        assert [ev.files[n] for n in stable] == await ops.stat([ev.path(n) for n in stable])
        assert ev.proc is not None and ev.proc.alive and ev.status is not None and ev.probes
        assert (await watch.poll()).checklist.verdict is Verdict.RUNNING
    finally:
        await watch.stop()
        await session.close()
