"""The watcher: `dflash-tui --watch` records every verdict change of every run (store.py),
notifies the chosen ones (notify.py), and `--timeline` replays them (timeline.py). Headless."""
