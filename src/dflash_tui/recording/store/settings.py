"""[watch]: the watcher's settings (`dflash-tui --watch`): where the store is, how often each
target is polled, how long changes are kept. This room's section of the config file
(config.Section, registered in config_file.SECTIONS); read by the store (`store_path`), the
daemon and `--timeline`.

    [watch]
    store = "~/watch.sqlite3"      # default: $XDG_STATE_HOME/dflash-tui/watch.sqlite3
    interval_s = 1                 # 0.1 to 3600
    retention_days = 30            # 0.001 to 36500
    max_rows_per_run = 1000        # 10 to 10000000
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

from ...config import Section
from ...table_values import CONTROL_RE, TableError, known_keys, seconds, whole

_WHERE = "[watch]"
_KEYS = ("store", "interval_s", "retention_days", "max_rows_per_run")


@dataclass(frozen=True)
class WatchSettings:
    store: str | None = None           # the SQLite file; None: $XDG_STATE_HOME/dflash-tui/watch.sqlite3
    interval_s: float = 1.0            # how often each target is polled
    retention_days: float = 30.0       # changes older than this are deleted
    max_rows_per_run: int = 1000       # per profile and run id, the newest this many are kept


def parse_watch(table: dict[str, Any], profiles: tuple[str, ...]) -> WatchSettings:
    """The [watch] table; a TableError names the key and what is wrong."""
    known_keys(_WHERE, table, _KEYS)
    out = WatchSettings()
    if "store" in table:
        store = table["store"]
        if not isinstance(store, str) or not store or CONTROL_RE.search(store):
            raise TableError(f"{_WHERE}: store must be a file path")
        out = replace(out, store=os.path.expanduser(store))
    if "interval_s" in table:
        out = replace(out, interval_s=seconds(_WHERE, "interval_s", table["interval_s"], 0.1, 3600))
    if "retention_days" in table:
        out = replace(out, retention_days=seconds(_WHERE, "retention_days", table["retention_days"], 0.001, 36500))
    if "max_rows_per_run" in table:
        out = replace(out, max_rows_per_run=whole(_WHERE, "max_rows_per_run", table["max_rows_per_run"],
                                                  10, 10_000_000))
    return out


WATCH_SECTION: Section[WatchSettings] = Section("watch", WatchSettings(), parse_watch)
