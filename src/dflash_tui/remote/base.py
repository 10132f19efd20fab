"""What every target (local shell, SSH host, container on a host) can do.

A target runs an argv, never a shell string we concatenated: the argv is quoted by the
transport (shlex.join for SSH, plain argv for local exec and for `pct exec ID --`). Anything
that needs a shell passes its script as one argv element and its data as positional args.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import AsyncIterator, Sequence

from ..contract.rundir import inert_text


class TargetError(Exception):
    """Base for transport failures. `hint` says what the user can do about it."""

    def __init__(self, message: str, hint: str = "") -> None:
        # A message quotes what the target said (a tool's stderr, a path): inert, one line.
        message, hint = inert_text(message), inert_text(hint)
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class TargetUnreachable(TargetError):
    """Could not connect / authenticate / verify the host key. CLI exit code 3."""


class ContainerNotRunning(TargetError):
    """The host answered but the container is stopped or missing."""


class OpRefused(TargetError):
    """The target answered, and the operation failed THERE: a path that is not a regular file,
    a permission, a bad argument. Not a transport failure (the CLI's exit code 1, not 3)."""


class CommandTimeout(TargetError):
    """A command did not finish in time (e.g. a PTY-like hang holding the channel)."""


# The failures of the way to the run (the host, the container, the command's time), not of the
# run: an observation that meets one is stale, never evidence that the run is gone.
TRANSPORT_FAILURES: tuple[type[TargetError], ...] = (TargetUnreachable, CommandTimeout, ContainerNotRunning)


def is_transport_failure(exc: BaseException) -> bool:
    return isinstance(exc, TRANSPORT_FAILURES)


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    exit_status: int | None   # None when killed by a signal / channel closed without status
    stdout: str
    stderr: str
    seconds: float
    # the signal name ("KILL", "HUP") when the command was killed rather than exiting
    exit_signal: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


class Process(abc.ABC):
    """A long-running command with pipes: used for the remote agent and streams."""

    @abc.abstractmethod
    async def write(self, data: bytes) -> None: ...

    @abc.abstractmethod
    async def readline(self) -> bytes:
        """One line including b"\\n"; b"" at EOF."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Close stdin and terminate if still running."""

    @property
    @abc.abstractmethod
    def returncode(self) -> int | None: ...


class Target(abc.ABC):
    """Somewhere commands run. Implementations: LocalTarget, SSHTarget, ContainerTarget."""

    #: human label for headers and messages, e.g. "local", "root@gpu1", "root@gpu1 pct:200"
    label: str = "target"

    @abc.abstractmethod
    async def run(
        self,
        argv: Sequence[str],
        *,
        input: bytes | None = None,
        timeout: float | None = 30.0,
    ) -> CommandResult:
        """Run argv to completion. Raises TargetUnreachable / CommandTimeout."""

    @abc.abstractmethod
    async def open_process(self, argv: Sequence[str]) -> Process:
        """Start argv with stdin/stdout pipes (stderr collected separately)."""

    async def stream(self, argv: Sequence[str]) -> AsyncIterator[str]:
        """Yield stdout of a long-running command line by line (text, no newline)."""
        proc = await self.open_process(argv)
        try:
            while True:
                line = await proc.readline()
                if not line:
                    return
                yield line.decode("utf-8", "replace").rstrip("\n")
        finally:
            await proc.close()

    async def write_file(self, path: str, data: bytes, *, mode: int = 0o644) -> None:
        """Write a file on the target (atomically: temp + rename, same directory)."""
        script = (
            'set -e; tmp="$1.tmp.$$"; umask 077; cat > "$tmp"; '
            'chmod "$2" "$tmp"; mv -f "$tmp" "$1"'
        )
        res = await self.run(["sh", "-c", script, "sh", path, format(mode, "o")], input=data)
        if not res.ok:
            raise TargetError(
                f"could not write {path} on {self.label}: {res.stderr.strip() or res.exit_status}",
                "check that the directory exists and is writable",
            )

    @property
    def state(self):
        """The state of the connection underneath (SSHTarget's ConnectionState: connected,
        last error, attempts), for the header; None where there is no connection to keep."""
        return None

    async def ensure_running(self) -> None:
        """Raise ContainerNotRunning where commands run in a container that is stopped; a
        machine has nothing to check."""

    async def close(self) -> None:
        """Release connections. Idempotent."""

    async def __aenter__(self) -> "Target":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
