"""Metrics from the files real writers write (run/evidence/metric_files/), read through the real
agent: torch's SummaryWriter (TensorBoard), Lightning's CSVLogger in a real Trainer.fit, the
transformers Trainer's trainer_state.json, MLflow's mlflow.db; incrementally, and bounded (a
record cut short, a locked database, a directory of many files). And the verdict: a program
that writes only TensorBoard events and prints nothing stays RUNNING past stall_after_s, on
this machine and over the loopback sshd into the pct stand-in."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.remote.agent import open_ops
from dflash_tui.remote.local import LocalTarget
from dflash_tui.run.evidence.metric_files import reader as reader_mod
from dflash_tui.run.evidence.metric_files.reader import MetricFiles
from dflash_tui.run.evidence.metric_files.tfrecord import split_records
from dflash_tui.run.verdict.checklist import Verdict
from dflash_tui.remote.ssh_dest import SSHDest

from tests.run.verdict.test_verdicts_programs import program_profile

pytestmark = pytest.mark.timeout(300)

PROGRAMS = Path(__file__).resolve().parents[2] / "programs"
PY = sys.executable


@pytest.fixture(params=["local", "ssh"])
async def ops(request):
    """The agent on this machine, or over the loopback sshd (the files are the same files)."""
    if request.param == "local":
        target = LocalTarget()
    else:
        from dflash_tui.remote.factory import make_host_target
        target = make_host_target(SSHDest(**request.getfixturevalue("sshd").profile()))
    o = await open_ops(target, python=PY, prefer="agent")
    yield o
    await o.close()


async def _poll(files: MetricFiles, ops, run_dir: Path, now: float | None = None):
    await files.poll(ops, str(run_dir), time.time() if now is None else now)
    return files.take()


def _run(*argv: str, cwd: Path) -> None:
    res = subprocess.run([PY, *argv], cwd=cwd, capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]


async def test_tensorboard_events_read_incrementally_and_a_cut_record_waits(tmp_path, ops):
    from torch.utils.tensorboard import SummaryWriter

    logdir = tmp_path / "runs" / "exp1"
    w = SummaryWriter(str(logdir))
    for step in range(1, 51):
        w.add_scalar("train/loss", 10.0 / step, step)
    w.flush()
    files = MetricFiles()
    points = await _poll(files, ops, tmp_path)
    assert [p.step for p in points if p.name == "train/loss"] == list(range(1, 51))
    (source,) = files.views()
    assert source.kind == "tensorboard" and source.label == "TensorBoard runs/exp1, 1 tag" and not source.note
    (event_file,) = logdir.iterdir()
    tb = files.sources[str(logdir)]
    assert tb.files[str(event_file)].offset == event_file.stat().st_size   # all of it read

    before = event_file.stat().st_size
    for step in range(51, 61):
        w.add_scalar("train/loss", 10.0 / step, step)
    w.flush()
    points = await _poll(files, ops, tmp_path, time.time())   # no search this poll: one request
    assert [p.step for p in points] == list(range(51, 61))
    assert tb.files[str(event_file)].offset == event_file.stat().st_size > before

    # A record cut short (its writer mid-write): nothing now, the point once its rest is there.
    w.add_scalar("train/loss", 0.5, 61)
    w.flush()
    whole = event_file.read_bytes()
    record = whole[tb.files[str(event_file)].offset:]
    assert split_records(record).records
    event_file.write_bytes(whole[:len(whole) - len(record)] + record[:len(record) // 2])
    assert await _poll(files, ops, tmp_path) == [] and not tb.note
    event_file.write_bytes(whole)
    assert [(p.step, p.value) for p in await _poll(files, ops, tmp_path)] == [(61, 0.5)]
    w.close()


async def test_hf_trainer_state_gives_its_log_history_and_exact_progress(tmp_path, ops):
    _run(str(PROGRAMS / "hf_trainer.py"), "out", "20", cwd=tmp_path)
    files = MetricFiles()
    points = await _poll(files, ops, tmp_path)
    assert sorted({p.step for p in points if p.name == "loss"}) == [5, 10, 15, 20], points
    assert {"grad_norm", "learning_rate"} <= {p.name for p in points}
    progress = files.progress()
    # The newest checkpoint's file is the source: the Trainer's global_step of max_steps.
    assert (progress.step, progress.total, progress.source) == (20, 20, "trainer_state.json out/checkpoint-20")
    assert files.latest()["loss"][2] == "trainer_state.json out/checkpoint-20"
    # Caught while the Trainer rewrites it: a note, the same file read again at the next poll.
    state = tmp_path / "out" / "checkpoint-20" / "trainer_state.json"
    whole = state.read_bytes()
    state.write_bytes(whole[:len(whole) // 2])
    assert await _poll(files, ops, tmp_path) == []
    assert "did not parse (being rewritten?)" in files.views()[0].note
    state.write_bytes(whole.replace(b'"global_step": 20', b'"global_step": 21'))
    await _poll(files, ops, tmp_path)
    assert files.views()[0].note == "" and files.progress().step == 21


async def test_lightning_csv_logger_with_a_column_that_appears_mid_run(tmp_path, ops):
    _run(str(PROGRAMS / "lightning_csv.py"), "logs", cwd=tmp_path)
    files = MetricFiles()
    points = await _poll(files, ops, tmp_path)
    train = [p.step for p in points if p.name == "train_loss"]
    assert train == list(range(24)), train          # 3 epochs of 8 steps, each row once
    assert [p.step for p in points if p.name == "val_loss"] == [7, 15, 23]
    (source,) = files.views()
    assert source.label == "metrics.csv logs/lightning_logs/version_0, 2 columns"


async def test_mlflow_db_rows_incrementally_and_a_locked_database_is_a_note(tmp_path, ops):
    mlflow = pytest.importorskip("mlflow")
    db = tmp_path / "mlflow.db"
    mlflow.set_tracking_uri(f"sqlite:///{db}")
    with mlflow.start_run():
        for step in range(5):
            mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
        files = MetricFiles()
        points = await _poll(files, ops, tmp_path)
        assert [(p.name, p.step) for p in points] == [("loss", s) for s in range(5)]
        mlflow.log_metric("loss", 0.1, step=5)
        assert [(p.name, p.step, p.value) for p in await _poll(files, ops, tmp_path)] == [("loss", 5, 0.1)]
        # A writer holding the database: the poll answers at once with a note, then reads on.
        con = sqlite3.connect(db)
        con.execute("BEGIN EXCLUSIVE")
        t0 = time.monotonic()
        assert await _poll(files, ops, tmp_path) == []
        assert time.monotonic() - t0 < 2
        assert "locked" in files.views()[0].note, files.views()
        con.rollback()
        con.close()
        mlflow.log_metric("loss", 0.05, step=6)
        assert [p.step for p in await _poll(files, ops, tmp_path)] == [6]
    mlflow.set_tracking_uri("")


async def test_a_directory_of_many_files_is_looked_at_in_part(tmp_path, ops, monkeypatch):
    monkeypatch.setattr(reader_mod, "MAX_ENTRIES", 3000)
    crowd = tmp_path / "crowd"
    crowd.mkdir()
    for i in range(5000):
        (crowd / f"f{i}").touch()
    files = MetricFiles()
    t0 = time.monotonic()
    await _poll(files, ops, tmp_path)
    assert time.monotonic() - t0 < 5
    assert any("stopped looking" in n and "3000 entries" in n for n in files.notes), files.notes


async def test_a_profile_names_a_metrics_directory_outside_the_run_dir(tmp_path, ops):
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path / "elsewhere" / "tb"))
    w.add_scalar("loss", 1.0, 1)
    w.close()
    (tmp_path / "run").mkdir()
    files = MetricFiles(("../elsewhere",))
    points = await _poll(files, ops, tmp_path / "run")
    assert [(p.name, p.step) for p in points] == [("loss", 1)]


async def test_a_silent_tensorboard_writer_stays_running_past_stall_after_s(place, sessions, tmp_path, monkeypatch):
    label, keys = place
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    # No run probe: no stacks either, so only the event file can say it progresses.
    s = sessions(program_profile(tmp_path / "tb", (PY, str(PROGRAMS / "tb_silent.py")), **keys,
                                 stall_after_s=2.0, probe=False))
    await s.launch(preflight=False)
    t0 = time.monotonic()
    verdicts, running_since = [], None
    # Torch's import is silent too (STARTING, or STALLED when it outlasts the 2 s limit); from
    # its first event on, watched for four stall limits and more.
    while time.monotonic() - t0 < 60 and (running_since is None or time.monotonic() - running_since < 9):
        ev, cl = await s.check()
        verdicts.append((round(time.monotonic() - t0, 1), cl.verdict.value, cl.summary))
        if running_since is None and cl.verdict is Verdict.RUNNING:
            running_since = time.monotonic()
            first = len(verdicts) - 1
        await asyncio.sleep(1.0)
    assert running_since is not None, (label, verdicts)
    assert all(v == "RUNNING" for _, v, _ in verdicts[first:]), (label, verdicts)
    assert "metrics written to TensorBoard runs/exp1" in cl.summary, cl.summary
    assert ev.activity.log_grew_at is None or not ev.activity.program_output   # it printed nothing
    assert "output" not in cl.summary, cl.summary                           # so no "output just now"


def test_check_json_has_metrics_and_progress(tmp_path, monkeypatch):
    from tests.test_cli_modes import cli

    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    cfg = tmp_path / "config.toml"
    cfg.write_text(f"[profile.tb]\nrun_dir = {json.dumps(str(tmp_path / 'run'))}\n"
                   f"command = {json.dumps([PY, str(PROGRAMS / 'tb_silent.py')])}\n"
                   "stall_after_s = 2\nmin_free_gb = 0\nprobe = false\nstop_grace_s = 2\n")
    try:
        res = cli(tmp_path, "--config", str(cfg), "--launch", "--no-preflight")
        assert res.returncode in (0, 4), res.stdout + res.stderr
        time.sleep(5)
        d = json.loads(cli(tmp_path, "--config", str(cfg), "--check", "--json").stdout)
        assert d["verdict"] == "RUNNING", d["summary"]
        loss = d["metrics"]["train/loss"]
        assert loss["step"] > 5 and loss["source"] == "TensorBoard runs/exp1", d["metrics"]
        # Nothing printed a step: the event file's newest step is the progress, its total unknown.
        progress = d["progress"]
        assert progress["step"] >= loss["step"] and progress["total"] is None, progress
        assert progress["source"] == "TensorBoard runs/exp1", progress
    finally:
        cli(tmp_path, "--config", str(cfg), "--stop")


async def test_a_big_event_file_is_read_from_its_newest_part(tmp_path, ops, monkeypatch):
    from torch.utils.tensorboard import SummaryWriter

    monkeypatch.setattr(reader_mod, "TB_FIRST_TAIL", 32 << 10)
    w = SummaryWriter(str(tmp_path / "tb"))
    for step in range(1, 4001):
        w.add_scalar("loss", 1.0 / step, step)
    w.close()
    files = MetricFiles()
    steps = []
    for _ in range(4):
        steps += [p.step for p in await _poll(files, ops, tmp_path)]
    # Resynced on a record's start (both CRCs): every step from there to the last, in order.
    assert steps and steps[-1] == 4000 and steps == list(range(steps[0], 4001)) and steps[0] > 1000, steps[:3]
    assert "read from its newest" in files.views()[0].note


async def test_without_the_agent_files_are_read_through_single_ops(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path / "runs" / "exp1"))
    for step in range(1, 11):
        w.add_scalar("train/loss", 1.0 / step, step)
    w.flush()
    sqlite3.connect(tmp_path / "mlflow.db").close()
    (tmp_path / "trackio").mkdir()
    sqlite3.connect(tmp_path / "trackio" / "exp.db").close()
    shell = await open_ops(LocalTarget(), prefer="shell")
    try:
        files = MetricFiles(("trackio",))
        assert [p.step for p in await _poll(files, shell, tmp_path)] == list(range(1, 11))
        w.add_scalar("train/loss", 0.01, 11)
        w.flush()
        assert [p.step for p in await _poll(files, shell, tmp_path)] == [11]
        notes = {v.kind: v.note for v in files.views()}
        assert "read by the agent (python3 on the target)" in notes["mlflow"], notes
        assert "read by the agent (python3 on the target)" in notes["trackio"], notes
    finally:
        w.close()
        await shell.close()


async def test_hf_trainer_progress_and_eta_while_it_runs(place, sessions, tmp_path, monkeypatch):
    from dflash_tui.run.verdict.report import RunProgress

    label, keys = place
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    s = sessions(program_profile(tmp_path / "hf", (PY, str(PROGRAMS / "hf_trainer.py"), "out", "80"), **keys,
                                 stall_after_s=30.0))
    await s.launch(preflight=False)
    seen = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < 200:
        ev, cl = await s.check()
        p = RunProgress.of(ev)
        if p is not None and p.source.startswith("trainer_state.json"):
            seen.append((p.step, p.total, p.eta_s, cl.verdict.value, cl.summary))
        if cl.verdict.value in ("FINISHED", "CRASHED", "KILLED"):
            break
        await asyncio.sleep(0.5)
    assert cl.verdict.value == "FINISHED", (label, cl.summary)
    assert seen and seen[-1][:2] == (80, 80), (label, seen)
    running = [x for x in seen if x[3] == "RUNNING" and x[2] is not None and x[0] < 80]
    assert running, (label, seen)        # an ETA from two checkpoints' steps and times
    assert any(f"step {x[0]}/80, ETA " in x[4] for x in running), (label, running)
    # The Trainer's dicts in the log and its trainer_state.json are one quantity: one series,
    # the file's points first (no "hf:loss" beside the log's "loss").
    latest, history = ev.metrics.latest, ev.metrics.history
    assert not any(name.startswith("hf:") for name in latest), latest
    assert latest["loss"][0] == 80 and latest["loss"][2].startswith("trainer_state.json out/checkpoint-"), latest
    assert latest["train_runtime"][2] == "log", latest       # only the log says it
    assert history["loss"][0] == tuple(range(5, 81, 5)), history["loss"]


def _trackio(trackio_dir: Path, *argv: str) -> None:
    """tests/programs/trackio_log.py with its store in `trackio_dir` (read: trackio 0.43)."""
    res = subprocess.run([PY, str(PROGRAMS / "trackio_log.py"), *argv], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "TRACKIO_DIR": str(trackio_dir)})
    assert res.returncode == 0, res.stderr[-3000:]


async def test_trackio_rows_of_the_newest_run_incrementally_and_a_locked_database_is_a_note(tmp_path, ops):
    pytest.importorskip("trackio")
    store, run_dir = tmp_path / "trackio", tmp_path / "run"
    run_dir.mkdir()
    _trackio(store, "exp", "run-a", "0", "3")
    files = MetricFiles(("../trackio",))          # a profile's `metrics` directory named trackio
    points = await _poll(files, ops, run_dir)
    assert [(p.name, p.step) for p in points] == [(n, s) for s in range(3) for n in ("loss", "train/acc")]
    (source,) = files.views()
    assert source.label == "trackio project exp run run-a, 2 metrics", source
    _trackio(store, "exp", "run-a", "3", "2")
    assert [(p.name, p.step, p.value) for p in await _poll(files, ops, run_dir)] == [
        ("loss", 3, 0.25), ("train/acc", 3, 0.3), ("loss", 4, 0.2), ("train/acc", 4, 0.4)]
    # A writer holding the database (trackio's TRACKIO_SQLITE_LOCKING_MODE=exclusive, as on
    # Spaces): the poll answers at once with a note, then reads on.
    con = sqlite3.connect(store / "exp.db")
    con.execute("PRAGMA locking_mode = EXCLUSIVE")
    con.execute("BEGIN EXCLUSIVE")
    t0 = time.monotonic()
    assert await _poll(files, ops, run_dir) == []
    assert time.monotonic() - t0 < 2
    assert "locked" in files.views()[0].note, files.views()
    con.rollback()
    con.close()
    _trackio(store, "exp", "run-b", "0", "1")       # a new run of the project: its rows only
    assert [(p.name, p.step) for p in await _poll(files, ops, run_dir)] == [("loss", 0), ("train/acc", 0)]
    assert files.views()[0].label.startswith("trackio project exp run run-b"), files.views()


async def test_trackio_default_store_is_read_from_the_newest_project_written_since_the_launch(tmp_path, monkeypatch):
    pytest.importorskip("trackio")
    store, run_dir = tmp_path / "hf" / "trackio", tmp_path / "run"
    run_dir.mkdir()
    _trackio(store, "old", "run-x", "0", "2")
    launch = time.time() - 30
    os.utime(store / "old.db", (launch - 60, launch - 60))     # a project of an earlier day
    _trackio(store, "new", "run-y", "0", "2")
    # The agent finds trackio's directory as trackio does: $HF_HOME/trackio here.
    monkeypatch.delenv("TRACKIO_DIR", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    o = await open_ops(LocalTarget(), python=PY, prefer="agent")
    try:
        files = MetricFiles()
        await files.poll(o, str(run_dir), time.time(), floor=launch)
        assert sorted({p.name for p in files.take()}) == ["loss", "train/acc"]
        (source,) = files.views()
        assert source.label.startswith("trackio project new run run-y"), source
    finally:
        await o.close()


async def test_a_csv_field_over_the_field_limit_and_a_deep_trainer_state_are_notes_beside_the_others(tmp_path, ops):
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path / "runs" / "exp1"))
    for step in range(1, 6):
        w.add_scalar("train/loss", 1.0 / step, step)
    w.close()
    # An unterminated quote over 5 MiB (csv's field limit is 128 KiB), and JSON 100,000 deep.
    (tmp_path / "metrics.csv").write_bytes(b"step,loss\n1,0.5\n2,\"" + (b"x" * 1023 + b"\n") * 5200)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "trainer_state.json").write_bytes(b"[" * 100_000 + b"]" * 100_000)
    files = MetricFiles()
    points = []
    for _ in range(8):      # the CSV is read 1 MiB a poll
        points += await _poll(files, ops, tmp_path)
    assert [p.step for p in points if p.name == "train/loss"] == [1, 2, 3, 4, 5]
    assert [(p.name, p.step) for p in points if p.name == "loss"] == [("loss", 1)]
    notes = {v.kind: v.note for v in files.views()}
    assert "larger than field limit" in notes["csv"] and "read no further" in notes["csv"], notes
    assert "nested too deep" in notes["trainer_state"], notes
    assert notes["tensorboard"] == "", notes
    # Not read again while it is the same file (8 MiB of JSON a poll would be wasted).
    assert files.sources["trainer_state"].known is not None


async def test_steps_and_totals_beyond_2_53_are_ignored_with_a_note(tmp_path, ops):
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path / "runs" / "exp1"))
    w.add_scalar("train/loss", 0.5, 7)
    w.add_scalar("train/loss", 0.4, 2 ** 62)
    w.close()
    (tmp_path / "out").mkdir()
    state = '{"global_step": %s, "max_steps": %s, "log_history": [{"loss": 1.0, "step": 3}, {"loss": 2.0, "step": %s}]}'
    (tmp_path / "out" / "trainer_state.json").write_text(state % ("9" * 400, 2 ** 63, 2 ** 60))
    files = MetricFiles()
    points = await _poll(files, ops, tmp_path)
    assert sorted((p.name, p.step) for p in points) == [("loss", 3), ("train/loss", 7)], points
    assert files.progress() is None
    notes = {v.kind: v.note for v in files.views()}
    assert "beyond 2^53" in notes["trainer_state"] and "beyond 2^53" in notes["tensorboard"], notes
    (tmp_path / "out" / "trainer_state.json").write_text(state % (40, 2 ** 63, 30))
    await _poll(files, ops, tmp_path)
    p = files.progress()
    assert (p.step, p.total) == (40, None), p


def _endless_store(db: Path, kind: str) -> None:
    """A SQLite file whose query never ends: a trackio project whose `metrics` is a recursive
    view, an mlflow.db whose `runs` is one (the query orders them: it never gets a first row)."""
    con = sqlite3.connect(db)
    endless = ("WITH RECURSIVE c(id, run_name, step, metrics, run_uuid, start_time) AS (SELECT 1, 'r', 0, '{}', "
               "'r', 1 UNION ALL SELECT id + 1, run_name, step + 1, metrics, run_uuid, start_time + 1 FROM c) "
               "SELECT * FROM c")
    if kind == "trackio":
        con.execute(f"CREATE VIEW metrics AS {endless}")
    else:
        con.execute("CREATE TABLE metrics (key TEXT, value REAL, timestamp INTEGER, step INTEGER, "
                    "is_nan INTEGER, run_uuid TEXT)")
        con.execute("INSERT INTO metrics VALUES ('loss', 1.0, 1, 1, 0, 'r')")
        con.execute(f"CREATE VIEW runs AS {endless}")
    con.commit()
    con.close()


async def test_a_sqlite_store_that_never_answers_is_a_note_within_the_polls_budget(tmp_path, ops):
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path / "runs" / "exp1"))
    w.add_scalar("train/loss", 0.5, 1)
    w.close()
    (tmp_path / "trackio").mkdir()
    _endless_store(tmp_path / "trackio" / "exp.db", "trackio")
    _endless_store(tmp_path / "mlflow.db", "mlflow")
    files = MetricFiles(("trackio",))
    t0 = time.monotonic()
    points = await _poll(files, ops, tmp_path)
    took = time.monotonic() - t0
    assert took < 4, took          # both queries interrupted within the request's 2 s for SQLite
    assert [(p.name, p.step) for p in points] == [("train/loss", 1)]
    notes = {v.kind: v.note for v in files.views()}
    for kind in ("trackio", "mlflow"):
        assert "no answer within" in notes[kind] or "not read this poll" in notes[kind], notes
        assert "asked again in 30 s" in notes[kind], notes
    # Not asked again at the next polls: they cost nothing until SQL_RETRY_S has passed.
    t0 = time.monotonic()
    await _poll(files, ops, tmp_path, time.time())
    assert time.monotonic() - t0 < 0.5


def test_a_sources_label_counts_its_series_in_plain_english():
    from dflash_tui.run.evidence.metric_files.reader import _TrainerState
    src = _TrainerState("/r/out/trainer_state.json", "out/trainer_state.json")
    src.names = {"loss", "learning_rate", "grad_norm"}
    assert src.label().endswith(", 3 series"), src.label()


async def test_a_relaunchs_series_are_its_own_and_the_previous_runs_files_are_drawn_as_such(sessions, tmp_path,
                                                                                           monkeypatch):
    """Two runs of a TensorBoard writer in one run dir, each into a directory of its own: after
    the relaunch the plain names are the new run's (no "tb:" prefix), and the files written
    before its launch are the previous run's series."""
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    tb = str(PROGRAMS / "tb_silent.py")
    s = sessions(program_profile(tmp_path / "tb", (PY, tb, "runs/a"), stall_after_s=30.0, probe=False))

    async def newest(at_least: int):
        for _ in range(120):
            ev, _ = await s.check()
            got = ev.metrics.latest.get("train/loss") if ev.metrics is not None else None
            if got is not None and got[0] >= at_least:
                return ev
            await asyncio.sleep(0.5)
        raise AssertionError(f"no train/loss at step {at_least}: {ev.metrics}")

    await s.launch(preflight=False)
    first = (await newest(25)).metrics.latest["train/loss"][0]
    await s.stop()
    await s.launch(preflight=False, relaunch=True, argv=(PY, tb, "runs/b"))
    m = (await newest(3)).metrics
    assert not [name for name in m.latest if name.startswith("tb:")], m.latest
    assert m.latest["train/loss"][2] == "TensorBoard runs/b", m.latest
    assert m.history["train/loss"][0][0] == 1 and m.history["train/loss"][1][0] == 5.0, m.history
    assert [v.label.split(",")[0] for v in m.sources] == ["TensorBoard runs/b"], m.sources
    assert m.previous_sources == ("TensorBoard runs/a",)
    steps, values = m.previous["train/loss"]
    assert steps[0] == 1 and steps[-1] >= first and values[0] == 5.0

