"""LaunchRequest: what one launch is asked to do, built once by whoever asks (the CLI, the run
view, the watcher's recovery) and handed whole down the floors to the launch sequence
(run/launch/launch.py), which gives the Launcher its `Placement`.

Every floor between the caller and the Launcher (RunWatch, Session, NodesSession, launch_run)
passes the request on and reads only the fields it acts on, so a new launch option is a field
here, the line that reads it, and the caller that sets it; one the wrapper carries out is read
by run/wrapper.py as a `ProgramOptions` field (`program_options` below) and rendered there.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from ..wrapper import ProgramOptions

# Why a run on the profile's `nodes` (or on one host) cannot be placed elsewhere: no scheduler
# picks its nodes, the profile lists them.
OWN_NODES = "the profile's nodes are its own list"


@dataclass(frozen=True)
class Placement:
    """What a backend needs to place the run (`Launcher.detach`). Only a backend that picks the
    nodes (`Launcher.PLACES_NODES`) can carry one out; empty for every other launch."""

    exclude: tuple[str, ...] = ()   # nodes the run must not get (a recovery's: the node that failed)

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    def words(self) -> str:
        """ "excluding node n2" ("" when empty) """
        return f"excluding node {', '.join(self.exclude)}" if self.exclude else ""


@dataclass(frozen=True)
class LaunchRequest:
    relaunch: bool = False        # stop the live run first (else a live run refuses the launch)
    preflight: bool = True        # run/launch/preflight.py's checks before anything is touched
    resume: bool = False          # the bundled trainer continues from the newest checkpoint
    restart: int = 0              # the program's DFLASH_RESTART (the recovery counts its relaunches)
    # The checkpoint a recovery resumes from (its path and step): the program's
    # DFLASH_RESUME_FROM / DFLASH_RESUME_STEP, and `{resume_from}` in its argv. "": none.
    resume_from: str = ""
    resume_step: int | None = None
    # After a DIVERGED run, its first bad step (DFLASH_DIVERGED_AT): the batches from the
    # checkpoint to it are the diverged window, which the bundled trainer passes over.
    diverged_at: int | None = None
    gpus: bool = False            # the launch's report carries the "gpus" check (one GPU sample)
    placement: Placement = Placement()
    argv: tuple[str, ...] | None = None   # what launch.sh runs; None: the profile's trainer
    run_dir: str | None = None            # None: the profile's

    def program_options(self) -> ProgramOptions:
        """What the wrapper renders of this request for the program's start (run/wrapper.py)."""
        return ProgramOptions(restart=self.restart, resume_from=self.resume_from, resume_step=self.resume_step,
                              diverged_at=self.diverged_at)

    def refused_placement(self, places_nodes: bool) -> str | None:
        """Why a launcher that does (not) pick nodes cannot carry out this request's placement
        (one line), or None. A placement is never dropped in silence."""
        if not self.placement or places_nodes:
            return None
        return f"cannot launch {self.placement.words()}: {OWN_NODES}"


RESUME_TOKEN = "{resume_from}"


def with_resume_from(argv: list[str], resume_from: str) -> list[str]:
    """`argv` with each `{resume_from}` replaced by the checkpoint's path ("" when none)."""
    return [a.replace(RESUME_TOKEN, resume_from) for a in argv]


def as_request(request: LaunchRequest | None, fields_: dict[str, Any]) -> LaunchRequest:
    """`request`, or one made of its fields given as keywords (`launch(preflight=False)`), not both."""
    if request is None:
        return LaunchRequest(**fields_)
    if fields_:
        raise TypeError(f"a LaunchRequest or its fields, not both ({', '.join(fields_)})")
    return request


def relaunching(request: LaunchRequest | None, fields_: dict[str, Any]) -> LaunchRequest:
    """`as_request`, as a relaunch."""
    return replace(as_request(request, fields_), relaunch=True)
