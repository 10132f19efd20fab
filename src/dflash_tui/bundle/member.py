"""One member of an evidence bundle, or one that could not be taken (and why)."""

from __future__ import annotations

import dataclasses
import enum
import json
import re
from dataclasses import dataclass
from typing import Any

_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")


@dataclass
class Member:
    """What goes into the archive as `name`: its raw bytes, before cleaning."""

    name: str                  # its path inside the archive ("stacks/raw.json")
    what: str                  # what it is, in words, for the manifest
    data: bytes
    taken_at: float            # epoch seconds, this machine's clock
    where: str                 # where it was read: the run's target, its host, this machine


@dataclass
class Missing:
    """A member that is not in the archive: never taken, or left out, and why."""

    name: str
    what: str
    reason: str


def safe_name(name: str) -> str:
    """`name` as a path of plain segments: every byte outside [A-Za-z0-9._-] is `_`, no empty,
    `.` or `..` segment, never absolute: nothing in a listing of the archive can act on a
    terminal or write outside the folder it is unpacked in; at most 100 characters (a
    plain ustar name)."""
    parts = [_UNSAFE_NAME.sub("_", p)[:100] for p in name.split("/")]
    parts = [p if p not in ("", ".", "..") else "_" for p in parts]
    joined = "/".join(parts) or "_"
    return joined if len(joined) <= 100 else joined[:50] + "_" + joined[-49:]   # a plain tar name


def jsonable(value: Any) -> Any:
    """A dataclass, enum, tuple or set tree as plain JSON values (anything else: its str)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def json_bytes(value: Any) -> bytes:
    """Indented JSON, ASCII only: an escape byte in a value is written as `\\u001b`, text."""
    return json.dumps(jsonable(value), indent=1, ensure_ascii=True, sort_keys=False).encode("ascii")
