"""The persistent agent: protocol, robustness, restarts, extras, old pythons, fallback."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from dflash_tui.remote.agent import (BOOTSTRAP, AgentOps, AgentUnavailable, build_program,
                                     open_ops)
from dflash_tui.remote import agent_server
from dflash_tui.remote.agent_server import MAX_WAIT_PIDS, pid_info_one
from dflash_tui.remote.base import CommandTimeout, OpRefused, TargetError
from dflash_tui.remote.local import LocalTarget
from dflash_tui.remote.shell_ops import ShellOps

PYENV = Path("/root/.pyenv/versions")


class NoopTarget(LocalTarget):
    """Runs `true` whatever it is asked: the incident's `pct exec` that exits 0, runs nothing."""

    label = "noop"

    async def run(self, argv, **kw):
        return await super().run(["true"], **kw)

    async def open_process(self, argv):
        return await super().open_process(["true"])


async def test_agent_protocol_survives_bad_requests():
    proc = await LocalTarget().open_process(["python3", "-c", BOOTSTRAP])
    await proc.write(build_program())
    hello = json.loads(await proc.readline())
    assert hello["id"] == 0 and hello["ok"] and hello["result"]["protocol"] == 1
    bad = [b"not json\n", b"[1,2]\n", b'{"id": 5}\n', b'{"id": 6, "op": "nope"}\n',
           b'{"id": 7, "op": "stat", "args": {"wrong": 1}}\n',
           b'{"id": 8, "op": "read", "args": {"path": "/etc/hostname", "offset": -1}}\n',
           b'{"id": 9, "op": "pid_info", "args": {"pids": ["x"]}}\n']
    answers = []
    for line in bad:
        await proc.write(line)
        answers.append(json.loads(await proc.readline()))
    assert [a["ok"] for a in answers] == [False] * len(bad)
    assert [a["id"] for a in answers] == [None, None, 5, 6, 7, 8, 9]
    assert "unknown op 'nope'" in answers[3]["error"]
    assert "bad arguments for stat" in answers[4]["error"]
    await proc.write(b'{"id": 10, "op": "stat", "args": {"paths": ["/"]}}\n')
    good = json.loads(await proc.readline())
    assert good["ok"] and good["result"][0]["is_dir"]
    await proc.close()
    assert proc.returncode == 0   # EOF on stdin ends it cleanly


async def test_concurrent_requests_and_restart_after_channel_death(tmp_path):
    files = []
    for i in range(40):
        f = tmp_path / f"f{i}"
        f.write_bytes(b"x" * i)
        files.append(str(f))
    ops = await AgentOps.start(LocalTarget())
    try:
        results = await asyncio.gather(*(ops.stat([f]) for f in files))
        assert [r[0].size for r in results] == list(range(40))
        first_pid = ops.info["pid"]
        os.kill(first_pid, signal.SIGKILL)   # the channel dies under the client
        st = await ops.stat([files[3]])      # retried on a fresh agent
        assert st[0].size == 3
        assert ops.starts == 2 and ops.info["pid"] != first_pid
    finally:
        await ops.close()


async def test_request_timeout_restarts_a_wedged_agent():
    extra = ("import time\n"
             "def nap(seconds):\n"
             "    time.sleep(seconds)\n"
             "    return seconds\n"
             "register('test.nap', nap)\n")
    ops = await AgentOps.start(LocalTarget(), extra_sources=[extra])
    try:
        with pytest.raises(CommandTimeout, match="did not answer test.nap"):
            await ops.call("test.nap", timeout=0.3, seconds=30)
        assert (await ops.stat(["/"]))[0].exists
        assert ops.starts == 2
    finally:
        await ops.close()


