"""Real notification receivers on 127.0.0.1: an HTTP server that records every request, and
an SMTP server (aiosmtpd) that records every message, for the watcher's Apprise tests."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


@dataclass
class Received:
    path: str
    content_type: str
    body: bytes
    at: float


class HttpReceiver:
    """POSTs are recorded; a path listed in `fail_first` answers 500 that many times first."""

    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.fail_first: dict[str, int] = {}
        self._cv = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):   # noqa: N802 - the http.server name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with outer._cv:
                    left = outer.fail_first.get(self.path, 0)
                    if left:
                        outer.fail_first[self.path] = left - 1
                    else:
                        outer.requests.append(Received(self.path, self.headers.get("Content-Type", ""),
                                                       body, time.time()))
                        outer._cv.notify_all()
                self.send_response(500 if left else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, n: int, path: str | None = None, timeout: float = 20.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                got = [r for r in self.requests if path is None or r.path == path]
                if len(got) >= n or time.monotonic() > deadline:
                    return got
                self._cv.wait(0.1)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class SmtpReceiver:
    user: str = "watch"
    password: str = "s3cret"
    messages: list[Message] = field(default_factory=list)

    def start(self) -> "SmtpReceiver":
        outer = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):   # noqa: N802 - aiosmtpd's name
                outer.messages.append(message_from_bytes(envelope.original_content))
                return "250 OK"

        def auth(server, session, envelope, mechanism, data):
            ok = isinstance(data, LoginPassword) and (data.login.decode(), data.password.decode()) == (
                outer.user, outer.password)
            return AuthResult(success=ok)

        with socket.socket() as s:   # aiosmtpd cannot bind port 0: take a free one first
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port, authenticator=auth,
                                     auth_require_tls=False, auth_required=True)
        self.controller.start()
        return self

    def wait_for(self, n: int, timeout: float = 20.0) -> list[Message]:
        deadline = time.monotonic() + timeout
        while len(self.messages) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        return list(self.messages)

    def close(self) -> None:
        self.controller.stop()
