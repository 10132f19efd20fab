"""Stacks of a process that cannot run Python: the probe's faulthandler dump, asked for by the
agent (and its sh twin) only when the report went stale, only on the signal the report
declares, read into Evidence.hang.stack_dumps by gather(); locally and in the pct stand-in."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dflash_tui.config import Profile
from dflash_tui.contract.rundir import PROBE_DIR, probe_stack_name
from dflash_tui.remote.agent import AgentOps
from dflash_tui.remote.local import LocalTarget
from dflash_tui.remote.ops import StackDumpAnswer
from dflash_tui.remote.shell_ops import ShellOps
from dflash_tui.run.evidence.memory import LookMemory
from dflash_tui.run.evidence.stack_dumps import gather_stack_dumps, parse_faulthandler, parse_py_spy, stack_dump_of
from dflash_tui.watch.session import Session

from tests.support.probe import probe_env, wait_reports

pytestmark = pytest.mark.timeout(180)

GIL_HOLD = Path(__file__).parents[2] / "programs" / "gil_hold.py"


def profile(tmp_path: Path, command: tuple[str, ...], **kw) -> Profile:
    base = dict(name="p", run_dir=str(tmp_path / "run"), python=sys.executable, command=command,
                stall_after_s=30.0, stop_grace_s=2.0, min_free_gb=0.0)
    base.update(kw)
    return Profile(**base)


async def wait_dump(session: Session, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        ev = await session.evidence()
        if ev.hang.stack_dumps or time.monotonic() > deadline:
            return ev
        await asyncio.sleep(0.5)


def check_gil_dump(ev) -> None:
    (report,) = ev.probes
    assert report.stack_signal is not None and ev.now - report.time > 3, report
    dump = ev.hang.stack_dumps[report.pid]
    assert dump.source == "faulthandler" and dump.pid == report.pid
    names = {t.name: t for t in dump.threads}
    main = names["MainThread"]
    assert main.frames[0].endswith(" match") and main.frames[1].endswith(" parse_metadata")
    assert main.frames[1].split(":")[0].endswith("gil_hold.py")
    assert names["queue-poller"].frames[0].endswith(" poll_queue")   # named from the report
    assert not any("dflash_probe" in f for t in dump.threads for f in t.frames)   # not the program's


async def test_a_c_call_holding_the_gil_still_gives_its_stack(sessions, tmp_path):
    s = sessions(profile(tmp_path, (sys.executable, str(GIL_HOLD))))
    await s.launch(preflight=False)
    ev = await wait_dump(s)
    check_gil_dump(ev)
    assert not ev.hang.problems, ev.hang.problems
    (report,) = ev.probes
    # Asked again within DUMP_EVERY_S: the same dump, no new signal.
    before = (tmp_path / "run" / PROBE_DIR / probe_stack_name(report.pid)).stat().st_mtime_ns
    ev2 = await s.evidence()
    assert ev2.hang.stack_dumps[report.pid] == ev.hang.stack_dumps[report.pid]
    assert (tmp_path / "run" / PROBE_DIR / probe_stack_name(report.pid)).stat().st_mtime_ns == before


@pytest.mark.sshd
async def test_stack_dump_in_the_pct_standin(sshd, standin, sessions, tmp_path):
    standin.container("pct:200", mode="ok")
    s = sessions(profile(tmp_path, (sys.executable, str(GIL_HOLD)), **sshd.profile(), container="pct:200"))
    await s.launch(preflight=False)
    check_gil_dump(await wait_dump(s, timeout=90))


@pytest.fixture
async def both():
    agent = await AgentOps.start(LocalTarget())
    shell = await ShellOps.start(LocalTarget())
    yield agent, shell
    await agent.close()


TAKES_THE_SIGNAL = """\
    import re, signal, sys, time
    sig = int(sys.argv[1])
    time.sleep(1.5)                      # the probe has armed on it by now
    signal.signal(sig, lambda *a: open(sys.argv[2], "w").write("theirs"))
    time.sleep(2.5)                      # the probe sees it at its next beat
    re.match(r"(a+)+$", "a" * 64 + "b")  # then stale for good