async def test_extra_sources_register_ops_and_a_broken_one_is_reported():
    # A chatty extra (print, a subprocess writing to stdout, one reading stdin) must not
    # corrupt the protocol.
    good = ("from __future__ import annotations\n"
            "import os, subprocess\n"
            "def sample(n: int) -> dict:\n"
            "    print('debug noise')\n"
            "    subprocess.run(['sh', '-c', 'echo child noise; cat'])\n"
            "    return {'n': n, 'pid': os.getpid()}\n"
            "register('test.sample', sample, blocking=True)\n")
    broken = "raise RuntimeError('no NVML here')\n"
    ops = await AgentOps.start(LocalTarget(), extra_sources=[good, broken])
    try:
        assert "test.sample" in ops.info["ops"]
        assert ops.info["extras_failed"] == ["extra1: RuntimeError: no NVML here"]
        assert ops.info["args"]["test.sample"] == ["n"]          # what a client may ask of it
        assert ops.info["args"]["wait_exit"] == ["pids", "timeout_s"]
        res = await asyncio.gather(*(ops.call("test.sample", n=i) for i in range(3)))
        assert res == [{"n": i, "pid": ops.info["pid"]} for i in range(3)]
        assert (await ops.stat(["/"]))[0].is_dir
        with pytest.raises(TargetError, match="unknown op 'test.missing'"):
            await ops.call("test.missing")
    finally:
        await ops.close()


@pytest.mark.skipif(not (PYENV / "3.8.18/bin/python3").exists(), reason="no python 3.8 here")
async def test_agent_runs_on_python_3_8(tmp_path):
    (tmp_path / "log").write_bytes(b"hello\n")
    ops = await AgentOps.start(LocalTarget(), python=str(PYENV / "3.8.18/bin/python3"))
    try:
        assert ops.info["python"].startswith("3.8.")
        assert (await ops.read_tail(str(tmp_path / "log"))).data == b"hello\n"
        assert (await ops.pid_info([os.getpid()]))[0].alive
    finally:
        await ops.close()


@pytest.mark.skipif(not (PYENV / "3.7.16/bin/python3").exists(), reason="no python 3.7 here")
async def test_too_old_python_falls_back_to_shell():
    ops = await open_ops(LocalTarget(), python=str(PYENV / "3.7.16/bin/python3"))
    assert ops.kind == "shell"
    assert "older than 3.8" in ops.fallback_reason


async def test_missing_python_falls_back_to_shell_and_says_why():
    ops = await open_ops(LocalTarget(), python="python3-that-does-not-exist")
    assert isinstance(ops, ShellOps) and ops.kind == "shell"
    assert "no python3-that-does-not-exist on local" in ops.fallback_reason
    with pytest.raises(AgentUnavailable):
        await open_ops(LocalTarget(), python="python3-that-does-not-exist", prefer="agent")


async def test_a_transport_that_runs_nothing_is_named_not_mistaken_for_no_file():
    with pytest.raises(TargetError, match="printed nothing and exited .status 0.: the transport "
                                          "did not run the command"):
        await open_ops(NoopTarget())
    with pytest.raises(TargetError, match="exited 0 and printed nothing, so it never ran"):
        await open_ops(NoopTarget(), prefer="shell")


async def test_agent_leaves_no_file_and_dies_with_its_channel():
    ops = await AgentOps.start(LocalTarget())
    pid = ops.info["pid"]
    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    # the program came over stdin: argv holds only the small bootstrap, no file path
    assert cmd[-3:] == [b"-c", BOOTSTRAP.encode(), b""]
    await ops.close()
    for _ in range(50):
        if not Path(f"/proc/{pid}").exists() or \
                Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z":
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("agent outlived its channel")


class ChattyLoginTarget(LocalTarget):
    """A host whose login script prints a banner before every command (a noisy ~/.bashrc)."""

    label = "chatty"

    def _wrap(self, argv):
        return ["sh", "-c", 'echo "Welcome to gpu1"; printf "motd\\0\\n"; exec "$@"', "sh", *argv]

    async def run(self, argv, **kw):
        return await super().run(self._wrap(argv), **kw)

    async def open_process(self, argv):
        return await super().open_process(self._wrap(argv))


@pytest.mark.parametrize("prefer", ["agent", "shell"])
async def test_a_login_banner_does_not_confuse_either_way(prefer, tmp_path):
    (tmp_path / "f").write_bytes(b"data")
    ops = await open_ops(ChattyLoginTarget(), prefer=prefer)
    try:
        assert ops.kind == prefer
        (st,) = await ops.stat([str(tmp_path / "f")])
        assert st.exists and st.size == 4
        assert (await ops.read(str(tmp_path / "f"))).data == b"data"
        assert (await ops.which(["sh"]))["sh"]
    finally:
        await ops.close()


def _threads_and_fds(pid: int) -> tuple[int, int]:
    return len(os.listdir(f"/proc/{pid}/task")), len(os.listdir(f"/proc/{pid}/fd"))


