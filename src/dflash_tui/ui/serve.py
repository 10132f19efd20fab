"""`dflash-tui --serve`: the dashboard in a browser, through textual-serve, behind a token.

Each browser tab gets its own dashboard process (textual-serve runs the command per
websocket), watching the same profile; the run itself is untouched by tabs coming and
going. The token check (serve_auth.require_token) runs before any textual-serve route.
"""

from __future__ import annotations

from aiohttp import web
from textual_serve.server import Server

from ..serve_auth import dashboard_command, require_token, start_lines


class TokenServer(Server):
    def __init__(self, command: str, *, host: str, port: int, token: str, title: str) -> None:
        super().__init__(command, host=host, port=port, title=title)
        self.token = token

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.middlewares.append(require_token(self.token))
        return app

    async def on_startup(self, app: web.Application) -> None:
        for line in start_lines(self.host, self.port, self.token):
            print(line, flush=True)


def serve(config_path: str | None, profile: str, *, host: str, port: int, token: str) -> int:
    command = dashboard_command(config_path, profile)
    TokenServer(command, host=host, port=port, token=token, title=f"dflash-tui · {profile}").serve()
    return 0
