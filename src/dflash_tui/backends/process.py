"""The process backends: the run is a process tree on a machine we reach by a Target.

Local, SSH, pct and docker differ only in how the Targets are made (remote/factory.py); they
start the wrapper with ONE command through the run target (setsid, else nohup: run/wrapper.py
`DETACH_SCRIPT`), know it alive by its recorded pid and start time, and stop it by signalling
its process group after stop.json (run/launch/stop.py).
"""

from __future__ import annotations

from typing import Awaitable, Callable

from ..config import Profile
from ..remote.base import CommandTimeout, Target, TargetError
from ..remote.container import ContainerTarget
from ..remote.ops import RemoteOps
from ..run.launch.launcher import Detached, Launcher
from ..run.launch.request import Placement
from ..run.launch.stop import StopResult, stop_run
from ..run.launch.environment import EnvError, env_input, launch_environment, with_env_from_stdin
from ..run.wrapper import detach_argv, parse_detach_output

DETACH_TIMEOUT_S = 20


class ProcessLauncher(Launcher):
    @classmethod
    def make_run_target(cls, profile: Profile, host: Target) -> Target:
        return host

    async def detach(self, run_dir: str, run_id: str, placement: Placement) -> Detached:
        # The profile says where (PLACES_NODES is False): the launch refuses any placement first.
        try:
            env = launch_environment(self.profile.env, self.profile.env_file)
        except EnvError as exc:
            return Detached(None, error=str(exc))
        argv = detach_argv(run_dir, run_id)
        try:
            if env:
                res = await self.target.run(with_env_from_stdin(argv), input=env_input(env), timeout=DETACH_TIMEOUT_S)
            else:
                res = await self.target.run(argv, timeout=DETACH_TIMEOUT_S)
        except (CommandTimeout, TargetError) as exc:   # unreachable included
            return Detached(None, error=str(exc))
        pid, via, own = parse_detach_output(res.stdout)
        return Detached(res.exit_status, res.stdout[-2000:], res.stderr[-2000:], pid, via, own)

    async def stop(self, ops: RemoteOps, run_dir: str, *, grace_s: float,
                   requested_by: str | None = None,
                   before_signal: Callable[[], Awaitable[None]] | None = None) -> StopResult:
        return await stop_run(ops, self.target, run_dir, grace_s=grace_s, requested_by=requested_by,
                              before_signal=before_signal)


class LocalLauncher(ProcessLauncher):
    """This machine (no `host`, no `container`)."""

    @classmethod
    def handles(cls, profile: Profile) -> bool:
        return not profile.host and not profile.container


class SSHLauncher(ProcessLauncher):
    """A machine over SSH (`host`, with user, port, identity_file, known_hosts, ssh_config)."""

    @classmethod
    def handles(cls, profile: Profile) -> bool:
        return bool(profile.host) and not profile.container


class ContainerLauncher(ProcessLauncher):
    """A Proxmox LXC (`container = "pct:ID"`) or a docker container (`"docker:NAME"`) on this
    machine or an SSH host: commands go through `pct exec` / `docker exec -i`."""

    @classmethod
    def handles(cls, profile: Profile) -> bool:
        return bool(profile.container)

    @classmethod
    def make_run_target(cls, profile: Profile, host: Target) -> Target:
        return ContainerTarget(host, profile.container)
