"""The recording watcher: `dflash-tui --watch` records every verdict change of every run
(store/), notifies the chosen ones (notify/), applies each profile's [recover] policy
(recovery/), and `--timeline` replays them with the goodput (goodput/). Rooms in an order kept
by tests/test_boundaries.py `RECORDING_LAYERS`; the daemon and its doors on top. Headless:
never imports textual."""
