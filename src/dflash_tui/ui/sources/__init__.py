"""What the dashboard watches: the DashboardSource seam (source.py) and its live implementations
over a HostWatch (session_source.py) and a NodesWatch (nodes_source.py)."""