@pytest.mark.parametrize("mode", ["touch", "garbage", "same_step"])
async def test_a_fresh_event_file_without_a_new_step_is_stalled_on_time(mode, sessions, tmp_path, monkeypatch):
    """A loop that hangs while a monitoring thread keeps its TensorBoard file fresh (mtime only,
    garbage appended, the same step logged again): STALLED past stall_after_s, in a watched
    session and in a one-shot --check, the file named as written without a new step."""
    from tests.test_cli_modes import cli

    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    run_dir = tmp_path / "run"
    s = sessions(program_profile(run_dir, (PY, str(PROGRAMS / "tb_then_hang.py"), mode), stall_after_s=3.0,
                                 probe=False))
    await s.launch(preflight=False)
    t0 = time.monotonic()
    verdicts, stalled_at, first_step_at = [], None, None
    while time.monotonic() - t0 < 60 and stalled_at is None:
        ev, cl = await s.check()
        verdicts.append((round(time.monotonic() - t0, 1), cl.verdict.value, cl.summary))
        if first_step_at is None and ev.activity is not None and ev.activity.metrics_at is not None:
            first_step_at = time.monotonic()
        if cl.verdict is Verdict.STALLED and first_step_at is not None:    # torch's import is silent too
            stalled_at = time.monotonic()
        await asyncio.sleep(0.5)
    assert stalled_at is not None, (mode, verdicts)
    # Ten steps (2 s) of training, then the stall limit (3 s) and a poll or two.
    assert stalled_at - first_step_at < 2 + 3 + 3, (mode, verdicts)
    assert "runs/exp1 written" in cl.summary and "no new step for" in cl.summary, (mode, cl.summary)
    # One-shot: a fresh reader of the same files, past the limit.
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[profile.p]\nrun_dir = {json.dumps(str(run_dir))}\ncommand = [\"true\"]\n"
                   "stall_after_s = 3\nmin_free_gb = 0\nprobe = false\n")
    d = json.loads(cli(tmp_path, "--config", str(cfg), "--check", "--json").stdout)
    assert d["verdict"] == "STALLED", (mode, d["summary"])
    assert "runs/exp1 written" in d["summary"] and "no new step for" in d["summary"], (mode, d["summary"])


