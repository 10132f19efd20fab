"""This machine's own memory of what it sent: the launch command's exit status and output, and
a stop request whose stop.json the target could not take (its disk full).

The target cannot tell us that the transport ran nothing (the incident: `pct exec` exited 0 and
no shell ever ran, so no file on the target records the attempt). This machine can: every
launch stores its command result here, under the state directory, and a later `--check` (another
process) shows it next to NEVER STARTED.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from ..contract.rundir import SchemaError, StopRecord, atomic_write_text, build_record

from ..config import Profile, state_dir


@dataclass
class LaunchAttempt:
    run_id: str
    run_dir: str
    target: str                     # target label
    local_time: float               # this machine's clock when the launch command returned
    target_time: float | None       # the target's clock right after it, if it answered
    exit_status: int | None         # of the launch command (None: killed / no status)
    stdout: str = ""
    stderr: str = ""
    pid: int | None = None          # what the detach command printed, if anything
    via: str | None = None          # "setsid" | "nohup"
    own_session: bool | None = None  # the detached child was seen leading its own session
    wrapper_written: bool = True    # launch.sh was confirmed on the target before the launch
    error: str = ""                 # transport error instead of a result (timeout, unreachable)
    # The host GPUs' energy counters at the preflight (GPU index as text -> mJ; None: no
    # counter); None: launched without the preflight's GPU sample (run/verdict/energy.py).
    gpu_energy_mj: dict[str, int | None] | None = None

    def transport_summary(self) -> str:
        """One line: what the transport said about the launch command."""
        if self.error:
            return f"launch command failed: {self.error}"
        if not self.wrapper_written:
            err = " ".join(self.stderr.split())[:200]
            status = "no exit status" if self.exit_status is None else f"exit status {self.exit_status}"
            return (f"writing launch.sh: {status}, stderr {err!r}" + ("" if err else " (empty)")
                    + ", yet the file is not there")
        status = "no exit status" if self.exit_status is None else f"exit status {self.exit_status}"
        err = " ".join(self.stderr.split())[:200]
        printed = f"pid {self.pid} via {self.via}" if self.pid else "no pid (the detach shell did not run)"
        return f"launch command: {status}, stderr {err!r}" + ("" if err else " (empty)") + f", printed {printed}"


def _path_for(profile: Profile) -> Path:
    key = hashlib.sha256(f"{profile.where()}\0{profile.run_dir}".encode()).hexdigest()[:16]
    return state_dir() / "attempts" / f"{profile.name}-{key}.json"


def save_attempt(profile: Profile, attempt: LaunchAttempt) -> None:
    path = _path_for(profile)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(asdict(attempt), sort_keys=True))
    except OSError:
        # Losing this record only costs the transport detail in a later --check; the launch
        # itself and this process's own verdict do not depend on it.
        pass


def load_attempt(profile: Profile) -> LaunchAttempt | None:
    try:
        data = json.loads(_path_for(profile).read_text(encoding="utf-8"))
        names = {f.name for f in fields(LaunchAttempt)}
        attempt = LaunchAttempt(**{k: v for k, v in data.items() if k in names})
    except (OSError, ValueError, TypeError):
        return None
    return attempt if attempt.run_dir == profile.run_dir else None


def _stop_path_for(profile: Profile) -> Path:
    return _path_for(profile).with_suffix(".stop.json")


def save_local_stop(profile: Profile, record: StopRecord) -> None:
    """Remember a stop request here when stop.json could not be written on the target, so the
    run that ends of it still reads STOPPED, to this process and to a later `--check`."""
    path = _stop_path_for(profile)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(asdict(record), sort_keys=True))
    except OSError:
        pass   # only the verdict's wording of the end depends on it; the stop itself is done


def load_local_stop(profile: Profile) -> StopRecord | None:
    try:
        return build_record(StopRecord, json.loads(_stop_path_for(profile).read_text(encoding="utf-8")),
                            "the local stop record")
    except (OSError, ValueError, SchemaError, TypeError):
        return None
