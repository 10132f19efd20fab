"""The agent's proc_tree and ShellOps's answer the same for one real process tree; the wrapper's
output buffering and its writes on a full disk.

The tree: sh -> (a python child that burns CPU then sleeps with 3 extra threads, a sleep).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

import pytest

from dflash_tui.remote.agent import AgentOps
from dflash_tui.remote.local import LocalTarget
from dflash_tui.remote.shell_ops import ShellOps
from dflash_tui.run.launch.request import LaunchRequest
from dflash_tui.run.wrapper import ProgramOptions, render_wrapper

pytestmark = pytest.mark.timeout(60)

CHILD = ("import threading, time\n"
         "for _ in range(3): threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
         "while time.process_time() < 0.8: pass\n"
         "time.sleep(60)\n")


@pytest.fixture
async def both():
    target = LocalTarget()
    agent = await AgentOps.start(target)
    shell = await ShellOps.start(target)
    yield agent, shell
    await agent.close()


@pytest.fixture
def tree():
    p = subprocess.Popen(["sh", "-c", 'python3 -c "$1" "$2" & sleep 60 & wait', "sh", CHILD, "odd arg $(x)"],
                         start_new_session=True)
    yield p
    os.killpg(p.pid, 9)
    p.wait()


def _cpu_of(pid: int) -> float:
    """utime+stime+cutime+cstime of pid and its children, from /proc, in seconds."""
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            rest = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += sum(int(x) for x in rest[11:15])
        for task in Path(f"/proc/{p}/task").iterdir():
            todo += [int(x) for x in (task / "children").read_text().split()]
    return total / os.sysconf("SC_CLK_TCK")


async def test_proc_tree_parity_and_cpu(both, tree):
    agent, shell = both
    deadline = time.monotonic() + 20
    while True:       # until the python child has burnt its second of CPU and sleeps
        a = await agent.proc_tree(tree.pid)
        if (a.procs == 3 and a.cpu_s >= 0.8 and dict(a.states).get("R", 0) == 0) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    s = await shell.proc_tree(tree.pid)
    assert a.procs == s.procs == 3, (a, s)
    assert a.threads == s.threads == 1 + 4 + 1
    assert a.states == s.states == (("S", 3),)
    assert a.root == s.root and a.root.alive
    assert a.main_pid == s.main_pid and a.main_argv == s.main_argv
    assert a.main_argv[-1] == "odd arg $(x)" and "python3" in a.main_argv[0]
    assert abs(a.cpu_s - s.cpu_s) < 0.05 and abs(a.cpu_s - _cpu_of(tree.pid)) < 0.05
    assert 0.8 <= a.cpu_s < 5.0
    gone_a, gone_s = await agent.proc_tree(999_999), await shell.proc_tree(999_999)
    assert gone_a == gone_s and not gone_a.root.alive and gone_a.procs == 0


async def test_reaped_children_still_count(both):
    """A worker that ended and was reaped moves its CPU time into its parent's: never lost."""
    agent, _ = both
    p = subprocess.Popen(["sh", "-c", 'python3 -c "$1"; sleep 60', "sh",
                          "import time\nwhile time.process_time() < 0.6: pass\n"],
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            t = await agent.proc_tree(p.pid)
            if (t.main_argv and t.main_argv[0] == "sleep") or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        assert t.main_argv[0] == "sleep" and t.procs == 2
        assert t.cpu_s >= 0.6, t
    finally:
        os.killpg(p.pid, 9)
        p.wait()


def _run_wrapper(tmp_path: Path, argv: list[str], env: dict | None = None, **kw) -> str:
    run = tmp_path / "run"
    run.mkdir(parents=True)
    (run / "launch.sh").write_text(render_wrapper(str(run), "r1", argv, **kw))
    subprocess.run(["sh", "./launch.sh"], cwd=run, env=env, timeout=30, check=False)
    return (run / "train.log").read_text()


def test_wrapper_makes_python_unbuffered_unless_set(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    show = [sys.executable, "-c", "import os; print('PYU=' + os.environ.get('PYTHONUNBUFFERED', '-'))"]
    assert "PYU=1" in _run_wrapper(tmp_path / "a", show, env)
    assert "PYU=0" in _run_wrapper(tmp_path / "b", show, {**env, "PYTHONUNBUFFERED": "0"})


def test_wrapper_tells_the_program_its_restart_count(tmp_path):
    """DFLASH_RESTART: 0 on a first launch, the recovery's count on a relaunch, whatever the
    environment that started the wrapper said."""
    show = ["sh", "-c", 'echo "restart=$DFLASH_RESTART"']
    env = {**os.environ, "DFLASH_RESTART": "7"}
    assert "restart=0" in _run_wrapper(tmp_path / "a", show, env)
    assert "restart=2" in _run_wrapper(tmp_path / "b", show, env, options=ProgramOptions(restart=2))
    with pytest.raises(ValueError):
        render_wrapper(str(tmp_path), "r1", show, options=ProgramOptions(restart=-1))


def test_a_launch_requests_program_options_reach_the_program(tmp_path):
    """What a LaunchRequest asks of the program's start reaches it whole through
    `program_options`: each of the wrapper's options is a request field of the same name."""
    request = LaunchRequest(restart=3, resume_from="/ck/step 40", resume_step=40, diverged_at=57)
    assert {f.name for f in fields(ProgramOptions)} <= {f.name for f in fields(LaunchRequest)}
    assert all(getattr(request.program_options(), f.name) == getattr(request, f.name)
               for f in fields(ProgramOptions))
    show = ["sh", "-c", 'echo "got=$DFLASH_RESTART|$DFLASH_RESUME_FROM|$DFLASH_RESUME_STEP|$DFLASH_DIVERGED_AT"']
    assert "got=3|/ck/step 40|40|57" in _run_wrapper(tmp_path, show, options=request.program_options())


@pytest.mark.skipif(shutil.which("stdbuf") is None, reason="no stdbuf here (coreutils)")
def test_wrapper_line_buffers_other_programs(tmp_path):
    # stdbuf works by LD_PRELOAD; a child sees it in its environment.
    log = _run_wrapper(tmp_path, ["sh", "-c", 'echo "preload=$_STDBUF_O"'])
    assert "preload=L" in log, log


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
def test_no_tmp_file_left_when_the_disk_is_full(tmp_path):
    """On a full filesystem (a 64 KiB tmpfs, filled), launch.json cannot be written: the wrapper
    exits 4 and leaves no .tmp file behind."""
    probe = subprocess.run(["unshare", "-Urm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no mount namespaces here: {probe.stderr.decode().strip()}")
    run = tmp_path / "run"
    run.mkdir()
    script = render_wrapper(str(run), "r1", ["true"])
    inner = ('mount -t tmpfs -o size=64k none "$1" && printf "%s" "$2" > "$1/launch.sh" && '
             'touch "$1/train.log" && (dd if=/dev/zero of="$1/fill" bs=4k 2>/dev/null; true) && '
             'cd "$1" && sh ./launch.sh; echo "rc=$?"; ls -a "$1"')
    res = subprocess.run(["unshare", "-Urm", "sh", "-c", inner, "sh", str(run), script],
                         capture_output=True, text=True, timeout=30)
    assert "rc=4" in res.stdout, res.stdout + res.stderr
    names = res.stdout.split("rc=4", 1)[1].split()
    assert sorted(n for n in names if n not in (".", "..")) == ["fill", "launch.sh", "train.log"], names