"""


async def test_never_a_signal_the_program_does_not_catch(both, tmp_path):
    """A process with no handler is never signalled (a real-time signal's default action kills);
    a program that takes the probe's signal for itself is no longer sent it."""
    agent, shell = both
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    prog = tmp_path / "takes.py"
    prog.write_text(textwrap.dedent(TAKES_THE_SIGNAL))
    run_dir = tmp_path / "run"
    marker = tmp_path / "theirs-called"
    sig = signal.SIGRTMAX - 2
    taker = subprocess.Popen([sys.executable, str(prog), str(sig), str(marker)], env=probe_env(run_dir))
    try:
        (info,) = await agent.pid_info([plain.pid])
        stack = str(tmp_path / "plain.stack")
        Path(stack).write_text("")
        for ops in both:
            got = await ops.dump_stacks(plain.pid, sig, start_ticks=info.start_ticks, path=stack, min_interval_s=0)
            assert got == StackDumpAnswer("no-handler")
            assert await ops.dump_stacks(plain.pid, sig, start_ticks=info.start_ticks + 1, path=stack) \
                == StackDumpAnswer("mismatch")
        assert plain.poll() is None

        armed = wait_reports(run_dir, lambda rs: any(r.stack_signal == sig for r in rs), timeout=30)
        assert armed[0].start_ticks is not None
        disarmed = wait_reports(run_dir, lambda rs: any(r.stack_signal is None and r.seq > 2 for r in rs), timeout=30)
        for ops in both:
            deadline = time.monotonic() + 30
            while True:
                report = next(r for r in wait_reports(run_dir, bool) if r.pid == taker.pid)
                now = time.time()
                if now - report.time > 4 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.3)
            dumps, problems = await gather_stack_dumps(ops, str(run_dir), [report], now)
            # No signal: py-spy's view where the target has it, else nothing.
            assert all(d.source == "py-spy" for d in dumps.values()) and problems == [], (dumps, problems)
        assert disarmed and taker.poll() is None and not marker.exists()
    finally:
        plain.kill()
        taker.kill()



async def test_a_process_that_exited_is_found_gone_look_after_look(both, tmp_path):
    """A stale report whose process is no more (killed: no atexit, its report stays as it was)
    is found gone at the next look, though its stacks were dumped less than DUMP_EVERY_S
    before (one pid_info, no dump), and stays gone without asking again."""
    for n, ops in enumerate(both):
        run_dir = tmp_path / f"run{n}"
        prog = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=probe_env(run_dir))
        try:
            (report,) = wait_reports(run_dir, lambda rs: any(r.stack_signal is not None and r.start_ticks for r in rs))
            memory = LookMemory()
            dumps, problems = await gather_stack_dumps(ops, str(run_dir), [report], report.time + 10, memory)
            assert report.pid in dumps and dumps.gone == frozenset() and problems == [], (dumps, problems)
        finally:
            prog.kill()
            prog.wait()
        for _ in range(2):
            dumps, problems = await gather_stack_dumps(ops, str(run_dir), [report], report.time + 11, memory)
            assert dict(dumps) == {} and dumps.gone == {report.pid} and problems == [], (dumps, problems)


