"""TerminalTarget: this machine, each command run on a fresh pseudo-terminal as its controlling
terminal (stdin, stdout and stderr on it), as `ssh -t host CMD` runs a command. A container
tool under it (`pct exec`) then attaches the command to a terminal of its own, and tears that
terminal down when the command returns: the incident's way of losing a background job.
Long-lived channels (open_process: the agent) and commands fed on stdin stay on pipes, as
LocalTarget's.
"""

from __future__ import annotations

import asyncio
import os
import pty
import select
import signal
import subprocess
import time
import tty
from typing import Sequence

from dflash_tui.remote.base import CommandResult, CommandTimeout
from dflash_tui.remote.local import LocalTarget


def _hangup_as_a_login_session() -> None:
    """SIGHUP's default action, as a login session has it: a test run started under `nohup`
    (SIGHUP ignored, inherited through exec) would otherwise let the hung-up job live on."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _run_on_terminal(argv: Sequence[str], env: dict | None, timeout: float | None) -> tuple[int, bytes]:
    master, slave = pty.openpty()
    tty.setraw(slave)      # no CRLF translation: the output reads as it would over pipes
    try:
        proc = subprocess.Popen(["setsid", "--ctty", *argv], stdin=slave, stdout=slave, stderr=slave,
                                env=env, close_fds=True, preexec_fn=_hangup_as_a_login_session)
    finally:
        os.close(slave)
    out = bytearray()
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            if deadline is not None and time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise CommandTimeout(f"{argv[0]} did not finish within {timeout:.0f}s on a terminal")
            if not select.select([master], [], [], 0.2)[0]:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:      # EIO: every holder of the terminal closed it
                break
            if not chunk:
                break
            out += chunk
        return proc.wait(), bytes(out)
    finally:
        os.close(master)


class TerminalTarget(LocalTarget):
    label = "local-tty"

    async def run(self, argv: Sequence[str], *, input: bytes | None = None,
                  timeout: float | None = 30.0) -> CommandResult:
        if input is not None:   # a file written through stdin: pipes, as over `ssh` without -t
            return await super().run(argv, input=input, timeout=timeout)
        t0 = time.monotonic()
        rc, out = await asyncio.to_thread(_run_on_terminal, list(argv), self._env, timeout)
        text = out.decode("utf-8", "replace")
        return CommandResult(tuple(argv), rc, text, "", time.monotonic() - t0)
