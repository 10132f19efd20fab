"""Seeded fuzzing of the watch store: `--timeline` (text, --json, --trace) and `--watch` on stores
another program, a newer dflash-tui, a damaged disk or a hostile hand made: another schema, a
newer schema, damaged pages, truncation, BLOB or text where numbers belong, infinite and NaN
times and evidence, a FIFO, names SQLite would read as URI syntax. Every case ends with exit 0
(the store read, damaged rows skipped) or 2 (one line naming the file and the fix), never a
traceback or "internal error", and `--json` is always valid JSON (no NaN, no Infinity).

DFLASH_FUZZ_SEED reproduces a run; DFLASH_FUZZ_SCALE widens it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dflash_tui import cli
from dflash_tui.recording.store.change import Evidence, VerdictChange
from dflash_tui.recording.store.store import SCHEMA_VERSION, ChangeStore
from dflash_tui.verdicts import TargetState, Verdict

pytestmark = pytest.mark.timeout(170)

SEED = int(os.environ.get("DFLASH_FUZZ_SEED", "20261205"))
SCALE = float(os.environ.get("DFLASH_FUZZ_SCALE", "1"))
CASES = int(60 * SCALE)
WATCH_CASES = max(3, int(6 * SCALE))      # each a real `--watch` process: the costly kind
T = 1_780_000_000.0

# Values where a number, a text or the evidence JSON belongs.
BAD_NUMBERS = ["abc", b"\x00\xff", "9e999", float("inf"), float("-inf"), None, 10 ** 18, -5.0, "", "1e308",
               2 ** 63 - 1, 1e300]
BAD_TEXTS = [b"\xff\xfe\x1b[2J", 7, 3.5, None, "\x1b]52;c;ZXZpbA==\x07", "x" * 20000, "\ud800".encode("utf-8",
             "surrogatepass")]
BAD_EVIDENCE = ["NaN", '{"loss": NaN, "rate": Infinity}', '{"step": "x", "total": [1], "pid": 1e999}',
                "[1, 2]", '"text"', "[" * 5000 + "]" * 5000, '{"traceback": "not a list"}',
                '{"traceback": [1, null, "\\u001b[31mred"]}', '{"step": ' + "9" * 4000 + "}", b"\x80\x81",
                '{"loss": 1e999}', "{", 42, None, '{"rate_unit": {"a": 1}, "stuck_at": 5}']

_SCHEMA = ("CREATE TABLE changes (id INTEGER PRIMARY KEY, profile, run_id, time, state, previous, cause, "
           "check_id, evidence)")


def good_store(path: Path, rows: int = 40) -> None:
    with ChangeStore(path) as s:
        for i in range(rows):
            s.record(VerdictChange("p", f"r{i // 10}", T + i, ("RUNNING", "STALLED")[i % 2], "", "c" * 200,
                                   "progress", Evidence(step=i, loss=0.5)))


def loose_store(path: Path, rng: random.Random) -> None:
    """A store of this schema's version whose columns take anything (no types, no NOT NULL)."""
    db = sqlite3.connect(path)
    db.execute(_SCHEMA)
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    for i in range(rng.randint(1, 12)):
        row = ["p", f"r{i % 3}", T + i, "RUNNING", "", "cause", "progress", "{}"]
        for _ in range(rng.randint(1, 3)):
            col = rng.randrange(8)
            row[col] = rng.choice(BAD_NUMBERS if col == 2 else BAD_EVIDENCE if col == 7 else BAD_TEXTS)
        db.execute("INSERT INTO changes (profile, run_id, time, state, previous, cause, check_id, evidence) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)
    db.commit()
    db.close()


def hostile_store(rng: random.Random, path: Path) -> str:
    """Make a hostile store at `path`; its class."""
    kind = rng.choice(["other_schema", "other_program", "newer", "negative_version", "damaged_page",
                       "truncated", "loose", "loose", "loose", "not_sqlite", "empty_file", "fifo", "directory",
                       "loose_recovery"])
    if kind == "other_schema":
        db = sqlite3.connect(path)
        db.execute(rng.choice(["CREATE TABLE changes (a, b)", "CREATE TABLE changes (id, profile, run_id)"]))
        db.execute(f"PRAGMA user_version={rng.choice([0, SCHEMA_VERSION])}")
        db.commit()
        db.close()
    elif kind == "other_program":
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE moz_places (id INTEGER PRIMARY KEY, url TEXT)")
        db.execute("INSERT INTO moz_places (url) VALUES ('https://example.com')")
        db.commit()
        db.close()
    elif kind in ("newer", "negative_version"):
        good_store(path, 3)
        db = sqlite3.connect(path)
        db.execute(f"PRAGMA user_version={rng.choice([2, 99, 2 ** 31 - 1]) if kind == 'newer' else -3}")
        db.commit()
        db.close()
    elif kind in ("damaged_page", "truncated"):
        good_store(path, 300)
        size = path.stat().st_size
        with open(path, "r+b") as f:
            if kind == "truncated":
                f.truncate(rng.randrange(100, size))
            else:
                for _ in range(rng.randint(1, 4)):
                    f.seek(rng.randrange(4096, size - 64))
                    f.write(bytes(rng.randrange(256) for _ in range(rng.randint(8, 64))))
    elif kind == "loose":
        loose_store(path, rng)
    elif kind == "loose_recovery":       # the recovery log's table beside the changes, hand-made
        good_store(path, 5)
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE recovery (id INTEGER PRIMARY KEY, profile, time, action, run_id, attempt, detail)")
        for _ in range(rng.randint(1, 6)):
            db.execute("INSERT INTO recovery (profile, time, action, run_id, attempt, detail) VALUES (?, ?, ?, ?, ?, ?)",
                       ["p", rng.choice(BAD_NUMBERS + [T + 2]), rng.choice(["stopped", "launched", b"\xff", 3]),
                        rng.choice(["r0", b"\x00", 1.5]), rng.choice([1, "x", 2 ** 62, 1e999, None]),
                        rng.choice(BAD_EVIDENCE)])
        db.commit()
        db.close()
    elif kind == "not_sqlite":
        path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(1, 9000))))
    elif kind == "empty_file":
        path.write_bytes(b"")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    return kind


