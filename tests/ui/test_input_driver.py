"""The quiet input driver in a real terminal (a pty): it reads keys as Textual's does, its
input thread sleeps while nobody types (Textual's own wakes ten times a second, measured side by
side here), a lone Esc still becomes the Escape key, and the app still exits at once."""

from __future__ import annotations

import fcntl
import os
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest

from dflash_tui.ui.app import DashboardApp
from dflash_tui.ui.input_driver import QuietInputDriver

pytestmark = pytest.mark.skipif(QuietInputDriver is None, reason="no termios on this platform")

# A Textual app on the driver under test that writes what it sees to a file.
KEY_APP = """
import sys, time
from textual.app import App
from dflash_tui.ui.input_driver import quiet_driver_class

out = open(sys.argv[1], "a", buffering=1)

class KeyApp(App):
    def get_driver_class(self):
        chosen = super().get_driver_class()
        return quiet_driver_class(chosen) if sys.argv[2] == "quiet" else chosen

    def on_mount(self):
        out.write(f"driver {type(self._driver).__name__} thread {self._driver._key_thread.native_id}\\n")

    def on_key(self, event):
        out.write(f"key {event.key} {time.monotonic()}\\n")
        if event.key == "q":
            self.exit()

KeyApp().run()
out.write("exited\\n")
"""


class PtyApp:
    def __init__(self, tmp_path: Path, driver: str) -> None:
        self.out = tmp_path / f"{driver}.txt"
        self.out.touch()
        script = tmp_path / "key_app.py"
        script.write_text(KEY_APP)
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        env = {**os.environ, "TERM": "xterm-256color"}
        env.pop("TEXTUAL_DRIVER", None)
        self.proc = subprocess.Popen([sys.executable, str(script), str(self.out), driver],
                                     stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
        os.close(slave)
        # The app's frames must be read, or its writer blocks on a full pty.
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        try:
            while os.read(self.master, 65536):
                pass
        except OSError:
            pass

    def lines(self) -> list[str]:
        return self.out.read_text().splitlines()

    def wait_for(self, prefix: str, timeout: float = 20.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            hit = next((line for line in self.lines() if line.startswith(prefix)), None)
            if hit is not None:
                return hit
            time.sleep(0.02)
        raise AssertionError(f"the app never wrote {prefix!r}: {self.lines()}")

    def input_thread_wakes(self, seconds: float) -> int:
        """Voluntary context switches of the input thread over `seconds`: its wake-ups."""
        tid = int(self.wait_for("driver").split()[-1])
        status = Path(f"/proc/{self.proc.pid}/task/{tid}/status")

        def switches() -> int:
            line = next(x for x in status.read_text().splitlines() if x.startswith("voluntary_ctxt_switches"))
            return int(line.split()[1])

        before = switches()
        time.sleep(seconds)
        return switches() - before

    def type(self, data: bytes) -> float:
        os.write(self.master, data)
        return time.monotonic()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        os.close(self.master)


@pytest.fixture
def pty_app(tmp_path):
    apps: list[PtyApp] = []

    def start(driver: str) -> PtyApp:
        apps.append(PtyApp(tmp_path, driver))
        return apps[-1]

    yield start
    for app in apps:
        app.close()


def test_the_dashboard_runs_on_the_quiet_driver_in_a_terminal(monkeypatch):
    monkeypatch.delenv("TEXTUAL_DRIVER", raising=False)
    app = DashboardApp(lambda name: None, "p")
    assert app.driver_class is QuietInputDriver


def test_quiet_input_thread_sleeps_and_still_reads_every_key(pty_app):
    quiet, textual = pty_app("quiet"), pty_app("textual")
    assert quiet.wait_for("driver").split()[1] == "QuietInputDriver"
    assert textual.wait_for("driver").split()[1] == "LinuxDriver"
    time.sleep(0.5)   # past the start-up's own terminal queries and answers
    # Side by side over the same 2 s: Textual's input thread wakes every 0.1 s, this one not at all.
    results: dict[str, int] = {}
    threads = [threading.Thread(target=lambda a=a, k=k: results.__setitem__(k, a.input_thread_wakes(2.0)))
               for k, a in (("quiet", quiet), ("textual", textual))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["textual"] >= 12, results
    assert results["quiet"] <= 2, results

    quiet.type(b"x")
    quiet.wait_for("key x")
    sent = quiet.type(b"\x1b")   # a lone Esc: the Escape key once the parser's timeout passes
    at = float(quiet.wait_for("key escape").split()[-1])
    assert at - sent < 1.0
    quiet.type(b"\x1b[A")        # an escape sequence in one read: the arrow key, no Escape
    quiet.wait_for("key up")
    assert sum(line.startswith("key escape") for line in quiet.lines()) == 1

    sent = quiet.type(b"q")
    quiet.proc.wait(timeout=5)
    assert quiet.wait_for("exited")
    assert time.monotonic() - sent < 5.0
