"""Checkpoints as evidence: real checkpoints of real trainers (a Hugging Face Trainer, Lightning's
ModelCheckpoint, torch.distributed.checkpoint.save, torch.save) found and judged complete or torn
through both ways of asking a target (the agent, ShellOps), with the same answers; and the
hostile and huge ones (100,000 files, a 50 GB sparse file, a forged zip directory) judged within
a poll's budget."""

from __future__ import annotations

import asyncio
import os
import shutil
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from dflash_tui.remote.agent import AgentOps
from dflash_tui.remote.local import LocalTarget
from dflash_tui.remote.shell_ops import ShellOps
from dflash_tui.run.evidence.checkpoints import CheckpointLooks
from dflash_tui.run.verdict.checklist import CheckId, CheckState
from dflash_tui.run.verdict.checks.checkpoints import checkpoint_check

pytestmark = pytest.mark.timeout(300)

PROGRAMS = Path(__file__).resolve().parents[2] / "programs"
LOOK_BUDGET_S = 1.0     # a look at the checkpoints must fit well inside a 1 s poll


def run_program(*argv: str) -> None:
    res = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=240,
                         env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"})
    assert res.returncode == 0, res.stderr[-2000:]


def aged(root: Path, seconds: float) -> None:
    """Every file under root written `seconds` earlier: saved before this look, as a real run's are."""
    for p in [root, *root.rglob("*")]:
        st = p.stat()
        os.utime(p, (st.st_atime - seconds, st.st_mtime - seconds))


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hf") / "out"
    run_program(str(PROGRAMS / "hf_trainer.py"), str(out), "20", "0.01")
    return out


@pytest.fixture(scope="module")
def lightning_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lightning") / "out"
    run_program(str(PROGRAMS / "lightning_csv.py"), str(out), "ckpt")
    return out


@pytest.fixture(scope="module")
def dcp_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dcp") / "out"
    run_program(str(PROGRAMS / "dcp_save.py"), str(out), "3", "0.05")
    return out


@pytest.fixture(params=["agent", "shell"])
async def ops(request):
    target = LocalTarget()
    o = await (AgentOps.start(target) if request.param == "agent" else ShellOps.start(target))
    yield o
    await o.close()


def copy(src: Path, tmp_path: Path, age_s: float = 600.0) -> Path:
    run = tmp_path / "run"
    shutil.copytree(src, run, symlinks=True)
    aged(run, age_s)
    return run


async def look(ops, run_dir: Path, named: tuple[str, ...] = ()):
    return await CheckpointLooks(named).look(ops, str(run_dir), time.time())


async def test_hf_trainer_checkpoints_are_complete_and_one_cut_short_is_torn(ops, hf_run, tmp_path):
    run = copy(hf_run, tmp_path)
    view = await look(ops, run)
    last = view.last_complete
    assert (last.format, last.step, Path(last.path).name) == ("hf", 20, "checkpoint-20"), view
    assert last.bytes > 100_000 and not view.torn
    assert view.to_json(time.time())["last_complete"]["age_s"] >= 600
    # A crash in the middle of the save: its weight file cut short (written long ago).
    weights = run / "checkpoint-20" / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)
    aged(run / "checkpoint-20", 600)
    view = await look(ops, run)
    assert Path(view.last_complete.path).name == "checkpoint-10"
    (torn,) = view.torn
    assert Path(torn.path).name == "checkpoint-20" and torn.why.startswith("model.safetensors: "), torn.why
    check = checkpoint_check(view, time.time(), live=True)
    assert check.id == CheckId.CHECKPOINT and check.state is CheckState.WARN
    assert "checkpoint-20 is torn" in check.cause and "step 10" in check.cause, check.cause


async def test_hf_checkpoint_without_its_trainer_state_is_torn_and_a_fresh_one_is_being_written(ops, hf_run, tmp_path):
    run = copy(hf_run, tmp_path)
    (run / "checkpoint-20" / "trainer_state.json").unlink()
    view = await look(ops, run)
    assert [Path(c.path).name for c in view.torn] == ["checkpoint-20"]
    assert "trainer_state.json" in view.torn[0].why
    # The same, written a moment ago: a save in progress, not torn (and not complete).
    now = time.time()
    for p in (run / "checkpoint-20").iterdir():
        os.utime(p, (now, now))
    view = await look(ops, run)
    assert not view.torn and Path(view.last_complete.path).name == "checkpoint-10"
    assert view.newest.writing


