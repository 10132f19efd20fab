"""The watcher as a systemd user service: the unit file (shipped beside this module) filled in
with this install's command line, written to ~/.config/systemd/user/, enabled and started."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Sequence

UNIT_NAME = "dflash-tui-watch.service"
SYSTEMCTL_TIMEOUT_S = 30.0


def unit_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "systemd" / "user"


def _escape(ch: str) -> str:
    if ch in '\\"':
        return "\\" + ch
    if ch in "%$":                      # a specifier, a variable: taken literally
        return ch * 2
    if ch.isprintable():
        return ch
    # A newline or CR would end the line and start a directive of its own.
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def systemd_quote(arg: str) -> str:
    """One ExecStart argument: double-quoted, with systemd's specifiers (%) and variables ($)
    taken literally and every control character as systemd's C escape (systemd.service(5),
    "Command lines"), so the argument stays one argument on one line."""
    return '"' + "".join(_escape(ch) for ch in arg) + '"'


def watch_command(*, config: str | None, profile: str | None, store: str | None) -> list[str]:
    """This install's `dflash-tui --watch` with absolute paths (a unit has no working directory)."""
    exe = shutil.which("dflash-tui") if not sys.argv[0].endswith("dflash-tui") else sys.argv[0]
    argv = [os.path.abspath(exe)] if exe else [sys.executable, "-m", "dflash_tui"]
    argv.append("--watch")
    if config:
        argv += ["--config", os.path.abspath(os.path.expanduser(config))]
    if profile:
        argv += ["--profile", profile]
    if store:
        argv += ["--store", os.path.abspath(os.path.expanduser(store))]
    return argv


def unit_text(argv: Sequence[str]) -> str:
    template = files(__package__).joinpath(UNIT_NAME).read_text()
    return template.replace("@EXEC_START@", " ".join(systemd_quote(a) for a in argv))


@dataclass(frozen=True)
class Installed:
    path: Path
    started: bool
    message: str       # one line: what happened, or why the service was not started


def install(argv: Sequence[str]) -> Installed:
    """Write the unit, then `systemctl --user daemon-reload` and `enable --now` it."""
    directory = unit_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / UNIT_NAME
    tmp = path.with_suffix(".tmp")
    tmp.write_text(unit_text(argv))
    os.replace(tmp, path)
    systemctl = shutil.which("systemctl")
    if systemctl is None:
        return Installed(path, False, f"wrote {path}, but systemd --user is not available here "
                                      "(no systemctl); run the watcher another way: " + shlex.join(argv))
    for args in (["daemon-reload"], ["enable", "--now", UNIT_NAME]):
        try:
            out = subprocess.run([systemctl, "--user", *args], capture_output=True, text=True,
                                 timeout=SYSTEMCTL_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Installed(path, False, f"wrote {path}, but systemctl --user {args[0]} failed ({exc})")
        if out.returncode != 0:
            why = " ".join((out.stderr or out.stdout).split())[:200] or f"exit {out.returncode}"
            return Installed(path, False, f"wrote {path}, but systemd --user is not available here "
                                          f"(systemctl --user {args[0]}: {why})")
    return Installed(path, True, f"installed and started {UNIT_NAME} ({path}); "
                                 f"its log: journalctl --user -u {UNIT_NAME.removesuffix('.service')}")
