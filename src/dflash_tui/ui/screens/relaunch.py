"""The confirmations of the run actions, shared by the single-run view and the fleet screen,
so both ask exactly the same before touching a run.

`RelaunchScreen` is the relaunch question; when the run dir holds a checkpoint it also offers
to resume from it (the bundled trainer's --resume; checkpoints/ stays in the run dir when the
last run moves to history/). It answers "fresh", "resume" or None (cancelled).
"""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

FRESH, RESUME = "fresh", "resume"


def relaunch_detail(profile: str, pid_text: str, run_dir: str) -> str:
    first = (f"Stops {pid_text} (SIGTERM, then SIGKILL after the grace period, only if that pid is "
             f"still this run), then launches" if pid_text else "No live run: launches")
    return (f"{first} profile {profile} in {run_dir}.\n"
            "The checklist resets and fills in as the new run starts.")


def stop_detail(profile: str, pid_text: str) -> str:
    return (f"Stops {pid_text or 'the run'} of profile {profile}: SIGTERM, a grace period, then SIGKILL.\n"
            "Only that pid with its recorded start time is signalled, never a pattern.")


class RelaunchScreen(ModalScreen[str | None]):
    """y relaunches from scratch; u resumes from `checkpoint` (when there is one); n/escape cancel."""

    BINDINGS = [
        Binding("y", "answer('fresh')", "Relaunch"),
        Binding("u", "answer('resume')", "Resume"),
        Binding("n,escape", "answer(None)", "No"),
    ]

    def __init__(self, detail: str, checkpoint: str | None = None) -> None:
        """`checkpoint`: how to name the newest checkpoint ("step 120 (step-00000120) of run RUN_ID")."""
        super().__init__()
        self._detail, self._checkpoint = detail, checkpoint

    def compose(self):
        with Vertical(id="dialog"):
            yield Static(Text("Relaunch the run?", style="bold"), id="dialog-title")
            yield Static(self._detail, id="dialog-detail")
            if self._checkpoint:
                yield Static(f"Resume from the newest checkpoint, {self._checkpoint}? "
                             "u resumes from it, y starts from step 0.", id="dialog-resume")
            with Horizontal(id="dialog-buttons"):
                if self._checkpoint:
                    yield Button("Resume (u)", variant="warning", id="resume")
                yield Button("Yes (y)" if not self._checkpoint else "From scratch (y)",
                             variant="error", id="fresh")
                yield Button("No (n)", variant="primary", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss({"fresh": FRESH, "resume": RESUME}.get(event.button.id or ""))

    def action_answer(self, answer: str | None) -> None:
        if answer == RESUME and not self._checkpoint:
            return   # nothing to resume from: the key does nothing
        self.dismiss(answer)
