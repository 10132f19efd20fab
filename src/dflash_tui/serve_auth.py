"""The token that guards `dflash-tui --serve`, and the command its browser sessions run.

textual-serve has no authentication of its own: anyone who reaches its port gets a
dashboard that can stop and relaunch runs. So every request (the page, its static files, the
websocket that drives the app) must carry a random token, printed once at start: in the
URL's `?token=` on the first request, then in an HttpOnly, SameSite=Strict cookie the page
load sets. A request without it is refused (403) before textual-serve sees it; so is one whose
token or cookie is not even text (not UTF-8, bad percent-encoding): refused, never an error.
Browsers send a host's cookies to every port of it, so the cookie is named for the port
(`dflash_token_8765`): a token of one server is never offered to, or taken by, another. The
server binds 127.0.0.1 unless told otherwise; remote use goes through an SSH port-forward.

Pure aiohttp and stdlib: the server glue that knows textual-serve lives in ui/serve.py.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import shlex
import sys
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from aiohttp import web

COOKIE_PREFIX = "dflash_token_"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def new_token() -> str:
    return secrets.token_urlsafe(24)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cookie_name(port: int) -> str:
    """The token's cookie for the server on `port`."""
    return f"{COOKIE_PREFIX}{int(port)}"


def given_token(request: "web.Request", port: int) -> bytes | None:
    """The token a request offers (its query's, else its cookie's), as UTF-8 bytes; None when
    it offers none, or one that is not text (a cookie of raw bytes, bad percent-encoding)."""
    try:
        given = request.query.get("token") or request.cookies.get(cookie_name(port))
        return None if given is None else given.encode("utf-8")
    except (UnicodeError, ValueError):
        return None


def require_token(token: str, port: int):
    """aiohttp middleware: 403 for a request without `token` (constant-time compare)."""
    # Imported here: aiohttp takes ~0.2 s to import, which every `dflash-tui --check` would
    # pay, since cli.py reads this module's defaults.
    from aiohttp import web

    expected = token.encode("utf-8")

    @web.middleware
    async def check(request: "web.Request", handler):
        given = given_token(request, port)
        if given is None or not hmac.compare_digest(given, expected):
            raise web.HTTPForbidden(
                text="dflash-tui --serve: this needs the token printed when the server started "
                     "(open the URL it printed, with ?token=...)\n")
        response = await handler(request)
        if request.query.get("token") and not getattr(response, "prepared", True):
            response.set_cookie(cookie_name(port), token, httponly=True, samesite="Strict", path="/")
        return response

    return check


def dashboard_command(config_path: str | None, profile: str, python: str = sys.executable) -> str:
    """The command each browser session runs: this dashboard on `profile`. textual-serve
    hands it to a shell, so every part is quoted (a path with spaces or quotes stays one
    argument, never shell syntax)."""
    argv: list[str] = [python, "-m", "dflash_tui"]
    if config_path:
        argv += ["--config", config_path]
    argv += ["--profile", profile]
    return shlex.join(argv)


def start_lines(host: str, port: int, token: str, *, ssh_hint_host: str = "GPU-HOST") -> Sequence[str]:
    """What the server prints at start: the URL with its token, and how to reach it remotely."""
    url = f"http://{host}:{port}/?token={token}"
    lines = [f"dflash-tui: serving the dashboard on {url}",
             "  every request needs that token; keep the URL private. Ctrl+C stops the server "
             "(the run keeps running)."]
    if is_loopback(host):
        lines.append(f"  from another machine: ssh -N -L {port}:127.0.0.1:{port} {ssh_hint_host}  "
                     f"then open the URL above there")
    else:
        lines.append(f"  warning: bound to {host}, reachable from the network in plain HTTP; "
                     "the token is its only guard (prefer 127.0.0.1 and an SSH port-forward)")
    return lines
