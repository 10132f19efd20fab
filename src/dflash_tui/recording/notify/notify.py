"""NotifyPolicy: which recorded changes notify, and when; and what the message says.

A change notifies when it is news (`news_event`, decided per run id) of an event the user chose
(`[notify] on`: any failing verdict, FINISHED, STOPPED, UNREACHABLE, and `recovered`: a healthy
verdict of a run after its notified failing state, or after a notified UNREACHABLE), once it has
lasted `hold_s` (UNREACHABLE: `unreachable_after_s`, if longer). A state that changes again
within its hold notifies nothing; the same state of the same run as the last one notified is not
news (a flapping run notifies once per change that lasts), while a relaunched run's states are
news of their own; a run the watcher first saw already ended is recorded, not notified (it ended
before anyone watched). A `warning` (a check that foresees a failure, turned warn or fail while
the verdict stands: recording/store/change.py `CheckNotice`) notifies at once, once per run, check and
state. Pure: time comes in as arguments; delivery is sender.py's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...run.verdict.energy import spent_words
from ...verdicts import State, TargetState, Verdict
from ...words import eta, progress
from ..store.change import CheckNotice, Evidence, VerdictChange
from .settings import NotifySettings


@dataclass(frozen=True)
class Notified:
    """What was last notified of a profile: news is told apart per run."""

    run_id: str
    state: State


def ended(state: State) -> bool:
    """A run that is over (`Verdict.ended`): seen at the watcher's first look, it happened before it."""
    return isinstance(state, Verdict) and state.ended


def news_event(change: VerdictChange, notified: Notified | None) -> str | None:
    """The `[notify] on` word `change` is news of, given what was last notified of its profile;
    None when it is no news. Decided per run id: the same state of the same run is not news
    again, a relaunched run's state is; `recovered` is a run healthy again after its own
    notified failure, or any run once its target answers after a notified UNREACHABLE. A run
    first seen already ended (`change.first_look`) is no news: it ended before the watcher looked."""
    if notified is not None and (notified.run_id, notified.state) == (change.run_id, change.state):
        return None
    state = change.state
    if change.first_look and ended(state):
        return None
    if state is TargetState.UNREACHABLE:
        return TargetState.UNREACHABLE.value
    if not isinstance(state, Verdict):
        return None
    if state.failing:
        return "failing"
    if state.ended_well:
        return state.value
    if state.healthy and notified is not None and (notified.state is TargetState.UNREACHABLE or (
            _failing(notified.state) and notified.run_id == change.run_id)):
        return "recovered"
    return None


def _failing(state: State) -> bool:
    return isinstance(state, Verdict) and state.failing


@dataclass(frozen=True)
class Notification:
    profile: str
    state: State
    event: str                    # the `on` word that made it
    title: str
    body: str
    urls: tuple[str, ...]
    change: VerdictChange         # the recorded change it announces
    due: float                    # when it became due (local epoch)
    outbox_id: int | None = None  # a recovery's notice: its row in the store's outbox (recovery_log.py)


def open_command(profile: str, config_path: str | None) -> str:
    return "dflash-tui " + (f"--config {config_path} " if config_path else "") + f"--profile {profile}"


def _run_figures(ev: Evidence, *, with_eta: bool) -> list[str]:
    """The run's progress (with its ETA where asked and known) and what it has spent, each line
    only where there is something to say."""
    lines = []
    numbers = progress(ev.step, ev.total, ev.loss, ev.rate, ev.rate_unit)
    if with_eta and ev.eta_s is not None and ev.step is not None and ev.total and ev.step < ev.total:
        numbers += f", ETA {eta(ev.eta_s)}"
    if numbers:
        lines.append(numbers)
    if spent := spent_words(ev.kwh, ev.cost):
        lines.append(f"this run: {spent}")
    return lines


def _closing_lines(change: VerdictChange, config_path: str | None) -> list[str]:
    """A notification's last lines: the run's id where known, and the command that opens it."""
    return ([f"run {change.run_id}"] if change.run_id else []) + [
        f"open it: {open_command(change.profile, config_path)}"]


