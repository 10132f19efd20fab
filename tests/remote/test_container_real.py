"""The container paths against real runtimes: an LXC container behind Proxmox's `pct` (pct.pm's
own path, `lxc-attach -n ID --`) and a podman container answering as `docker`, each running on
this machine (tests/support/realct.py). Launch, verdicts from the host, stop, a container stopped
under a run, and the incident's failure modes that a real runtime shows.

What stays on the stand-in (test_container_standin.py) is what no healthy runtime does on
demand: an exec that exits 0 and runs nothing, and an exec torn down while its children still
hold its pipes.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.config import Profile
from dflash_tui.remote.base import ContainerNotRunning
from dflash_tui.remote.container import ContainerTarget
from dflash_tui.remote.local import LocalTarget
from dflash_tui.run.verdict.checklist import CheckState, Verdict
from dflash_tui.watch.session import Session

from tests.support.realct import RealContainer
from tests.support.run_standins import PROGRAM
from tests.support.runs import standin_profile
from tests.support.terminal import TerminalTarget

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def ct(real_container: RealContainer, monkeypatch, tmp_path) -> RealContainer:
    """The module's container, running, its tool first on PATH for in-process sessions."""
    real_container.ensure_running()
    for key in ("PATH", "DFLASH_LXC_PATH", "DFLASH_PODMAN_ROOT"):
        if key in real_container.env:
            monkeypatch.setenv(key, real_container.env[key])
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return real_container


@pytest.fixture
def where(ct, request) -> Path:
    """This test's directory inside the container's shared dir (the same path on both sides)."""
    d = ct.share / request.node.name.replace("[", "-").replace("]", "")
    d.mkdir()
    return d


@pytest.fixture
async def sessions(ct):
    made: list[Session] = []

    def open_session(profile: Profile) -> Session:
        s = Session(profile)
        made.append(s)
        return s
    yield open_session
    ct.ensure_running()
    for s in made:
        try:
            await s.stop(grace_s=0.5)
        except Exception:   # noqa: BLE001 - cleanup of a test that already failed must go on
            pass
        await s.close()


def profile(ct: RealContainer, run_dir: Path, mode: str, *args: str, **kw) -> Profile:
    return standin_profile(run_dir, mode, *args, container=ct.spec, **kw)


