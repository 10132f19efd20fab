"""The single-run view's screen: it owns the run view's keys.

Textual offers a screen's bindings only while that screen is on top, so the fleet, a history
list and the dialogs (each with keys of its own) never see these; the actions are the app's
(`app.` prefix), since they act on the source, the panes and the screen stack the app holds.
"""

from __future__ import annotations

from textual.binding import Binding
from textual.screen import Screen

from ..panes import TAB_PANES


class RunScreen(Screen):
    BINDINGS = [
        Binding("r", "app.relaunch", "Relaunch", tooltip="stop this run by pid (verified) and launch it again"),
        Binding("s", "app.stop", "Stop", tooltip="stop this run by pid: SIGTERM, grace period, SIGKILL"),
        Binding("c", "app.canary", "Canary", tooltip="launch `sleep` through the same wrapper and check it outlives the channel"),
        Binding("l", "app.switch_log", "Log", tooltip="switch the log pane between train.log and events.jsonl"),
        Binding("f", "app.toggle_follow", "Follow", tooltip="follow the end of the log on/off"),
        Binding("slash", "app.search", "Search", tooltip="search the log; n / N for next / previous match"),
        Binding("n", "app.search_next", "Next match", show=False),
        Binding("N", "app.search_prev", "Previous match", show=False),
        Binding("e", "app.first_error", "Error", tooltip="jump to the first traceback or error line in the log"),
        *(Binding(str(n), f"app.show_tab('tab-{pane.PANE_ID}')", pane.TITLE, show=False)
          for n, pane in enumerate(TAB_PANES, 1)),
        Binding("k", "app.toggle_checks", "Checks", show=False, tooltip="show the ok checks one per row, or fold them into one line"),
        Binding("o", "app.metrics_smoothing", "Smooth", show=False,
                tooltip="Metrics: cycle the smoothing (TensorBoard's debiased EMA: off, 0.6, 0.9)"),
        Binding("z", "app.metrics_zoom", "Zoom", show=False, tooltip="Metrics: all steps, the last 1000, the last 200"),
        Binding("m", "app.metrics_page", "More charts", show=False,
                tooltip="Metrics: the next page of charts when the run reports more series than fit"),
        Binding("question_mark", "app.help", "Help"),
        Binding("q", "app.quit", "Quit", tooltip="leave the dashboard; the run keeps running"),
        # Last: in the footer from 100 columns (it scrolls), always in ? help and the palette.
        Binding("p", "app.switch_profile", "Profile", tooltip="watch another profile (this run keeps running)"),
        Binding("g", "app.log_top", "Top", tooltip="top of the log (follow off)"),
        Binding("G", "app.log_bottom", "End", tooltip="bottom of the log (follow on)"),
        # Not in the footer (full from 100 columns already); in ? help and the palette.
        Binding("a", "app.fleet", "Fleet", show=False, tooltip="every profile at once (the fleet screen)"),
        Binding("h", "app.history", "History", show=False,
                tooltip="this profile's earlier runs, openable read-only"),
        Binding("escape", "app.back", "Back", show=False,
                tooltip="from a history run: the live run; else the fleet screen"),
    ]