def run_in_process(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue(), err.getvalue()


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def judge(code: int, out: str, err: str, as_json: bool) -> str | None:
    if "Traceback" in out + err or "internal error" in out + err:
        return "a traceback or an internal error"
    if code == 2:
        lines = err.strip().splitlines()
        return None if len(lines) == 1 and lines[0].startswith("dflash-tui: ") else f"a {len(lines)}-line error"
    if code != 0:
        return f"exit code {code}"
    if as_json:
        try:
            json.loads(out, parse_constant=_no_constant)
        except ValueError as exc:
            return f"invalid JSON ({exc})"
    if any(ord(c) < 0x20 and c != "\n" or 0x7f <= ord(c) <= 0x9f for c in out + err):
        return "control characters printed"
    return None


def config(tmp_path: Path) -> Path:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[profile.p]\nrun_dir = "{tmp_path / "run"}"\nmin_free_gb = 0\n'
                   f'[profile.q]\nrun_dir = "{tmp_path / "runq"}"\nmin_free_gb = 0\n[watch]\ninterval_s = 0.5\n')
    return cfg


def test_timeline_on_hostile_stores_is_a_timeline_or_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("DFLASH_TUI_DEBUG", raising=False)
    rng = random.Random(SEED)
    cfg = config(tmp_path)
    failures, kinds = [], {}
    for i in range(CASES):
        store = tmp_path / f"s{i}.db"
        kind = hostile_store(rng, store)
        kinds[kind] = kinds.get(kind, 0) + 1
        for extra in ([], ["--json"], ["--profile", "p", "--json"], ["--trace", str(tmp_path / f"t{i}.json")]):
            code, out, err = run_in_process(["--config", str(cfg), "--timeline", "--store", str(store), *extra])
            why = judge(code, out, err, "--json" in extra)
            if why is None and "--trace" in extra and code == 0:
                try:
                    json.loads((tmp_path / f"t{i}.json").read_text(), parse_constant=_no_constant)
                except ValueError as exc:
                    why = f"invalid trace JSON ({exc})"
            if why:
                failures.append(f"case {i} {kind} {extra}: {why}\n    {err.strip()[:300]}")
    print(f"\nstore fuzz seed {SEED}: {CASES} stores {kinds}, {len(failures)} failed")
    assert not failures, "\n".join(failures[:20])


