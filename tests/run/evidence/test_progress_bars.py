"""Progress bars that draw only on a terminal reach train.log as on one, and are read: real rich
(as Lightning's RichProgressBar draws) and real tqdm, launched through the real wrapper, watched
past stall_after_s, locally and over the loopback sshd into the pct stand-in.

rich's refresh thread redraws the bar ten times a second also while the program hangs: a redraw
of the same step is not progress, so such a hang still reads STALLED."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from textual.app import App

from dflash_tui.config import Profile
from dflash_tui.remote.agent import AgentOps
from dflash_tui.remote.local import LocalTarget
from dflash_tui.run.evidence.logtail import LogFollower
from dflash_tui.run.evidence.progress import ProgressParser
from dflash_tui.run.verdict.checklist import Verdict
from dflash_tui.ui.panes.logview import LogLines

pytestmark = pytest.mark.timeout(240)

PROGRAMS = Path(__file__).resolve().parents[2] / "programs"
PY = sys.executable
STALL_S = 4.0
WATCH_S = STALL_S + 6

SCENARIOS = {
    "rich": (PY, str(PROGRAMS / "rich_bar.py"), "100000", "0.2"),
    "rich_hangs": (PY, str(PROGRAMS / "rich_bar.py"), "100000", "0.1", "5"),
    # The same bar where the environment says "no terminal": rich draws nothing until the end.
    "rich_no_tty": ("env", "TTY_COMPATIBLE=0", "TTY_INTERACTIVE=0", PY, str(PROGRAMS / "rich_bar.py"), "100000", "0.2"),
    "tqdm": (PY, str(PROGRAMS / "tqdm_bar.py"), "100000", "0.2"),
}


def profile(run_dir: Path, command, **kw) -> Profile:
    base = dict(name="bar", run_dir=str(run_dir), python=PY, command=command, train_args=(),
                stall_after_s=STALL_S, compile_stall_after_s=60.0, stop_grace_s=2.0, min_free_gb=0.0)
    base.update(kw)
    return Profile(**base)


@pytest.fixture
def where(place, sessions, monkeypatch):
    """(make_session(run_dir, command) -> Session, label), with no terminal hints inherited."""
    label, keys = place
    for name in ("TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "FORCE_COLOR", "PYTHONUNBUFFERED"):
        monkeypatch.delenv(name, raising=False)
    return (lambda run_dir, command: sessions(profile(run_dir, command, **keys))), label


async def test_bars_that_draw_only_on_a_terminal(where, tmp_path):
    make, label = where
    sessions = {name: make(tmp_path / name, cmd) for name, cmd in SCENARIOS.items()}
    await asyncio.gather(*(s.launch(preflight=False) for s in sessions.values()))
    seen: dict[str, list] = {n: [] for n in sessions}
    t0 = time.monotonic()
    while time.monotonic() - t0 < 120:
        looks = await asyncio.gather(*(s.check() for s in sessions.values()))
        youngest = None
        for name, (ev, cl) in zip(sessions, looks):
            up = ev.now - ev.launch.start_time if ev.launch is not None else 0.0
            youngest = up if youngest is None else min(youngest, up)
            seen[name].append((up, cl.verdict, cl.summary, ev.activity))
        if youngest > WATCH_S:
            break
        await asyncio.sleep(0.5)

    def verdicts(name):
        return [v for _, v, _, _ in seen[name]]

    for name in ("rich", "tqdm"):
        v = verdicts(name)
        assert Verdict.STALLED not in v and v[-1] is Verdict.RUNNING, (label, name, seen[name][-3:])
        act = seen[name][-1][3]
        assert act.step is not None and act.step >= 10 and act.total == 100000, (label, name, act)
        assert act.loss is not None and act.loss < 1.0, (label, name, act)
    # Hung after 5 steps while its bar keeps being redrawn: STALLED once past stall_after_s.
    hung = seen["rich_hangs"]
    assert hung[-1][1] is Verdict.STALLED, (label, hung[-3:])
    assert hung[-1][3].step == 5, hung[-1][3]
    log = (tmp_path / "rich_hangs" / "train.log").read_bytes() if label == "local" else None
    if log is not None:   # the bar really was redrawn all along
        assert log.count(b" 5/100000\x1b[0m") > 20, log[-500:]
    # Without the terminal the same program's bar never reaches the log: no step to read.
    assert seen["rich_no_tty"][-1][3].step is None, seen["rich_no_tty"][-1]


RICH_TWO_TASKS = """\
    import time
    from rich.progress import Progress
    with Progress() as p:
        train = p.add_task("train", total=20)
        evaluate = p.add_task("eval", total=20)
        for i in range(20):
            time.sleep(0.03)
            p.update(train, advance=1, description=f"train step {i + 1}/20 loss {1 / (i + 1):.3f}")
            p.update(evaluate, advance=1)
        print("done")
