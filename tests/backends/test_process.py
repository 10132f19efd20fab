"""The Launcher seam (run/launch/launcher.py) and its backends (backends/): which backend runs which
profile, the one-line config errors, and a backend written here in a few lines (its own start
command and its own stop) carrying a real run through Session, the watch and the canary,
which is what the next backend gets."""

from __future__ import annotations

import asyncio
import signal
import sys
import time

import pytest

from dflash_tui import backends
from dflash_tui.backends import launcher_for
from dflash_tui.backends.process import ContainerLauncher, LocalLauncher, SSHLauncher
from dflash_tui.config import ConfigError, Profile
from dflash_tui.remote.container import ContainerTarget
from dflash_tui.remote.local import LocalTarget
from dflash_tui.remote.ops import RemoteOps
from dflash_tui.remote.ssh import SSHTarget
from dflash_tui.run.launch.launcher import Detached
from dflash_tui.run.launch.request import Placement
from dflash_tui.run.launch.stop import StopResult
from dflash_tui.run.verdict.checklist import Verdict
from dflash_tui.run.wrapper import wrapper_argv
from dflash_tui.watch.session import Session
from dflash_tui.watch import HostWatch

from tests.support.runs import alive, standin_profile

pytestmark = pytest.mark.timeout(60)


def test_each_profile_gets_its_backend_and_targets():
    local = launcher_for(Profile(name="a", run_dir="/srv/a"))
    assert type(local) is LocalLauncher and isinstance(local.host, LocalTarget) and local.target is local.host
    ssh = launcher_for(Profile(name="b", run_dir="/srv/b", host="gpu1", user="root"))
    assert type(ssh) is SSHLauncher and isinstance(ssh.host, SSHTarget) and ssh.target is ssh.host
    for spec in ("pct:200", "docker:trainer"):
        ct = launcher_for(Profile(name="c", run_dir="/srv/c", host="gpu1", container=spec))
        assert type(ct) is ContainerLauncher and isinstance(ct.target, ContainerTarget)
        assert ct.target.inner is ct.host and ct.target.spec == spec and ct.label.endswith(spec)


def test_fields_that_make_no_target_are_one_config_line():
    with pytest.raises(ConfigError, match=r"^c.toml: \[profile.x\]: container 'lxc:200' is not understood"):
        launcher_for(Profile(name="x", run_dir="/srv/x", host="h", container="lxc:200", source="c.toml"))
    with pytest.raises(ConfigError, match=r"\[profile.y\]: user given without host"):
        launcher_for(Profile(name="y", run_dir="/srv/y", user="root", source="c.toml"))


# The start command of the backend below: Python's own spawn in a new session, printing the pid.
SPAWN = ("import subprocess, sys; out = open('launch.out', 'ab'); "
         "p = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=out, stderr=out, "
         "start_new_session=True); print(f'dflash-launched pid={p.pid} via=popen-test own_session=yes')")


class PopenLauncher(LocalLauncher):
    """A backend of this test: its own start command (a Python spawn in a new session, no
    setsid) and its own stop (one verified SIGTERM to the run's group, then waiting)."""

    stops: list[int] = []

    @classmethod
    def handles(cls, profile: Profile) -> bool:
        return profile.name.startswith("popen-")

    async def detach(self, run_dir: str, run_id: str, placement: Placement) -> Detached:
        res = await self.target.run(["sh", "-c", 'cd "$1" && shift && exec "$@"', "t", run_dir, sys.executable,
                                     "-c", SPAWN, *wrapper_argv(run_dir, run_id)], timeout=10)
        pid = int(res.stdout.split("pid=")[1].split()[0])
        return Detached(res.exit_status, res.stdout, res.stderr, pid, "popen-test", True)

    async def stop(self, ops: RemoteOps, run_dir: str, *, grace_s: float,
                   requested_by: str | None = None, before_signal=None) -> StopResult:
        ev = await self.observe(ops, run_dir)
        if not self.alive(ev):
            return StopResult("not-running", None, None, 0.0, "not running")
        if before_signal is not None:
            await before_signal()
        sent = await ops.signal(ev.launch.pid, signal.SIGTERM, start_ticks=ev.launch.start_ticks,
                                cmdline=wrapper_argv(run_dir, ev.launch.run_id), cwd=run_dir, group=True)
        assert sent == "sent", sent
        self.stops.append(ev.launch.pid)
        while self.alive(await self.observe(ops, run_dir)):
            await asyncio.sleep(0.05)
        return StopResult("terminated", ev.launch.pid, ev.launch.run_id, 0.0, "ended after SIGTERM")


async def test_a_new_backend_is_one_class(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(backends, "BACKENDS", (PopenLauncher, *backends.BACKENDS))
    profile = standin_profile(tmp_path / "run", "beat", "--interval=0.2", name="popen-run", stall_after_s=30.0)
    watch = HostWatch(Session(profile), interval=0.2)
    try:
        assert type(watch.session.launcher) is PopenLauncher
        result = await watch.launch()
        (outcome,) = result.outcomes.values()
        assert result.launched and outcome.attempt.via == "popen-test", outcome.checklist
        deadline = time.monotonic() + 20
        report = await watch.poll()
        while report.checklist.verdict is not Verdict.RUNNING and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            report = await watch.poll()
        assert report.checklist.verdict is Verdict.RUNNING, report.checklist
        pid = report.launch.pid
        (stopped,) = (await watch.stop()).values()
        assert stopped.outcome == "terminated" and PopenLauncher.stops == [pid] and not alive(pid)
        assert (await watch.poll()).checklist.verdict is Verdict.CRASHED   # no stop.json: this backend wrote none
    finally:
        await watch.close()
