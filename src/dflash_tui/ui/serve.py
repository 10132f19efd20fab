"""`dflash-tui --serve`: the dashboard in a browser, through textual-serve, behind a token.

Each browser tab gets its own dashboard process (textual-serve runs the command per
websocket), watching the same profile; the run itself is untouched by tabs coming and
going. The token check (serve_auth.require_token) runs before any textual-serve route.

Whoever connects is a stranger until the token says otherwise, so: the routes are
textual-serve's own but for `/static/`, which serves its files without listing a directory;
and the server's log is one inert line per record (a malformed request is a 4xx and one line,
never a traceback, and nothing a request carries reaches the terminal as an escape).
"""

from __future__ import annotations

import errno
import logging
import socket

import aiohttp_jinja2
import jinja2
from aiohttp import web
from textual_serve.server import Server

from ..contract.rundir import inert_text
from ..serve_auth import dashboard_command, require_token, start_lines


class OneLineFormatter(logging.Formatter):
    """A log record as one inert line: an exception is named, never drawn as a traceback."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            text += f": {type(exc).__name__}: {str(exc).strip()[:300]}"
        return inert_text(" ".join(text.split()))


class TokenServer(Server):
    def __init__(self, command: str, *, host: str, port: int, token: str, title: str) -> None:
        super().__init__(command, host=host, port=port, title=title)
        self.token = token

    def initialize_logging(self) -> None:
        handler = logging.StreamHandler()
        handler.setFormatter(OneLineFormatter())
        logging.basicConfig(level="DEBUG" if self.debug else "INFO", handlers=[handler], force=True)

    async def _make_app(self) -> web.Application:
        # textual-serve's routes (Server._make_app) with the token check first and a static
        # route that lists no directory.
        app = web.Application(middlewares=[require_token(self.token, self.port)])
        aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(self.templates_path))
        app.add_routes([
            web.get("/", self.handle_index, name="index"),
            web.get("/ws", self.handle_websocket, name="websocket"),
            web.get("/download/{key}", self.handle_download, name="download"),
            web.static("/static", self.statics_path, show_index=False, name="static"),
        ])
        app.on_startup.append(self.on_startup)
        app.on_shutdown.append(self.on_shutdown)
        return app

    async def on_startup(self, app: web.Application) -> None:
        for line in start_lines(self.host, self.port, self.token):
            print(line, flush=True)


class CannotServe(Exception):
    """--serve cannot listen where it was told: one line naming the problem and the fix."""


def _listen_words(host: str, port: int, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return f"--serve: port {port} on {host} is in use by another program; pick a free one with --port"
    if exc.errno == errno.EADDRNOTAVAIL:
        return (f"--serve: --host {host} is not an address of this machine; use 127.0.0.1 (the default, "
                "with an SSH port-forward) or one of this host's own addresses")
    if exc.errno == errno.EACCES:
        return f"--serve: port {port} is not allowed for this user (below 1024 needs root); pick one above 1023 with --port"
    return f"--serve cannot listen on {host} port {port}: {exc.strerror or exc}"


def check_listen(host: str, port: int) -> None:
    """Bind every address `host` resolves to, as the server will (SO_REUSEADDR, IPv6 only on
    IPv6 sockets), and let go: a port in use or an address not on this host is CannotServe
    before anything is printed. (One that goes between this and the server's own bind is
    caught there, with the same words.)"""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise CannotServe(f"--serve: --host {inert_text(host)} is not an address this machine can resolve "
                          f"({getattr(exc, 'strerror', None) or exc}); use 127.0.0.1 or one of this host's "
                          "own addresses") from None
    for family, kind, proto, _, addr in found:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                s.bind(addr)
            except OSError as exc:
                raise CannotServe(_listen_words(inert_text(host), port, exc)) from None


def serve(config_path: str | None, profile: str, *, host: str, port: int, token: str) -> int:
    """Serve until Ctrl+C; CannotServe where it cannot listen."""
    check_listen(host, port)
    command = dashboard_command(config_path, profile)
    try:
        TokenServer(command, host=host, port=port, token=token, title=f"dflash-tui · {profile}").serve()
    except OSError as exc:
        raise CannotServe(_listen_words(inert_text(host), port, exc)) from None
    return 0
