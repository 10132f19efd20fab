"""Notifications through Apprise to real receivers on 127.0.0.1: HTTP (json://, form://) and
SMTP (aiosmtpd, mailto://), with retries, and never in the way of the caller."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import warnings

import pytest

from dflash_tui.recording.store.change import Evidence, VerdictChange
from dflash_tui.recording.notify.notify import Notification, message
from dflash_tui.recording.notify.sender import NotifySender, check_urls, masked
from tests.support.receivers import SmtpReceiver

# AUTH without TLS is what a plain local SMTP server on 127.0.0.1 speaks.
pytestmark = pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")


@pytest.fixture(scope="module")
def smtp():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # AUTH without TLS: on purpose, on 127.0.0.1
        r = SmtpReceiver().start()
    yield r
    r.close()


def notification(urls, state="CRASHED", event="failing") -> Notification:
    change = VerdictChange("gpu1", "r7", time.time(), state, "RUNNING", "exit code 1: ValueError: bad batch",
                           "exit_json", Evidence(step=120, loss=2.5, traceback=("  File \"t.py\", line 9",
                                                                                 "ValueError: bad batch")))
    title, body = message(change, event, None)
    return Notification("gpu1", state, event, title, body, tuple(urls), change, time.time())


def test_json_and_form_targets_get_the_whole_message(http):
    deliveries = []
    sender = NotifySender(on_delivery=deliveries.append)
    try:
        sender.submit(notification([f"json://127.0.0.1:{http.port}/j", f"form://127.0.0.1:{http.port}/f"]))
        (j,) = http.wait_for(1, "/j")
        (f,) = http.wait_for(1, "/f")
    finally:
        sender.close()
    doc = json.loads(j.body)
    assert doc["title"] == "dflash-tui: gpu1 CRASHED" and doc["type"] == "failure"
    for words in ("exit code 1: ValueError: bad batch", "step 120", "ValueError: bad batch",
                  "open it: dflash-tui --profile gpu1", "check: exit_json"):
        assert words in doc["message"]
    form = urllib.parse.parse_qs(f.body.decode())
    assert form["title"] == ["dflash-tui: gpu1 CRASHED"] and "open it: dflash-tui --profile gpu1" in form["message"][0]
    assert {d.url.split(":")[0] for d in deliveries if d.sent_at} == {"json", "form"}


def test_mailto_reaches_a_real_smtp_server(smtp):
    url = (f"mailto://{smtp.user}:{smtp.password}@127.0.0.1:{smtp.port}"
           "?from=watch@example.com&to=ops@example.com&mode=insecure")
    assert check_urls((url,)) is None and smtp.password not in masked(url)
    sender = NotifySender()
    try:
        sender.submit(notification([url], state="FINISHED", event="FINISHED"))
        (msg,) = smtp.wait_for(1)
    finally:
        sender.close()
    assert msg["Subject"] == "dflash-tui: gpu1 FINISHED" and "ops@example.com" in msg["To"]
    text = msg.get_payload(decode=True) if not msg.is_multipart() else msg.get_payload(0).get_payload(decode=True)
    assert b"open it: dflash-tui --profile gpu1" in text


def test_a_failing_service_is_retried_with_backoff_and_never_blocks(http, caplog):
    http.fail_first["/flaky"] = 2
    dead = "json://127.0.0.1:9/never"     # nothing listens on port 9: refused at once, every time
    deliveries = []
    sender = NotifySender(retry_max_s=1.0, on_delivery=deliveries.append)
    try:
        t0 = time.monotonic()
        sender.submit(notification([dead, f"json://127.0.0.1:{http.port}/flaky"]))
        assert time.monotonic() - t0 < 0.05                     # submit only queues
        (got,) = http.wait_for(1, "/flaky")
        # the third attempt, after 1 s and then 1 s (the cap): not before
        assert got.at - (time.time() - (time.monotonic() - t0)) >= 1.9
        time.sleep(1.2)
        flaky = [d for d in deliveries if d.url.endswith("/flaky")]
        assert [(d.attempt, d.sent_at is not None) for d in flaky] == [(1, False), (2, False), (3, True)]
        assert sum(1 for d in deliveries if d.url == dead) >= 3   # still retrying, on its own
        assert threading.active_count() >= 2
    finally:
        sender.close(drain_s=0.5)
    assert "could not notify json://127.0.0.1/…" in caplog.text


def test_a_url_apprise_cannot_use_is_one_line():
    problem = check_urls(("json://127.0.0.1:1/x", "nosuchservice://abc"))
    assert problem is not None and "'nosuchservice'" in problem and "\n" not in problem


SECRETS = ("alice", "pw-SECRET1", "SECRET2", "SECRET3", "SECRET4", "SECRET5")


def secret_url(port: int) -> str:
    return (f"json://alice:pw-SECRET1@127.0.0.1:{port}/hook/SECRET2?-token=SECRET3"
            "&+Authorization=Bearer%20SECRET4&:extra=SECRET5")


def test_nothing_of_a_url_but_its_scheme_and_host_is_ever_logged(http, caplog):
    """Tokens sit in a URL's user part, path, GET parameters, headers and payload extras; and an
    HTTP library's error quotes the path and query it tried."""
    caplog.set_level("INFO", logger="dflash_tui.recording")
    dead, flaky = secret_url(9), secret_url(http.port)
    http.fail_first["/hook/SECRET2?token=SECRET3"] = 1
    deliveries = []
    sender = NotifySender(retry_max_s=0.5, on_delivery=deliveries.append)
    try:
        sender.submit(notification([dead, flaky]))
        (got,) = http.wait_for(1, "/hook/SECRET2?token=SECRET3")
        deadline = time.monotonic() + 10
        while sum(1 for d in deliveries if d.url == dead) < 2 or not any(d.sent_at for d in deliveries):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        sender.close(drain_s=0.5)
    assert b"SECRET5" in got.body                                      # the URL did carry them
    logged = caplog.text + " ".join(d.error for d in deliveries)
    assert "could not notify json://127.0.0.1/… (attempt 1" in logged and "notified json://127.0.0.1/…" in logged
    assert not [s for s in SECRETS if s in logged], logged
    assert masked("tgram://123456:ABCDEFtoken/chatid") == "tgram://1...n/…"    # a token as the host


def test_a_refused_url_shows_nothing_of_itself_but_its_scheme():
    for url in ("ghp_SECRETTOKEN0123456789/abc", "nosuch://user:SECRET1@host/SECRET2?k=SECRET3",
                "json//SECRET4@127.0.0.1"):
        problem = check_urls(("json://127.0.0.1/x", url))
        assert problem is not None and "URL 2 of 2" in problem and "\n" not in problem
        assert "SECRET" not in problem and "ghp_" not in problem, problem
