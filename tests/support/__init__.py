"""Real components for the tests: a loopback OpenSSH server and pct/docker stand-ins."""