def test_a_damaged_row_is_skipped_and_counted_and_the_rest_is_read(tmp_path):
    path = tmp_path / "s.db"
    db = sqlite3.connect(path)
    db.execute(_SCHEMA)
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    rows = [(T, "RUNNING", "{}"), (float("inf"), "STALLED", "{}"), (b"\x01", "STALLED", "{}"),
            ("abc", "STALLED", "{}"), (T + 5, "CRASHED", '{"loss": NaN, "step": 7, "rate": "fast"}')]
    for t, state, ev in rows:
        db.execute("INSERT INTO changes (profile, run_id, time, state, previous, cause, check_id, evidence) "
                   "VALUES ('p', 'r', ?, ?, '', X'41ff', 3, ?)", (t, state, ev))
    db.commit()
    db.close()
    with ChangeStore(path, readonly=True) as store:
        got = store.changes("p")
        assert store.skipped == 3
    assert [(c.state, c.time, c.cause, c.check) for c in got] == [("RUNNING", T, "A\ufffd", "3"),
                                                                  ("CRASHED", T + 5, "A\ufffd", "3")]
    assert (got[1].evidence.step, got[1].evidence.loss, got[1].evidence.rate) == (7, None, None)
    cfg = config(tmp_path)
    code, out, err = run_in_process(["--config", str(cfg), "--profile", "p", "--timeline", "--json",
                                     "--store", str(path)])
    doc = json.loads(out, parse_constant=_no_constant)
    assert code == 0 and doc["skipped"] == 3 and [b["state"] for b in doc["bands"]] == ["RUNNING", "CRASHED"]
    code, out, err = run_in_process(["--config", str(cfg), "--profile", "p", "--timeline", "--store", str(path)])
    assert code == 0 and "3 damaged rows skipped" in out.splitlines()[0]


def test_a_row_whose_state_the_watcher_never_writes_is_skipped_and_counted(tmp_path):
    """States are read to their type where they are read: a word that is no verdict and not
    UNREACHABLE (another program's, a hand edit, the fleet's CONNECTING) makes the row damaged."""
    path = tmp_path / "s.db"
    db = sqlite3.connect(path)
    db.execute(_SCHEMA)
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    rows = [("RUNNING", ""), ("HUNG", "RUNNING"), ("running", ""), ("CONNECTING", ""), ("STALLED", "BOGUS"),
            ("UNREACHABLE", "RUNNING"), ("CRASHED", "UNREACHABLE")]
    for i, (state, previous) in enumerate(rows):
        db.execute("INSERT INTO changes (profile, run_id, time, state, previous, cause, check_id, evidence) "
                   "VALUES ('p', 'r', ?, ?, ?, 'c', '', '{}')", (T + i, state, previous))
    db.commit()
    db.close()
    with ChangeStore(path, readonly=True) as store:
        got = store.changes("p")
        assert store.skipped == 4
    assert [(c.state, c.previous) for c in got] == [
        (Verdict.RUNNING, None), (TargetState.UNREACHABLE, Verdict.RUNNING), (Verdict.CRASHED, TargetState.UNREACHABLE)]
    code, out, err = run_in_process(["--config", str(config(tmp_path)), "--profile", "p", "--timeline", "--json",
                                     "--store", str(path)])
    doc = json.loads(out)
    assert code == 0 and doc["skipped"] == 4
    assert [(b["state"], b["previous"]) for b in doc["bands"]] == [("RUNNING", ""), ("UNREACHABLE", "RUNNING"),
                                                                   ("CRASHED", "UNREACHABLE")]


@pytest.mark.parametrize("name", ["a#b.db", "%41.db", "x?mode=memory.db", "file:rel.db"])
def test_the_store_is_opened_by_path_never_as_a_uri(tmp_path, monkeypatch, name):
    """SQLite's URI parsing would read `a` for `a#b.db` and `A.db` for `%41.db`."""
    monkeypatch.chdir(tmp_path)
    for decoy in ("a", "A.db", "x", "rel.db"):
        good_store(tmp_path / decoy, 1)
    with ChangeStore(tmp_path / name) as s:
        s.record(VerdictChange("p", "mine", T, "FINISHED", "", "the right file"))
    cfg = config(tmp_path)
    for where in (str(tmp_path / name), name):
        code, out, err = run_in_process(["--config", str(cfg), "--profile", "p", "--timeline", "--json",
                                         "--store", where])
        assert code == 0, err
        assert [(b["run_id"], b["cause"]) for b in json.loads(out)["bands"]] == [("mine", "the right file")]