async def test_lightning_model_checkpoint_files_and_a_cut_one(ops, lightning_run, tmp_path):
    run = copy(lightning_run, tmp_path)
    view = await look(ops, run)
    assert (view.last_complete.format, view.last_complete.step) == ("lightning", 24), view
    assert len(view.complete) == 6 and not view.torn
    last = Path(view.last_complete.path)
    before = last.stat().st_mtime
    os.truncate(last, last.stat().st_size - 100)
    os.utime(last, (before, before))      # cut by a crash long ago
    view = await look(ops, run)
    assert view.last_complete.step == 20
    assert "end-of-central-directory" in view.torn[0].why, view.torn


async def test_distributed_checkpoint_folders_and_one_without_metadata(ops, dcp_run, tmp_path):
    run = copy(dcp_run, tmp_path)
    view = await look(ops, run)
    assert (view.last_complete.format, view.last_complete.step) == ("dcp", 30)
    (run / "step_30" / ".metadata").unlink()
    view = await look(ops, run)
    assert view.last_complete.step == 20 and ".metadata" in view.torn[0].why


async def test_a_profiles_folders_are_searched_too(ops, lightning_run, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copytree(lightning_run / "ckpt", tmp_path / "elsewhere" / "weights")
    aged(tmp_path / "elsewhere", 60)
    assert (await look(ops, run)).last_complete is None
    view = await look(ops, run, ("../elsewhere/weights",))
    assert view.last_complete.step == 24


def _torch_save_zip(path: Path) -> None:
    subprocess.run([sys.executable, "-c", "import sys, torch; torch.save({'w': torch.ones(1000)}, sys.argv[1])",
                    str(path)], check=True, timeout=120)


async def test_a_forged_zip_directory_is_torn_at_once(ops, tmp_path):
    run = tmp_path / "run"
    (run / "ckpt").mkdir(parents=True)
    good = run / "ckpt" / "step-1.pt"
    _torch_save_zip(good)
    data = bytearray(good.read_bytes())
    # The end record says the directory is at an offset past the end of the file, with more
    # entries than a reader could ever walk.
    forged = run / "ckpt" / "step-2.pt"
    i = data.rfind(b"PK\x05\x06")
    struct.pack_into("<HHII", data, i + 8, 0xFFFE, 0xFFFE, 0x7FFFFFF0, 0x7FFFFFF0)
    j = data.rfind(b"PK\x06\x07")
    k = struct.unpack_from("<Q", data, j + 8)[0]
    struct.pack_into("<QQQQ", data, k + 24, 1 << 60, 1 << 60, 1 << 62, 1 << 40)
    forged.write_bytes(bytes(data))
    zipped = run / "ckpt" / "step-3.pt"       # a plain zip (no ZIP64), its directory offset moved
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("a/data.pkl", b"x" * 1000)
    raw = bytearray(zipped.read_bytes())
    e = raw.rfind(b"PK\x05\x06")
    struct.pack_into("<I", raw, e + 16, struct.unpack_from("<I", raw, e + 16)[0] - 7)
    zipped.write_bytes(bytes(raw))
    aged(run, 60)
    t0 = time.monotonic()
    view = await look(ops, run)
    assert time.monotonic() - t0 < LOOK_BUDGET_S
    assert view.last_complete.path == str(good)
    whys = {Path(c.path).name: c.why for c in view.torn}
    assert set(whys) == {"step-2.pt", "step-3.pt"}, whys
    assert "forged or cut" in whys["step-2.pt"] and "forged or cut" in whys["step-3.pt"], whys


async def test_a_50_gb_safetensors_file_is_judged_from_its_header(ops, tmp_path):
    run = tmp_path / "run" / "ckpt"
    run.mkdir(parents=True)
    size = 50 << 30
    header = b'{"w":{"dtype":"F32","shape":[%d],"data_offsets":[0,%d]}}' % (size // 4, size)
    whole, cut = run / "model-step-1.safetensors", run / "model-step-2.safetensors"
    for path, length in ((whole, 8 + len(header) + size), (cut, 8 + len(header) + size // 2)):
        with open(path, "wb") as f:       # sparse: 50 GB on paper, a few bytes on disk
            f.write(struct.pack("<Q", len(header)) + header)
            f.truncate(length)
    aged(run, 60)
    os.utime(whole, (time.time() - 120, time.time() - 120))
    t0 = time.monotonic()
    view = await look(ops, tmp_path / "run")
    assert time.monotonic() - t0 < LOOK_BUDGET_S
    assert view.last_complete.path == str(whole) and view.last_complete.bytes == whole.stat().st_size
    assert [c.path for c in view.torn] == [str(cut)] and "cut short" in view.torn[0].why


async def test_a_pickle_saved_with_a_checkpoint_s_name_is_no_checkpoint(ops, tmp_path):
    # torch.save(..., _use_new_zipfile_serialization=False) writes a pickle, not a zip: it is not
    # judged at all, and the real checkpoint beside it still is.
    import pickle
    import torch
    run = tmp_path / "run"
    (run / "ckpt").mkdir(parents=True)
    (run / "ckpt" / "old.pt").write_bytes(pickle.dumps({"w": [1.0] * 64}, protocol=2))
    torch.save({"w": torch.ones(4)}, run / "ckpt" / "new.pt")
    aged(run, 60)
    view = await CheckpointLooks().look(ops, str(run), time.time())
    assert [c.path for c in view.complete] == [str(run / "ckpt" / "new.pt")], view
    assert not view.torn, view.torn


async def test_a_folder_of_100000_files_gives_a_verdict_and_a_note_within_a_poll(ops, tmp_path):
    run = tmp_path / "run"
    many = run / "ckpt"
    many.mkdir(parents=True)
    for i in range(100_000):
        (many / f"step-{i}.pt").touch()      # empty: not a zip, never a checkpoint
    aged(run, 60)
    t0 = time.monotonic()
    looks = CheckpointLooks()
    view = await looks.look(ops, str(run), time.time())
    spent = time.monotonic() - t0
    assert spent < LOOK_BUDGET_S, spent
    assert view.last_complete is None
    assert any("stopped" in n for n in view.notes), view.notes


async def test_a_bounded_search_judges_the_checkpoints_up_to_its_step_first(ops, tmp_path):
    # The bundled trainer's checkpoints every 10 steps to 400, all new to the look: a look
    # judges the newest JUDGE_PER_LOOK first, so step 30 waits; a search bounded at step 35 (a
    # rollback's last good step: recording/recovery/recovery.py) judges those at or before it
    # first, newest first, then the newest of the rest.
    import torch
    from dflash_train.checkpoint import CheckpointStore
    run = tmp_path / "run"
    store = CheckpointStore(str(run), keep=1000)
    for step in range(10, 410, 10):
        store.save(step, {"w": torch.ones(4)})
    plain = await CheckpointLooks().look(ops, str(run), time.time())
    assert [c.step for c in plain.complete] == list(range(90, 410, 10)) and plain.unjudged == 8, plain.notes
    looks = CheckpointLooks()
    looks.expire(at_or_before=35)
    view = await looks.look(ops, str(run), time.time())
    assert [c.step for c in view.complete] == [10, 20, 30, *range(120, 410, 10)] and view.unjudged == 8, view.notes


async def test_a_look_beside_another_looks_search_waits_for_its_view(ops, tmp_path):
    # The recovery's look (RunWatch.check) runs beside the poller's, on the same run's
    # CheckpointLooks: asked for a search at once (`expire`), the poller's look may start that
    # search first. The recovery's look, no longer due, must answer with that search's view,
    # not with the view from before it (which knew no checkpoint yet: a rollback from scratch).
    import torch
    from dflash_train.checkpoint import CheckpointStore
    run = tmp_path / "run"
    run.mkdir()
    looks = CheckpointLooks()
    assert (await looks.look(ops, str(run), time.time())).last_complete is None
    CheckpointStore(str(run), keep=10).save(30, {"w": torch.ones(4)})
    looks.expire()
    poller = asyncio.create_task(looks.look(ops, str(run), time.time()))
    await asyncio.sleep(0)      # the poller's look has started its search and waits on the target
    view = await looks.look(ops, str(run), time.time())
    assert view.last_complete is not None and view.last_complete.step == 30, view
    assert (await poller).last_complete.step == 30
