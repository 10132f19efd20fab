"""SharedTransport: one host target per SSH destination, one agent per host/container target.

Profiles that name the same destination (host, port, user, keys, known_hosts, ssh_config) get
the same host Target, so every command, stream and agent of them rides one SSH connection
(remote/ssh.py pools by the same key). Profiles that also name the same container (or none)
get the same run Target and the same RemoteOps: one agent process answers all of them. The
host's GPU probe is shared the same way, one sample at a time; one sample serves every run
asked (`gpu_sample_runs`), each run getting its own snapshot with its own processes marked.

A Session built with `transport=` borrows its Launcher's targets from here and never closes what it borrowed; the
transport's owner (the fleet poller, `--check --all`) closes everything once, at the end.
"""

from __future__ import annotations

import asyncio
from typing import Sequence

from ..backends import launcher_class, launcher_for
from ..config import ConfigError, Profile
from ..gpu.oneshot import OneShotGpuProbe
from ..gpu.sample import GpuSnapshot
from ..gpu.sources import RunRef
from ..remote.agent import open_ops
from ..remote.base import Target, TargetError
from ..remote.ops import RemoteOps
from ..run.launch.launcher import Launcher


def host_key(profile: Profile) -> tuple:
    """What makes two profiles reach the same machine the same way."""
    if profile.host is None:
        return ("local",)
    return ("ssh", profile.ssh_dest)


def target_key(profile: Profile) -> tuple:
    """What makes two profiles' runs live in the same place (machine + container)."""
    return (*host_key(profile), profile.container or "")


class SharedTransport:
    def __init__(self, *, ops_kind: str = "auto") -> None:
        self.ops_kind = ops_kind
        self._hosts: dict[tuple, Target] = {}
        self._targets: dict[tuple, Target] = {}
        self._ops: dict[tuple, RemoteOps] = {}
        self._ops_locks: dict[tuple, asyncio.Lock] = {}
        self._gpu: dict[tuple, OneShotGpuProbe] = {}
        self._gpu_locks: dict[tuple, asyncio.Lock] = {}

    def targets(self, profile: Profile) -> tuple[Target, Target]:
        """(host, run target) of `profile`, the same objects for every profile that shares them.
        Raises ConfigError for a profile whose fields cannot make a target."""
        tkey = target_key(profile)
        target = self._targets.get(tkey)
        if target is not None:
            return self._hosts[host_key(profile)], target
        hkey = host_key(profile)
        backend = launcher_class(profile)
        try:
            host = self._hosts.get(hkey)
            host = host if host is not None else backend.make_host(profile)
            target = backend.make_run_target(profile, host)
        except ValueError as exc:
            raise ConfigError(f"{profile.source}: [profile.{profile.name}]: {exc}") from None
        self._hosts[hkey] = host
        self._targets[tkey] = target
        return host, target

    def launcher(self, profile: Profile) -> Launcher:
        """`profile`'s Launcher over the shared targets."""
        return launcher_for(profile, targets=self.targets(profile))

    async def ops(self, profile: Profile) -> RemoteOps:
        """The one RemoteOps of `profile`'s run target, opened on first use. Raises TargetError."""
        tkey = target_key(profile)
        lock = self._ops_locks.setdefault(tkey, asyncio.Lock())
        async with lock:
            ops = self._ops.get(tkey)
            if ops is None:
                _, target = self.targets(profile)
                ops = self._ops[tkey] = await open_ops(target, prefer=self.ops_kind)
            return ops

    async def gpu_sample(self, profile: Profile, run: RunRef | None) -> GpuSnapshot:
        """One GPU snapshot of `profile`'s host with `run`'s processes marked. Never raises;
        bounded in time by the probe (gpu/oneshot.py)."""
        return (await self.gpu_sample_runs(profile, [run]))[0]

    async def gpu_sample_runs(self, profile: Profile, runs: Sequence[RunRef | None]) -> list[GpuSnapshot]:
        """One read of `profile`'s host's GPUs for all of `runs` (runs on that host): one
        snapshot per run, in order, each with that run's processes marked. Never raises;
        bounded in time as `gpu_sample`."""
        hkey = host_key(profile)
        lock = self._gpu_locks.setdefault(hkey, asyncio.Lock())
        async with lock:
            probe = self._gpu.get(hkey)
            if probe is None:
                host, _ = self.targets(profile)
                probe = self._gpu[hkey] = OneShotGpuProbe(host, python=profile.python)
            return await probe.sample_runs(runs)

    @property
    def host_count(self) -> int:
        return len(self._hosts)

    @property
    def agent_count(self) -> int:
        return len(self._ops)

    async def close(self) -> None:
        """Close every probe, agent and connection, each at most once; never raises."""
        gpus, self._gpu = list(self._gpu.values()), {}
        for probe in gpus:
            await probe.close()   # before the host transport it rides on
        things = [*self._ops.values(), *self._targets.values(), *self._hosts.values()]
        self._ops, self._targets, self._hosts = {}, {}, {}
        seen: set[int] = set()
        for thing in things:
            if id(thing) in seen:
                continue
            seen.add(id(thing))
            try:
                await thing.close()
            except (TargetError, OSError):
                pass   # it is being thrown away; a failing close changes nothing