WAIT_PYTHONS = ["python3"] + [str(PYENV / "3.8.18/bin/python3")] * (PYENV / "3.8.18/bin/python3").exists()


@pytest.mark.parametrize("python", WAIT_PYTHONS, ids=lambda p: "pidfd" if p == "python3" else "proc-3.8")
async def test_wait_exit_returns_when_that_very_process_ends(python):
    """pidfds where the agent's Python has them, /proc every 0.2 s on 3.8: an exit while waiting
    is answered at once and other requests go on meanwhile; a pid whose start time differs has
    ended; all alive is [] at the timeout; hostile arguments get one line; nothing is left behind,
    and a wait in flight does not keep the agent past its channel."""
    ops = await AgentOps.start(LocalTarget(), python=python)
    procs = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    agent = ops.info["pid"]
    try:
        ids = [(p.pid, pid_info_one(p.pid)["start_ticks"]) for p in procs]
        before = _threads_and_fds(agent)
        t = time.monotonic()
        assert await ops.wait_exit(ids, 0.3) == []
        assert 0.25 <= time.monotonic() - t < 3
        reused = (ids[0][0], ids[0][1] + 1)
        t = time.monotonic()
        assert await ops.wait_exit([ids[1], reused], 30) == [reused]
        assert time.monotonic() - t < 3

        waiting = asyncio.ensure_future(ops.wait_exit(ids, 30))
        await asyncio.sleep(0.5)
        assert not waiting.done()
        t = time.monotonic()
        assert (await ops.stat(["/"]))[0].is_dir and time.monotonic() - t < 1   # not held up
        procs[1].kill()
        t = time.monotonic()
        assert await asyncio.wait_for(waiting, 10) == [ids[1]]
        assert time.monotonic() - t < 1.5
        deadline = time.monotonic() + 5
        while _threads_and_fds(agent) != before and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert _threads_and_fds(agent) == before   # the waits' threads ended, their pidfds closed

        for args, words in [({"pids": []}, "non-empty list"), ({"pids": [[ids[0][0]]]}, "each of pids"),
                            ({"pids": [["1", 2]]}, "each of pids"), ({"pids": [[True, 2]]}, "each of pids"),
                            ({"pids": [[-4, 2]]}, "each of pids"), ({"pids": "1 2"}, "non-empty list"),
                            ({"pids": [[1, 2]] * (MAX_WAIT_PIDS + 1)}, f"at most {MAX_WAIT_PIDS} pids"),
                            ({"pids": [list(ids[0])], "timeout_s": "soon"}, "timeout_s must be a number"),
                            ({"pids": [list(ids[0])], "timeout_s": None}, "timeout_s must be a number"),
                            ({"pids": [list(ids[0])], "signal": 9}, "bad arguments for wait_exit")]:
            with pytest.raises(OpRefused, match=words):
                await ops.call("wait_exit", **args)
        t = time.monotonic()
        assert await ops.call("wait_exit", pids=[list(ids[0])], timeout_s=-30) == []   # clamped to 0
        assert time.monotonic() - t < 2

        in_flight = asyncio.ensure_future(ops.wait_exit([ids[0]], 60))
        await asyncio.sleep(0.3)
    finally:
        await ops.close()
        for p in procs:
            p.kill()
            p.wait()
    with pytest.raises(TargetError):
        await in_flight   # its channel closed under it
    deadline = time.monotonic() + 5
    while Path(f"/proc/{agent}").exists() and Path(f"/proc/{agent}/stat").read_text().split(") ")[1][0] != "Z":
        assert time.monotonic() < deadline, "a wait in flight kept the agent past its channel"
        await asyncio.sleep(0.05)


# -- the process tree's walk, its files held open between walks ------------------------------

THREAD_FORKS = ("import subprocess, sys, threading\n"
                "done = threading.Event()\n"
                "def worker():\n"
                "    child = subprocess.Popen(['sleep', '60'])\n"
                "    print(threading.get_native_id(), child.pid, flush=True)\n"
                "    done.wait()\n"
                "for line in sys.stdin:\n"
                "    if line.strip() == 'end':\n"
                "        done.set(); t.join(); done.clear(); print('ended', flush=True)\n"
                "    else:\n"
                "        t = threading.Thread(target=worker); t.start()\n")