"""


def rich_output(tmp_path: Path) -> bytes:
    """What real rich writes into a file under the wrapper's environment: two bars redrawn in
    place (carriage returns, erase, cursor up), then a line printed below them."""
    prog = tmp_path / "two_bars.py"
    prog.write_text(textwrap.dedent(RICH_TWO_TASKS))
    env = dict(os.environ, TTY_COMPATIBLE="1", TTY_INTERACTIVE="1", COLUMNS="100")
    out = subprocess.run([PY, str(prog)], env=env, capture_output=True, timeout=60, check=True).stdout
    assert b"\x1b[1A" in out and b"\r" in out, out[:300]    # really redrawn in place
    return out


def test_parser_reads_a_redrawn_display_at_its_latest_state(tmp_path):
    out = rich_output(tmp_path)
    whole = ProgressParser()
    whole.feed(out)
    assert whole.progress.step == 20 and whole.progress.total == 20 and whole.progress.loss == 0.05
    # Fed in pieces that cut escape sequences and lines anywhere: the same reading.
    pieces = ProgressParser()
    for i in range(0, len(out), 7):
        pieces.feed(out[i:i + 7])
    assert (pieces.progress.step, pieces.progress.loss) == (20, 0.05)
    assert pieces.progress.records == whole.progress.records <= 21
    # The "eval" row, redrawn after a newline under the cursor-up, is not output of its own.
    assert whole.progress.output <= whole.progress.records + 3, whole.progress


async def test_log_pane_shows_a_redrawn_row_once(tmp_path):
    out = rich_output(tmp_path)
    app = LogApp()
    async with app.run_test(size=(100, 20)) as pilot:
        ll = app.query_one(LogLines)
        # As the follower gives them: complete lines, in two polls cut mid-display.
        lines = out.decode().split("\n")
        half = len(lines) // 2
        ll.append(lines[:half])
        ll.append(lines[half:])
        await pilot.pause()
        shown = [x for x in ll.lines() if x.strip()]
        # rich prints above its live display, as a terminal shows it.
        assert len(shown) == 3 and shown[0] == "done", shown
        assert shown[1].startswith("train step 20/20 loss 0.050") and "100%" in shown[1], shown
        assert shown[2].startswith("eval") and "100%" in shown[2], shown
        ll.append(["after the bars"])
        assert ll.last_line() == "after the bars"


class LogApp(App):
    def compose(self):
        yield LogLines(max_lines=100)


async def test_log_pane_shows_a_tqdm_bar_before_its_line_ends(tmp_path):
    """Real tqdm writes one line of carriage-return updates for as long as the bar runs: the
    pane shows that line at its latest state, once, while it is being written."""
    log = tmp_path / "train.log"
    with log.open("wb") as fh:
        bar = subprocess.Popen([PY, str(PROGRAMS / "tqdm_bar.py"), "1000", "0.01"], stdout=fh, stderr=fh)
        time.sleep(2.0)
        bar.kill()
        bar.wait()
    assert b"\r" in log.read_bytes() and b"\n" not in log.read_bytes()
    ops = await AgentOps.start(LocalTarget())
    try:
        follower = LogFollower(ops, str(log))
        app = LogApp()
        async with app.run_test(size=(120, 10)) as pilot:
            ll = app.query_one(LogLines)
            ll.append(await follower.poll())
            ll.show_partial(follower.partial)
            await pilot.pause()
            assert ll.line_count == 0 and ll.virtual_size.height == 1
            assert re.search(r"\d+%\|.*\| *\d+/1000 \[", ll.partial) and "\r" not in ll.partial, ll.partial
            seen = int(re.search(r"(\d+)/1000", ll.partial).group(1))
            assert seen >= 10, ll.partial
            with log.open("ab") as fh:
                fh.write(b"\ndone\n")
            ll.append(await follower.poll())
            ll.show_partial(follower.partial)
            await pilot.pause()
            assert ll.partial == "" and [x for x in ll.lines() if x.strip()][-2:] == [ll.lines()[-2], "done"]
            assert f"{seen}/1000" in ll.lines()[-2] and ll.virtual_size.height == ll.line_count
    finally:
        await ops.close()
