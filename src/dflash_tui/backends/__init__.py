"""Launch backends: which Launcher (run/launch/launcher.py) runs a profile, building it, and
every backend's profile keys (SCHEDULERS) for config's loader (config_file.py hands them over).

A new backend is one folder here (a Launcher subclass whose `handles(profile)` recognises its
config keys, which it declares as `CONFIG_KEYS`) and one line in BACKENDS, before the backends
it must win over (docs/ARCHITECTURE.md, "Launcher"). Nothing outside backends/ imports a
backend's folder.
"""

from __future__ import annotations

from ..config import ConfigError, Profile, SchedulerKeys
from ..remote.base import Target
from ..run.launch.launcher import Launcher
from .process import ContainerLauncher, LocalLauncher, SSHLauncher
from .slurm.launcher import SlurmLauncher

# First match wins: a scheduler's keys before the host/container ones a Slurm profile also has.
BACKENDS: tuple[type[Launcher], ...] = (SlurmLauncher, ContainerLauncher, SSHLauncher, LocalLauncher)
# The schedulers' profile keys, for config's loader (config sits below the backends).
SCHEDULERS: tuple[SchedulerKeys, ...] = tuple(cls.CONFIG_KEYS for cls in BACKENDS if cls.CONFIG_KEYS is not None)


def launcher_class(profile: Profile) -> type[Launcher]:
    for cls in BACKENDS:
        if cls.handles(profile):
            return cls
    raise ConfigError(f"{profile.source}: [profile.{profile.name}]: no launch backend runs this profile")


def launcher_for(profile: Profile, *, targets: tuple[Target, Target] | None = None) -> Launcher:
    """The profile's Launcher over `targets` (host, run target), else over new ones.
    Raises ConfigError for fields that cannot make a target."""
    cls = launcher_class(profile)
    if targets is None:
        try:
            host = cls.make_host(profile)
            targets = (host, cls.make_run_target(profile, host))
        except ValueError as exc:
            raise ConfigError(f"{profile.source}: [profile.{profile.name}]: {exc}") from None
    return cls(profile, *targets)
