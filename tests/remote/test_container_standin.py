"""The pct/docker stand-ins reproduce each failure mode they exist for, over real sshd."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from dflash_tui.remote.base import CommandTimeout, ContainerNotRunning
from dflash_tui.remote.container import ContainerTarget
from dflash_tui.remote.ssh import SSHTarget
from dflash_tui.remote.ssh_dest import SSHDest

pytestmark = pytest.mark.sshd


def host_pids(*argv: str) -> list[int]:
    """Host pids of live processes whose argv is exactly `argv`."""
    want = "\0".join(argv).encode() + b"\0"
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if open(f"/proc/{entry}/cmdline", "rb").read() == want:
                    stat = open(f"/proc/{entry}/stat").read()
                    if stat[stat.rindex(")") + 2] not in "ZX":
                        found.append(int(entry))
            except OSError:
                pass
    return found


def gone_soon(*argv: str, within: float = 3.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not host_pids(*argv):
            return True
        time.sleep(0.05)
    return False


def appears_soon(*argv: str, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if host_pids(*argv):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
async def host(sshd):
    t = SSHTarget(SSHDest(**sshd.profile()))
    yield t
    await t.close()


async def test_ok_mode_runs_in_a_pid_namespace_and_passes_everything_through(host, standin):
    ct = ContainerTarget(host, standin.container("pct:201"))
    res = await ct.run(["sh", "-c", 'echo "$$"; cat; exit 7'], input=b"from stdin\n")
    inner_pid, echoed = res.stdout.splitlines()
    assert res.exit_status == 7 and echoed == "from stdin"
    assert int(inner_pid) < 50   # a fresh PID namespace, not the host's numbering
    assert await ct.is_running()
    # The host sees both pids of a process inside: NSpid maps host pid → container pid.
    await ct.run(["sh", "-c", "setsid sleep 41.5 </dev/null >/dev/null 2>&1 &"])
    assert appears_soon("sleep", "41.5")
    (pid,) = host_pids("sleep", "41.5")
    nspid = [ln for ln in open(f"/proc/{pid}/status") if ln.startswith("NSpid:")][0].split()[1:]
    assert len(nspid) == 2 and nspid[0] == str(pid)
    standin.stop("pct:201")   # a container stop kills everything inside it
    assert gone_soon("sleep", "41.5")
    assert not await ct.is_running()


async def test_noop_mode_exits_0_and_runs_nothing(host, standin, tmp_path):
    ct = ContainerTarget(host, standin.container("pct:202", mode="noop"))
    marker = tmp_path / "ran"
    res = await ct.run(["touch", str(marker)])
    assert res.exit_status == 0 and res.stdout == "" and res.stderr == ""
    assert not marker.exists()
    assert await ct.is_running()   # the container looks perfectly healthy


async def test_hup_mode_kills_the_exec_group_and_fd_holders_but_not_a_detached_process(
        host, standin, tmp_path):
    ct = ContainerTarget(host, standin.container("pct:203", mode="hup"))
    # Each background child touches its marker once it runs in its own session, and the
    # script waits for the markers: otherwise the teardown can win the race against setsid
    # (a real exec teardown would, too).
    script = ('cd "$1"; '
              "sleep 42.1 </dev/null >/dev/null 2>&1 & "                  # same process group
              "setsid sh -c ': > held; exec sleep 42.2' & "               # new session, keeps fds
              "setsid sh -c ': > detached; exec sleep 42.3' "             # fully detached
              "</dev/null >/dev/null 2>&1 & "
              "while [ ! -e held ] || [ ! -e detached ]; do sleep 0.05; done; echo launched")
    res = await ct.run(["sh", "-c", script, "sh", str(tmp_path)], timeout=30)
    assert res.exit_status == 0 and res.stdout == "launched\n"
    assert gone_soon("sleep", "42.1") and gone_soon("sleep", "42.2")
    assert host_pids("sleep", "42.3"), "a fully detached process must survive the exec"
    # The same group member in ok mode lives on (the control experiment).
    standin.set_mode("pct:203", "ok")
    await ct.run(["sh", "-c", "sleep 42.4 </dev/null >/dev/null 2>&1 & echo launched"])
    assert appears_soon("sleep", "42.4")
    time.sleep(0.5)
    assert host_pids("sleep", "42.4")


def spawn_keeping_stdin(tag: str) -> list[str]:
    """A launcher that detaches a child but lets it inherit stdin (Popen without
    stdin=DEVNULL): harmless over pipes, a hang behind a PTY."""
    code = ("import subprocess, sys; subprocess.Popen(['sleep', sys.argv[1]], "
            "start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
            "print('launched')")
    return [sys.executable, "-c", code, tag]


async def test_ptyhang_mode_hangs_while_a_child_holds_the_exec_fds(host, standin):
    ct = ContainerTarget(host, standin.container("pct:204", mode="ptyhang"))
    t0 = time.monotonic()
    with pytest.raises(CommandTimeout, match="holding the channel"):
        await ct.run(spawn_keeping_stdin("43.1"), timeout=2)
    assert time.monotonic() - t0 < 6
    detached = "setsid sleep 43.2 </dev/null >/dev/null 2>&1 & echo launched"
    res = await ct.run(["sh", "-c", detached], timeout=10)
    assert res.stdout == "launched\n"
    # Over plain pipes (ok mode) the same launcher returns at once: that is why it slips by.
    standin.set_mode("pct:204", "ok")
    res = await ct.run(spawn_keeping_stdin("43.3"), timeout=10)
    assert res.stdout == "launched\n"


async def test_stopped_mode_fails_like_the_real_tool(host, standin):
    ct = ContainerTarget(host, standin.container("pct:205", mode="stopped"))
    raw = await host.run(["pct", "exec", "205", "--", "true"])
    assert (raw.exit_status, raw.stderr.strip()) == (2, "container '205' not running!")
    with pytest.raises(ContainerNotRunning) as exc:
        await ct.run(["true"])
    assert exc.value.hint == "pct start 205" and "pct:205" in str(exc.value)
    assert not await ct.is_running()
    with pytest.raises(ContainerNotRunning, match="pct start 205"):
        await ct.ensure_running()


def test_incident_way_through_openssh_client(sshd, standin):
    """`ssh host 'pct exec ID -- ...'` with the OpenSSH client reaches the stand-in too."""
    standin.container("pct:206", mode="noop")
    res = subprocess.run(sshd.ssh_argv("pct exec 206 -- bash -c 'ls -la /nonexistent-log'"),
                         capture_output=True, text=True, timeout=30)
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
    standin.set_mode("pct:206", "ok")
    res = subprocess.run(sshd.ssh_argv("command -v pct; pct exec 206 -- sh -c 'echo $$'"),
                         capture_output=True, text=True, timeout=30)
    path, pid = res.stdout.split()
    assert path == str(sshd.bin_dir / "pct") and int(pid) < 50


async def test_docker_standin(host, standin):
    ct = ContainerTarget(host, standin.container("docker:trainer-1"))
    assert ct.prefix() == ["docker", "exec", "-i", "trainer-1"]
    res = await ct.run(["sh", "-c", "cat; echo $$"], input=b"x\n")
    assert res.stdout.splitlines()[0] == "x" and int(res.stdout.split()[1]) < 50
    assert await ct.is_running()
    standin.stop("docker:trainer-1")
    assert not await ct.is_running()
    with pytest.raises(ContainerNotRunning, match="docker start trainer-1"):
        await ct.run(["true"])
    missing = ContainerTarget(host, "docker:nope")
    assert not await missing.is_running()
    with pytest.raises(ContainerNotRunning):
        await missing.run(["true"])


async def test_container_target_over_a_local_host(standin):
    from dflash_tui.remote.local import LocalTarget

    ct = ContainerTarget(LocalTarget(env=standin.env), standin.container("pct:230"))
    assert ct.label == "local · pct:230"
    res = await ct.run(["sh", "-c", 'printf "%s|" "$@"; echo $$', "sh", "a b", "$(touch x)"])
    assert res.stdout.startswith("a b|$(touch x)|") and int(res.stdout.split("|")[-1]) < 50
    assert await ct.is_running()
