"""NotifyPolicy: which recorded changes notify, and when; and what the message says.

A change notifies when its state is one the user chose (`[notify] on`: any failing verdict,
FINISHED, STOPPED, UNREACHABLE, and `recovered`: a healthy verdict after a notified failing or
unreachable one), once it has lasted `hold_s` (UNREACHABLE: `unreachable_after_s`, if longer).
A state that changes again within its hold notifies nothing, and a state equal to the last one
notified is not news: a flapping run notifies once per change that lasts. Pure: time comes in
as arguments; delivery is sender.py's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import NotifySettings
from ..fleet.row import UNREACHABLE
from ..run.verdict.checklist import Verdict
from .change import VerdictChange


def event_of(state: str, notified: str) -> str | None:
    """The `[notify] on` word a change to `state` is, given the state last notified."""
    if state == UNREACHABLE:
        return UNREACHABLE
    try:
        verdict = Verdict(state)
    except ValueError:
        return None
    if verdict.failing:
        return "failing"
    if verdict in (Verdict.FINISHED, Verdict.STOPPED):
        return verdict.value
    if verdict.healthy and notified and (notified == UNREACHABLE or _failing(notified)):
        return "recovered"
    return None


def _failing(state: str) -> bool:
    try:
        return Verdict(state).failing
    except ValueError:
        return False


@dataclass(frozen=True)
class Notification:
    profile: str
    state: str
    event: str                    # the `on` word that made it
    title: str
    body: str
    urls: tuple[str, ...]
    change: VerdictChange         # the recorded change it announces
    due: float                    # when it became due (local epoch)


def open_command(profile: str, config_path: str | None) -> str:
    return "dflash-tui " + (f"--config {config_path} " if config_path else "") + f"--profile {profile}"


def message(change: VerdictChange, event: str, config_path: str | None) -> tuple[str, str]:
    """(title, body) of a change's notification; every run-made text in it is already inert."""
    word = "recovered: " if event == "recovered" else ""
    title = f"dflash-tui: {change.profile} {word}{change.state}"
    ev = change.evidence
    lines = [f"{change.state} (was {change.previous or 'not recorded'}): {change.cause}"]
    if change.check:
        lines.append(f"check: {change.check}")
    numbers = []
    if ev.step is not None:
        numbers.append(f"step {ev.step}" + (f"/{ev.total}" if ev.total else ""))
    if ev.loss is not None:
        numbers.append(f"loss {ev.loss:.4g}")
    if ev.rate is not None:
        numbers.append(f"{ev.rate:.4g} {ev.rate_unit}".strip())
    if numbers:
        lines.append(", ".join(numbers))
    if ev.stuck_at:
        lines.append(f"stuck at: {ev.stuck_at}")
    if ev.ranks:
        lines.append("ranks (where they differ): " + "; ".join(ev.ranks))
    if ev.traceback:
        lines.append("traceback (last lines):")
        lines += [f"  {line}" for line in ev.traceback]
    if change.run_id:
        lines.append(f"run {change.run_id}")
    lines.append(f"open it: {open_command(change.profile, config_path)}")
    return title, "\n".join(lines)


class NotifyPolicy:
    def __init__(self, settings: NotifySettings, *, config_path: str | None = None) -> None:
        self.settings = settings
        self.config_path = config_path
        self._notified: dict[str, str] = {}                       # profile -> state last notified
        self._pending: dict[str, tuple[VerdictChange, str, float]] = {}   # profile -> (change, event, due)

    def hold_for(self, state: str) -> float:
        if state == UNREACHABLE:
            return max(self.settings.hold_s, self.settings.unreachable_after_s)
        return self.settings.hold_s

    def resume(self, last: VerdictChange, now: float) -> None:
        """A restarted watcher: `last` (the store's newest change of a profile) was notified
        if its hold had passed; else it is pending again."""
        self._pending.pop(last.profile, None)
        self.changed(last)
        due = self._pending.get(last.profile)
        if due is not None and due[2] <= now:
            del self._pending[last.profile]
            self._notified[last.profile] = last.state

    def changed(self, change: VerdictChange) -> None:
        """A recorded change: it replaces whatever was waiting out its hold for the profile."""
        name = change.profile
        self._pending.pop(name, None)
        if not self.settings.for_profile(name):
            return
        notified = self._notified.get(name, "")
        if change.state == notified:
            return
        event = event_of(change.state, notified)
        if event is None or event not in self.settings.on:
            return
        self._pending[name] = (change, event, change.time + self.hold_for(change.state))

    def due(self, now: float) -> list[Notification]:
        """The notifications whose hold has passed, oldest first; each is returned once."""
        out = []
        for name, (change, event, at) in sorted(self._pending.items(), key=lambda kv: kv[1][2]):
            if at > now:
                continue
            del self._pending[name]
            self._notified[name] = change.state
            title, body = message(change, event, self.config_path)
            out.append(Notification(name, change.state, event, title, body,
                                    self.settings.for_profile(name), change, at))
        return out

    def next_due(self) -> float | None:
        return min((at for _, _, at in self._pending.values()), default=None)
