"""The program's environment from the profile: `env = {K = "V"}` and `env_file` (secrets).

Both reach the program the same way, and never through a file of the run: the launcher sends
them as `NAME=VALUE` lines on the stdin of its start command, whose shell exports them before it
starts the wrapper (`with_env_from_stdin`), so the wrapper and the program inherit them. They are
not in launch.sh, launch.json's argv, the command line a `ps` shows, the change store or any
output. `env_file` is a file on the machine dflash-tui runs on, read at each launch (a changed
secret takes effect at the next launch), never copied.

A value the wrapper would otherwise set (PYTHONUNBUFFERED, PYTHONFAULTHANDLER, COLUMNS, ...)
is the environment's own and wins; the names the wrapper owns (DFLASH_RUN_ID, DFLASH_RUN_DIR,
DFLASH_RESTART) are refused.
"""

from __future__ import annotations

import os
from typing import Iterable, Mapping

from ...env_entry import env_entry_problem
from ...small_file import SmallFileRefused, read_small_file

MAX_ENV_FILE_BYTES = 256 << 10

# $@: the command to start with the environment. Each stdin line is one NAME=VALUE; `export
# "$_e"` takes the value as it is (no expansion, no word splitting).
ENV_FROM_STDIN_SCRIPT = 'while IFS= read -r _e; do export "$_e"; done; exec "$@"'


class EnvError(ValueError):
    """A bad env entry or env_file, as the one line the user reads."""


def parse_env_file(text: str, path: str) -> dict[str, str]:
    """NAME=VALUE lines (`export ` before the name allowed; blank lines and `#` comments
    skipped; a value in matching single or double quotes loses them, nothing else is expanded)."""
    out: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        name, eq, value = line.partition("=")
        name = name.strip()
        if not eq:
            raise EnvError(f"env_file {path} line {n}: no '='; write NAME=VALUE")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        why = env_entry_problem(name, value)
        if why:
            raise EnvError(f"env_file {path} line {n}: {why}")
        out[name] = value
    return out


_REFUSED = {"directory": "is a directory; point env_file at a file of NAME=VALUE lines",
            "special": "is not a regular file; point env_file at a file of NAME=VALUE lines",
            "changed": "is not a regular file; point env_file at a file of NAME=VALUE lines",
            "too_big": f"is too big for an env file (at most {MAX_ENV_FILE_BYTES} bytes)",
            "unreadable": "permission denied; make it readable by you (chmod u+r)",
            "not_utf8": "is not UTF-8 text; write NAME=VALUE lines"}


def read_env_file(path: str) -> dict[str, str]:
    """The env_file's variables, read now; an EnvError naming the file for any problem."""
    try:
        text = read_small_file(path, MAX_ENV_FILE_BYTES)
    except FileNotFoundError:
        raise EnvError(f"env_file {path} does not exist; create it or fix the path in the profile") from None
    except SmallFileRefused as no:
        why = _REFUSED.get(no.problem, f"cannot be read: {no.detail or no.problem}")
        raise EnvError(f"env_file {path} {why}") from None
    return parse_env_file(text or "", path)


def launch_environment(env: Iterable[tuple[str, str]], env_file: str | None) -> dict[str, str]:
    """The variables a launch gives its program: the profile's `env`, then `env_file`'s (read
    now). A name in both is refused: which one was meant cannot be told."""
    out = dict(env)
    if env_file:
        secret = read_env_file(os.path.expanduser(env_file))
        both = sorted(set(out) & set(secret))
        if both:
            raise EnvError(f"{both[0]} is set in both env and env_file {env_file}; keep one")
        out.update(secret)
    return out


def env_input(env: Mapping[str, str]) -> bytes:
    """The start command's stdin: one NAME=VALUE line each."""
    return "".join(f"{k}={v}\n" for k, v in env.items()).encode("utf-8")


def with_env_from_stdin(argv: list[str]) -> list[str]:
    """`argv`, started by a shell that first exports the NAME=VALUE lines of its stdin."""
    return ["sh", "-c", ENV_FROM_STDIN_SCRIPT, "dflash-env", *argv]
