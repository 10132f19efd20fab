"""--stop and --check never take a stranger for the run: identity is proven, not guessed.

Real processes throughout: a copied run dir (`cp -a`) next to its live original, forged
launch.json records naming a process-group leader whose command line says "launch.sh" (with
its start time, which anyone can read), the previous version's launch.json (no wrapper argv)
for a real wrapper started the previous way, PID 1 of a real PID namespace (`unshare`), and a
group that holds the stopper itself. Seeded: DFLASH_FUZZ_SEED picks the forged fields.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.remote.agent import AgentOps
from dflash_tui.remote.local import LocalTarget
from dflash_tui.remote.shell_ops import ShellOps
from dflash_tui.run.launch.claim import _own_start_ticks
from dflash_tui.run.wrapper import render_wrapper
from tests.support.runs import alive
from tests.support.standin import USERNS_UNSHARE
from tests.test_cli_modes import cli, local, write_config

pytestmark = pytest.mark.timeout(180)

SEED = int(os.environ.get("DFLASH_FUZZ_SEED", "20261201"))


def _wait(pred, seconds: float = 20.0, what: str = "") -> None:
    deadline = time.monotonic() + seconds
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _cmdline(pid: int) -> list[str]:
    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    return [a.decode() for a in raw.split(b"\0")[:-1]]


def _copy_live_dir(src: Path, dst: Path) -> None:
    """`cp -a` as a person runs it on a live run dir: the run renames its status files while the
    copy walks the folder, so cp can meet a name that is gone by the time it opens it (exit 1);
    the person runs it again, and so does this."""
    for _ in range(10):
        res = subprocess.run(["cp", "-a", str(src), str(dst)], capture_output=True, text=True)
        if res.returncode == 0:
            return
        shutil.rmtree(dst, ignore_errors=True)
        time.sleep(0.1)
    raise AssertionError(f"cp -a of the live run dir kept failing: {res.stderr}")


@pytest.fixture(scope="module")
def live_run(tmp_path_factory):
    """A real run of a beating program, launched by the CLI, and its copy made by `cp -a`."""
    tmp = tmp_path_factory.mktemp("live")
    cfg = write_config(tmp, orig=local(tmp / "run", "beat"), copy=local(tmp / "copy", "beat"))
    res = cli(tmp, "--config", str(cfg), "--profile", "orig", "--launch", "--json", "--wait", "20")
    assert res.returncode == 0, (res.stdout, res.stderr)
    pid = json.loads(res.stdout)["pid"]
    _copy_live_dir(tmp / "run", tmp / "copy")
    yield tmp, cfg, pid
    if alive(pid):
        os.killpg(pid, signal.SIGKILL)


def test_a_copied_run_dir_does_not_adopt_the_original_process(live_run):
    tmp, cfg, pid = live_run
    res = cli(tmp, "--config", str(cfg), "--profile", "copy", "--check", "--json")
    out = json.loads(res.stdout)
    assert out["verdict"] == "KILLED" and res.returncode == 1, out
    assert "run dir is a copy" in out["summary"], out["summary"]

    res = cli(tmp, "--config", str(cfg), "--profile", "copy", "--stop", "--json")
    out = json.loads(res.stdout)
    assert res.returncode == 1 and out["stop"]["outcome"] == "mismatch", (res.stdout, res.stderr)
    assert "nothing was signalled" in out["stop"]["message"]
    time.sleep(0.5)
    assert alive(pid)

    res = cli(tmp, "--config", str(cfg), "--profile", "orig", "--check", "--json")
    assert json.loads(res.stdout)["verdict"] == "RUNNING", res.stdout
    res = cli(tmp, "--config", str(cfg), "--profile", "orig", "--stop", "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["stop"]["outcome"] == "terminated", res.stdout
    _wait(lambda: not alive(pid), what="the original run to end")


def _stranger(cwd: Path) -> subprocess.Popen:
    """Not a run: a process-group leader whose command line says launch.sh (an editor on a file
    of that name), even working in the run dir."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "launch.sh"],
                            cwd=cwd, start_new_session=True)


@pytest.mark.parametrize("forgery", ["contains launch.sh", "its own argv as the wrapper's",
                                     "another run dir's wrapper argv", "previous version's record"])
