"""The record: one verdict change (change.py), the SQLite change store (store.py), and the
recorder that turns reports into changes exactly once (recorder.py). The lowest room."""
