"""The checkpoint search runs only when something moved (run/evidence/checkpoint_gate.py): real
Hugging Face-style checkpoint folders on disk, the real agent counting its requests. A steady
look stats the folders and searches nothing; a new checkpoint, a torn one completed, one rotated
away are each seen at the next look past the cadence; a file rewritten in place (no folder
moves) at the safety interval; and on a live run the folders' stat rides in the look's one
request."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import struct
import time
import zipfile
from pathlib import Path

import pytest

from dflash_tui.remote.local import LocalTarget
from dflash_tui.run.evidence.activity import ProgressTracker
from dflash_tui.run.evidence.checkpoint_gate import SAFETY_MAX_S, SAFETY_S, SAFETY_SHARE, FolderGate
from dflash_tui.run.evidence.checkpoints import CheckpointLooks
from dflash_tui.run.evidence.observe import gather

from tests.run.evidence.test_first_look import CountingAgent, live_run  # noqa: F401 (a fixture)

pytestmark = pytest.mark.timeout(60)

_HEADER = b'{"w":{"dtype":"F32","shape":[256],"data_offsets":[0,1024]}}'


def set_mtime(path: Path, ago_s: float) -> None:
    t = time.time() - ago_s
    os.utime(path, (t, t))


def save_hf(run: Path, step: int, *, state: bool = True, ago_s: float = 600.0) -> Path:
    """A Hugging Face Trainer's checkpoint-N/ (trainer_state.json written last, when `state`),
    saved `ago_s` earlier; the run dir's own mtime is left as the save made it."""
    d = run / f"checkpoint-{step}"
    d.mkdir()
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(_HEADER)) + _HEADER + bytes(1024))
    with zipfile.ZipFile(d / "optimizer.pt", "w") as z:
        z.writestr("optimizer/data.pkl", b"x" * 4096)
    if state:
        (d / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
    for p in [*d.iterdir(), d]:
        set_mtime(p, ago_s)
    return d


@pytest.fixture
async def agent():
    a = await CountingAgent.start(LocalTarget())
    yield a
    await a.close()


@pytest.fixture
def run(tmp_path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    for step in (10, 20):
        save_hf(run, step)
    save_hf(run, 30, state=False)        # torn: its trainer_state.json never came
    set_mtime(run, 600)
    return run


async def steady(looks: CheckpointLooks, agent: CountingAgent, run: Path):
    """Looks until one past the cadence searches nothing: the folders are watched."""
    for _ in range(3):
        agent.asked.clear()
        view = await looks.look(agent, str(run), time.time())
        if "find_files" not in agent.asked:
            return view
    raise AssertionError(f"every look searched: {looks.why_searched}")


async def test_a_steady_look_stats_the_folders_in_one_request_and_searches_nothing(agent, run):
    looks = CheckpointLooks(every_s=0.0)           # every look is past the cadence
    first = await looks.look(agent, str(run), time.time())
    assert "find_files" in agent.asked and first.last_complete.step == 20
    await steady(looks, agent, run)
    for _ in range(3):
        agent.asked.clear()
        view = await looks.look(agent, str(run), time.time())
        assert agent.asked == ["stat"], agent.asked
        assert view is looks.view and view.last_complete.step == 20
    assert set(looks.prefetch()) == {str(run), str(run / "checkpoint-30")}   # the parent, the torn one


async def test_only_the_look_past_the_cadence_asks_the_folders_up_front(agent, tmp_path):
    """Looks a second apart and a 5 s cadence: of each five looks only the one past the cadence
    carries the folders' stat (known from the looks' spacing before it comes); the others ask
    nothing of them."""
    run = tmp_path / "run"
    run.mkdir()
    save_hf(run, 10, ago_s=700)
    save_hf(run, 20, ago_s=600)          # saved 100 s apart: the cadence stays at every_s
    set_mtime(run, 600)
    looks = CheckpointLooks(every_s=5.0)
    t = time.time()
    await looks.look(agent, str(run), t)
    asked_ahead = []
    for i in range(1, 11):
        asked_ahead.append(bool(looks.prefetch()))
        await looks.look(agent, str(run), t + i)
    assert asked_ahead == [False, False, False, False, True] * 2, asked_ahead
    assert looks.prefetch() == []
    looks.expire()
    assert looks.prefetch() == [str(run)]       # a recovery's look


async def test_a_new_checkpoint_folder_is_seen_at_the_next_look(agent, run):
    looks = CheckpointLooks(every_s=0.0)
    await steady(looks, agent, run)
    save_hf(run, 40)
    set_mtime(run, 300)                 # the run dir moved (and not just now: no coarse-clock doubt)
    agent.asked.clear()
    view = await looks.look(agent, str(run), time.time())
    assert "find_files" in agent.asked and looks.why_searched == f"{run} moved", looks.why_searched
    assert view.last_complete.step == 40


async def test_a_torn_checkpoint_completed_later_is_seen(agent, run):
    looks = CheckpointLooks(every_s=0.0)
    view = await steady(looks, agent, run)
    assert [Path(c.path).name for c in view.torn] == ["checkpoint-30"]
    torn = run / "checkpoint-30"
    (torn / "trainer_state.json").write_text(json.dumps({"global_step": 30, "log_history": []}))
    set_mtime(torn / "trainer_state.json", 300)
    set_mtime(torn, 300)                # its folder moved; the run dir did not
    agent.asked.clear()
    view = await looks.look(agent, str(run), time.time())
    assert "find_files" in agent.asked, looks.why_searched
    assert view.last_complete.step == 30 and not view.torn


async def test_a_checkpoint_rotated_away_is_seen(agent, run):
    looks = CheckpointLooks(every_s=0.0)
    await steady(looks, agent, run)
    shutil.rmtree(run / "checkpoint-10")  # save_total_limit: the oldest goes
    set_mtime(run, 300)
    view = await looks.look(agent, str(run), time.time())
    assert [Path(c.path).name for c in view.found] == ["checkpoint-20", "checkpoint-30"], view.found


async def test_a_file_rewritten_in_place_is_seen_at_the_safety_interval(agent, run):
    safety_s = 3.0
    looks = CheckpointLooks(every_s=0.0, safety_s=safety_s)
    await steady(looks, agent, run)
    searched = time.monotonic()
    weights = run / "checkpoint-20" / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)   # cut short in place: no folder moves
    set_mtime(weights, 300)
    agent.asked.clear()
    view = await looks.look(agent, str(run), time.time())
    assert agent.asked == ["stat"] and view.last_complete.step == 20   # not seen yet: nothing moved
    await asyncio.sleep(max(0.0, safety_s - (time.monotonic() - searched)) + 0.2)
    agent.asked.clear()
    view = await looks.look(agent, str(run), time.time())
    assert "find_files" in agent.asked and looks.why_searched == "the safety interval passed"
    assert view.last_complete.step == 10
    assert {Path(c.path).name for c in view.torn} == {"checkpoint-20", "checkpoint-30"}


async def test_the_newest_file_checkpoint_saved_over_in_place_is_seen_at_the_next_look(agent, tmp_path):
    """`last.pt` rewritten in place moves no folder; the newest file-checkpoints are watched
    themselves, and the search that one of them starts stats every file."""
    run = tmp_path / "run"
    (run / "ckpt").mkdir(parents=True)
    for step in (10, 20):
        with zipfile.ZipFile(run / "ckpt" / f"step-{step}.pt", "w") as z:
            z.writestr("archive/data.pkl", b"x" * 4096)
        set_mtime(run / "ckpt" / f"step-{step}.pt", 700 - step)
    set_mtime(run / "ckpt", 600)
    set_mtime(run, 600)
    looks = CheckpointLooks(every_s=0.0)
    view = await steady(looks, agent, run)
    assert view.last_complete.step == 20
    assert str(run / "ckpt" / "step-20.pt") in looks.prefetch()
    newest = run / "ckpt" / "step-20.pt"
    os.truncate(newest, newest.stat().st_size // 2)      # saved over, cut short: no folder moves
    set_mtime(newest, 300)
    agent.asked.clear()
    view = await looks.look(agent, str(run), time.time())
    assert "find_files" in agent.asked and looks.why_searched == f"{newest} moved", looks.why_searched
    assert view.last_complete.step == 10 and [Path(c.path).name for c in view.torn] == ["step-20.pt"]


def test_a_dear_safety_search_runs_less_often():
    """The safety interval is the last safety search's time over SAFETY_SHARE, from SAFETY_S to
    SAFETY_MAX_S; the first search and the searches of moved folders do not set it."""
    gate = FolderGate()
    assert gate.safety_interval_s == SAFETY_S
    gate.searched(0.0, ("/r",), {}, "all", 5.0)
    gate.searched(1.0, ("/r",), {}, "moved", 5.0)
    assert gate.safety_interval_s == SAFETY_S
    gate.searched(2.0, ("/r",), {}, "every file", 0.001)       # cheap: every minute
    assert gate.safety_interval_s == SAFETY_S
    gate.searched(3.0, ("/r",), {}, "every file", 0.013)       # 600 checkpoints' worth
    assert gate.safety_interval_s == pytest.approx(0.013 / SAFETY_SHARE) and 250 < gate.safety_interval_s < 270
    gate.searched(4.0, ("/r",), {}, "every file", 2.0)
    assert gate.safety_interval_s == SAFETY_MAX_S
    assert gate.why_search(4.0 + SAFETY_MAX_S + 1, "", {}) == "the safety interval passed"
    assert gate.scope(4.0 + 300) == "moved" and gate.scope(4.0 + SAFETY_MAX_S + 1) == "every file"


async def test_a_recovery_searches_at_once_whatever_the_folders_say(agent, run):
    looks = CheckpointLooks(every_s=5.0)
    await looks.look(agent, str(run), time.time())
    looks.expire()
    agent.asked.clear()
    await looks.look(agent, str(run), time.time())
    assert "find_files" in agent.asked and looks.why_searched == "no search yet"


async def test_on_a_live_run_the_folders_stat_rides_in_the_looks_one_request(live_run, agent):
    run = Path(live_run.profile.run_dir)
    out = run / "out"
    out.mkdir()
    for step in (10, 20):
        save_hf(out, step)
    set_mtime(out, 600)
    tracker = ProgressTracker(checkpoint_paths=("out",))
    tracker.checkpoints.every_s = 0.0
    for _ in range(4):                     # the first looks read everything and search
        ev = await gather(agent, str(run), tracker=tracker)
        await asyncio.sleep(0.3)
    assert ev.checkpoints.last_complete.step == 20, ev.checkpoints
    assert str(out) in tracker.checkpoints.prefetch()
    for _ in range(3):
        agent.asked.clear()
        ev = await gather(agent, str(run), tracker=tracker)
        assert "find_files" not in agent.asked and "stat" not in agent.asked, agent.asked
        assert agent.asked.count("observe") == 1, agent.asked
        assert ev.checkpoints.last_complete.step == 20
        await asyncio.sleep(0.3)