def _crowd(folder: Path, n: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (folder / f"sample_{i:06d}.json").touch()


async def test_the_one_event_file_beside_100000_files_is_found(tmp_path, ops):
    from torch.utils.tensorboard import SummaryWriter

    _crowd(tmp_path, 100_000)                  # the run dir itself holds them (a data dump)
    w = SummaryWriter(str(tmp_path / "runs" / "exp1"))
    w.add_scalar("train/loss", 0.5, 1)
    w.close()
    files = MetricFiles()
    t0 = time.monotonic()
    points = await _poll(files, ops, tmp_path)
    assert time.monotonic() - t0 < 5
    assert [(p.name, p.step) for p in points] == [("train/loss", 1)], files.notes
    assert files.notes == [], files.notes


async def test_a_search_that_must_stop_says_how_far_it_went_and_looks_at_the_newest_first(tmp_path, ops,
                                                                                              monkeypatch):
    from torch.utils.tensorboard import SummaryWriter

    monkeypatch.setattr(reader_mod, "MAX_ENTRIES", 30_000)
    for name in ("dump_a", "dump_b"):
        _crowd(tmp_path / name, 20_000)
        os.utime(tmp_path / name, (time.time() - 3600, time.time() - 3600))   # written an hour ago
    w = SummaryWriter(str(tmp_path / "runs" / "exp1"))
    w.add_scalar("train/loss", 0.5, 1)
    w.close()
    files = MetricFiles()
    points = await _poll(files, ops, tmp_path)
    assert [(p.name, p.step) for p in points] == [("train/loss", 1)], files.notes
    words = " ".join(files.notes)
    assert "stopped looking in" in words and "after 30000 entries" in words, words
    assert "; dump_a only in part; not looked in: none" in words or "; dump_b only in part; not looked in: none" in words, words


def test_hostile_metric_files_are_a_note_beside_the_verdict_of_check(tmp_path, monkeypatch):
    """--check of a live run whose run dir holds a CSV over csv's field limit, a trainer_state.json
    100,000 deep, a trackio project and an mlflow.db whose queries never end, and steps beyond
    2^53: RUNNING (exit 0, never "internal error" nor UNREACHABLE) within the poll's budget, the
    TensorBoard metrics read, each bad file named in the metric_files check."""
    from tests.test_cli_modes import cli

    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    run = tmp_path / "run"
    cfg = tmp_path / "config.toml"
    cfg.write_text(f"[profile.tb]\nrun_dir = {json.dumps(str(run))}\n"
                   f"command = {json.dumps([PY, str(PROGRAMS / 'tb_silent.py')])}\n"
                   "stall_after_s = 20\nmin_free_gb = 0\nprobe = false\nstop_grace_s = 2\nmetrics = [\"trackio\"]\n")
    try:
        res = cli(tmp_path, "--config", str(cfg), "--launch", "--no-preflight")
        assert res.returncode in (0, 4), res.stdout + res.stderr
        (run / "metrics.csv").write_bytes(b"step,loss\n1,0.5\n2,\"" + (b"x" * 1023 + b"\n") * 5200)
        (run / "out").mkdir()
        (run / "out" / "trainer_state.json").write_bytes(b"[" * 100_000 + b"]" * 100_000)
        (run / "trackio").mkdir()
        _endless_store(run / "trackio" / "p.db", "trackio")
        _endless_store(run / "mlflow.db", "mlflow")
        time.sleep(6)
        t0 = time.monotonic()
        res = cli(tmp_path, "--config", str(cfg), "--check", "--json")
        took = time.monotonic() - t0
        assert res.returncode == 0 and "internal error" not in res.stderr, (res.returncode, res.stderr[-2000:])
        d = json.loads(res.stdout)
        assert d["verdict"] == "RUNNING", d["summary"]
        assert took < 10, took
        assert d["metrics"]["train/loss"]["step"] > 5, d["metrics"]
        (note,) = [c for c in d["checks"] if c["id"] == "metric_files"]
        assert note["state"] == "warn", note
        for words in ("larger than field limit", "nested too deep", "no answer within"):
            assert words in note["cause"], note["cause"]
    finally:
        cli(tmp_path, "--config", str(cfg), "--stop")
