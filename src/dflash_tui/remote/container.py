"""ContainerTarget: run inside a Proxmox LXC (`pct exec ID --`) or a docker container
(`docker exec -i NAME`) reached through another target (local or SSH).

The argv travels as argv: pct and docker pass the words after the container to execve
unchanged, so nothing is re-parsed by a shell on the way in. A reply that is the tool's own
"not running" error is raised as ContainerNotRunning (with the command that starts it) instead
of being mistaken for the command's exit status.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from .base import (CommandResult, ContainerNotRunning, Process, Target, TargetError)

@dataclass(frozen=True)
class Runtime:
    """What one container runtime's host-side tool says and answers; the one place that knows it."""
    kind: str
    name_rule: re.Pattern[str]
    exec_prefix: tuple[str, ...]          # the words before the container's name in `exec`
    exec_after_name: tuple[str, ...]      # and after it, before the argv
    start: str                            # how a person starts the container ("{name}")
    status_argv: tuple[str, ...]          # asks the host whether it runs ("{name}" filled in)
    running_answer: str                   # what status_argv prints when it does
    missing_hint: str                     # the tool is not on the host: what to do
    status_missing_hint: str

    def not_running(self, res: CommandResult, name: str) -> bool:
        """The tool's own "not running" error, not the command's exit status.

        Only the tool's own refusal, word for word: the command inside may print anything.
        pct.pm dies with "container 'ID' not running!" (Proxmox VE 7 and later; its API's
        wording is "CT ID not running"), exiting with Perl's errno. Docker's daemon answers
        "Error response from daemon: ..." with 1; podman (also when installed as `docker`)
        says "Error: ..." with 125, or 255 for a stopped container. A container that does not
        exist (no pct config, no such docker container) counts as not running, with the words.
        """
        if not res.exit_status:
            return False
        err = res.stderr.strip()
        if self.kind == "pct":
            return err in (f"container '{name}' not running!", f"CT {name} not running") or (
                re.fullmatch(rf"Configuration file 'nodes/[^/']+/lxc/{re.escape(name)}\.conf' does not exist",
                             err) is not None)
        if res.exit_status == 1 and err.startswith("Error response from daemon"):
            return "is not running" in err or "No such container" in err
        return res.exit_status in (125, 255) and err.startswith("Error: ") and (
            err.endswith(": container state improper") and "running containers" in err
            or err.endswith(": no such container"))


RUNTIMES: dict[str, Runtime] = {
    "pct": Runtime(
        kind="pct", name_rule=re.compile(r"^[1-9][0-9]{2,8}$"),     # Proxmox VMIDs: 100..999999999
        exec_prefix=("pct", "exec"), exec_after_name=("--",), start="pct start {name}",
        status_argv=("pct", "status", "{name}"), running_answer="status: running",
        missing_hint="is the container on this host? (`pct` runs on the Proxmox node)",
        status_missing_hint="pct:ID needs the Proxmox node itself as `host`"),
    "docker": Runtime(
        kind="docker", name_rule=re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"),   # docker's own rule
        exec_prefix=("docker", "exec", "-i"), exec_after_name=(), start="docker start {name}",
        status_argv=("docker", "inspect", "-f", "{{{{.State.Running}}}}", "{name}"), running_answer="true",
        missing_hint="install docker there, or fix `container`",
        status_missing_hint="install docker there, or fix `container`"),
}


def parse_container_spec(spec: str) -> tuple[str, str]:
    """"pct:200" → ("pct", "200"); "docker:trainer" → ("docker", "trainer")."""
    kind, sep, name = (spec or "").partition(":")
    runtime = RUNTIMES.get(kind)
    if sep and runtime is not None and runtime.name_rule.match(name):
        return kind, name
    raise ValueError(f"container {spec!r} is not understood: write pct:ID (a Proxmox "
                     "container number, e.g. pct:200) or docker:NAME (e.g. docker:trainer)")


class ContainerTarget(Target):
    def __init__(self, inner: Target, spec: str) -> None:
        self.inner = inner
        self.kind, self.name = parse_container_spec(spec)
        self.runtime = RUNTIMES[self.kind]
        self.spec = f"{self.kind}:{self.name}"

    @property
    def label(self) -> str:   # type: ignore[override]
        return f"{self.inner.label} · {self.spec}"

    @property
    def state(self):
        """The connection state of the host underneath (SSHTarget.state), None when local."""
        return self.inner.state

    def prefix(self) -> list[str]:
        return [*self.runtime.exec_prefix, self.name, *self.runtime.exec_after_name]

    def wrap(self, argv: Sequence[str]) -> list[str]:
        if not argv:
            raise ValueError("empty argv")
        return [*self.prefix(), *argv]

    def start_hint(self) -> str:
        return self.runtime.start.format(name=self.name)

    def _tool_missing(self, res: CommandResult) -> bool:
        # 127 alone is not enough: a program missing INSIDE the container also exits 127 through
        # `pct exec`. Only the shell's own complaint about `pct`/`docker` itself counts.
        if res.exit_status != 127 or res.stdout:
            return False
        first = res.stderr.strip().splitlines()[:1]
        return bool(first) and re.search(
            rf"(^|[\s:]){re.escape(self.kind)}: (command not found|not found|No such file or directory)",
            first[0]) is not None

    async def run(self, argv: Sequence[str], *, input: bytes | None = None,
                  timeout: float | None = 30.0) -> CommandResult:
        res = await self.inner.run(self.wrap(argv), input=input, timeout=timeout)
        if self.runtime.not_running(res, self.name):
            raise ContainerNotRunning(f"{self.spec} on {self.inner.label} is not running "
                                      f"({res.stderr.strip()})", self.start_hint())
        if self._tool_missing(res):
            raise TargetError(f"`{self.kind}` not found on {self.inner.label}", self.runtime.missing_hint)
        return CommandResult(tuple(argv), res.exit_status, res.stdout, res.stderr, res.seconds,
                             exit_signal=res.exit_signal)

    async def open_process(self, argv: Sequence[str]) -> Process:
        return await self.inner.open_process(self.wrap(argv))

    async def is_running(self) -> bool:
        """Asks the host (`pct status ID` / `docker inspect`); False for a missing container."""
        argv = [w.format(name=self.name) for w in self.runtime.status_argv]
        res = await self.inner.run(argv, timeout=30)
        if self._tool_missing(res):
            raise TargetError(f"`{self.kind}` not found on {self.inner.label}", self.runtime.status_missing_hint)
        return res.ok and res.stdout.strip() == self.runtime.running_answer

    async def ensure_running(self) -> None:
        if not await self.is_running():
            raise ContainerNotRunning(f"{self.spec} on {self.inner.label} is not running",
                                      self.start_hint())

    async def close(self) -> None:
        await self.inner.close()

    def __repr__(self) -> str:
        return f"ContainerTarget({self.inner!r}, {self.spec!r})"
