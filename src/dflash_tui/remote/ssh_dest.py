"""SSHDest: where and as whom a host is reached over SSH (stdlib only: config imports it without
loading asyncssh)."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class SSHDest:
    """Where and as whom a host is reached over SSH, as a profile names it: one record from the
    profile to the connection. `host` None is this machine (remote/factory.py then refuses the
    other fields)."""

    host: str | None
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    known_hosts: str | None = None
    ssh_config: str | None = None

    def on(self, host: str) -> "SSHDest":
        """The same settings for another host (a node of a run on several)."""
        return replace(self, host=host)
