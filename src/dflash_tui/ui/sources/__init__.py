"""What the dashboard watches: the DashboardSource seam (source.py) and its live implementation
over any RunWatch (watch_source.py)."""
