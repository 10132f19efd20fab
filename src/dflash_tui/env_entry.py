"""What makes NAME=VALUE an environment variable a profile may give its program (`env`,
`env_file`): checked when the config is loaded (config.py) and when env_file is read at launch
(run/launch/environment.py)."""

from __future__ import annotations

import re

ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Set by the wrapper for every run (run/wrapper.py): a profile's value would be overwritten.
WRAPPER_OWNS = ("DFLASH_RUN_ID", "DFLASH_RUN_DIR", "DFLASH_RESTART")


def env_entry_problem(name: object, value: object) -> str | None:
    """Why NAME=VALUE cannot be given to a program (None: it can). Never repeats the value: it
    may be a secret."""
    if not isinstance(name, str) or not ENV_NAME_RE.fullmatch(name):
        return f"{name!r:.60} is not a variable name (letters, digits and '_', not starting with a digit)"
    if name in WRAPPER_OWNS:
        return f"{name} is set by the wrapper for every run; choose another name"
    if not isinstance(value, str):
        return f"{name}'s value is not a string (quote it)"
    if "\n" in value or "\r" in value or "\x00" in value:
        return f"{name}'s value holds a newline or NUL character, which cannot be passed; remove it"
    return None
