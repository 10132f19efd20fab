"""`dflash-tui --serve` in a real headless Chromium: the token lets the page in and nothing
else does; the dashboard it serves is the real one (the verdict shows, a key works).

The browser's terminal draws on a canvas, so the test reads what the app sent: a script
installed before the page's own records every websocket frame, and the frames (ANSI
stripped) must contain the verdict and, after a key press, the help dialog.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.serve import served_dashboard

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
needs_chromium = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                    reason="needs chromium and chromium-driver (make system-tools)")

# Records the frames the page's websocket receives, for the test to read back.
RECORD_FRAMES = """
window.__frames = [];
const Native = window.WebSocket;
function Recording(url, protocols) {
  const ws = protocols === undefined ? new Native(url) : new Native(url, protocols);
  ws.addEventListener("message", (e) => {
    if (typeof e.data === "string") window.__frames.push(e.data);
    else if (e.data instanceof Blob) e.data.text().then((t) => window.__frames.push(t));
    else window.__frames.push(new TextDecoder().decode(e.data));
  });
  return ws;
}
Recording.prototype = Native.prototype;
for (const k of ["CONNECTING", "OPEN", "CLOSING", "CLOSED"]) Recording[k] = Native[k];
window.WebSocket = Recording;
"""
ANSI = re.compile(r"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]|\x1b\][^\x07]*\x07")


@pytest.fixture
def server(tmp_path: Path):
    with served_dashboard(tmp_path) as (port, token, _):
        yield port, token, tmp_path


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_serve_refuses_requests_without_the_token(server):
    port, token, _ = server
    base = f"http://127.0.0.1:{port}"
    assert status_of(f"{base}/") == 403
    assert status_of(f"{base}/ws") == 403
    assert status_of(f"{base}/static/js/textual.js") == 403
    assert status_of(f"{base}/?token=not-{token}") == 403
    assert status_of(f"{base}/?token={token}") == 200


def test_serve_binds_loopback_by_default(server):
    port, _, _ = server
    out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("ss (iproute2) not available")
    addrs = {line.split()[3].rsplit(":", 1)[0] for line in out.stdout.splitlines() if line.strip()}
    assert addrs == {"127.0.0.1"}, out.stdout


@needs_chromium
def test_serve_in_headless_chromium(server):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    port, token, tmp = server
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,800", f"--user-data-dir={tmp / 'chromium'}"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    try:
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORD_FRAMES})

        def screen_text() -> str:
            return ANSI.sub("", "".join(driver.execute_script("return window.__frames || []")))

        def wait_for(text: str, seconds: float = 60) -> None:
            deadline = time.monotonic() + seconds
            while text not in screen_text():
                assert time.monotonic() < deadline, f"{text!r} never reached the browser"
                time.sleep(0.2)

        driver.get(f"http://127.0.0.1:{port}/?token={token}")
        wait_for("NO RUN")                       # the verdict of an empty run dir
        wait_for("nothing launched")
        terminal = driver.find_element(By.CSS_SELECTOR, ".textual-terminal")
        terminal.click()
        ActionChains(driver).send_keys("?").perform()
        wait_for("dflash-tui keys")              # the help dialog: the key reached the app
        shot = tmp / "serve.png"
        assert driver.get_screenshot_as_file(str(shot))
        assert shot.stat().st_size > 10_000
        # The page set the token cookie, so its own requests carry it; a fresh client does not.
        assert status_of(f"http://127.0.0.1:{port}/static/js/textual.js") == 403
    finally:
        driver.quit()
