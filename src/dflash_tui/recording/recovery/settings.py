"""[recover]: the watcher's restart policy, as the config file says it (recording/recovery/README.md).
This room's section of the config file (config.Section, registered in config_file.SECTIONS);
applied by recovery.py (the watcher is the one actor), decided by recover_policy.py (pure).

    [recover]                      # off when absent
    on = ["CRASHED", "STALLED", "KILLED", "PREEMPTED", "NODE FAIL", "TIMEOUT"]
    max_restarts = 3               # within window_s; then give up
    window_s = 21600
    backoff_s = 30                 # before the first restart; doubled each time, capped at 30 min
    no_progress_restarts = 2       # this many restarts in a row without a new best step: give up
    give_up_on = ["cuda_oom", "syntax_error", "import_error", "missing_file"]
    resume = true                  # a relaunch resumes from a checkpoint (the bundled trainer with --resume)

    [recover.profile.NAME]         # the same keys for one profile, and `enabled`

The verdicts a restart may follow, and the default ones, are the verdicts' own to say
(dflash_tui/verdicts.py `restartable`, `restarted_by_default`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ...config import Section
from ...table_values import TableError, flag, known_keys, profile_tables, seconds, whole, words
from ...verdicts import Verdict

# The words `on` may name, in the verdicts' order (what an unknown word's message lists).
RESTARTABLE: tuple[str, ...] = tuple(v.value for v in Verdict if v.restartable)
DEFAULT_ON: tuple[Verdict, ...] = tuple(v for v in Verdict if v.restarted_by_default)
# Failures a restart cannot fix (recover_policy.py `unfixable`), each one a word here.
UNFIXABLE = ("cuda_oom", "syntax_error", "import_error", "missing_file")
BACKOFF_CAP_S = 1800.0

_KEYS = ("enabled", "on", "max_restarts", "window_s", "backoff_s", "no_progress_restarts", "give_up_on", "resume")
# This section's messages show a value in at most 60 characters.
_WIDTH = 60


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


def _policy(where: str, table: Any, base: RecoverPolicy) -> tuple[RecoverPolicy, bool]:
    """`base` with `table`'s keys applied, and whether the table leaves recovery enabled."""
    if not isinstance(table, dict):
        raise TableError(f"{where} must be a table")
    known_keys(where, table, _KEYS, _WIDTH)
    out = base
    if "on" in table:
        out = replace(out, on=tuple(Verdict(w) for w in words(where, "on", table["on"], RESTARTABLE, _WIDTH)))
    if "give_up_on" in table:
        out = replace(out, give_up_on=words(where, "give_up_on", table["give_up_on"], UNFIXABLE, _WIDTH))
    for key in ("max_restarts", "no_progress_restarts"):
        if key in table:
            out = replace(out, **{key: whole(where, key, table[key], 0, 1000, _WIDTH)})
    if "window_s" in table:
        out = replace(out, window_s=seconds(where, "window_s", table["window_s"], 1.0, 366 * 86400.0,
                                            what="a number of seconds", width=_WIDTH))
    if "backoff_s" in table:
        out = replace(out, backoff_s=seconds(where, "backoff_s", table["backoff_s"], 0.0, BACKOFF_CAP_S,
                                             what="a number of seconds", width=_WIDTH))
    resume = flag(where, "resume", table.get("resume", out.resume))
    enabled = flag(where, "enabled", table.get("enabled", True))
    return replace(out, resume=resume), enabled


def parse_recover(table: dict[str, Any], profiles: tuple[str, ...]) -> RecoverSettings:
    """The [recover] table. Recovery is on for every profile when [recover] holds a key of its
    own, for a profile when [recover.profile.NAME] exists (NAME one of `profiles`); `enabled =
    false` turns it off (a profile's own table wins). A TableError names the key and what is wrong."""
    own = {k: v for k, v in table.items() if k != "profile"}
    default, enabled = _policy("[recover]", own, RecoverPolicy())
    per: dict[str, RecoverPolicy | None] = {}
    for name, where, sub in profile_tables("[recover]", table, profiles):
        policy, on = _policy(where, sub, default)
        per[name] = policy if on else None
    return RecoverSettings(default if (own and enabled) else None, per)


RECOVER_SECTION: Section[RecoverSettings] = Section("recover", RecoverSettings(), parse_recover)