def message(change: VerdictChange, event: str, config_path: str | None) -> tuple[str, str]:
    """(title, body) of a change's notification; every run-made text in it is already inert."""
    word = "recovered: " if event == "recovered" else ""
    title = f"dflash-tui: {change.profile} {word}{change.state}"
    ev = change.evidence
    lines = [f"{change.state} (was {change.previous or 'not recorded'}): {change.cause}"]
    if change.check:
        lines.append(f"check: {change.check}")
    lines += _run_figures(ev, with_eta=True)
    if ev.stuck_at:
        lines.append(f"stuck at: {ev.stuck_at}")
    if ev.ranks:
        lines.append("ranks (where they differ): " + "; ".join(ev.ranks))
    if ev.traceback:
        lines.append("traceback (last lines):")
        lines += [f"  {line}" for line in ev.traceback]
    lines += _closing_lines(change, config_path)
    return title, "\n".join(lines)


def notice_message(notice: CheckNotice, config_path: str | None) -> tuple[str, str]:
    """(title, body) of a warning: "dflash-tui: p warning: disk fail" and the check's words."""
    c = notice.change
    title = f"dflash-tui: {c.profile} warning: {c.check} {notice.check_state.value}"
    lines = [f"{c.state}, and the {c.check} check says: {c.cause}"]
    lines += _run_figures(c.evidence, with_eta=False)
    lines += _closing_lines(c, config_path)
    return title, "\n".join(lines)


class NotifyPolicy:
    def __init__(self, settings: NotifySettings, *, config_path: str | None = None) -> None:
        self.settings = settings
        self.config_path = config_path
        self._warned: set[tuple[str, str, str, str]] = set()   # (profile, run id, check, state) notified
        self._notices: list[Notification] = []                  # warnings due now
        self._notified: dict[str, Notified] = {}                  # profile -> what was last notified
        self._pending: dict[str, tuple[VerdictChange, str, float]] = {}   # profile -> (change, event, due)

    def hold_for(self, state: State) -> float:
        if state is TargetState.UNREACHABLE:
            return max(self.settings.hold_s, self.settings.unreachable_after_s)
        return self.settings.hold_s

    def resume(self, last: VerdictChange, now: float) -> None:
        """A restarted watcher: `last` (the store's newest change of a profile) was notified
        if its hold had passed; else it is pending again. (`last.first_look`: the store holds
        no earlier change of its run, so an ended run's change was no news when recorded.)"""
        self._pending.pop(last.profile, None)
        self.changed(last)
        due = self._pending.get(last.profile)
        if due is not None and due[2] <= now:
            del self._pending[last.profile]
            self._notified[last.profile] = Notified(last.run_id, last.state)

    def changed(self, change: VerdictChange) -> None:
        """A recorded change: it replaces whatever was waiting out its hold for the profile."""
        name = change.profile
        self._pending.pop(name, None)
        if not self.settings.for_profile(name):
            return
        event = news_event(change, self._notified.get(name))
        if event is None or event not in self.settings.on:
            return
        self._pending[name] = (change, event, change.time + self.hold_for(change.state))

    def noticed(self, notice: CheckNotice) -> None:
        """A foresight check turned warn or fail: due at once, unless this run's check was
        notified in this state already."""
        c = notice.change
        urls = self.settings.for_profile(c.profile)
        key = (c.profile, c.run_id, c.check, notice.check_state.value)
        if not urls or "warning" not in self.settings.on or key in self._warned:
            return
        if len(self._warned) > 4096:
            self._warned.clear()
        self._warned.add(key)
        title, body = notice_message(notice, self.config_path)
        self._notices.append(Notification(c.profile, c.state, "warning", title, body, urls, c, c.time))

    def due(self, now: float) -> list[Notification]:
        """The notifications whose hold has passed, oldest first; each is returned once."""
        out, self._notices = self._notices, []
        for name, (change, event, at) in sorted(self._pending.items(), key=lambda kv: kv[1][2]):
            if at > now:
                continue
            del self._pending[name]
            self._notified[name] = Notified(change.run_id, change.state)
            title, body = message(change, event, self.config_path)
            out.append(Notification(name, change.state, event, title, body,
                                    self.settings.for_profile(name), change, at))
        return out

    def next_due(self) -> float | None:
        if self._notices:
            return self._notices[0].due
        return min((at for _, _, at in self._pending.values()), default=None)
