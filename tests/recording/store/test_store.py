"""The watcher's store, recorder and notification policy, on real SQLite files."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest

from dflash_tui.config import ConfigError
from dflash_tui.config_file import parse_config
from dflash_tui.recording.notify.settings import NOTIFY_SECTION, NotifyProfile, NotifySettings
from dflash_tui.recording.store.settings import WATCH_SECTION
from dflash_tui.contract.rundir import LaunchRecord
from dflash_tui.run.verdict.report import RunProgress, RunReport
from dflash_tui.run.verdict.checklist import Check, CheckState, Checklist, Verdict
from dflash_tui.recording.store.change import evidence_of, inert
from dflash_tui.recording.notify.notify import NotifyPolicy
from dflash_tui.recording.store.recorder import Recorder
from dflash_tui.recording.store.store import ChangeStore
from tests.support import scenarios as R


def report(verdict: Verdict, *, profile="p", run_id="r1", connected=True, summary="why",
           checks=(), tb=None, step=None) -> RunReport:
    launch = LaunchRecord(run_id=run_id, pid=123, pgid=123, start_ticks=1, start_time=1.0, argv=["x"])
    return RunReport(time=0.0, profile=profile, target_label="local", run_dir="/d",
                     checklist=Checklist(verdict, list(checks), summary), launch=launch,
                     connected=connected, error=None if connected else "connection refused",
                     last_traceback=tb, progress=RunProgress("log", step, None, 0.5, 3.0, "it/s") if step else None)


class Clock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


def test_records_changes_only_and_resumes_where_the_runs_are(tmp_path):
    path = tmp_path / "w.sqlite3"
    clock = Clock()
    store = ChangeStore(path)
    rec = Recorder(store, clock=clock)
    heard = []
    rec.listeners.append(heard.append)
    assert rec.observe(report(Verdict.STARTING)).state == "STARTING"
    assert rec.observe(report(Verdict.STARTING, summary="other cause")) is None   # same state: no change
    stall = [Check("heartbeat", "Heartbeat", CheckState.OK), Check("progress", "Progress", CheckState.FAIL)]
    rec.observe(report(Verdict.RUNNING, step=5, checks=[Check("heartbeat", "H", CheckState.OK),
                                                       Check("progress", "P", CheckState.OK)]))
    c = rec.observe(report(Verdict.STALLED, step=5, checks=stall, summary="no step for 61 s"))
    assert (c.previous, c.check, c.evidence.step, c.evidence.rate_unit) == ("RUNNING", "progress", 5, "it/s")
    assert rec.observe(report(Verdict.STALLED, connected=False)).state == "UNREACHABLE"
    assert rec.observe(report(Verdict.STALLED, connected=False)) is None
    assert rec.observe(report(Verdict.RUNNING, run_id="r2")).run_id == "r2"
    assert rec.observe(report(Verdict.RUNNING, run_id="r3")).previous == "RUNNING"   # a relaunch is a change
    assert [h.state for h in heard] == ["STARTING", "RUNNING", "STALLED", "UNREACHABLE", "RUNNING", "RUNNING"]
    store.close()

    # A new watcher on the same file: what is unchanged is not recorded again.
    store = ChangeStore(path)
    rec = Recorder(store, clock=clock)
    assert rec.observe(report(Verdict.RUNNING, run_id="r3")) is None
    assert rec.observe(report(Verdict.CRASHED, run_id="r3", tb="Traceback\n  File x\nValueError: \x1b[31mboom")
                       ).evidence.traceback[-1] == "ValueError: \\x1b[31mboom"
    assert [c.state for c in store.changes("p")][-2:] == ["RUNNING", "CRASHED"]
    assert store.count() == 7


def test_the_store_is_wal_and_durable_and_its_schema_is_as_documented(tmp_path):
    store = ChangeStore(tmp_path / "w.sqlite3")
    db = sqlite3.connect(tmp_path / "w.sqlite3")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    cols = [r[1] for r in db.execute("PRAGMA table_info(changes)")]
    assert cols == ["id", "profile", "run_id", "time", "state", "previous", "cause", "check_id", "evidence"]
    assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 2   # FULL
    store.close()


def test_a_commit_survives_sigkill_of_the_writer(tmp_path):
    path = tmp_path / "w.sqlite3"
    code = ("import os, signal, sys\n"
            "from dflash_tui.recording.store.store import ChangeStore\n"
            "from dflash_tui.recording.store.change import VerdictChange\n"
            f"s = ChangeStore({str(path)!r})\n"
            "for i in range(50): s.record(VerdictChange('p', 'r', float(i), 'RUNNING', '', 'c'))\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert out.returncode == -9, out.stderr
    assert ChangeStore(path).count() == 50


def test_retention_by_age_and_by_rows_per_run_keeps_where_each_run_stands(tmp_path):
    from dflash_tui.recording.store.change import VerdictChange
    store = ChangeStore(tmp_path / "w.sqlite3", retention_days=1, max_rows_per_run=10)
    day = 86400.0
    for i in range(30):
        store.record(VerdictChange("busy", "r", 10 * day + i, "RUNNING" if i % 2 else "STALLED", "", "c"))
    store.record(VerdictChange("old", "r", 1.0, "FINISHED", "", "done"))
    store.record(VerdictChange("old2", "r", 1.0, "RUNNING", "", "x"))
    store.record(VerdictChange("old2", "r", 2.0, "CRASHED", "", "x"))
    assert store.prune(now=10 * day + 40) == 20 + 1
    busy = store.changes("busy")
    assert len(busy) == 10 and busy[-1].time == 10 * day + 29
    assert [c.state for c in store.changes("old")] == ["FINISHED"]   # the newest state outlives the age limit
    assert [c.state for c in store.changes("old2")] == ["CRASHED"]


def test_a_file_that_is_not_a_store_is_one_line(tmp_path):
    bad = tmp_path / "w.sqlite3"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ConfigError, match="not a usable watch store"):
        ChangeStore(bad)


def test_inert_writes_control_characters_out():
    assert inert("a\x1b]52;c;AAAA\x07b\nc\u202e") == "a\\x1b]52;c;AAAA\\x07b\\nc\\u202e"
    assert len(inert("x" * 1000)) == 400


# -- the policy -------------------------------------------------------------------------------

def _changes(rec, clock, seq):
    for t, verdict, connected in seq:
        clock.t = t
        rec.observe(report(verdict, connected=connected))


def test_flapping_notifies_once_per_change_that_lasts(tmp_path):
    clock = Clock(0.0)
    rec = Recorder(ChangeStore(tmp_path / "w.sqlite3"), clock=clock)
    policy = NotifyPolicy(NotifySettings(urls=("json://x",), hold_s=10, unreachable_after_s=60),
                          config_path="/c.toml")
    rec.listeners.append(policy.changed)
    sent = []

    def at(t, verdict=None, connected=True):
        clock.t = t
        if verdict is not None:
            rec.observe(report(verdict, connected=connected))
        sent.extend((n.state, n.event) for n in policy.due(t))

    at(0, Verdict.RUNNING)
    at(5, Verdict.STALLED)       # flaps back within its hold: nothing
    at(8, Verdict.RUNNING)
    at(30)
    at(31, Verdict.STALLED)
    at(41.5)                     # lasted 10 s: notified once
    at(50, Verdict.RUNNING)      # recovers briefly, stalls again: the same news, nothing new
    at(52, Verdict.STALLED)
    at(100)
    at(101, Verdict.RUNNING)
    at(120)
    at(130, Verdict.RUNNING, connected=False)   # unreachable only counts after 60 s
    at(150, Verdict.RUNNING)
    at(200, Verdict.RUNNING, connected=False)
    at(265)
    at(270, Verdict.CRASHED)
    at(290)
    assert sent == [("STALLED", "failing"), ("RUNNING", "recovered"), ("UNREACHABLE", "UNREACHABLE"),
                    ("CRASHED", "failing")]


def test_the_message_says_what_where_and_how_to_open_it(tmp_path):
    clock = Clock(0.0)
    rec = Recorder(ChangeStore(tmp_path / "w.sqlite3"), clock=clock)
    policy = NotifyPolicy(NotifySettings(urls=("json://x",), hold_s=0,
                                         profiles={"q": NotifyProfile(enabled=False)}), config_path="/c.toml")
    rec.listeners.append(policy.changed)
    rec.observe(report(Verdict.RUNNING))
    rec.observe(report(Verdict.RUNNING, profile="q"))
    rec.observe(report(Verdict.CRASHED, tb="Traceback (most recent call last):\n  File \"t.py\", line 3\n"
                       "RuntimeError: CUDA error", step=40, summary="exit code 1: RuntimeError: CUDA error"))
    rec.observe(report(Verdict.CRASHED, profile="q"))
    (n,) = policy.due(0.0)
    assert n.title == "dflash-tui: p CRASHED"
    assert "exit code 1: RuntimeError: CUDA error" in n.body and "  RuntimeError: CUDA error" in n.body
    assert "step 40" in n.body and "open it: dflash-tui --config /c.toml --profile p" in n.body


def test_notify_config_is_validated_in_one_line():
    base = '[profile.a]\nrun_dir = "/x/y"\n'
    ok = parse_config(base + '[notify]\nurls = ["json://h"]\non = ["failing"]\n[notify.profile.a]\n'
                      'urls = ["ntfy://t"]\n[watch]\nmax_rows_per_run = 50\n', "f.toml")
    assert (NOTIFY_SECTION.of(ok).for_profile("a") == ("json://h", "ntfy://t")
            and WATCH_SECTION.of(ok).max_rows_per_run == 50)
    for bad, words in (('[notify]\nurls = "json://h"\n', "urls must be a list"),
                       ('[notify]\non = ["RUNNING"]\n', "unknown event 'RUNNING'"),
                       ('[notify]\nhold_s = -1\n', "hold_s = -1: must be a number"),
                       ('[notify]\nspeed = 1\n', "unknown key 'speed'"),
                       ('[notify.profile.zz]\nenabled = false\n', "no [profile.zz]"),
                       ('[watch]\nstore = 3\n', "store must be a file path")):
        with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("(", r"\(")) as e:
            parse_config(base + bad, "f.toml")
        assert "\n" not in str(e.value) and str(e.value).startswith("f.toml: ")


def test_a_reader_of_a_file_the_watcher_just_created_sees_an_empty_store(tmp_path):
    path = tmp_path / "w.sqlite3"
    sqlite3.connect(path).close()            # created, no table yet
    with ChangeStore(path, readonly=True) as store:
        assert store.changes("p") == [] and store.last_states() == {}


def test_a_store_where_none_can_be_made_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="cannot create the watch store there"):
        ChangeStore(blocker / "sub" / "w.sqlite3")


def test_a_restarted_watcher_neither_repeats_nor_drops_what_waited_out_its_hold():
    from dflash_tui.recording.store.change import VerdictChange
    policy = NotifyPolicy(NotifySettings(urls=("json://x",), hold_s=10))
    policy.resume(VerdictChange("old", "r", 0.0, "STALLED", "RUNNING", "c"), now=100.0)     # sent before
    policy.resume(VerdictChange("new", "r", 95.0, "CRASHED", "RUNNING", "c"), now=100.0)    # killed in its hold
    assert policy.due(100.0) == [] and [n.profile for n in policy.due(105.0)] == ["new"]
    policy.changed(VerdictChange("old", "r", 106.0, "RUNNING", "STALLED", "c"))
    assert [(n.profile, n.event) for n in policy.due(116.0)] == [("old", "recovered")]


def test_a_store_that_fails_under_the_watcher_is_logged_and_retried_never_raised(tmp_path, caplog):
    from dflash_tui.recording.daemon import Watcher
    cfg = parse_config(f'[profile.p]\nrun_dir = "{tmp_path}/p"\n', "c.toml")
    store = ChangeStore(tmp_path / "w.sqlite3")
    watcher = Watcher(cfg, cfg.file_profiles(), store)
    try:
        real, store._db = store._db, sqlite3.connect(":memory:")   # no table: every insert fails
        watcher._heard(None, report(Verdict.STALLED))                # the poll that called the hook goes on
        watcher._heard(None, report(Verdict.CRASHED))
        assert caplog.text.count("could not record a change") == 1
        store._db = real
        assert store.count() == 0
        watcher._record(watcher._unrecorded["p"])                     # what each tick does
        assert [c.state for c in store.changes("p")] == ["CRASHED"] and not watcher._unrecorded
    finally:
        watcher.sender.close()


def test_news_is_decided_per_run_id(tmp_path):
    """A run first seen already ended is recorded, not notified; a relaunched run that crashes
    again within hold_s is news of its own; a known run that ended while no watcher ran is news."""
    path = tmp_path / "w.sqlite3"
    clock = Clock(0.0)
    settings = NotifySettings(urls=("json://x",), hold_s=10)
    sent = []

    def watcher():
        store = ChangeStore(path)
        rec, policy = Recorder(store, clock=clock), NotifyPolicy(settings)
        rec.listeners.append(policy.changed)
        return store, rec, policy

    def at(rec, policy, t, *reports):
        clock.t = t
        for r in reports:
            rec.observe(r)
        sent.extend((n.profile, n.change.run_id, n.state, n.event) for n in policy.due(t))

    store, rec, policy = watcher()
    # The first look: p's run finished and q's crashed before the watcher started; s is live.
    at(rec, policy, 0, report(Verdict.FINISHED, run_id="old"), report(Verdict.CRASHED, profile="q", run_id="qq"),
       report(Verdict.RUNNING, profile="s", run_id="s1"))
    at(rec, policy, 20)
    assert sent == [] and [c.state for c in store.changes("p")] == ["FINISHED"]    # recorded, not notified
    at(rec, policy, 30, report(Verdict.RUNNING, run_id="r1"))
    at(rec, policy, 40, report(Verdict.CRASHED, run_id="r1"))
    at(rec, policy, 55)
    at(rec, policy, 60, report(Verdict.RUNNING, run_id="r2"))     # relaunched ...
    at(rec, policy, 63, report(Verdict.CRASHED, run_id="r2"))     # ... and crashed again within the hold
    at(rec, policy, 80)
    at(rec, policy, 90, report(Verdict.CRASHED, run_id="r3"))     # a run that came and went between two polls
    at(rec, policy, 110)
    assert sent == [("p", "r1", "CRASHED", "failing"), ("p", "r2", "CRASHED", "failing"),
                    ("p", "r3", "CRASHED", "failing")]
    store.close()

    # A restarted watcher: s's run, known RUNNING, crashed while none watched: that is news.
    store, rec, policy = watcher()
    sent.clear()
    at(rec, policy, 200, report(Verdict.CRASHED, profile="s", run_id="s1"), report(Verdict.CRASHED, run_id="r3"))
    at(rec, policy, 220)
    assert sent == [("s", "s1", "CRASHED", "failing")]
    store.close()


def test_a_restarted_watcher_does_not_announce_a_first_look_it_recorded_in_its_hold(tmp_path):
    from dflash_tui.recording.daemon import Watcher
    cfg = parse_config(f'[profile.p]\nrun_dir = "{tmp_path}/p"\n[notify]\nurls = ["json://127.0.0.1:9/x"]\n'
                       'hold_s = 60\n', "c.toml")
    clock = Clock(1000.0)
    with ChangeStore(tmp_path / "w.sqlite3") as store:
        Recorder(store, clock=clock).observe(report(Verdict.FINISHED, run_id="old"))   # first look, then killed
    clock.t = 1010.0
    store = ChangeStore(tmp_path / "w.sqlite3")
    watcher = Watcher(cfg, cfg.file_profiles(), store, clock=clock)
    try:
        assert watcher.policy.next_due() is None and watcher.policy.due(2000.0) == []
    finally:
        watcher.sender.close()
        store.close()


def test_a_stalled_run_of_many_ranks_says_where_they_differ_and_the_store_keeps_it(tmp_path):
    clock = Clock(0.0)
    store = ChangeStore(tmp_path / "w.sqlite3")
    rec = Recorder(store, clock=clock)
    policy = NotifyPolicy(NotifySettings(urls=("json://x",), hold_s=0))
    rec.listeners.append(policy.changed)
    rec.observe(R.ranks(64, stuck=7))
    (n,) = policy.due(0.0)
    assert "hung in a collective: ranks 0-6, 8-63 wait in all_reduce (train.py:88); rank 7 is not in it" in n.body
    assert ("ranks (where they differ): rank 7 (node h1): lock threading.wait (data.py:40); "
            "ranks 0-6, 8-63 (nodes h1, h2, h3, h4, h5, h6, h7, h8): collective all_reduce (train.py:88)") in n.body, n.body
    (stored,) = ChangeStore(tmp_path / "w.sqlite3", readonly=True).changes(R.PROFILE)
    assert stored.evidence.ranks[0] == "rank 7 (node h1): lock threading.wait (data.py:40)"
    # a healthy run of many ranks keeps none: its groups are no news
    assert evidence_of(R.ranks(64)).ranks == ()