async def test_py_spy_where_no_signal_is_declared(tmp_path, monkeypatch):
    """A program that took the probe's signal for itself: its stacks come from `py-spy dump`,
    from outside the process, with no signal sent; threads named as py-spy reads them."""
    spy = Path(sys.executable).with_name("py-spy")
    assert spy.exists(), "py-spy is in the test extra"
    monkeypatch.setenv("PATH", f"{spy.parent}{os.pathsep}{os.environ['PATH']}")
    prog = tmp_path / "takes.py"
    prog.write_text(textwrap.dedent(TAKES_THE_SIGNAL))
    run_dir, marker = tmp_path / "run", tmp_path / "theirs-called"
    taker = subprocess.Popen([sys.executable, str(prog), str(signal.SIGRTMAX - 2), str(marker)], env=probe_env(run_dir))
    agent = await AgentOps.start(LocalTarget())
    try:
        wait_reports(run_dir, lambda rs: any(r.stack_signal is None and r.seq > 2 for r in rs), timeout=30)
        deadline = time.monotonic() + 30
        while True:
            (report,) = wait_reports(run_dir, bool)
            if time.time() - report.time > 4 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.3)
        for ops in (agent, ShellOps(LocalTarget())):
            dumps, problems = await gather_stack_dumps(ops, str(run_dir), [report], time.time())   # a fresh memory
            assert problems == [], problems
            dump = dumps[report.pid]
            main = next(t for t in dump.threads if t.name == "MainThread")
            assert dump.source == "py-spy" and main.frames[0].endswith(" match"), dump
            assert main.native_id == report.pid and main.ident == next(
                t.ident for t in report.threads if t.name == "MainThread")    # matched to the report
        assert taker.poll() is None and not marker.exists()
    finally:
        taker.kill()
        await agent.close()


async def test_dump_parity_and_refusals(both, tmp_path):
    agent, shell = both
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, str(GIL_HOLD), "0.5"], env=probe_env(run_dir))
    try:
        (report,) = wait_reports(run_dir, lambda rs: rs and rs[0].stack_signal is not None, timeout=30)
        path = str(run_dir / PROBE_DIR / probe_stack_name(report.pid))
        time.sleep(1.0)      # into parse_metadata by now
        answers = []
        for ops in both:
            got = await ops.dump_stacks(report.pid, report.stack_signal, start_ticks=report.start_ticks,
                                        path=path, min_interval_s=0)
            assert got.status == "dumped" and b"parse_metadata" in got.data, got
            again = await ops.dump_stacks(report.pid, report.stack_signal, start_ticks=report.start_ticks, path=path)
            assert again.status == "recent" and again.data == got.data
            answers.append(stack_dump_of(report, got, "faulthandler"))
            link = tmp_path / "link.stack"
            link.unlink(missing_ok=True)
            link.symlink_to(path)
            for bad, words in ((str(link), "Too many levels of symbolic links"),
                               (str(tmp_path), "Is a directory"),
                               (str(tmp_path / "nope"), "No such file or directory")):
                with pytest.raises(Exception, match=words):
                    await ops.dump_stacks(report.pid, report.stack_signal, start_ticks=report.start_ticks,
                                          path=bad, min_interval_s=0)
        assert [t.name for t in answers[0].threads] == [t.name for t in answers[1].threads]
        assert proc.poll() is None
    finally:
        proc.kill()


def test_parsers_read_faulthandler_and_py_spy():
    fh = textwrap.dedent('''\
        Thread 0x00007f3a2b4c5740 (most recent call first):
          File "/srv/x.py", line 6 in parse_metadata
          File "/srv/x.py", line 10 in <module>

        Current thread 0x00007f3a2a000640 (most recent call first):
          <no Python frame>
        Stack (most recent call first):
          File "/srv/y.py", line ??? in f
    ''')
    assert parse_faulthandler(fh) == [(0x7f3a2b4c5740, ["/srv/x.py:6 parse_metadata", "/srv/x.py:10 <module>"]),
                                      (0x7f3a2a000640, []), (None, ["/srv/y.py:??? f"])]
    spy = textwrap.dedent('''\
        Process 812: python train.py
        Python v3.11.7 (/usr/bin/python3.11)

        Thread 812 (active+gil): "MainThread"
            parse_metadata (x.py:6)
            <module> (x.py:10)
        Thread 0x7F3A2A000640 (idle)
            wait (threading.py:331)
    ''')
    assert parse_py_spy(spy) == [(None, 812, "MainThread", ["x.py:6 parse_metadata", "x.py:10 <module>"]),
                                 (0x7F3A2A000640, None, "", ["threading.py:331 wait"])]
