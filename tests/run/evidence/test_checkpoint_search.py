"""A search that runs because one folder moved costs what that folder costs (the agent lists
again only the folders whose mtime moved, run/evidence/checkpoints.py asks it since its last
answer): real checkpoint folders on disk, 600 checkpoints, the real agent's own account of what
it listed and stat'd. An unfinished checkpoint grows in place, which moves no folder: it is
stat'd again at every search until it is complete."""

from __future__ import annotations

import json
import struct
import time
import zipfile
from pathlib import Path

import pytest

from dflash_tui.remote.local import LocalTarget
from dflash_tui.run.evidence.checkpoints import CheckpointLooks

from tests.run.evidence.test_checkpoint_gate import _HEADER, save_hf, set_mtime
from tests.run.evidence.test_first_look import CountingAgent

pytestmark = pytest.mark.timeout(90)


class SearchRecordingAgent(CountingAgent):
    """The real agent; keeps the answer of every search (find_files) it was asked."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.searches: list[dict] = []

    async def call(self, op, timeout=None, **args):
        answer = await super().call(op, timeout, **args)
        if op == "find_files":
            self.searches.append(answer)
        return answer


@pytest.fixture
async def agent():
    a = await SearchRecordingAgent.start(LocalTarget())
    yield a
    await a.close()


def zip_bytes(step: int) -> bytes:
    import io
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("step/data.pkl", bytes([step % 251]) * 4096)
    return buf.getvalue()


async def steady(looks: CheckpointLooks, agent: CountingAgent, run: Path):
    """Looks until one searches nothing: every file judged (32 a look), the folders watched."""
    for _ in range(120):
        agent.asked.clear()
        view = await looks.look(agent, str(run), time.time())
        if "find_files" not in agent.asked:
            return view
    raise AssertionError(f"every look searched: {looks.why_searched}")


@pytest.fixture
def big_run(tmp_path) -> Path:
    """300 Hugging Face checkpoint folders and 300 torch.save zips beside 300 other files: 600
    checkpoints, 1,200 files found."""
    run = tmp_path / "run"
    ckpt = run / "ckpt"
    ckpt.mkdir(parents=True)
    for i in range(300):
        save_hf(run, (i + 1) * 10, ago_s=4000 - i * 10)
        p = ckpt / f"step-{i}.pt"
        p.write_bytes(zip_bytes(i))
        set_mtime(p, 4000 - i * 10)
        (ckpt / f"notes-{i}.txt").write_text("n")
    set_mtime(ckpt, 600)
    set_mtime(run, 600)
    return run


async def test_a_search_after_one_new_checkpoint_lists_and_stats_only_its_folder(agent, big_run):
    looks = CheckpointLooks(every_s=0.0)
    await steady(looks, agent, big_run)
    first = agent.searches[0]
    assert first["full"] and len(first["found"]) == 1200 and first["stated"] == 1200, \
        (first["listed"], first["stated"])
    save_hf(big_run, 9990, ago_s=300)
    set_mtime(big_run, 300)               # the run dir moved (not just now: no coarse-clock doubt)
    agent.searches.clear()
    view = await looks.look(agent, str(big_run), time.time())
    assert looks.why_searched == f"{big_run} moved", looks.why_searched
    (answer,) = agent.searches
    # The run dir listed again (a new entry) and the new folder listed, its 3 files stat'd; the
    # 300 other folders and ckpt/ only stat'd themselves, their files kept as found before.
    assert not answer["full"] and answer["listed"] == 2 and answer["stated"] == 3, \
        (answer["listed"], answer["stated"])
    assert sorted(Path(r["path"]).name for r in answer["found"]) == \
        ["model.safetensors", "optimizer.pt", "trainer_state.json"]
    assert len(answer["kept"]) == 301
    assert len(view.found) == 601 and view.last_complete.step == 9990, view.last_complete


async def test_a_torch_save_completed_in_place_is_found(agent, big_run):
    """A zip among 600 others, written in place: cut short first (being written), then whole
    (its central directory, the zip's end, comes last); its folder never moves after it appears."""
    looks = CheckpointLooks(every_s=0.0)
    await steady(looks, agent, big_run)
    new = big_run / "ckpt" / "step-300.pt"
    whole = zip_bytes(300)
    new.write_bytes(whole[: len(whole) // 3])
    set_mtime(big_run / "ckpt", 300)     # its appearance seen as an older move: the listing is trusted
    view = await looks.look(agent, str(big_run), time.time())
    assert view.newest.path == str(new) and view.newest.writing, view.newest
    agent.searches.clear()
    for size in (2 * len(whole) // 3, len(whole)):
        with open(new, "r+b") as f:      # grows in place: no entry of ckpt/ changes
            f.seek(0, 2)
            f.write(whole[f.tell():size])
        view = await looks.look(agent, str(big_run), time.time())
        assert looks.why_searched == "a checkpoint is being written", looks.why_searched
    assert view.last_complete.path == str(new) and not view.torn and not view.writing, view.newest
    # Each search stat'd that one file again, and listed no folder.
    assert [(a["full"], a["listed"], a["stated"]) for a in agent.searches] == [(False, 0, 1)] * 2


async def test_a_folder_checkpoint_whose_files_grow_then_its_marker_appears_is_found(agent, big_run):
    """A Hugging Face checkpoint saved slowly: its weights grow in place over several looks, then
    trainer_state.json comes last."""
    looks = CheckpointLooks(every_s=0.0)
    await steady(looks, agent, big_run)
    d = big_run / "checkpoint-9990"
    d.mkdir()
    weights = struct.pack("<Q", len(_HEADER)) + _HEADER + bytes(1024)
    (d / "model.safetensors").write_bytes(weights[:100])
    set_mtime(d, 300)
    set_mtime(big_run, 300)
    view = await looks.look(agent, str(big_run), time.time())
    assert view.newest.path == str(d) and view.newest.writing, view.newest
    with open(d / "model.safetensors", "r+b") as f:
        f.seek(100)
        f.write(weights[100:])
    agent.searches.clear()
    view = await looks.look(agent, str(big_run), time.time())
    assert view.newest.path == str(d) and view.newest.writing, view.newest
    assert view.newest.bytes == len(weights), view.newest            # its grown size, seen
    (answer,) = agent.searches
    assert not answer["full"] and answer["listed"] == 1, answer["listed"]   # the unfinished folder
    (d / "trainer_state.json").write_text(json.dumps({"global_step": 9990, "log_history": []}))
    set_mtime(d, 300)
    view = await looks.look(agent, str(big_run), time.time())
    assert view.last_complete.path == str(d) and view.last_complete.step == 9990, view.newest


async def test_a_search_after_the_safety_interval_or_a_recovery_lists_everything(agent, big_run):
    looks = CheckpointLooks(every_s=0.0, safety_s=60.0)
    await steady(looks, agent, big_run)
    looks.expire()
    agent.searches.clear()
    await looks.look(agent, str(big_run), time.time())
    (answer,) = agent.searches
    assert answer["full"] and answer["stated"] == 1200 and answer["listed"] == 302, answer["listed"]
