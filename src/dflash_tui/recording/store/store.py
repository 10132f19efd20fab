"""ChangeStore: the watcher's record of verdict changes, one SQLite file (stdlib sqlite3).

Schema (recording/README.md, "The watcher"), `PRAGMA user_version` = SCHEMA_VERSION:

    changes(id INTEGER PRIMARY KEY, profile TEXT, run_id TEXT, time REAL, state TEXT,
            previous TEXT, cause TEXT, check_id TEXT, evidence TEXT)   -- evidence: JSON
    index changes_by_run(profile, run_id, time)

Durability: WAL with synchronous=FULL, and one transaction per change. A change is committed
before `record` returns, so a SIGKILL of the watcher loses nothing it recorded; FULL (not
NORMAL) because under WAL, NORMAL may also lose the newest commits on a power cut, and
changes are rare enough (a handful per run per day) that one fsync each costs nothing.

Retention: `prune` deletes changes older than `retention_days` and, per profile and run id,
all but the newest `max_rows_per_run`; the watcher calls it at start and once an hour.
Several readers (`--timeline`, the dashboard) may read while one watcher writes (WAL). One
writer per store: the writer holds an exclusive flock on `<store>.lock` (its pid and host
inside) for as long as it is open, so a second watcher is refused in one line naming the first.

The file is only as trusted as its directory: it is opened by path (never parsed as an SQLite
URI: a `#` or `%41` in its name is just a character), another program's database or a newer
schema is refused in one line, a damaged page is one line when it is read, and a row whose
values are not of their column's kind (BLOB or text for a number, an infinite time, a state
the watcher does not record) is skipped and counted (`skipped`), never an error. The
states are read to their type (dflash_tui/verdicts.py) here, once.
"""

from __future__ import annotations

import fcntl
import math
import os
import socket
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from ...config import ConfigError, state_dir
from ...verdicts import State
from .change import Evidence, VerdictChange, inert, recorded_state
from .settings import WatchSettings
from .sqlite_file import empty_stand_in, not_a_regular_file, open_reader, open_writer

SCHEMA_VERSION = 1
STORE_NAME = "watch.sqlite3"

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
# A time the watcher can have written: an epoch from 1970 to the year 9999 (what localtime takes).
MAX_TIME = 253402300799.0
_TIME_RANGE = (0.0, MAX_TIME)
_MOVE_IT = "move it away or choose another with --store"


class StoreError(ConfigError):
    """The store cannot be used: one line naming the file, what is wrong and the fix."""


def default_store_path() -> Path:
    return state_dir() / STORE_NAME


def store_path(settings: WatchSettings, override: str | None = None) -> Path:
    """--store, else [watch] store, else $XDG_STATE_HOME/dflash-tui/watch.sqlite3."""
    chosen = override or settings.store
    return Path(os.path.expanduser(chosen)) if chosen else default_store_path()


def _text(v: Any, limit: int) -> str:
    """A stored text, inert; a BLOB or a number where text belongs is read as what it says."""
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    elif not isinstance(v, str):
        v = "" if v is None else str(v)
    return inert(v, limit)


def _row(r: tuple) -> VerdictChange | None:
    """A stored change, every text inert again (the file is only as trusted as its directory);
    None for a row whose id or time is not a number the watcher can have written, or whose
    state (or state before) is none it writes."""
    rid, t = r[0], r[3]
    if not isinstance(rid, int) or isinstance(t, (str, bytes)) or t is None:
        return None
    if not (math.isfinite(t) and _TIME_RANGE[0] <= t <= _TIME_RANGE[1]):
        return None
    state, before = recorded_state(_text(r[4], 20)), _text(r[5], 20)
    previous = recorded_state(before) if before else None
    if state is None or (before and previous is None):
        return None
    return VerdictChange(id=rid, profile=_text(r[1], 80), run_id=_text(r[2], 80), time=float(t),
                         state=state, previous=previous, cause=_text(r[6], 400),
                         check=_text(r[7], 40), evidence=Evidence.from_json(r[8]))


def _word(state: State | None) -> str:
    """A state as the store writes it ("" for none)."""
    return state.value if state is not None else ""


