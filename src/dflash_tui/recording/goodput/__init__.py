"""Time: the goodput (goodput.py), the timeline's bands (timeline.py) and its Perfetto trace
(trace_export.py), all read from recorded changes. Above the store."""
