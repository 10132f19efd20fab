"""--timeline: the recorded states as text, JSON and Chrome trace JSON (the Trace Event Format)."""

from __future__ import annotations

import json

from dflash_tui.recording.store.change import Evidence, VerdictChange
from dflash_tui.recording.service import systemd_quote
from dflash_tui.recording.store.store import ChangeStore
from tests.test_cli_modes import cli

T = 1_780_000_000.0


def seed(path):
    with ChangeStore(path) as s:
        for t, run, state, prev in ((T, "a", "RUNNING", ""), (T + 60, "a", "STALLED", "RUNNING"),
                                    (T + 90, "a", "CRASHED", "STALLED"), (T + 100, "b", "RUNNING", "CRASHED")):
            s.record(VerdictChange("p", run, t, state, prev, f"cause of {state}", "progress",
                                   Evidence(step=7, traceback=("Boom: \x1b[2J",)) if state == "CRASHED" else Evidence()))


def test_trace_is_valid_trace_event_format(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[profile.p]\nrun_dir = "{tmp_path / "p"}"\n[watch]\nstore = "{tmp_path / "s.db"}"\n')
    seed(tmp_path / "s.db")
    res = cli(tmp_path, "--config", str(cfg), "--profile", "p", "--timeline", "--trace", str(tmp_path / "t.json"))
    assert res.returncode == 0 and "wrote 4 bands" in res.stdout, res.stderr
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["displayTimeUnit"] in ("ms", "ns") and isinstance(doc["traceEvents"], list)
    for e in doc["traceEvents"]:
        assert isinstance(e["name"], str) and e["ph"] in ("X", "i", "M")
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] != "M":
            assert isinstance(e["ts"], int) and e["ts"] >= 0
        if e["ph"] == "X":
            assert isinstance(e["dur"], int) and e["dur"] > 0
        if e["ph"] == "i":
            assert e["s"] in ("g", "p", "t")
    x = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert [(e["name"], e["ts"], e["dur"], e["tid"]) for e in x[:3]] == [
        ("RUNNING", 0, 60_000_000, 1), ("STALLED", 60_000_000, 30_000_000, 1), ("CRASHED", 90_000_000, 10_000_000, 1)]
    assert x[3]["tid"] == 2 and x[3]["args"]["open"] is True            # the second run: a thread of its own
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M"}
    assert names == {"dflash-tui p", "run a", "run b"}
    assert [e["name"] for e in doc["traceEvents"] if e["ph"] == "i"][1] == "RUNNING -> STALLED"


def test_text_and_json(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[profile.p]\nrun_dir = "{tmp_path / "p"}"\n[profile.q]\nrun_dir = "{tmp_path / "q"}"\n')
    seed(tmp_path / "s.db")
    text = cli(tmp_path, "--config", str(cfg), "--profile", "p", "--timeline", "--store", str(tmp_path / "s.db"))
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].startswith("p · 4 changes recorded since") and "run a" in lines and "run b" in lines
    assert any("STALLED" in l and "30s" in l and "cause of STALLED  [progress]" in l for l in lines)
    assert "\x1b" not in text.stdout and "| Boom: \\x1b[2J" in text.stdout      # inert
    js = json.loads(cli(tmp_path, "--config", str(cfg), "--profile", "p", "--timeline", "--json",
                        "--store", str(tmp_path / "s.db")).stdout)
    assert [(b["state"], b["seconds"]) for b in js["bands"][:3]] == [("RUNNING", 60), ("STALLED", 30), ("CRASHED", 10)]
    none = cli(tmp_path, "--config", str(cfg), "--profile", "q", "--timeline", "--store", str(tmp_path / "s.db"))
    assert none.returncode == 0 and "no changes recorded" in none.stdout
    missing = cli(tmp_path, "--config", str(cfg), "--profile", "q", "--timeline", "--store", str(tmp_path / "x.db"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "no such store" in missing.stderr


def test_systemd_quoting_takes_specifiers_and_variables_literally():
    assert systemd_quote('/home/a b/100%"$x\\') == '"/home/a b/100%%\\"$$x\\\\"'


def test_without_profile_every_profile_of_the_file_is_shown(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[profile.p]\nrun_dir = "{tmp_path / "p"}"\n[profile.q]\nrun_dir = "{tmp_path / "q"}"\n')
    seed(tmp_path / "s.db")
    with ChangeStore(tmp_path / "s.db") as s:
        s.record(VerdictChange("q", "z", T + 5, "FINISHED", "", "done"))
    text = cli(tmp_path, "--config", str(cfg), "--timeline", "--store", str(tmp_path / "s.db"))
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("p · 4 changes recorded") and "\n\nq · 1 changes recorded" in text.stdout
    js = json.loads(cli(tmp_path, "--config", str(cfg), "--timeline", "--json", "--store", str(tmp_path / "s.db")).stdout)
    assert [(d["profile"], len(d["bands"])) for d in js] == [("p", 4), ("q", 1)]
    res = cli(tmp_path, "--config", str(cfg), "--timeline", "--store", str(tmp_path / "s.db"), "--trace", str(tmp_path / "t.json"))
    assert res.returncode == 0 and "wrote 5 bands of p, q" in res.stdout, res.stderr
    doc = json.loads((tmp_path / "t.json").read_text())
    assert {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"} == {"dflash-tui p", "dflash-tui q"}
