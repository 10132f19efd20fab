"""NotifySender: delivers notifications through Apprise, off the poll loop, never failing it.

One worker thread sends; `submit` only puts work in a queue, so a slow or dead service never
holds up polling. Each (notification, URL) is one delivery, retried on its own with backoff
(1 s doubling, capped at `retry_max_s`) until it is sent or `give_up_after_s` has passed;
every failure is logged with the URL shown as its scheme and host only (redact.py), and the
failure's words scrubbed of the rest of it.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable

import apprise

from ...verdicts import TargetState, Verdict
from .notify import Notification
from .redact import masked, scheme_of, scrub

log = logging.getLogger("dflash_tui.recording")

RETRY_START_S = 1.0
GIVE_UP_AFTER_S = 86400.0
SEND_TIMEOUT_S = 10.0


def check_urls(urls: tuple[str, ...]) -> str | None:
    """The first URL Apprise cannot use, as a one-line problem naming only its scheme (a URL is
    a credential); None when all are usable."""
    for i, url in enumerate(urls, start=1):
        scheme = scheme_of(url)
        if scheme is None:
            return (f"[notify] urls: URL {i} of {len(urls)} has no scheme (no '://'); write it as "
                    "SERVICE://..., see https://github.com/caronc/apprise/wiki for the form of each service")
        try:
            usable = bool(apprise.Apprise.instantiate(url))
        except Exception:   # a plugin's own bug on a hostile URL
            usable = False
        if not usable:
            return (f"[notify] urls: Apprise cannot use URL {i} of {len(urls)} ({masked(url)}); see "
                    f"https://github.com/caronc/apprise/wiki for the form of a {scheme!r} URL")
    return None


@dataclass(frozen=True)
class Delivery:
    notification: Notification
    url: str
    attempt: int
    sent_at: float | None = None      # local epoch it went out; None: it failed
    error: str = ""


class NotifySender:
    def __init__(self, *, retry_max_s: float = 300.0, give_up_after_s: float = GIVE_UP_AFTER_S,
                 on_delivery: Callable[[Delivery], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.retry_max_s = retry_max_s
        self.give_up_after_s = give_up_after_s
        self.on_delivery = on_delivery
        self.clock = clock
        self._heap: list[tuple[float, int, Notification, str, int]] = []
        self._seq = itertools.count()
        self._cv = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._work, name="dflash-tui notify", daemon=True)
        self._thread.start()

    def submit(self, n: Notification) -> None:
        now = self.clock()
        with self._cv:
            for url in n.urls:
                heapq.heappush(self._heap, (now, next(self._seq), n, url, 1))
            self._cv.notify()

    @property
    def pending(self) -> int:
        with self._cv:
            return len(self._heap)

    def close(self, drain_s: float = 5.0) -> None:
        """Stop the worker: what is due now still goes out, for at most `drain_s`."""
        deadline = time.monotonic() + drain_s
        with self._cv:
            while self._heap and self._heap[0][0] <= self.clock() and time.monotonic() < deadline:
                self._cv.wait(0.05)
            self._closing = True
            self._cv.notify()
        self._thread.join(max(0.1, deadline - time.monotonic()))

    # -- the worker --------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            with self._cv:
                while not self._closing and (not self._heap or self._heap[0][0] > self.clock()):
                    self._cv.wait(None if not self._heap else max(0.01, self._heap[0][0] - self.clock()))
                if self._closing:
                    return
                _, _, n, url, attempt = heapq.heappop(self._heap)
            error = self._send(n, url)
            now = self.clock()
            if error is None:
                log.info("notified %s: %s", masked(url), n.title)
                self._report(Delivery(n, url, attempt, sent_at=now))
                continue
            self._report(Delivery(n, url, attempt, error=error))
            if now - n.due >= self.give_up_after_s:
                log.error("gave up notifying %s of %r after %d attempts: %s", masked(url), n.title,
                          attempt, error)
                continue
            delay = min(self.retry_max_s, RETRY_START_S * 2 ** (attempt - 1))
            log.warning("could not notify %s (attempt %d: %s); retrying in %.0f s", masked(url),
                        attempt, error, delay)
            with self._cv:
                heapq.heappush(self._heap, (now + delay, next(self._seq), n, url, attempt + 1))

    def _send(self, n: Notification, url: str) -> str | None:
        """None when sent; else why not, one line, with nothing of `url` but its scheme and
        host (a service's or an HTTP library's words may quote its path and query). Never raises."""
        error = self._attempt(n, url)
        return None if error is None else scrub(error, url)

    def _attempt(self, n: Notification, url: str) -> str | None:
        try:
            ap = apprise.Apprise()
            if not ap.add(url):
                return "Apprise cannot use this URL"
            ntype = apprise.NotifyType.FAILURE if n.event in ("failing", TargetState.UNREACHABLE) else (
                apprise.NotifyType.SUCCESS if n.event in (Verdict.FINISHED, "recovered") else (
                    apprise.NotifyType.WARNING if n.event == "warning" else apprise.NotifyType.INFO))
            said: list[str] = []

            def heard(entry, _plugin=None) -> None:
                if entry.level in ("WARNING", "ERROR", "CRITICAL"):
                    said.append(" ".join(str(entry.message).split()))

            ok = ap.notify(body=n.body, title=n.title, notify_type=ntype, log_callback=heard,
                           body_format=apprise.NotifyFormat.TEXT, interpret_escapes=False)
            return None if ok else ("; ".join(dict.fromkeys(said))[:300] or "the service did not accept it")
        except Exception as exc:   # a plugin's own bug must not end the worker
            return f"{type(exc).__name__}: {exc}"

    def _report(self, d: Delivery) -> None:
        if self.on_delivery is not None:
            try:
                self.on_delivery(d)
            except Exception:   # an observer's bug is not a delivery failure
                log.exception("on_delivery failed")
