"""ChangeStore: the watcher's record of verdict changes, one SQLite file (stdlib sqlite3).

Schema (docs/ARCHITECTURE.md, "The watcher"), `PRAGMA user_version` = SCHEMA_VERSION:

    changes(id INTEGER PRIMARY KEY, profile TEXT, run_id TEXT, time REAL, state TEXT,
            previous TEXT, cause TEXT, check_id TEXT, evidence TEXT)   -- evidence: JSON
    index changes_by_run(profile, run_id, time)

Durability: WAL with synchronous=FULL, and one transaction per change. A change is committed
before `record` returns, so a SIGKILL of the watcher loses nothing it recorded; FULL (not
NORMAL) because under WAL, NORMAL may also lose the newest commits on a power cut, and
changes are rare enough (a handful per run per day) that one fsync each costs nothing.

Retention: `prune` deletes changes older than `retention_days` and, per profile and run id,
all but the newest `max_rows_per_run`; the watcher calls it at start and once an hour.
Several readers (`--timeline`, the dashboard) may read while one watcher writes (WAL).
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import replace
from pathlib import Path

from ..config import ConfigError, WatchSettings, state_dir
from .change import Evidence, VerdictChange, inert

SCHEMA_VERSION = 1
STORE_NAME = "watch.sqlite3"
BUSY_TIMEOUT_S = 5.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS changes (
    id INTEGER PRIMARY KEY,
    profile TEXT NOT NULL,
    run_id TEXT NOT NULL,
    time REAL NOT NULL,
    state TEXT NOT NULL,
    previous TEXT NOT NULL,
    cause TEXT NOT NULL,
    check_id TEXT NOT NULL,
    evidence TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS changes_by_run ON changes(profile, run_id, time);
"""
_COLUMNS = "id, profile, run_id, time, state, previous, cause, check_id, evidence"


def default_store_path() -> Path:
    return state_dir() / STORE_NAME


def store_path(settings: WatchSettings, override: str | None = None) -> Path:
    """--store, else [watch] store, else $XDG_STATE_HOME/dflash-tui/watch.sqlite3."""
    chosen = override or settings.store
    return Path(os.path.expanduser(chosen)) if chosen else default_store_path()


def _row(r: tuple) -> VerdictChange:
    """A stored change, every text inert again: the file is only as trusted as its directory."""
    try:
        ev = Evidence.from_json(r[8])
    except (ValueError, TypeError):   # a row damaged outside the watcher: its words still count
        ev = Evidence()
    ev = replace(ev, rate_unit=inert(ev.rate_unit, 20), stuck_at=inert(ev.stuck_at, 200),
                 traceback=tuple(inert(line, 200) for line in ev.traceback),
                 ranks=tuple(inert(str(w), 200) for w in ev.ranks))
    return VerdictChange(id=r[0], profile=inert(r[1], 80), run_id=inert(r[2], 80), time=r[3],
                         state=inert(r[4], 20), previous=inert(r[5], 20), cause=inert(r[6]),
                         check=inert(r[7], 40), evidence=ev)


class ChangeStore:
    def __init__(self, path: str | os.PathLike[str], *, retention_days: float = 30.0,
                 max_rows_per_run: int = 1000, readonly: bool = False) -> None:
        """Raises ConfigError (one line) for a file that cannot be opened as the store."""
        self.path = Path(path)
        self.retention_days = retention_days
        self.max_rows_per_run = max_rows_per_run
        try:
            if readonly:
                self._db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
                if not self._db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                    # A watcher has just created the file and not yet its table: empty, for now.
                    self._db.close()
                    self._db = sqlite3.connect(":memory:")
                    self._db.executescript(_SCHEMA)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
                version = self._db.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise ConfigError(f"{self.path}: a store of a newer dflash-tui (schema {version}); "
                                      "upgrade, or point --store at another file")
                with self._db:
                    self._db.executescript(_SCHEMA)
                    self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self._db.execute("SELECT count(*) FROM changes").fetchone()
        except sqlite3.Error as exc:
            raise ConfigError(f"{self.path}: not a usable watch store ({exc}); "
                              "move it away or choose another with --store") from None
        except OSError as exc:
            raise ConfigError(f"{self.path}: cannot create the watch store there ({exc.strerror}); "
                              "choose another with --store or [watch] store") from None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "ChangeStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- writing ----------------------------------------------------------------------------
    def record(self, change: VerdictChange) -> VerdictChange:
        """Commit `change` (durable on return); the change with its row id."""
        with self._db:
            cur = self._db.execute(
                "INSERT INTO changes (profile, run_id, time, state, previous, cause, check_id, evidence) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (change.profile, change.run_id, change.time, change.state, change.previous,
                 change.cause, change.check, change.evidence.to_json()))
        return VerdictChange(**{**change.__dict__, "id": cur.lastrowid})

    def prune(self, now: float | None = None) -> int:
        """Apply the retention limits; how many changes were deleted. The newest change of
        every profile survives the age limit: it is where the run stands."""
        now = time.time() if now is None else now
        cutoff = now - self.retention_days * 86400.0
        with self._db:
            n = self._db.execute(
                "DELETE FROM changes WHERE time < ? AND id NOT IN "
                "(SELECT max(id) FROM changes GROUP BY profile)", (cutoff,)).rowcount
            n += self._db.execute(
                "DELETE FROM changes WHERE id IN (SELECT id FROM (SELECT id, row_number() OVER "
                "(PARTITION BY profile, run_id ORDER BY id DESC) AS k FROM changes) WHERE k > ?)",
                (self.max_rows_per_run,)).rowcount
        return n

    # -- reading ----------------------------------------------------------------------------
    def last_states(self) -> dict[str, VerdictChange]:
        """Per profile, its newest change: where each run stood when the watcher last saw it."""
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM changes WHERE id IN (SELECT max(id) FROM changes GROUP BY profile)")
        return {c.profile: c for c in map(_row, rows)}

    def changes(self, profile: str | None = None, *, run_id: str | None = None,
                since: float | None = None) -> list[VerdictChange]:
        """Changes oldest first, of one profile (and run) or all."""
        where, args = [], []
        for col, val in (("profile", profile), ("run_id", run_id)):
            if val is not None:
                where.append(f"{col} = ?")
                args.append(val)
        if since is not None:
            where.append("time >= ?")
            args.append(since)
        sql = f"SELECT {_COLUMNS} FROM changes" + (f" WHERE {' AND '.join(where)}" if where else "")
        return [_row(r) for r in self._db.execute(sql + " ORDER BY id", args)]

    def count(self) -> int:
        return self._db.execute("SELECT count(*) FROM changes").fetchone()[0]