class ChangeStore:
    def __init__(self, path: str | os.PathLike[str], *, retention_days: float = 30.0,
                 max_rows_per_run: int = 1000, readonly: bool = False) -> None:
        """Raises StoreError (one line) for a file that cannot be opened as the store, and, for
        a writer, when another writer holds the store."""
        self.path = Path(path)
        self.retention_days = retention_days
        self.max_rows_per_run = max_rows_per_run
        self.skipped = 0              # rows read and skipped as damaged, since it was opened
        self._lock_fd: int | None = None
        if not_a_regular_file(self.path):
            raise StoreError(f"{self.path}: not a regular file; {_MOVE_IT}")
        try:
            if readonly:
                self._db = open_reader(self.path)
                if not self._check_schema():
                    # A watcher has just created the file and not yet its table: empty, for now.
                    self._db.close()
                    self._db = empty_stand_in(_SCHEMA)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._lock()
                self._db = open_writer(self.path)
                self._check_schema()
                # The table and its version in one transaction: a reader sees both or neither.
                self._db.executescript(f"BEGIN; {_SCHEMA} PRAGMA user_version={SCHEMA_VERSION}; COMMIT;")
            self._db.execute(f"SELECT {_COLUMNS} FROM changes LIMIT 1").fetchall()
        except StoreError:
            self._abandon()
            raise
        except sqlite3.Error as exc:
            self._abandon()
            raise StoreError(f"{self.path}: not a usable watch store ({exc}); {_MOVE_IT}") from None
        except OSError as exc:
            self._abandon()
            raise StoreError(f"{self.path}: cannot create the watch store there ({exc.strerror}); "
                             "choose another with --store or [watch] store") from None

    def _check_schema(self) -> bool:
        """True for a watch store of this schema; False for an empty database (no table yet);
        StoreError for a newer dflash-tui's store or another program's database."""
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        tables = self._db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path}: a store of a newer dflash-tui (schema {version}; this one "
                             f"reads {SCHEMA_VERSION}); upgrade dflash-tui, or point --store at another file")
        if version == 0 and not tables:
            return False
        columns = [r[1] for r in self._db.execute("PRAGMA table_info(changes)")]
        # Version 0 with this table: made by a dflash-tui that set the version apart from it.
        if version not in (0, SCHEMA_VERSION) or columns != _COLUMNS.split(", "):
            raise StoreError(f"{self.path}: not a watch store (another schema: user_version {version}, "
                             f"{'no changes table' if not columns else 'other columns'}); {_MOVE_IT}")
        return True

    def _lock(self) -> None:
        """One writer per store: an exclusive flock on `<store>.lock`, held while open."""
        lock = self.path.with_name(self.path.name + ".lock")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            said = os.pread(fd, 300, 0).decode("utf-8", "replace").split()
            os.close(fd)
            pid = said[0] if said and said[0].isascii() and said[0].isdigit() else "unknown"
            host = inert(said[1], 80) if len(said) > 1 else "unknown"
            raise StoreError(f"{self.path}: another watcher writes this store (pid {pid} on {host}, "
                             f"holding {lock.name}); stop it first, or give this one another --store") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
        self._lock_fd = fd

    def _abandon(self) -> None:
        """An open that failed: close what it had opened."""
        db = getattr(self, "_db", None)
        if db is not None:
            db.close()
        self._unlock()

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)      # closing the descriptor releases the flock
            self._lock_fd = None

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """A damaged page (or a file changed under the reader) is one line, never a traceback."""
        try:
            yield
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot read the watch store ({exc}); {_MOVE_IT}") from None

    def _rows(self, sql: str, args: Any = ()) -> list[VerdictChange]:
        with self._reading():
            rows = self._db.execute(sql, args).fetchall()
        out = []
        for r in rows:
            c = _row(r)
            if c is None:
                self.skipped += 1
            else:
                out.append(c)
        return out

    def close(self) -> None:
        self._db.close()
        self._unlock()

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
                (change.profile, change.run_id, change.time, change.state.value, _word(change.previous),
                 change.cause, change.check, change.evidence.to_json()))
        return VerdictChange(**{**change.__dict__, "id": cur.lastrowid})

    def prune(self, now: float | None = None) -> int:
        """Apply the retention limits; how many changes were deleted. The newest change of
        every profile survives the age limit: it is where the run stands."""
        now = time.time() if now is None else now
        cutoff = now - self.retention_days * 86400.0
        with self._reading(), self._db:
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
        rows = self._rows(
            f"SELECT {_COLUMNS} FROM changes WHERE id IN (SELECT max(id) FROM changes GROUP BY profile)")
        return {c.profile: c for c in rows}

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
        return self._rows(sql + " ORDER BY id", args)

    def count(self) -> int:
        with self._reading():
            return self._db.execute("SELECT count(*) FROM changes").fetchone()[0]
