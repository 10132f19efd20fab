"""Profile fields → targets: backends/ (the launch backends) build theirs from these."""

from __future__ import annotations

from .base import Target
from .local import LocalTarget
from .ssh import SSHTarget


def make_host_target(host: str | None = None, user: str | None = None, port: int | None = None,
                     identity_file: str | None = None, known_hosts: str | None = None,
                     ssh_config: str | None = None) -> Target:
    """The machine: LocalTarget when `host` is empty, else an SSHTarget.
    Raises ValueError with a one-line message naming the bad field."""
    if not host:
        extra = [n for n, v in (("user", user), ("port", port), ("identity_file", identity_file),
                                ("known_hosts", known_hosts)) if v]
        if extra:
            raise ValueError(f"{', '.join(extra)} given without host: set host (or remove "
                             f"{'them' if len(extra) > 1 else 'it'}) for a local run")
        return LocalTarget()
    if port is not None and (not isinstance(port, int) or isinstance(port, bool)
                             or not 1 <= port <= 65535):
        raise ValueError(f"port must be a number from 1 to 65535, not {port!r}")
    return SSHTarget(host, user=user or None, port=port, identity_file=identity_file or None,
                     known_hosts=known_hosts or None, ssh_config=ssh_config or None)
