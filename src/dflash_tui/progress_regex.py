"""A profile's `progress_regex`: the one rule for what such a pattern may be.

Below config.py (which refuses a bad one when the profile is read) and run/progress.py (which
reads the log with it), so neither imports the other's layer.
"""

from __future__ import annotations

import re


class ProgressRegexError(ValueError):
    """A profile's progress_regex that cannot be used, phrased for the user."""


def compile_progress_regex(pattern: str) -> re.Pattern[str]:
    """The profile's `progress_regex`, or ProgressRegexError saying what to fix."""
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise ProgressRegexError(f"progress_regex {pattern!r} is not a valid regular expression "
                                 f"({exc}); fix it or remove the key") from None
    names = set(rx.groupindex)
    unknown = names - {"step", "loss", "total"}
    if unknown:
        raise ProgressRegexError(f"progress_regex {pattern!r} has group(s) {', '.join(sorted(unknown))}; "
                                 "only (?P<step>...), (?P<loss>...) and (?P<total>...) are read")
    if not names & {"step", "loss"}:
        raise ProgressRegexError(f"progress_regex {pattern!r} names no group; add (?P<step>\\d+) "
                                 "and/or (?P<loss>[0-9.]+)")
    return rx
