"""The checks of a config table's values that config.py's profiles and the rooms' sections
([watch], [notify], [recover]) share: known keys, seconds, whole numbers, flags, lists of strings
and of words, and a value shown in one short line. Each problem is a `TableError` phrased as the
one line the user reads; config's loader adds the file's path. Stdlib and words.py only.
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterable, Iterator

from .words import did_you_mean

# C0 controls, DEL and the C1 controls (U+0080-U+009F: "\x9b" is a CSI to a terminal).
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class TableError(ValueError):
    """A value of a config table, already phrased as the one line the user reads (without the
    file's path, which the loader adds)."""


def show_value(value: Any, width: int = 80) -> str:
    """A value as one short line for a message: repr, with huge numbers and long strings cut."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"<a {value.bit_length()}-bit integer>"
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def known_keys(where: str, table: dict[str, Any], keys: Iterable[str], width: int = 80) -> None:
    """Every key of `table` is one of `keys`, else the first unknown one, named with its fix."""
    keys = tuple(keys)
    unknown = sorted(set(table) - set(keys))
    if unknown:
        raise TableError(f"{where}: unknown key {show_value(unknown[0], width)}{did_you_mean(unknown[0], keys)} "
                         f"(known: {', '.join(keys)})")


def seconds(where: str, key: str, value: Any, low: float, high: float, *, what: str = "a number",
            width: int = 80) -> float:
    """A finite number from `low` to `high` (a TOML integer or float, never a boolean)."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float))
    if not ok or not math.isfinite(value) or not low <= value <= high:
        raise TableError(f"{where}: {key} = {show_value(value, width)}: must be {what} from {low:g} to {high:g}")
    return float(value)


def whole(where: str, key: str, value: Any, low: int, high: int, width: int = 80) -> int:
    """An integer from `low` to `high` (never a boolean)."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise TableError(f"{where}: {key} = {show_value(value, width)}: must be an integer from {low} to {high}")
    return value


def flag(where: str, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TableError(f"{where}: {key} must be true or false")
    return value


def one_line_strings(where: str, key: str, value: Any) -> tuple[str, ...]:
    """A list of non-empty strings without a control character."""
    if not isinstance(value, list) or not all(isinstance(v, str) and v and not CONTROL_RE.search(v)
                                              for v in value):
        raise TableError(f"{where}: {key} must be a list of non-empty one-line strings")
    return tuple(value)


def words(where: str, key: str, value: Any, known: tuple[str, ...], width: int = 80) -> tuple[str, ...]:
    """A list of words each one of `known`, without repeats, in the list's order."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TableError(f"{where}: {key} must be a list of words, e.g. {list(known[:2])}")
    bad = [v for v in value if v not in known]
    if bad:
        raise TableError(f"{where}: {key}: unknown word {show_value(bad[0], width)}{did_you_mean(bad[0], known)} "
                         f"(pick from {', '.join(known)})")
    return tuple(dict.fromkeys(value))


def profile_tables(where: str, table: dict[str, Any], profiles: Iterable[str]) -> Iterator[tuple[str, str, Any]]:
    """A section's `[NAME.profile.P]` tables as (P, "[NAME.profile.P]", its table), each P checked
    to be a profile of the file as it comes (where = "[NAME]")."""
    tables = table.get("profile", {})
    if not isinstance(tables, dict):
        raise TableError(f"{where}: profile must hold tables, e.g. {where[:-1]}.profile.gpu1]")
    names = tuple(profiles)
    for name, sub in tables.items():
        sub_where = f"{where[:-1]}.profile.{name}]"
        if name not in names:
            raise TableError(f"{sub_where}: no [profile.{name}] to apply it to{did_you_mean(name, names)}; "
                             "fix the name")
        yield name, sub_where, sub
