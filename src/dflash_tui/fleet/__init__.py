"""Many profiles at once, headless: the shared transport, the fleet poller, --check --all.

Nothing here imports textual: `dflash-tui --check --all` and the fleet screen (ui/screens/fleet.py)
both use it.
"""
