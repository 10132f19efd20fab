"""The silence limit learned from the pace, on real programs under real time.

- torchrun, 4 gloo ranks on CPU, a step every 0.5 s, then rank 2 waits on a queue while the
  others sit in all_reduce: STALLED within 20 s of the last step, `stall_after_s` left at 60
  (the fixed limit said it 61 s after).
- A loop that evaluates for 5x its step time and saves a checkpoint (real torch.save, through a
  slow file) for 10x: never STALLED, though both pauses outlast the learned limit.
- Progress bars and print loops, and the bundled trainer with its evaluations and checkpoints:
  RUNNING well past their learned limit.
Each is watched by one Session (its ProgressTracker: the pace across looks) about every second;
a one-shot `--check` learns the pace from the step events' own times.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from pathlib import Path

import pytest

from dflash_tui.config import LOCAL_TRAIN_ARGS, Profile
from dflash_tui.run.verdict.checklist import Verdict
from dflash_tui.run.verdict.stall_limit import learned_limit
from tests.support.ports import free_port
from tests.test_cli_modes import cli, write_config

pytestmark = pytest.mark.timeout(400)

PROGRAMS = Path(__file__).resolve().parents[2] / "programs"
PY = sys.executable
ENDED = (Verdict.FINISHED, Verdict.CRASHED, Verdict.KILLED, Verdict.STOPPED)


def profile(run_dir: Path, command: tuple[str, ...], **kw) -> Profile:
    base = dict(name="pace", run_dir=str(run_dir), python=PY, command=command, stall_after_s=60.0,
                stop_grace_s=2.0, min_free_gb=0.0)
    base.update(kw)
    return Profile(**base)


async def watch(s, until, limit_s: float, every_s: float = 1.0) -> list[tuple]:
    """Looks every `every_s` until `until(look)` or `limit_s`: [(ev, checklist)]."""
    looks = []
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        ev, cl = await s.check()
        looks.append((ev, cl))
        if until(ev, cl):
            break
        await asyncio.sleep(every_s)
    return looks


async def test_four_gloo_ranks_one_stuck_is_stalled_within_20_s_of_its_last_step(sessions, tmp_path):
    command = (PY, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=4",
               f"--master-port={free_port()}", str(PROGRAMS / "ranks_one_odd.py"), "50", "0.5", "2")
    s = sessions(profile(tmp_path / "ranks", command))
    await s.launch(preflight=False)
    looks = await watch(s, lambda ev, cl: cl.verdict is Verdict.STALLED or cl.verdict in ENDED, 200)
    ev, cl = looks[-1]
    assert cl.verdict is Verdict.STALLED, [(c.verdict, c.summary) for _, c in looks[-3:]]
    last_step = ev.activity.step_at
    assert ev.now - last_step <= 20, (ev.now - last_step, cl.summary)
    assert cl.stall_limit_s is not None and cl.stall_limit_s <= 15, cl.stall_limit_why
    assert "STALLED after" in cl.summary and "x its slowest step of" in cl.summary, cl.summary
    assert cl.rank_groups and cl.rank_groups[0].ranks == (2,), [g.words() for g in cl.rank_groups]
    # RUNNING up to then, under the limit learned while it stepped
    verdicts = [c.verdict for _, c in looks]
    assert Verdict.RUNNING in verdicts and set(verdicts[verdicts.index(Verdict.RUNNING):-1]) == {Verdict.RUNNING}


async def test_evaluations_and_a_slow_torch_save_are_never_stalled(sessions, tmp_path):
    # a step every 1.5 s (learned limit 10 s, its floor), evaluations of 7.5 s at steps 8 and 16,
    # a save of 15 s at 13
    command = (PY, str(PROGRAMS / "eval_and_save.py"), "18", "1.5", "8", "5", "13", "10")
    s = sessions(profile(tmp_path / "evals", command))
    await s.launch(preflight=False)
    looks = await watch(s, lambda ev, cl: cl.verdict in ENDED, 200)
    verdicts = [cl.verdict for _, cl in looks]
    assert Verdict.STALLED not in verdicts, [(cl.verdict, cl.summary) for _, cl in looks if cl.verdict is Verdict.STALLED]
    assert verdicts[-1] is Verdict.FINISHED, looks[-1][1].summary
    # The pauses were known and outlasted the limit the steps' pace gives.
    why = {cl.stall_limit_why.split(": ", 1)[-1] for _, cl in looks}
    assert "saving a checkpoint (torch.save)" in why and "evaluating (evaluate)" in why, why
    learned = [cl.stall_limit_s for _, cl in looks if cl.stall_limit_why.startswith(("10 s: 5x", "1"))
               and "x its slowest step" in cl.stall_limit_why]
    assert learned and min(learned) <= 15, why

    def silence(ev):
        return ev.now - ev.activity.step_at if ev.activity and ev.activity.step_at else 0.0
    paused = [(silence(ev), learned_limit(ev.activity.intervals, 60)) for ev, cl in looks
              if cl.stall_limit_why.endswith(("(torch.save)", "(evaluate)"))]
    assert any(lim is not None and sil > lim.seconds for sil, lim in paused), paused


async def test_progress_bars_and_print_loops_run_past_their_learned_limit(sessions, tmp_path):
    programs = {"print_loop": (PY, str(PROGRAMS / "print_loop.py")),
                "tqdm_bar": (PY, str(PROGRAMS / "tqdm_bar.py")),
                "rich_bar": (PY, str(PROGRAMS / "rich_bar.py")),
                "trainer_dicts": (PY, str(PROGRAMS / "trainer_dicts.py"))}
    runs = {n: sessions(profile(tmp_path / n, cmd)) for n, cmd in programs.items()}
    await asyncio.gather(*(s.launch(preflight=False) for s in runs.values()))
    seen: dict[str, list] = {n: [] for n in runs}
    learned_at: dict[str, float] = {}
    t0 = time.monotonic()
    while time.monotonic() - t0 < 150:
        looks = await asyncio.gather(*(s.check() for s in runs.values()))
        for n, (ev, cl) in zip(runs, looks):
            seen[n].append((cl.verdict, cl.stall_limit_s, cl.stall_limit_why, cl.summary))
            if cl.stall_limit_s is not None and cl.stall_limit_s < 60:
                learned_at.setdefault(n, time.monotonic())
        # each watched for twice its learned limit after it learned it
        if len(learned_at) == len(runs) and time.monotonic() - max(learned_at.values()) > 22:
            break
        await asyncio.sleep(1.0)
    for n, looks in seen.items():
        assert n in learned_at, (n, looks[-1])
        verdicts = [v for v, *_ in looks]
        assert Verdict.STALLED not in verdicts and verdicts[-1] is Verdict.RUNNING, (n, looks[-3:])
        limits = {lim for _, lim, _, _ in looks if lim is not None and lim < 60}
        assert max(limits) <= 15, (n, limits)


@pytest.mark.slow
async def test_the_bundled_trainer_with_its_evals_and_checkpoints_runs_past_its_learned_limit(sessions, tmp_path):
    args = list(LOCAL_TRAIN_ARGS)
    args[args.index("--steps") + 1] = "1000000"
    args += ["--eval-every", "40", "--checkpoint-every", "60"]
    s = sessions(Profile(name="trainer", run_dir=str(tmp_path / "run"), python=PY, train_args=tuple(args),
                         stall_after_s=60.0, stop_grace_s=5.0, min_free_gb=0.0))
    await s.launch(preflight=False)
    looks = []
    learned_at = None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        ev, cl = await s.check()
        looks.append((cl.verdict, cl.stall_limit_s, cl.stall_limit_why, cl.summary, ev.status.phase if ev.status else ""))
        assert cl.verdict in (Verdict.STARTING, Verdict.RUNNING), looks[-3:]
        if learned_at is None and cl.stall_limit_s is not None and cl.stall_limit_s < 60:
            learned_at = time.monotonic()
        if learned_at is not None and time.monotonic() - learned_at > 32:
            break
        await asyncio.sleep(1.0)
    assert learned_at is not None and time.monotonic() - learned_at > 32, looks[-3:]
    assert looks[-1][0] is Verdict.RUNNING, looks[-3:]
    # its evaluations and checkpoints came by while the limit was learned
    assert {"evaluating", "checkpointing"} <= {phase for *_, phase in looks} or any(
        "trainer's phase" in why for _, _, why, _, _ in looks), sorted({p for *_, p in looks})


def test_a_one_shot_check_learns_the_pace_from_the_step_events(tmp_path):
    """`--check --json`, one look each time: the step events' own times give the pace."""
    run = tmp_path / "probe-steps"
    cfg = write_config(tmp_path, p={"run_dir": str(run), "command": [PY, str(PROGRAMS / "probe_steps_then_hang.py"), "14", "1.0"],
                                    "stall_after_s": 60, "stop_grace_s": 2, "min_free_gb": 0})
    res = cli(tmp_path, "--config", str(cfg), "--launch", "--json", "--no-preflight", timeout=120)
    assert res.returncode in (0, 4), res.stdout + res.stderr
    seen = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            out = json.loads(cli(tmp_path, "--config", str(cfg), "--check", "--json", timeout=60).stdout)
            seen.append((round(time.monotonic() - deadline + 120), out["verdict"], out["stall_limit_s"], out["summary"]))
            if out["verdict"] == "STALLED":
                break
            time.sleep(1.0)
        verdict, limit, summary = seen[-1][1:]
        assert verdict == "STALLED" and limit == 10.0, seen[-4:]
        assert "STALLED after 1" in summary and "x its slowest step of 1.0 s" in summary, summary
        assert int(re.search(r"STALLED after (\d+) s", summary).group(1)) <= 15, summary
    finally:
        cli(tmp_path, "--config", str(cfg), "--stop", timeout=60)
