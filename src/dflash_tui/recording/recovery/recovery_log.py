"""RecoveryLog: every action of the watcher's recovery, committed before it is taken or as soon
as it is done, in the watch store's SQLite file (its own table beside `changes`):

    recovery(id INTEGER PRIMARY KEY, profile TEXT, time REAL, action TEXT, run_id TEXT,
             attempt INTEGER, detail TEXT)   -- detail: JSON

`run_id` is the run that failed (the one the action answers); `attempt` the restart's number.
Actions, in order: `planned` (the decision to restart: `at`, the failure), `stopped` (a live
run stopped first), `launching` (committed BEFORE the launch), `launched` (the new run id,
what it resumed from), or `gave_up` (the reason), or `superseded` (a person launched another
run meanwhile), or `cancelled` (a person's stop while the restart was pending: `by`, `was`). So a watcher killed at any point and started again knows where it was: it
never plans the same failure twice, and a `launching` whose new run is there is recorded as
launched rather than launched again (the launch claim, run/launch/claim.py, holds across the two).
Durable like the ChangeStore: WAL, synchronous=FULL, one transaction per action.

Two processes write it: the watcher, and a person's stop (`cancel`, another process: the CLI's
--stop, the dashboard's `s`). Each of the watcher's steps commits only on top of the action it
acted on (`record(..., after=)`, in one IMMEDIATE transaction), and a cancel only on top of an
action in flight: whichever commits first wins, so a restart is either cancelled before its
launch is committed, or its watcher finds the cancel when it records the launch and stops the
run it launched.

Beside it, the recovery's outbox: the notification an action announces (`launched`, `gave_up`)
is committed in the same transaction as the action, and marked sent once every URL took it:

    outbox(id INTEGER PRIMARY KEY, action_id INTEGER, profile TEXT, time REAL, event TEXT,
           title TEXT, body TEXT, sent REAL)   -- sent: NULL while pending

So a watcher killed between the action and the send does not lose the notification: the next
one sends what is pending, once. No URL is stored (a URL is a credential): a pending notice goes
to the profile's URLs in the config of the watcher that sends it.
"""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ...config import ConfigError
from ...verdicts import verdict_named
from ..store.change import inert
from ..store.sqlite_file import empty_stand_in, not_a_regular_file, open_from_thread, open_reader, open_writer
from ..store.store import MAX_TIME
from .recover_policy import Attempt, Failure

PLANNED, STOPPED, LAUNCHING, LAUNCHED, GAVE_UP, SUPERSEDED, CANCELLED = (
    "planned", "stopped", "launching", "launched", "gave_up", "superseded", "cancelled")
IN_FLIGHT = (PLANNED, STOPPED, LAUNCHING)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS recovery (
    id INTEGER PRIMARY KEY,
    profile TEXT NOT NULL,
    time REAL NOT NULL,
    action TEXT NOT NULL,
    run_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS recovery_by_profile ON recovery(profile, id);
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY,
    action_id INTEGER NOT NULL,
    profile TEXT NOT NULL,
    time REAL NOT NULL,
    event TEXT NOT NULL,
    title TEXT NOT NULL,
    body TEXT NOT NULL,
    sent REAL
);
CREATE INDEX IF NOT EXISTS outbox_pending ON outbox(sent, id);
"""
OUTBOX_KEEP_S = 86400.0   # a notice pending longer than this is not sent any more (the sender's give-up)


@dataclass(frozen=True)
class Notice:
    """A recovery's notification, as the outbox keeps it."""

    profile: str
    time: float
    event: str                    # "restarted" | "gave_up" | "cancelled"
    title: str
    body: str
    id: int | None = None


@dataclass(frozen=True)
class Action:
    profile: str
    time: float
    action: str
    run_id: str
    attempt: int
    detail: dict[str, Any] = field(default_factory=dict)
    id: int | None = None

    @property
    def failure(self) -> Failure | None:
        """The failure the action answered, its verdict read from its word; None where the log
        holds none it could have written."""
        f = self.detail.get("failure")
        if not isinstance(f, dict):
            return None
        state = verdict_named(f.get("state"))
        if state is None:
            return None
        try:
            return Failure(**{**{k: f.get(k) for k in Failure.__dataclass_fields__}, "state": state})
        except TypeError:
            return None


