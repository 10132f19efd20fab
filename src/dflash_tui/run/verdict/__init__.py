"""Evidence -> verdict: the checklist's words, one builder per check, the ladder (health.evaluate), the hang diagnosis, the report."""