async def wait_verdict(session: Session, want: set[Verdict], timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while True:
        ev, cl = await session.check()
        if cl.verdict in want or time.monotonic() > deadline:
            return ev, cl
        await asyncio.sleep(0.2)


def host_pid_of(ct: RealContainer, container_pid: int) -> int | None:
    """The host pid of `container_pid` in the container's PID namespace (NSpid), None if none."""
    ns = os.readlink(f"/proc/{ct.init_host_pid()}/ns/pid")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/pid") != ns:
                continue
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        nspid = next(ln.split()[1:] for ln in status.splitlines() if ln.startswith("NSpid:"))
        state = next(ln.split()[1] for ln in status.splitlines() if ln.startswith("State:"))
        if nspid[-1] == str(container_pid) and state != "Z":
            return int(entry)
    return None


def cli(ct: RealContainer, tmp_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**ct.env, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    return subprocess.run([sys.executable, "-m", "dflash_tui", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


def write_config(tmp_path: Path, ct: RealContainer, run_dir: Path, mode: str, *args: str) -> Path:
    fields = {"container": ct.spec, "run_dir": str(run_dir), "python": sys.executable,
              "command": [sys.executable, PROGRAM, mode], "train_args": list(args),
              "stall_after_s": 2, "stop_grace_s": 2, "min_free_gb": 0}
    lines = ["[profile.ct]"] + [f"{k} = {json.dumps(v)}" for k, v in fields.items()]
    path = tmp_path / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def one_line(res: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    return lines[0]


async def test_the_tool_passes_argv_through_and_names_a_stopped_container(ct):
    """ContainerTarget against the real tool: argv arrives as argv, exit statuses and stdin pass
    through, and a stopped or missing container is ContainerNotRunning with the command that
    starts it, never an exit status of the command."""
    target = ContainerTarget(LocalTarget(), ct.spec)
    res = await target.run(["sh", "-c", 'printf "%s|" "$@"; echo "$$"; cat; exit 7', "sh",
                            "a b", "$(touch /tmp/pwned-real-ct)", "'q\""], input=b"from stdin\n")
    words, rest = res.stdout.rsplit("|", 1)
    inner_pid, echoed = rest.strip().split("\n")
    assert words == "a b|$(touch /tmp/pwned-real-ct)|'q\"" and echoed == "from stdin", res
    assert res.exit_status == 7 and int(inner_pid) < 1000     # a PID namespace of its own
    assert not os.path.exists("/tmp/pwned-real-ct")
    missing = await target.run(["/nonexistent/python9", "-V"])
    assert missing.exit_status in (126, 127) and "python9" in missing.stderr + missing.stdout
    assert await target.is_running()

    ct.stop()
    assert not await target.is_running()
    with pytest.raises(ContainerNotRunning) as exc:
        await target.run(["true"])
    assert exc.value.hint == ct.start_hint and ct.spec in str(exc.value)
    with pytest.raises(ContainerNotRunning, match=ct.start_hint):
        await target.ensure_running()
    ct.start()

    gone = ContainerTarget(LocalTarget(), "pct:999999999" if ct.kind == "pct" else "docker:no-such-ct")
    assert not await gone.is_running()
    with pytest.raises(ContainerNotRunning):
        await gone.run(["true"])


async def test_launch_runs_in_the_container_detached_then_finishes(ct, sessions, where):
    s = sessions(profile(ct, where / "run", "finish", "--steps=40", "--interval=0.1"))
    out = await s.launch()
    assert out.preflight.ok, out.preflight.checks
    assert {c.id for c in out.preflight.checks} >= {"pre_reachable", "pre_container", "pre_run_dir",
                                                    "pre_python", "pre_no_live_run"}
    ev, cl = await wait_verdict(s, {Verdict.RUNNING})
    assert cl.verdict is Verdict.RUNNING, cl
    # The wrapper's pid is the container's numbering, and the host sees it in that namespace.
    assert ev.launch.pid < 1000 and host_pid_of(ct, ev.launch.pid) is not None
    assert "\nstep 1 loss" in (where / "run" / "train.log").read_text()
    ev, cl = await wait_verdict(s, {Verdict.FINISHED}, timeout=20)
    assert cl.verdict is Verdict.FINISHED, cl
    assert host_pid_of(ct, ev.launch.pid) is None


def test_check_verdicts_and_stop_from_the_host(ct, where, tmp_path):
    """`--launch`, `--check` and `--stop` as a user runs them on the container's host."""
    cfg = write_config(tmp_path, ct, where / "run", "beat")
    res = cli(ct, tmp_path, "--config", str(cfg), "--check", "--json")
    assert res.returncode == 4 and json.loads(res.stdout)["verdict"] == "NO RUN", res.stdout + res.stderr

    res = cli(ct, tmp_path, "--config", str(cfg), "--launch", "--json", "--wait", "20")
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert out["verdict"] == "RUNNING" and out["target"] == f"local · {ct.spec}", out
    pid = out["pid"]
    host_pid = host_pid_of(ct, pid)
    assert pid < 1000 and host_pid is not None and host_pid != pid

    res = cli(ct, tmp_path, "--config", str(cfg), "--check")
    assert res.returncode == 0 and res.stdout.splitlines()[1].startswith("RUNNING: step"), res.stdout

    res = cli(ct, tmp_path, "--config", str(cfg), "--stop", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert out["stop"]["outcome"] == "terminated" and out["pid"] == pid, out
    assert not Path(f"/proc/{host_pid}").exists() or host_pid_of(ct, pid) is None

    res = cli(ct, tmp_path, "--config", str(cfg), "--check")
    assert res.returncode == 0 and "STOPPED: stopped by" in res.stdout, res.stdout

    cfg = write_config(tmp_path, ct, where / "crash", "crash")
    res = cli(ct, tmp_path, "--config", str(cfg), "--launch", "--wait", "15")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "CRASHED: exit code 1: RuntimeError: CUDA error" in res.stdout, res.stdout


def test_a_container_stopped_under_a_running_run(ct, where, tmp_path):
    """The container stops while the run runs: while it is down every command names it and
    the command that starts it (exit 3); once it runs again the run is KILLED (its pid is gone
    and it wrote no exit.json)."""
    cfg = write_config(tmp_path, ct, where / "run", "beat")
    res = cli(ct, tmp_path, "--config", str(cfg), "--launch", "--json", "--wait", "20")
    assert res.returncode == 0, res.stdout + res.stderr
    pid = json.loads(res.stdout)["pid"]
    host_pid = host_pid_of(ct, pid)
    assert host_pid is not None

    ct.stop()
    deadline = time.monotonic() + 5
    while Path(f"/proc/{host_pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{host_pid}").exists(), "a container stop kills the run inside it"
    for mode in ("--check", "--stop"):
        res = cli(ct, tmp_path, "--config", str(cfg), mode)
        line = one_line(res)
        assert res.returncode == 3 and ct.spec in line and ct.start_hint in line, (mode, res.stdout, line)
    res = cli(ct, tmp_path, "--config", str(cfg), "--launch", "--json")
    out = json.loads(res.stdout)
    assert out["verdict"] == "NOT LAUNCHED", out
    (fail,) = [c for c in out["checks"] if c["state"] == "fail"]
    assert fail["id"] == "pre_container" and fail["hint"] == ct.start_hint, fail
    res = cli(ct, tmp_path, "--config", str(cfg), "--check", "--json")
    out = json.loads(res.stdout)
    assert res.returncode == 3 and out["verdict"] is None and ct.start_hint in out["error"], out

    ct.start()
    res = cli(ct, tmp_path, "--config", str(cfg), "--check", "--json")
    out = json.loads(res.stdout)
    assert res.returncode == 1 and out["verdict"] == "KILLED", out
    assert not (where / "run" / "exit.json").exists()


async def test_a_launch_into_a_stopped_container_is_refused_with_the_start_command(ct, sessions, where):
    """Preflight refuses at once and names the start command; without preflight (the container
    stopped between the two) the launch stops at the transport, which says the same; nothing
    was written into the run dir."""
    s = sessions(profile(ct, where / "run", "beat"))
    ct.stop()
    out = await s.launch()
    assert out.checklist.verdict is Verdict.NOT_LAUNCHED
    fail = next(c for c in out.checklist.checks if c.state is CheckState.FAIL)
    assert fail.id == "pre_container" and fail.hint == ct.start_hint, fail
    t0 = time.monotonic()
    with pytest.raises(ContainerNotRunning) as exc:
        await s.launch(preflight=False)
    assert exc.value.hint == ct.start_hint and time.monotonic() - t0 < 5
    assert not (where / "run" / "launch.json").exists()


async def test_the_incident_under_a_terminal_kills_a_background_job_but_not_the_launch(ct, sessions, where):
    """`pct exec` on a terminal (`ssh -t host 'pct exec ID -- ...'`): lxc-attach gives the
    command a terminal of its own and hangs it up when the command returns, so the incident's
    `sh -c "... > log 2>&1 &"` dies with the exec, while the product's launch (its own session,
    nothing on the terminal) returns at once and keeps running."""
    if ct.kind != "pct":
        pytest.skip("the incident's path is `pct exec`; the product's `docker exec -i` has no terminal")
    host = TerminalTarget()
    target = ContainerTarget(host, ct.spec)
    naive = await target.run(["sh", "-c", f"sleep 4242 > {where}/naive.log 2>&1 & echo $!"], timeout=20)
    assert naive.exit_status == 0, naive      # "it worked": exit 0, nothing on stderr
    bg_pid = int(naive.stdout.split()[-1])
    # Dead either way; often before its shell opened the log (the incident: no log, no process).
    # The hangup reaches it as the exec returns, or within a few seconds on a busy machine.
    deadline = time.monotonic() + 15
    while host_pid_of(ct, bg_pid) is not None and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert host_pid_of(ct, bg_pid) is None, "the background job outlived the exec's terminal"
    # The same job over pipes (no terminal) lives on: the terminal is what killed it.
    piped = await ContainerTarget(LocalTarget(), ct.spec).run(
        ["sh", "-c", "sleep 4243 > /dev/null 2>&1 & echo $!"])
    await asyncio.sleep(0.5)
    assert host_pid_of(ct, int(piped.stdout.split()[-1])) is not None
    ct.exec("kill", piped.stdout.split()[-1])

    s = Session(profile(ct, where / "run", "beat"), targets=(host, target))
    t0 = time.monotonic()
    out = await s.launch()
    try:
        assert out.preflight.ok, out.preflight.checks
        assert time.monotonic() - t0 < 15 and out.attempt.pid, out.attempt
        await asyncio.sleep(1.0)      # the exec's terminal is gone by now
        ev, cl = await wait_verdict(s, {Verdict.RUNNING})
        assert cl.verdict is Verdict.RUNNING and host_pid_of(ct, ev.launch.pid) is not None, cl
    finally:
        await s.stop(grace_s=0.5)
        await s.close()
