"""[notify]: which changes notify, where, and when (notify.py applies it, sender.py delivers).
This room's section of the config file (config.Section, registered in config_file.SECTIONS).

    [notify]
    urls = ["ntfy://ntfy.sh/my-runs"]  # Apprise URLs
    on = ["failing", "FINISHED"]       # NOTIFY_EVENTS; default all
    hold_s = 30                        # a new state lasts this long before it notifies
    unreachable_after_s = 300
    retry_max_s = 300                  # a failed send's backoff cap

    [notify.profile.NAME]              # one profile: `enabled`, and URLs besides [notify]'s
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ...config import Section
from ...table_values import TableError, flag, known_keys, one_line_strings, profile_tables, seconds
from ...verdicts import TargetState, Verdict
from ...words import did_you_mean

# `[notify] on`: any failing verdict, each verdict of a run that ended well by its own word
# (FINISHED, STOPPED), a target that does not answer, a run healthy again, and a `warning`: a
# check that foresees a failure (the disk runway, a torn checkpoint, the memory runway) turned warn or fail while
# the verdict stands (recording/store/change.py FORESIGHT_CHECKS).
NOTIFY_EVENTS: tuple[str, ...] = ("failing", *(v.value for v in Verdict if v.ended_well),
                                  TargetState.UNREACHABLE.value, "recovered", "warning")

_WHERE = "[notify]"
_KEYS = ("urls", "on", "hold_s", "unreachable_after_s", "retry_max_s", "profile")
_PROFILE_KEYS = ("enabled", "urls")
# Each duration and its ceiling (from 0).
_SECONDS = (("hold_s", 86400.0), ("unreachable_after_s", 7 * 86400.0), ("retry_max_s", 86400.0))


@dataclass(frozen=True)
class NotifyProfile:
    enabled: bool = True               # false: this profile never notifies
    urls: tuple[str, ...] = ()         # Apprise URLs notified besides [notify]'s own


@dataclass(frozen=True)
class NotifySettings:
    urls: tuple[str, ...] = ()         # Apprise URLs ("ntfy://...", "mailto://...", "json://...")
    on: tuple[str, ...] = NOTIFY_EVENTS  # which transitions notify
    hold_s: float = 30.0               # a new state must last this long before it notifies
    unreachable_after_s: float = 300.0  # UNREACHABLE notifies once it lasted this long
    retry_max_s: float = 300.0         # a failed send is retried with backoff capped here
    profiles: dict[str, NotifyProfile] = field(default_factory=dict)   # [notify.profile.NAME]

    def for_profile(self, name: str) -> tuple[str, ...]:
        """The URLs a change of `name`'s run goes to (none when it is switched off)."""
        own = self.profiles.get(name, NotifyProfile())
        return (*self.urls, *own.urls) if own.enabled else ()


def parse_notify(table: dict[str, Any], profiles: tuple[str, ...]) -> NotifySettings:
    """The [notify] table; [notify.profile.NAME] must name one of `profiles`. A TableError names
    the key and what is wrong."""
    known_keys(_WHERE, table, _KEYS)
    out = NotifySettings()
    if "urls" in table:
        out = replace(out, urls=one_line_strings(_WHERE, "urls", table["urls"]))
    if "on" in table:
        on = one_line_strings(_WHERE, "on", table["on"])
        bad = [x for x in on if x not in NOTIFY_EVENTS]
        if bad:
            raise TableError(f"{_WHERE}: on: unknown event {bad[0]!r}{did_you_mean(bad[0], NOTIFY_EVENTS)} "
                             f"(pick from {', '.join(NOTIFY_EVENTS)})")
        out = replace(out, on=on)
    for key, high in _SECONDS:
        if key in table:
            out = replace(out, **{key: seconds(_WHERE, key, table[key], 0.0, high)})
    per: dict[str, NotifyProfile] = {}
    for name, where, sub in profile_tables(_WHERE, table, profiles):
        if not isinstance(sub, dict):
            raise TableError(f"{where} must be a table")
        known_keys(where, sub, _PROFILE_KEYS)
        enabled = flag(where, "enabled", sub.get("enabled", True))
        per[name] = NotifyProfile(enabled, one_line_strings(where, "urls", sub["urls"]) if "urls" in sub else ())
    return replace(out, profiles=per)


NOTIFY_SECTION: Section[NotifySettings] = Section("notify", NotifySettings(), parse_notify)
