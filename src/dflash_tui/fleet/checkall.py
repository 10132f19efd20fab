"""`dflash-tui --check --all`: every profile checked at once over the shared transport.

Each profile gets exactly what `--check` gives it (the caller's `check` coroutine over the
profile's RunWatch, the same one the single-profile mode runs), concurrently and bounded;
profiles on one host share its connection and agent. A profile whose target fails is that profile's result (exit code 3,
or 2 for a profile that cannot make a target), never the end of the others.

The combined exit code is the worst by this precedence (README, "Exit codes"):
    2 usage/config error  >  1 failing verdict  >  3 unreachable  >  4 no verdict yet  >  0 healthy
A failing run is the most urgent thing to say; an unreachable target is unknown, which is
worse than "not decided yet" but not proof of a failure.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Sequence

from ..config import ConfigError, Profile
from ..remote.base import TargetError
from ..watch import RunWatch, open_watch
from ..watch.transport import SharedTransport

EXIT_PRECEDENCE = (2, 1, 3, 4, 0)   # worst first
DEFAULT_CONCURRENCY = 16


def worst_exit_code(codes: Sequence[int]) -> int:
    """The worst of `codes` by EXIT_PRECEDENCE (0 for none); unknown codes rank worst of all."""
    if not codes:
        return 0
    rank = {c: i for i, c in enumerate(EXIT_PRECEDENCE)}
    return min(codes, key=lambda c: rank.get(c, -1))


@dataclass
class ProfileResult:
    profile: Profile
    value: Any = None          # what `check` returned
    error: str | None = None   # one line, when it raised
    error_code: int | None = None


async def check_all(profiles: Sequence[Profile],
                    check: Callable[[RunWatch], Awaitable[Any]], *,
                    concurrency: int = DEFAULT_CONCURRENCY,
                    transport: SharedTransport | None = None) -> list[ProfileResult]:
    """`check(watch)` for every profile at once; results in the order of `profiles`."""
    own = transport is None
    transport = transport if transport is not None else SharedTransport()
    sem = asyncio.Semaphore(concurrency)

    async def one(p: Profile) -> ProfileResult:
        async with sem:
            try:
                watch = open_watch(p, transport=transport)
            except ConfigError as exc:
                return ProfileResult(p, error=str(exc), error_code=2)
            try:
                return ProfileResult(p, await check(watch))
            except ConfigError as exc:
                return ProfileResult(p, error=str(exc), error_code=2)
            except TargetError as exc:   # unreachable, auth, host key, container stopped
                return ProfileResult(p, error=str(exc), error_code=3)
            finally:
                await watch.close()   # what it borrowed from `transport` stays open

    try:
        return list(await asyncio.gather(*(one(p) for p in profiles)))
    finally:
        if own:
            await transport.close()
