"""`b` in the run view, on the live path (build_app over a real crashed run): the view asks the
headless bundle, which writes the file; the notification names it; the run is not touched."""

from __future__ import annotations

import asyncio
import json
import tarfile

import pytest

from dflash_tui.config import Config
from dflash_tui.recording.notify.settings import NOTIFY_SECTION, NotifySettings
from dflash_tui.run.verdict.checklist import Verdict
from dflash_tui.ui.main import build_app
from dflash_tui.watch.session import Session

from tests.support.runs import standin_profile

pytestmark = [pytest.mark.timeout(120)]


async def until(pilot, cond, timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, f"not reached in {timeout:.0f} s: {what}"
        await pilot.pause(0.1)


async def test_b_writes_a_bundle_and_names_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    crash = standin_profile(tmp_path / "crash", "crash", name="crash", source="cfg")
    async with Session(crash) as s:
        assert (await s.launch()).run_id
    secret = "tk_0a1b2c3d4e5f"
    config = Config(path="cfg", profiles={"crash": crash},
                    sections={NOTIFY_SECTION.name: NotifySettings(urls=(f"ntfy://ntfy.example.com/{secret}",))})
    app = build_app(config, "crash")
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.run_view.report is not None
                    and app.run_view.report.checklist.verdict is Verdict.CRASHED, 30, "CRASHED shown")
        await pilot.press("b")
        await until(pilot, lambda: any(n.title == "bundle" and ".tar.gz" in n.message for n in app._notifications),
                    40, "the bundle's notification")
        (note,) = [n for n in app._notifications if n.title == "bundle" and ".tar.gz" in n.message]
    (path,) = tmp_path.glob("dflash-bundle-crash-*.tar.gz")
    assert str(path) in note.message and "verdict CRASHED" in note.message, note.message
    with tarfile.open(path, "r:gz") as tar:
        names = tar.getnames()
        assert names[0] == "manifest.json" and "verdict.json" in names and "timeline.json" in names
        manifest = json.loads(tar.extractfile("manifest.json").read())
        assert manifest["verdict"] == "CRASHED"
        assert all(secret.encode() not in tar.extractfile(m).read() for m in tar.getmembers())
