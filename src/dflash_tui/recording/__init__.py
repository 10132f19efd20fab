"""The recording watcher: `dflash-tui --watch` records every verdict change of every run
(store.py), notifies the chosen ones (notify.py, sender.py), and `--timeline` replays them
(timeline.py, trace_export.py). Headless: never imports textual."""
