"""The RunWatch seam: `open_watch(profile)` is the watch of its run, on one host or several nodes."""

from __future__ import annotations

from ..config import Profile
from ..run.launch.request import LaunchRequest, Placement
from .transport import SharedTransport
from .session import Session
from .base import (ActionInFlight, LaunchResult, Listener, RunWatch, canary_words, changed, stop_words,
                   unreachable_report)
from .files import LineFollower
from .host import STEADY_INTERVAL_S, HostWatch
from .nodes import NodesWatch

__all__ = ["ActionInFlight", "HostWatch", "LaunchRequest", "LaunchResult", "LineFollower", "Listener", "NodesWatch",
           "Placement", "RunWatch", "STEADY_INTERVAL_S", "canary_words", "changed", "open_watch", "stop_words",
           "unreachable_report"]


def open_watch(profile: Profile, *, interval: float = 1.0, poll_timeout: float | None = None,
               transport: SharedTransport | None = None, steady_interval: float | None = None) -> RunWatch:
    """The watch of `profile`'s run. `transport`: a single host borrows its targets and agent
    from it (the fleet); the nodes of a run on several have their own. `steady_interval`: how
    often `reports` looks at a steady run on one host (watch/host.py). Raises ConfigError."""
    if profile.is_multinode:
        return NodesWatch(profile, interval=interval, poll_timeout=poll_timeout)
    return HostWatch(Session(profile, transport=transport), interval=interval, poll_timeout=poll_timeout,
                     steady_interval=steady_interval)