def failure_json(f: Failure) -> dict[str, Any]:
    return {k: getattr(f, k) for k in Failure.__dataclass_fields__}


def _sane(r: tuple) -> bool:
    t, attempt = r[2], r[5]
    return (isinstance(r[0], int) and isinstance(t, (int, float)) and math.isfinite(t) and 0 <= t <= MAX_TIME
            and isinstance(attempt, int) and 0 <= attempt < 2 ** 31)


def _row(r: tuple) -> Action:
    try:
        detail = json.loads(r[6])
    except (ValueError, TypeError, RecursionError):
        detail = {}
    if not isinstance(detail, dict):
        detail = {}
    # The file is only as trusted as its directory: the words in it are made inert again.
    detail = {k: inert(v) if isinstance(v, str) else v for k, v in detail.items()}
    text = [x.decode("utf-8", "replace") if isinstance(x, bytes) else x if isinstance(x, str) else "" for x in
            (r[1], r[3], r[4])]
    return Action(inert(text[0], 80), float(r[2]), inert(text[1], 20), inert(text[2], 80), r[5], detail, r[0])


class RecoveryLog:
    def __init__(self, path: str | Path, *, readonly: bool = False) -> None:
        self.path = Path(path)
        try:
            if readonly:
                if not_a_regular_file(self.path):
                    raise ConfigError(f"{self.path}: not a regular file; move it away or choose another with --store")
                self._db = open_reader(self.path)
                if not self._db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'recovery'").fetchone()[0]:
                    self._db.close()   # no recovery yet in this store: an empty log
                    self._db = empty_stand_in(_SCHEMA)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._db = open_writer(self.path)
                with self._db:
                    self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise ConfigError(f"{self.path}: not a usable watch store ({exc}); "
                              "move it away or choose another with --store") from None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "RecoveryLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _query(self, where: str, args: tuple) -> list[Action]:
        """The actions, each read as it can be: a row whose time or attempt is not a number the
        watcher can have written is left out; a damaged page is one line (ConfigError)."""
        sql = f"SELECT id, profile, time, action, run_id, attempt, detail FROM recovery {where} ORDER BY id"
        try:
            rows = self._db.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise ConfigError(f"{self.path}: cannot read the watch store ({exc}); "
                              "move it away or choose another with --store") from None
        return [_row(r) for r in rows if _sane(r)]

    def record(self, a: Action, notice: Notice | None = None, *, after: int | None | str = "any") -> Action | None:
        """Commit `a` and the notification it announces, if any, in one transaction (durable on
        return); `outbox_id` then says the notice's row. With `after` (the id of the action `a`
        follows; None: the first), only while that is still the profile's newest action: None when another
        process wrote one meanwhile (a person's stop cancelled the restart)."""
        self.outbox_id = None
        self._db.execute("BEGIN IMMEDIATE")
        try:
            if after != "any" and self._newest_id(a.profile) != after:
                self._db.rollback()
                return None
            done = self._insert(a, notice)
            self._db.commit()
        except BaseException:
            self._db.rollback()
            raise
        return done

    def _newest_id(self, profile: str) -> int | None:
        row = self._db.execute("SELECT max(id) FROM recovery WHERE profile = ?", (profile,)).fetchone()
        return row[0] if row else None

    def _insert(self, a: Action, notice: Notice | None) -> Action:
        cur = self._db.execute(
            "INSERT INTO recovery (profile, time, action, run_id, attempt, detail) VALUES (?, ?, ?, ?, ?, ?)",
            (a.profile, a.time, a.action, a.run_id, a.attempt, json.dumps(a.detail, separators=(",", ":"))))
        done = Action(a.profile, a.time, a.action, a.run_id, a.attempt, a.detail, cur.lastrowid)
        if notice is not None:
            self.outbox_id = self._db.execute(
                "INSERT INTO outbox (action_id, profile, time, event, title, body) VALUES (?, ?, ?, ?, ?, ?)",
                (done.id, notice.profile, notice.time, notice.event, notice.title, notice.body)).lastrowid
        return done

    def cancel(self, profile: str, by: str, now: float, run_id: str = "",
               notice: Callable[[Action], Notice | None] = lambda a: None) -> Action | None:
        """A person's stop (`by`), in one transaction: the profile's restart in flight (planned,
        stopped, launching) is cancelled, with the notice `notice` makes of it; else `run_id`, the
        run the person stopped, is disarmed (`was` ""), unless a failure of it was answered
        already. None when neither was there to do."""
        self.outbox_id = None
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                rows = self._query("WHERE id = (SELECT max(id) FROM recovery WHERE profile = ?)", (profile,))
                last = rows[-1] if rows else None
                if last is not None and last.action in IN_FLIGHT:
                    a = Action(profile, now, CANCELLED, last.run_id, last.attempt,
                               {"by": by, "was": last.action, "reason": f"restart cancelled by {by}",
                                **({"failure": last.detail["failure"]} if "failure" in last.detail else {})})
                    done = self._insert(a, notice(a))
                elif run_id and not self.handled(profile, run_id):
                    done = self._insert(Action(profile, now, CANCELLED, run_id, 0,
                                               {"by": by, "was": "", "reason": f"stopped by {by}"}), None)
                else:
                    done = None
                self._db.commit()
            except BaseException:
                self._db.rollback()
                raise
        except sqlite3.Error as exc:
            raise ConfigError(f"{self.path}: cannot write the watch store ({exc}); "
                              "move it away or choose another with --store") from None
        return done

    def pending(self, now: float) -> list[Notice]:
        """The notices committed and not yet sent, oldest first (none older than OUTBOX_KEEP_S)."""
        try:
            rows = self._db.execute("SELECT id, profile, time, event, title, body FROM outbox "
                                    "WHERE sent IS NULL AND time >= ? ORDER BY id", (now - OUTBOX_KEEP_S,)).fetchall()
        except sqlite3.Error as exc:
            raise ConfigError(f"{self.path}: cannot read the watch store ({exc}); "
                              "move it away or choose another with --store") from None
        return [Notice(inert(str(r[1]), 80), float(r[2]), inert(str(r[3]), 20), inert(str(r[4])),
                       "\n".join(inert(line) for line in str(r[5]).splitlines()), r[0]) for r in rows if isinstance(r[2], (int, float))]


    def last(self, profile: str) -> Action | None:
        """The profile's newest action, as the store has it now (a person's stop writes too)."""
        rows = self._query("WHERE id = (SELECT max(id) FROM recovery WHERE profile = ?)", (profile,))
        return rows[-1] if rows else None

    def actions(self, profile: str) -> list[Action]:
        return self._query("WHERE profile = ?", (profile,))

    def handled(self, profile: str, run_id: str) -> bool:
        """Whether a failure of this run was answered already (planned, or given up on)."""
        return bool(self._db.execute("SELECT 1 FROM recovery WHERE profile = ? AND run_id = ? LIMIT 1",
                                     (profile, run_id)).fetchone())


