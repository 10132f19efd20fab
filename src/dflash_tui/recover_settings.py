"""[recover]: the watcher's restart policy, as the config file says it (docs/ARCHITECTURE.md,
"Recovery"). Parsed and checked here; applied by recording/recovery/recovery.py (the watcher is the
one actor), decided by recording/recovery/recover_policy.py (pure).

    [recover]                      # off when absent
    on = ["CRASHED", "STALLED", "KILLED", "PREEMPTED", "NODE FAIL", "TIMEOUT"]
    max_restarts = 3               # within window_s; then give up
    window_s = 21600
    backoff_s = 30                 # before the first restart; doubled each time, capped at 30 min
    no_progress_restarts = 2       # this many restarts in a row without a new best step: give up
    give_up_on = ["cuda_oom", "syntax_error", "import_error", "missing_file"]
    resume = true                  # a relaunch resumes from a checkpoint (the bundled trainer with --resume)

    [recover.profile.NAME]         # the same keys for one profile, and `enabled`

Below config.py (which wraps RecoverSettingsError into its ConfigError with the file's path);
the verdicts a restart may follow, and the default ones, are the verdicts' own to say
(dflash_tui/verdicts.py `restartable`, `restarted_by_default`).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field, replace
from typing import Any

from .verdicts import Verdict

# The words `on` may name, in the verdicts' order (what an unknown word's message lists).
RESTARTABLE: tuple[str, ...] = tuple(v.value for v in Verdict if v.restartable)
DEFAULT_ON: tuple[Verdict, ...] = tuple(v for v in Verdict if v.restarted_by_default)
# Failures a restart cannot fix (recording/recovery/recover_policy.py `unfixable`), each one a word here.
UNFIXABLE = ("cuda_oom", "syntax_error", "import_error", "missing_file")
BACKOFF_CAP_S = 1800.0

_KEYS = ("enabled", "on", "max_restarts", "window_s", "backoff_s", "no_progress_restarts", "give_up_on", "resume")


class RecoverSettingsError(ValueError):
    """One line naming the key and what is wrong (config.py adds the file's path)."""


@dataclass(frozen=True)
class RecoverPolicy:
    on: tuple[Verdict, ...] = DEFAULT_ON
    max_restarts: int = 3
    window_s: float = 21600.0
    backoff_s: float = 30.0
    no_progress_restarts: int = 2
    give_up_on: tuple[str, ...] = UNFIXABLE
    resume: bool = True

    def backoff(self, restarts_before: int) -> float:
        """The wait before restart number `restarts_before + 1`: doubled each time, capped."""
        return min(BACKOFF_CAP_S, self.backoff_s * 2.0 ** min(restarts_before, 30))


@dataclass(frozen=True)
class RecoverSettings:
    default: RecoverPolicy | None = None                                  # None: off
    profiles: dict[str, RecoverPolicy | None] = field(default_factory=dict)   # [recover.profile.NAME]

    def for_profile(self, name: str) -> RecoverPolicy | None:
        """The policy of `name`'s run; None when recovery is off for it."""
        return self.profiles[name] if name in self.profiles else self.default


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _count(where: str, key: str, value: Any, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise RecoverSettingsError(f"{where}: {key} = {_show(value)}: must be an integer from 0 to {high}")
    return value


def _seconds(where: str, key: str, value: Any, low: float, high: float) -> float:
    ok = not isinstance(value, bool) and isinstance(value, (int, float))
    if not ok or not math.isfinite(value) or not low <= value <= high:
        raise RecoverSettingsError(f"{where}: {key} = {_show(value)}: must be a number of seconds "
                                   f"from {low:g} to {high:g}")
    return float(value)


def _close(word: Any, known: Any) -> str:
    """"; did you mean 'max_restarts'?" for a misspelt word (words.did_you_mean's rule; this
    module sits beside words.py, so it asks difflib itself)."""
    if not isinstance(word, str) or not word or len(word) > 64:
        return ""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _words(where: str, key: str, value: Any, known: tuple[str, ...]) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RecoverSettingsError(f"{where}: {key} must be a list of words, e.g. {list(known[:2])}")
    bad = [v for v in value if v not in known]
    if bad:
        raise RecoverSettingsError(f"{where}: {key}: unknown word {_show(bad[0])}{_close(bad[0], known)} "
                                   f"(pick from {', '.join(known)})")
    return tuple(dict.fromkeys(value))


def _policy(where: str, table: Any, base: RecoverPolicy, keys: tuple[str, ...]) -> tuple[RecoverPolicy, bool]:
    """`base` with `table`'s keys applied, and whether the table leaves recovery enabled."""
    if not isinstance(table, dict):
        raise RecoverSettingsError(f"{where} must be a table")
    unknown = sorted(set(table) - set(keys))
    if unknown:
        raise RecoverSettingsError(f"{where}: unknown key {_show(unknown[0])}{_close(unknown[0], keys)} "
                                   f"(known: {', '.join(keys)})")
    out = base
    if "on" in table:
        out = replace(out, on=tuple(Verdict(w) for w in _words(where, "on", table["on"], RESTARTABLE)))
    if "give_up_on" in table:
        out = replace(out, give_up_on=_words(where, "give_up_on", table["give_up_on"], UNFIXABLE))
    if "max_restarts" in table:
        out = replace(out, max_restarts=_count(where, "max_restarts", table["max_restarts"], 1000))
    if "no_progress_restarts" in table:
        out = replace(out, no_progress_restarts=_count(where, "no_progress_restarts", table["no_progress_restarts"], 1000))
    if "window_s" in table:
        out = replace(out, window_s=_seconds(where, "window_s", table["window_s"], 1.0, 366 * 86400.0))
    if "backoff_s" in table:
        out = replace(out, backoff_s=_seconds(where, "backoff_s", table["backoff_s"], 0.0, BACKOFF_CAP_S))
    for flag in ("resume", "enabled"):
        if flag in table and not isinstance(table[flag], bool):
            raise RecoverSettingsError(f"{where}: {flag} must be true or false")
    if "resume" in table:
        out = replace(out, resume=table["resume"])
    return out, table.get("enabled", True)


def recover_settings(table: Any, profile_names: set[str] | frozenset[str] | list[str]) -> RecoverSettings:
    """The [recover] table (None when the file has none). Recovery is on for every profile when
    [recover] holds a key of its own, for a profile when [recover.profile.NAME] exists; `enabled =
    false` turns it off (a profile's own table wins)."""
    if table is None:
        return RecoverSettings()
    if not isinstance(table, dict):
        raise RecoverSettingsError("[recover] must be a table")
    own = {k: v for k, v in table.items() if k != "profile"}
    default, enabled = _policy("[recover]", own, RecoverPolicy(), _KEYS)
    per: dict[str, RecoverPolicy | None] = {}
    tables = table.get("profile", {})
    if not isinstance(tables, dict):
        raise RecoverSettingsError("[recover]: profile must hold tables, e.g. [recover.profile.gpu1]")
    for name, pt in tables.items():
        where = f"[recover.profile.{name}]"
        if name not in profile_names:
            raise RecoverSettingsError(f"{where}: no [profile.{name}] to apply it to{_close(name, profile_names)}; "
                                       "fix the name")
        policy, on = _policy(where, pt, default, _KEYS)
        per[name] = policy if on else None
    return RecoverSettings(default if (own and enabled) else None, per)
