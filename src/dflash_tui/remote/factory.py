"""Profile fields → targets: backends/ (the launch backends) build theirs from these."""

from __future__ import annotations

from dataclasses import replace

from .base import Target
from .local import LocalTarget
from .ssh import SSHTarget
from .ssh_dest import SSHDest


def make_host_target(dest: SSHDest) -> Target:
    """The machine: LocalTarget when `dest` names no host, else an SSHTarget.
    Raises ValueError with a one-line message naming the bad field."""
    if not dest.host:
        extra = [n for n, v in (("user", dest.user), ("port", dest.port), ("identity_file", dest.identity_file),
                                ("known_hosts", dest.known_hosts)) if v]
        if extra:
            raise ValueError(f"{', '.join(extra)} given without host: set host (or remove "
                             f"{'them' if len(extra) > 1 else 'it'}) for a local run")
        return LocalTarget()
    port = dest.port
    if port is not None and (not isinstance(port, int) or isinstance(port, bool)
                             or not 1 <= port <= 65535):
        raise ValueError(f"port must be a number from 1 to 65535, not {port!r}")
    # An empty string in the profile is no setting.
    return SSHTarget(replace(dest, user=dest.user or None, identity_file=dest.identity_file or None,
                             known_hosts=dest.known_hosts or None, ssh_config=dest.ssh_config or None))