def test_a_newer_schema_is_refused_by_readers_too(tmp_path):
    path = tmp_path / "s.db"
    good_store(path, 2)
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version=7")
    db.commit()
    db.close()
    code, out, err = run_in_process(["--config", str(config(tmp_path)), "--profile", "p", "--timeline",
                                     "--store", str(path)])
    assert code == 2 and out == ""
    assert "a store of a newer dflash-tui (schema 7; this one reads 1); upgrade dflash-tui" in err


def watch_env(tmp_path: Path) -> dict:
    return {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}


def test_watch_on_hostile_stores_runs_or_is_one_line(tmp_path):
    rng = random.Random(SEED + 1)
    cfg = config(tmp_path)
    failures = []
    for i in range(WATCH_CASES):
        store = tmp_path / f"w{i}.db"
        kind = hostile_store(rng, store) if i % 3 else "loose"
        if kind == "loose" and not i % 3:
            loose_store(store, rng)
        proc = subprocess.Popen([sys.executable, "-m", "dflash_tui", "--config", str(cfg), "--watch",
                                 "--store", str(store)], env=watch_env(tmp_path), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            code = proc.wait(timeout=4)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=15)
        out, err = proc.communicate()
        if code == 2:
            why = judge(code, out, err, False)
        elif code != 0 or "Traceback" in err or "internal error" in err or " ERROR " in err:
            why = f"exit {code}"
        else:
            why = None
        if why:
            failures.append(f"case {i} {kind}: {why}\n    {err.strip()[-600:]}")
    assert not failures, "\n".join(failures)


def test_one_writer_per_store_and_the_second_names_the_first(tmp_path):
    cfg = config(tmp_path)
    store = tmp_path / "w.db"
    a = subprocess.Popen([sys.executable, "-m", "dflash_tui", "--config", str(cfg), "--watch", "--store", str(store)],
                         env=watch_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "w.db.lock").exists() or not (tmp_path / "w.db.lock").read_text():
            assert a.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        b = subprocess.run([sys.executable, "-m", "dflash_tui", "--config", str(cfg), "--watch", "--store",
                            str(store)], env=watch_env(tmp_path), capture_output=True, text=True, timeout=60)
        assert b.returncode == 2, b.stderr
        line, = b.stderr.splitlines()
        assert f"another watcher writes this store (pid {a.pid} on {os.uname().nodename}" in line
        assert "stop it first, or give this one another --store" in line
        # Readers are not writers: --timeline reads beside it.
        assert run_in_process(["--config", str(cfg), "--timeline", "--store", str(store)])[0] == 0
        a.send_signal(signal.SIGKILL)
        a.wait(timeout=10)
        with ChangeStore(store):            # the kernel let go of a killed writer's lock
            pass
    finally:
        a.kill()
        _, a_err = a.communicate()
    # Each log line says when, with the offset; the start line says the built-in `local` is not watched.
    first = a_err.splitlines()[0]
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[+-]\d{4} dflash-tui --watch: watching 2 profile", first), a_err
    assert "the built-in 'local' is not watched (add [profile.local] to" in first


def test_a_store_whose_version_was_never_set_is_still_ours(tmp_path):
    """Its table made, the watcher killed before the version was written: read, then completed."""
    path = tmp_path / "s.db"
    db = sqlite3.connect(path)
    db.execute(_SCHEMA)
    db.execute("INSERT INTO changes (profile, run_id, time, state, previous, cause, check_id, evidence) "
               "VALUES ('p', 'r', ?, 'RUNNING', '', 'c', '', '{}')", (T,))
    db.commit()
    db.close()
    with ChangeStore(path, readonly=True) as store:
        assert [c.state for c in store.changes("p")] == ["RUNNING"]
    with ChangeStore(path) as store:
        assert store.count() == 1
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