@pytest.fixture
def thread_forks():
    """A process whose worker thread forks a `sleep` on each 'fork' line and ends on 'end'."""
    p = subprocess.Popen(["python3", "-c", THREAD_FORKS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, start_new_session=True)

    def ask(line: str) -> list[str]:
        p.stdin.write(line + "\n")
        p.stdin.flush()
        return p.stdout.readline().split()
    yield p, ask
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    agent_server.op_proc_tree(p.pid)   # a tree that is gone lets its held files go


def _walked(pid: int) -> set[int]:
    """The pids one walk from pid finds."""
    return {p for p, *_ in agent_server._walk(pid, agent_server.MAX_TREE)[0]}


def test_proc_tree_finds_the_child_of_a_thread_that_replaced_one_that_ended(thread_forks):
    """The walk holds each thread's children file between walks. A worker thread that ended and
    another that started leave the thread count as it was: the held files must not be trusted
    then, or the new thread's child is missed (the ended one's file reads empty)."""
    p, ask = thread_forks
    held0 = agent_server._held_fds[0]
    tid1, child1 = map(int, ask("fork"))
    for _ in range(2):   # the first walk opens the files, the second reads the held ones
        tree = agent_server.op_proc_tree(p.pid)
        assert (tree["procs"], tree["threads"], tree["main_pid"]) == (2, 2 + 1, child1)
    assert ask("end") == ["ended"]     # its sleep is now the main thread's
    tid2, child2 = map(int, ask("fork"))
    assert tid2 != tid1
    assert _walked(p.pid) == {p.pid, child1, child2}   # the very walk after the change
    tree = agent_server.op_proc_tree(p.pid)
    assert (tree["procs"], tree["threads"]) == (3, 2 + 1 + 1)
    assert agent_server._held_fds[0] > held0
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    assert agent_server.op_proc_tree(p.pid)["procs"] == 0
    assert agent_server._held_fds[0] == held0   # a tree that is gone lets its files go


def test_proc_tree_trusts_no_held_file_of_a_process_that_ended(thread_forks):
    """A held file names the process it was opened for, not its number: files held for a
    number whose process ended (as when the number is reused) are dropped, the number read
    afresh. Files of an ended `sleep` are planted under the live process's number."""
    p, ask = thread_forks
    _, child = map(int, ask("fork"))
    gone = subprocess.Popen(["sleep", "60"])
    entry = agent_server._Held(p.pid, agent_server._hold(f"/proc/{gone.pid}/stat"))
    entry.tasks = [(str(p.pid), agent_server._hold(f"/proc/{gone.pid}/task/{gone.pid}/children"), None)]
    gone.kill()
    gone.wait()
    agent_server._held[p.pid] = [time.monotonic(), {p.pid: entry}]
    tree = agent_server.op_proc_tree(p.pid)
    assert tree["procs"] == 2 and tree["main_pid"] == child and tree["root"]["alive"]
    assert entry.stat_fd is None   # let go


def test_proc_tree_over_the_descriptor_budget_reads_by_path(thread_forks, monkeypatch):
    """Beyond the budget of held descriptors a process is read by path: the same answer."""
    p, ask = thread_forks
    _, child = map(int, ask("fork"))
    held = agent_server.op_proc_tree(p.pid)
    monkeypatch.setattr(agent_server, "FD_BUDGET", agent_server._held_fds[0] + 3)   # the root's stat only
    for entry in agent_server._held.pop(p.pid)[1].values():
        entry.close()
    by_path = agent_server.op_proc_tree(p.pid)
    assert by_path["main_pid"] == child and by_path["procs"] == 2
    moving = ("cpu_s", "rss_bytes")     # the processes run on between the two reads
    assert {k: v for k, v in by_path.items() if k not in moving} == {k: v for k, v in held.items() if k not in moving}
    assert by_path["rss_bytes"] > 0 and held["rss_bytes"] > 0


def test_list_dir_answers_every_entry_in_name_order_as_stat_one_does(tmp_path):
    """The listing (scandir, one stat an entry) answers what a stat of each listed name
    answers, in name order, whatever the entry: a file, a directory, a FIFO, a link to a file,
    a link to nothing (gone), names that sort by code point."""
    d = tmp_path / "probe"
    d.mkdir()
    for name in ("b.json", "B.stack", "a-b", "a.b", "é.json", "10.json", "9.json"):
        (d / name).write_bytes(name.encode() * 3)
    (d / "sub").mkdir()
    os.mkfifo(d / "fifo")
    (d / "to-file").symlink_to(d / "a.b")
    (d / "to-nothing").symlink_to(d / "missing")
    by_name = [agent_server.stat_one(os.path.join(str(d), n)) for n in sorted(os.listdir(d))]
    assert agent_server.op_list_dir(str(d)) == by_name
    assert [st["kind"] for st in by_name if st["path"].endswith(("sub", "fifo", "to-nothing"))] == ["fifo", "dir", ""]
    assert agent_server.op_list_dir(str(d) + "/") == [agent_server.stat_one(os.path.join(str(d) + "/", n))
                                                      for n in sorted(os.listdir(d))] == by_name
    assert agent_server.op_list_dir(str(d / "missing")) == []
    with pytest.raises(agent_server.OpFailed, match="cannot list .*Not a directory"):
        agent_server.op_list_dir(str(d / "a.b"))


def _serve(lines: list[bytes]) -> list[bytes]:
    """The answer lines a Server writes to `lines` (after its hello)."""
    import io
    out = io.BytesIO()
    agent_server.Server(io.BytesIO(b"".join(lines)), out).serve()
    return out.getvalue().splitlines(keepends=True)[1:]


def test_a_looks_answer_line_is_json_dumps_byte_for_byte(tmp_path):
    """A look's file data goes into its answer line unscanned: the line is exactly what
    json.dumps makes of the answer it decodes to, the data decodes to the files' bytes, and
    the answer the plan keeps for its next look still holds the data itself."""
    import base64
    run = tmp_path / "run"
    (run / "probe").mkdir(parents=True)
    log = bytes(range(256)) * 40 + "é\n\"\\\u2028".encode()     # past SPLICE_MIN, every byte
    (run / "train.log").write_bytes(log)
    (run / "probe" / "7.json").write_bytes(b'{"pid": 7}')    # under SPLICE_MIN: encoded as is
    look = {"paths": [str(run / "train.log"), str(run / "gone")],
            "reads": {str(run / "probe" / "7.json"): 4096, str(run / "gone"): 10},
            "grown": {str(run / "train.log"): [5, 1 << 20]}, "list_dirs": [str(run / "probe")]}
    plan = "look-line-test"
    requests = [json.dumps({"id": 1, "op": "observe", "args": {"looks": [
                    {"plan": plan, "seq": 1, "reset": True, "args": look}, "not a look"]}}).encode() + b"\n",
                json.dumps({"id": 2, "op": "observe", "args": {"looks": [{"plan": plan, "seq": 2}]}}).encode() + b"\n"]
    try:
        lines = _serve(requests)
        assert len(lines) == 2
        for line in lines:
            assert line == (json.dumps(json.loads(line), separators=(",", ":")) + "\n").encode()
            reads = json.loads(line)["result"][0]["result"]["reads"]
            assert base64.b64decode(reads[str(run / "train.log")]["result"]["data"]) == log[5:]
            assert base64.b64decode(reads[str(run / "probe" / "7.json")]["result"]["data"]) == b'{"pid": 7}'
        assert json.loads(lines[0])["result"][1] == {"ok": False, "error": "a look must be an object"}
        kept = agent_server.PLANS[plan]["last"]["reads"][str(run / "train.log")]["result"]["data"]
        assert base64.b64decode(kept) == log[5:]
    finally:
        agent_server.PLANS.pop(plan, None)


def test_an_answer_line_keeps_a_string_like_a_placeholder_as_it_is():
    """A string that holds a NUL and looks like a placeholder, but for another nonce, is
    encoded as json.dumps encodes it."""
    data = "QUJD" * 200
    looks = [{"ok": True, "result": {"reads": {"/x": {"ok": True, "result": {"data": data}}},
                                     "odd": "\0" + "0" * 16 + "-0", "also": agent_server._SPLICE_MARK[:-1]}}]
    spliced: list[str] = []
    line = agent_server.encode_line({"id": 3, "ok": True, "result": agent_server._lift_look_data(looks, spliced)},
                                    spliced)
    assert spliced == [data]
    assert line == (json.dumps({"id": 3, "ok": True, "result": looks}, separators=(",", ":")) + "\n").encode()
    assert looks[0]["result"]["reads"]["/x"]["result"]["data"] == data
