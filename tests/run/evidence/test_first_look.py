"""One look at a run dir in one agent request: the `observe` op and FirstLook (run/evidence/first_look.py).

A real run (the `beat` stand-in through the real wrapper), the real agent: a steady poll asks
the agent one question, and says the same about the run as the single questions do (ShellOps
asks them one by one)."""

from __future__ import annotations

import asyncio
import base64
import os
import time
from pathlib import Path

import pytest

from dflash_tui.remote.agent import AgentOps
from dflash_tui.remote.base import OpRefused
from dflash_tui.remote.local import LocalTarget
from dflash_tui.remote.shell_ops import ShellOps
from dflash_tui.run.evidence.activity import ProgressTracker
from dflash_tui.run.evidence.first_look import first_look
from dflash_tui.run.evidence.memory import LookMemory
from dflash_tui.run.evidence.observe import gather
from dflash_tui.watch.session import Session

from tests.support.runs import standin_profile

pytestmark = pytest.mark.timeout(60)


class CountingAgent(AgentOps):
    """The real agent; remembers the op of every request it sent."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.asked: list[str] = []

    async def call(self, op, timeout=None, **args):
        self.asked.append(op)
        return await super().call(op, timeout, **args)


async def wait_for_probe_report(run_dir: str, timeout: float = 10.0) -> None:
    """The run probe writes its first report a beat after the program starts."""
    deadline = time.monotonic() + timeout
    while not list((Path(run_dir) / "probe").glob("[0-9]*.json")):
        assert time.monotonic() < deadline, f"no probe report in {run_dir}/probe"
        await asyncio.sleep(0.1)


@pytest.fixture
async def live_run(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    s = Session(standin_profile(tmp_path / "run", "beat", "--interval=0.2"), targets=(LocalTarget(), LocalTarget()))
    out = await s.launch(preflight=False)
    assert out.evidence is not None and out.evidence.launch is not None, out.checklist
    try:
        yield s
    finally:
        await s.stop(grace_s=0.5)
        await s.close()


async def test_a_steady_look_is_one_request_and_says_what_the_single_questions_say(live_run):
    run_dir = live_run.profile.run_dir
    agent = await CountingAgent.start(LocalTarget())
    shell = await ShellOps.start(LocalTarget())
    try:
        tracker = ProgressTracker()
        await gather(agent, run_dir, tracker=tracker)       # the first look reads everything once
        await wait_for_probe_report(run_dir)
        await gather(agent, run_dir, tracker=tracker)       # and the probe's report, once it is there
        await asyncio.sleep(0.5)                            # the stand-in beats: status and log change
        agent.asked.clear()
        ev = await gather(agent, run_dir, tracker=tracker)
        assert agent.asked.count("observe") == 1, agent.asked
        assert set(agent.asked) <= {"observe", "disk_free"}, agent.asked   # free space: now and then
        one_by_one = await gather(shell, run_dir)
        assert ev.launch == one_by_one.launch and ev.wrapper_run_id == one_by_one.wrapper_run_id
        assert ev.status is not None and one_by_one.status is not None
        assert ev.status.run_id == one_by_one.status.run_id
        assert ev.proc.pid == one_by_one.proc.pid and ev.proc.alive and one_by_one.proc.alive
        assert {n: st.exists for n, st in ev.files.items()} == {n: st.exists for n, st in one_by_one.files.items()}
        assert ev.activity is not None and ev.activity.samples == 3   # the tracker saw three looks
    finally:
        await agent.close()
        await shell.close()


async def test_observe_answers_each_part_as_its_own_op_would(tmp_path):
    record, log, plain = tmp_path / "launch.json", tmp_path / "train.log", tmp_path / "plain"
    record.write_text('{"a": 1}')
    log.write_bytes(b"0123456789")
    plain.write_text("x")
    agent = await CountingAgent.start(LocalTarget())
    try:
        paths = [str(record), str(log), str(tmp_path / "missing")]
        known = await first_look(agent, paths, reads={str(record): 4096}, grown={str(log): (4, 64)},
                                 list_dirs=[str(plain)], proc_tree=(os.getpid(), str(tmp_path)))
        # one request; the stat, the read from 0, the bytes past offset 4, the tree: as the ops say
        assert agent.asked == ["observe"]
        assert await known.stat(paths) == await agent.stat(paths)
        assert (await known.read(str(record), 0, 4096)).data == b'{"a": 1}'
        assert (await known.read(str(log), 4, 64)).data == b"456789"
        assert (await known.proc_tree(os.getpid(), run_dir=str(tmp_path))).root.pid == os.getpid()
        with pytest.raises(OpRefused) as batched:
            await known.list_dir(str(plain))            # not a directory: the op's own refusal
        with pytest.raises(OpRefused) as single:
            await agent.list_dir(str(plain))
        assert batched.value.message == single.value.message
        agent.asked.clear()
        # each answer is handed out once: asked again, the op itself answers
        assert (await known.read(str(log), 4, 64)).data == b"456789"
        assert agent.asked == ["read"]

        # a record held as of its stat is not sent again; a file that did not grow is not read
        (held,) = await agent.stat([str(record)])
        memory = LookMemory()
        memory.held(str(record), held)
        agent.asked.clear()
        again = await first_look(agent, paths, reads={str(record): 4096}, grown={str(log): (10, 64)},
                                 list_dirs=[], proc_tree=None, memory=memory)
        assert again._reads == {}
        assert agent.asked == ["observe"]
        # ... by this watch only: another watch's memory (another host, the same path) sends it
        other = await first_look(agent, paths, reads={str(record): 4096}, grown={str(log): (10, 64)},
                                 list_dirs=[], proc_tree=None, memory=LookMemory())
        assert str(record) in other._reads
    finally:
        await agent.close()


async def test_the_looks_of_one_tick_are_one_request_and_a_bad_look_fails_alone(tmp_path):
    records = []
    for i in range(3):
        (tmp_path / f"run{i}").mkdir()
        record = tmp_path / f"run{i}" / "launch.json"
        record.write_text(f'{{"run": {i}}}')
        records.append(str(record))
    agent = await CountingAgent.start(LocalTarget())
    try:
        looks = [agent.observe([r], reads={r: 4096}, known={}) for r in records]
        bad = agent.observe([records[0]], reads={records[0]: "many"}, known={})
        *answers, refused = await asyncio.gather(*looks, bad, return_exceptions=True)
        assert agent.asked == ["observe"]           # four looks, one request
        for i, (record, answer) in enumerate(zip(records, answers)):
            assert [st.path for st in answer["stats"]] == [record]
            assert base64.b64decode(answer["reads"][record]["result"]["data"]) == f'{{"run": {i}}}'.encode()
        assert isinstance(refused, OpRefused) and "observe on" in refused.message, refused
        agent.asked.clear()
        # the next tick's look is the next request
        assert (await agent.observe([records[1]], reads={}, known={}))["stats"][0].exists
        assert agent.asked == ["observe"]
    finally:
        await agent.close()
