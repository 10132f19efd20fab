"""The one way the watcher's SQLite file is opened (the change store and the recovery log share
it, each its own tables): a reader through a read-only URI, a writer in WAL mode with full
syncs, every connection with one busy timeout, and an empty in-memory stand-in for a reader
that finds its table not created yet. Each store keeps its own schema and error lines."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

BUSY_TIMEOUT_S = 5.0


def sqlite_uri(path: Path, mode: str) -> str:
    """`path` as an SQLite URI: percent-encoded, so no character of its name is read as URI
    syntax (`#`, `?`, `%41`), and no name starting with `file:` is read as a URI either."""
    return f"{Path(os.path.abspath(path)).as_uri()}?mode={mode}"


def not_a_regular_file(path: Path) -> bool:
    """True for something at `path` that is no regular file: a FIFO would block the open."""
    return path.exists() and not path.is_file()


def open_reader(path: Path) -> sqlite3.Connection:
    """Read only: never creates the file, never writes it."""
    return sqlite3.connect(sqlite_uri(path, "ro"), uri=True, timeout=BUSY_TIMEOUT_S)


def open_writer(path: Path) -> sqlite3.Connection:
    """Creates the file if missing; WAL, so readers never wait on the writer; full syncs, so
    a committed row survives a power cut."""
    db = sqlite3.connect(sqlite_uri(path, "rwc"), uri=True, timeout=BUSY_TIMEOUT_S)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    return db


def open_from_thread(path: Path) -> sqlite3.Connection:
    """A short connection of another thread (a connection belongs to the thread that opened
    it), with the writer's full syncs."""
    db = sqlite3.connect(sqlite_uri(path, "rwc"), uri=True, timeout=BUSY_TIMEOUT_S)
    db.execute("PRAGMA synchronous=FULL")
    return db


def empty_stand_in(schema: str) -> sqlite3.Connection:
    """What a reader reads while the writer has not created its tables yet: the same tables,
    empty, in memory."""
    db = sqlite3.connect(":memory:")
    db.executescript(schema)
    return db