def test_a_forged_launch_json_never_gets_a_stranger_signalled(tmp_path, forgery):
    rng = random.Random(f"{SEED}-{forgery}")
    run = tmp_path / "run"
    run.mkdir()
    stranger = _stranger(run)
    try:
        _wait(lambda: _own_start_ticks(stranger.pid) is not None and "launch.sh" in _cmdline(stranger.pid))
        run_id = rng.choice(["20261201-000000-abcdef", "x", "run id with spaces"])
        rec = {"v": 1, "run_id": run_id, "pid": stranger.pid, "pgid": stranger.pid,
               "start_ticks": _own_start_ticks(stranger.pid), "start_time": time.time() - rng.randint(1, 99),
               "argv": ["python", "train.py"], "host": "h", "user": "u"}
        if forgery == "its own argv as the wrapper's":
            rec["wrapper_argv"] = _cmdline(stranger.pid)
        elif forgery == "another run dir's wrapper argv":
            rec["wrapper_argv"] = ["sh", str(tmp_path / "elsewhere" / "launch.sh"), run_id]
        (run / "launch.json").write_text(json.dumps(rec))
        (run / "train.log").write_text("step 1\n")
        cfg = write_config(tmp_path, p=local(run, "beat"))
        res = cli(tmp_path, "--config", str(cfg), "--check", "--json")
        assert json.loads(res.stdout)["verdict"] == "KILLED", res.stdout
        res = cli(tmp_path, "--config", str(cfg), "--stop", "--json")
        out = json.loads(res.stdout)
        assert res.returncode == 1 and out["stop"]["outcome"] == "mismatch", (res.stdout, res.stderr)
        assert len(res.stderr.strip().splitlines()) <= 1
        time.sleep(0.3)
        assert stranger.poll() is None, "the stranger was signalled"
    finally:
        stranger.kill()
        stranger.wait()


