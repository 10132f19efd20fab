"""The recording modes' flags: `--watch`, `--timeline` and their options (modes.py runs them).

Kept apart from modes.py so that parsing the command line never imports Apprise or the store.
"""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser, mode) -> None:
    mode.add_argument("--watch", action="store_true",
                      help="record every verdict change of every profile (or --profile's) in the store, "
                           "and send the [notify] notifications; runs until stopped")
    mode.add_argument("--timeline", action="store_true",
                      help="print --profile's recorded states over time (text, --json, or --trace FILE)")
    p.add_argument("--store", metavar="FILE",
                   help="with --watch/--timeline: the change store (default [watch] store, else "
                        "$XDG_STATE_HOME/dflash-tui/watch.sqlite3)")
    p.add_argument("--install-service", action="store_true",
                   help="with --watch: install and start the watcher as a systemd user service")
    p.add_argument("--trace", metavar="FILE",
                   help="with --timeline: write the timeline as Chrome trace JSON (Perfetto opens it)")


def wants(args) -> bool:
    return bool(args.watch or args.timeline or args.install_service or args.trace or args.store)
