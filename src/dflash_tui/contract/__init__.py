"""What a run directory holds, owned here and shared by everyone who reads or writes one.

`rundir.py` is stdlib-only and self-contained (no imports from this package), because three
kinds of code use the same definitions: the dashboard and `--check` (readers), the bundled
trainer (a writer that imports it), and the run probe that the launcher copies, as a file,
into a run directory on a host where nothing of ours is installed (a writer that embeds it).
"""