def _start_like_the_previous_version(run: Path, run_id: str) -> None:
    """launch.sh written and started as the previous version did: `setsid sh ./launch.sh` in
    the run dir; its launch.json then loses the wrapper argv the previous version never wrote."""
    run.mkdir()
    (run / "launch.sh").write_text(render_wrapper(str(run), run_id, [sys.executable, "-c",
                                                                     "import time; time.sleep(60)"]))
    subprocess.Popen(["setsid", "sh", "./launch.sh"], cwd=run, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait(lambda: (run / "launch.json").exists(), what="launch.json")
    rec = json.loads((run / "launch.json").read_text())
    del rec["wrapper_argv"]
    (run / "launch.json").write_text(json.dumps(rec))


def test_a_run_of_the_previous_version_is_judged_and_stopped_when_proven(tmp_path):
    run, other = tmp_path / "run", tmp_path / "other"
    _start_like_the_previous_version(run, "20261130-000000-aaaaaa")
    pid = json.loads((run / "launch.json").read_text())["pid"]
    # A legacy wrapper of ANOTHER run dir, named by a launch.json in `other`: its cwd says no.
    other.mkdir()
    shutil.copy(run / "launch.json", other / "launch.json")
    (other / "train.log").write_text("")
    try:
        cfg = write_config(tmp_path, run=local(run, "beat", stall_after_s=60),
                           other=local(other, "beat"))
        res = cli(tmp_path, "--config", str(cfg), "--profile", "other", "--stop", "--json")
        assert res.returncode == 1 and json.loads(res.stdout)["stop"]["outcome"] == "mismatch", res.stdout
        assert alive(pid)
        res = cli(tmp_path, "--config", str(cfg), "--profile", "run", "--check", "--json")
        assert json.loads(res.stdout)["verdict"] in ("RUNNING", "STARTING"), res.stdout
        res = cli(tmp_path, "--config", str(cfg), "--profile", "run", "--stop", "--json")
        assert res.returncode == 0 and json.loads(res.stdout)["stop"]["outcome"] == "terminated", res.stdout
        _wait(lambda: not alive(pid), what="the legacy wrapper to end")
    finally:
        if alive(pid):
            os.killpg(pid, signal.SIGKILL)


# PID 1 of a fresh PID namespace, as a container's init: a session leader (so group 1) working
# in the run dir with exactly the argv a wrapper of it would have. Its child forges launch.json
# naming pid 1 (its real start time and argv), starts a bystander and runs `dflash-tui --stop`:
# the group kill there would be kill(-1), reaching the bystander and the stopper itself.
NAMESPACE_DRIVER = r"""
import json, os, subprocess, sys, time
run, cfg = sys.argv[1], sys.argv[2]
bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
stat = open("/proc/1/stat").read()
ticks = int(stat[stat.rindex(")") + 2:].split()[19])
argv = [a.decode() for a in open("/proc/1/cmdline", "rb").read().split(b"\0")[:-1]]
rec = {"v": 1, "run_id": "r", "pid": 1, "pgid": 1, "start_ticks": ticks, "start_time": time.time(),
       "argv": ["sh", "./launch.sh"], "wrapper_argv": argv}
open(os.path.join(run, "launch.json"), "w").write(json.dumps(rec))
open(os.path.join(run, "train.log"), "w").write("")
res = subprocess.run([sys.executable, "-m", "dflash_tui", "--config", cfg, "--stop", "--json"],
                     capture_output=True, text=True, timeout=60)
time.sleep(0.3)
print(json.dumps({"rc": res.returncode, "stdout": res.stdout, "stderr": res.stderr, "init_argv": argv,
                  "bystander_alive": bystander.poll() is None}), flush=True)
bystander.kill()
"""


@pytest.mark.skipif(not shutil.which("unshare"), reason="needs unshare (util-linux)")
def test_pid_1_of_a_namespace_is_never_signalled(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (tmp_path / "driver.py").write_text(NAMESPACE_DRIVER)
    (run / "launch.sh").write_text('"$DFLASH_PY" "$DFLASH_DRIVER" "$DFLASH_RUN" "$DFLASH_CFG"\n')
    cfg = write_config(tmp_path, p=local(run, "beat"))
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
           "DFLASH_PY": sys.executable,
           "DFLASH_DRIVER": str(tmp_path / "driver.py"), "DFLASH_RUN": str(run), "DFLASH_CFG": str(cfg)}
    res = subprocess.run(["unshare", *USERNS_UNSHARE, "--pid", "--fork", "--mount-proc", "--",
                          "setsid", "sh", str(run / "launch.sh"), "r"],
                         cwd=run, capture_output=True, text=True, timeout=90, env=env)
    assert res.stdout.strip(), f"the namespace's processes were killed (kill(-1)?): {res.stderr[-2000:]}"
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["init_argv"] == ["sh", str(run / "launch.sh"), "r"], out
    assert out["bystander_alive"], out
    assert out["rc"] == 1, out
    assert json.loads(out["stdout"])["stop"]["outcome"] == "mismatch", out


@pytest.mark.parametrize("kind", ["agent", "shell"])
async def test_a_group_that_holds_the_stopper_is_never_signalled(tmp_path, kind):
    """Even with every proof right (start time, exact argv, cwd), the stopper's own group is
    refused; the same proof for a group of its own is signalled (the control)."""
    target = LocalTarget()
    ops = await (AgentOps.start(target) if kind == "agent" else ShellOps.start(target))
    # A group the ops' process belongs to: a leader that runs the ops as a child in its group.
    holder = subprocess.Popen([sys.executable, "-c", "import os, sys, time; time.sleep(60)"],
                              cwd=tmp_path, start_new_session=True)
    try:
        _wait(lambda: _own_start_ticks(holder.pid) is not None)
        mine = os.getpgrp()
        leader = mine if _own_start_ticks(mine) is not None else None
        if leader is not None:
            cwd = os.readlink(f"/proc/{leader}/cwd")
            assert await ops.signal(leader, signal.SIGCONT, start_ticks=_own_start_ticks(leader),
                                    cmdline=_cmdline(leader), cwd=cwd, group=True) == "mismatch"
        assert await ops.signal(holder.pid, signal.SIGTERM, start_ticks=_own_start_ticks(holder.pid),
                                cmdline=_cmdline(holder.pid), cwd=str(tmp_path / "nope"), group=True) == "mismatch"
        assert await ops.signal(1, signal.SIGCONT, start_ticks=_own_start_ticks(1), cmdline=None,
                                group=True) == "mismatch"
        assert holder.poll() is None
        assert await ops.signal(holder.pid, signal.SIGTERM, start_ticks=_own_start_ticks(holder.pid),
                                cmdline=_cmdline(holder.pid), cwd=str(tmp_path), group=True) == "sent"
        assert holder.wait(5) == -signal.SIGTERM
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait()
        await ops.close()


def test_the_identity_rule_case_by_case():
    """observe.wrapper_refusal / process_matches on the evidence a poll gives."""
    from dflash_tui.contract.rundir import LaunchRecord
    from dflash_tui.remote.ops import PidInfo
    from dflash_tui.run.evidence.observe import judged_root, process_matches
    from dflash_tui.run.wrapper import wrapper_argv

    run, rid = "/srv/runs/a", "20261201-000000-abcdef"
    argv = wrapper_argv(run, rid)
    new = LaunchRecord(run_id=rid, pid=4242, pgid=4242, start_ticks=7, start_time=0.0, argv=["x"], wrapper_argv=argv)
    old = LaunchRecord(run_id=rid, pid=4242, pgid=4242, start_ticks=7, start_time=0.0, argv=["x"])

    def proc(cmdline, in_run_dir, pid=4242):
        return PidInfo(pid, True, start_ticks=7, cmdline=tuple(cmdline), state="S", pgid=pid, in_run_dir=in_run_dir)

    assert process_matches(new, judged_root(new, run, proc(argv, True)))
    assert process_matches(new, judged_root(new, run, proc(argv, None)))        # cwd not readable: the argv proves it
    assert not process_matches(new, judged_root(new, run, proc(argv, False)))   # another cwd
    assert not process_matches(new, judged_root(new, "/srv/runs/copy", proc(argv, True)))   # a copy of the run dir
    assert not process_matches(new, judged_root(new, run, proc(["vim", "launch.sh"], True)))
    assert process_matches(old, proc(["sh", "./launch.sh"], True))             # the previous version, proven
    assert not process_matches(old, proc(["sh", "./launch.sh"], None))         # ... and not proven
    assert not process_matches(old, proc(["sh", "./launch.sh"], False))
    init = LaunchRecord(run_id=rid, pid=1, pgid=1, start_ticks=7, start_time=0.0, argv=["x"], wrapper_argv=argv)
    assert not process_matches(init, judged_root(init, run, proc(argv, True, pid=1)))
