"""Launcher: where and how a run is started, found alive, stopped and observed.

One Launcher per profile, chosen by backends/ (`launcher_for`). Everything above it (the launch
sequence in run/launch/launch.py, the canary, Session, the watches) calls these verbs and never asks
which backend it has; a new backend is a module in backends/ that subclasses Launcher, plus its
config keys and tests (docs/ARCHITECTURE.md, "Launcher"). A scheduler's own knowledge stays in
its folder and reaches the layers below through declared slots only: its profile keys
(`CONFIG_KEYS`, parsed at config load into `Profile.scheduler`), what it observed
(`Evidence.scheduler`), its verdict (`judge`, its facts in `Checklist.scheduler`), its run files
(`RUN_FILES`), whether a steady run may be polled slowly (`POLL_SLOWLY_WHEN_STEADY`), whether
it picks the run's nodes (`PLACES_NODES`) and how long its stop may take past the grace
(`STOP_SLACK_S`).

The verbs, and what today's backends (backends/process.py: local, SSH, pct, docker) do:
- `make_host(profile)` (the profile's host over SSH, or this machine, unless a backend says
  otherwise), `make_run_target(profile, host)`: the Targets: the machine commands run
  on (and NVML samples), and where the run dir lives (the same machine, or a container on it);
- `preflight(ops)`: what must hold before a launch (run/launch/preflight.py's checks);
- `detach(run_dir, run_id, placement)`: start RUN_DIR/launch.sh so that nothing holds the
  channel, and return at once with what the start command said (`Detached`), the only evidence
  before launch.json; `placement` (run/launch/request.py) is empty unless `PLACES_NODES`;
- `alive(ev)`: whether the run's process lives (the recorded pid, verified by its start time);
- `stop(ops, run_dir)`: stop.json, then the signals, never a process that is not the run's;
- `observe(ops, run_dir)`: one look at the run dir and the process tree (run/evidence/observe.py);
- `judge(ev, limits)`: the verdict's entry (run/verdict/health.py `evaluate`, unless the backend
  knows more: a scheduler's job states); `vouches(ev)`: whether the backend stands for the
  wrapper's pid where this host cannot see it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Awaitable, Callable

from ...config import Limits, Profile, SchedulerKeys
from ...remote.base import Target
from ...remote.factory import make_host_target
from ...remote.ops import RemoteOps
from ..evidence.memory import LookMemory
from ..evidence.observe import Evidence, gather, process_matches
from ..verdict.checklist import Checklist
from ..verdict.health import STOP_SLACK_S, evaluate
from .preflight import PER_RUN_FILES, GpuSampler, PreflightResult, run_preflight
from .request import Placement
from .stop import StopResult


@dataclass
class Detached:
    """What the start command of a launch said; all None/empty when it printed nothing."""

    exit_status: int | None
    stdout: str = ""
    stderr: str = ""
    pid: int | None = None            # what the backend started (the wrapper's pid, a job id's process)
    via: str | None = None            # how it was started ("setsid", "nohup", ...)
    own_session: bool | None = None   # the wrapper leads its own session (out of the channel's reach)
    error: str | None = None          # the command could not be sent, or did not return in time


class Launcher(ABC):
    # The files that describe one run, put aside to history/ on the next launch.
    RUN_FILES: tuple[str, ...] = PER_RUN_FILES
    # A steady run's poll may slow down while a cheap watch for its exit stands by (fleet/):
    # a backend whose end only its scheduler tells (no exit.json seen first) says False.
    POLL_SLOWLY_WHEN_STEADY: bool = True
    # The scheduler's profile keys (`scheduler = "NAME"`), handed to config's loader by
    # backends/; None for a backend chosen by the common keys alone.
    CONFIG_KEYS: SchedulerKeys | None = None
    # Whether `detach` picks the run's nodes and so can carry out a Placement (avoid a node):
    # a scheduler's backend. A host, a container, SSH `nodes`: the profile says where, and a
    # recovery asks this before it plans an exclusion.
    PLACES_NODES: bool = False
    # How long past stop_grace_s this backend's stop may still be under way (STOPPING until
    # then): the stopper's SIGKILL wait and a poll or two; a scheduler's cancel waits longer.
    STOP_SLACK_S: float = STOP_SLACK_S

    def __init__(self, profile: Profile, host: Target, target: Target) -> None:
        self.profile = profile
        self.host = host
        self.target = target

    # -- choosing and building ------------------------------------------------------------------

    @classmethod
    @abstractmethod
    def handles(cls, profile: Profile) -> bool:
        """Whether this backend runs `profile` (its config keys say so)."""

    @classmethod
    def make_host(cls, profile: Profile) -> Target:
        """The machine: commands, the agent's host, NVML. Raises ValueError naming the bad field.
        The profile's host over SSH, or this machine; a backend that reaches its machine another
        way overrides it."""
        return make_host_target(profile.ssh_dest)

    @classmethod
    @abstractmethod
    def make_run_target(cls, profile: Profile, host: Target) -> Target:
        """Where the run dir lives, reached through `host`. Raises ValueError."""

    @property
    def label(self) -> str:
        return self.target.label

    # -- the verbs ------------------------------------------------------------------------------

    async def preflight(self, ops: RemoteOps | None, *, profile: Profile | None = None,
                        check_live_run: bool = True, gpu_sample: GpuSampler | None = None) -> PreflightResult:
        """The checks a launch must pass; `ops` None when the run target gave none (the checks
        say why). `profile`: this one with another run dir (the canary's). `gpu_sample`: the
        host's GPUs, for the "gpu_health" check."""
        return await run_preflight(profile or self.profile, self.host, self.target, ops,
                                   check_live_run=check_live_run, run_files=self.RUN_FILES,
                                   gpu_sample=gpu_sample)

    @abstractmethod
    async def detach(self, run_dir: str, run_id: str, placement: Placement) -> Detached:
        """Start RUN_DIR/launch.sh (rendered for `run_id`, which its argv names) detached from
        every channel and return at once. Never raises for the transport: that is
        `Detached.error`. `placement`: where a backend that picks the nodes (`PLACES_NODES`)
        must not put the run (a recovery's: the node that failed); empty for every other."""

    def alive(self, ev: Evidence) -> bool:
        """Whether the run launch.json names still runs (its pid, verified by start time)."""
        return ev.launch is not None and process_matches(ev.launch, ev.proc)

    def judge(self, ev: Evidence, limits: Limits, memory: LookMemory | None = None) -> Checklist:
        """The verdict on one observation of this backend's run. `memory`: the watch's memory of
        its looks (`evaluate`'s), None for a one-shot look."""
        return evaluate(ev, limits, stop_slack_s=self.STOP_SLACK_S, memory=memory)

    def vouches(self, ev: Evidence) -> bool:
        """Whether the backend stands for the wrapper's pid, which this host may not see."""
        return False

    def describe_live(self, ev: Evidence) -> str:
        """The live run in words, for a refused launch (`alive(ev)` is true)."""
        return f"run {ev.launch.run_id} (pid {ev.launch.pid})" if ev.launch is not None else "a run"

    def job_argv(self, argv: list[str]) -> list[str]:
        """What launch.sh runs for the program `argv` (a scheduler's backend: its task launcher
        around it, one task per node)."""
        return argv

    @abstractmethod
    async def stop(self, ops: RemoteOps, run_dir: str, *, grace_s: float,
                   requested_by: str | None = None,
                   before_signal: Callable[[], Awaitable[None]] | None = None) -> StopResult:
        """Stop the run of `run_dir`: stop.json first, then by the recorded identity only;
        `before_signal` is awaited just before the first signal (or cancel) is sent."""

    async def observe(self, ops: RemoteOps, run_dir: str, **kw) -> Evidence:
        """One observation (run/evidence/observe.py `gather`'s keywords: attempt, tracker, rank, local_stop)."""
        return await gather(ops, run_dir, **kw)