def stop_times(actions: list[Action]) -> dict[str, float]:
    """Run id -> when the recovery stopped it (goodput.py: a stalled run is down from then)."""
    out: dict[str, float] = {}
    for a in actions:
        if a.action == STOPPED:
            out.setdefault(a.run_id, a.time)
    return out


def chain_of(actions: list[Action], run_id: str) -> list[Attempt]:
    """The restarts that led to `run_id`, oldest first: each one launched the run whose failure
    the next answered. A run a person launched has none."""
    launched = {a.detail.get("new_run_id"): a for a in actions if a.action == LAUNCHED}
    planned = {(a.run_id, a.attempt): a for a in actions if a.action == PLANNED}
    out: list[Attempt] = []
    seen = set()
    while run_id in launched and run_id not in seen:
        seen.add(run_id)
        done = launched[run_id]
        plan = planned.get((done.run_id, done.attempt))
        failure = plan.failure if plan is not None else None
        if failure is None:
            break
        out.append(Attempt(failure, plan.time, run_id))
        run_id = done.run_id
    return out[::-1]


def mark_sent(path: str | Path, outbox_id: int, when: float) -> None:
    """Mark a notice sent, from any thread (its own connection: the sender's worker calls it)."""
    db = open_from_thread(Path(path))
    try:
        with db:
            db.execute("UPDATE outbox SET sent = ? WHERE id = ? AND sent IS NULL", (when, outbox_id))
    finally:
        db.close()
