"""A profile's `progress_regex`: the one rule for what such a pattern may be.

Below config.py (which refuses a bad one when the profile is read) and run/evidence/progress.py (which
reads the log with it), so neither imports the other's layer. RE2 matches in time linear in
the text, so a user's pattern cannot hang or starve a poll whatever line it meets.
"""

from __future__ import annotations

import re

import re2

from .contract.rundir import inert_text


class ProgressRegexError(ValueError):
    """A profile's progress_regex that cannot be used, phrased for the user."""


# What a profile's progress_regex may be: RE2 matches in time linear in the text, and these
# bound the per-character cost (the compiled program) and refuse what RE2 would read
# differently from Python (a repeat count over its 1000 is taken as literal text there).
MAX_REGEX_CHARS = 1000
MAX_REGEX_DEPTH = 50
MAX_REGEX_REPEAT = 1000
MAX_REGEX_PROGRAM = 10000
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False          # errors are ours to phrase, not stderr lines
_RE2_OPTIONS.max_mem = 8 << 20
_REPEAT = re.compile(r"(?<!\\)\{(\d++)(?:,(\d*+))?+\}")
_FIX = "fix it or remove the key"
# How RE2 names the constructs it refuses because no linear-time match exists for them.
_UNBOUNDED = ("invalid perl operator", "invalid escape sequence", "bad repetition operator", "invalid named capture")


def _regex_depth(pattern: str) -> int:
    depth = deepest = 0
    escaped = in_class = False
    for ch in pattern:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        elif ch == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == ")":
            depth = max(0, depth - 1)
    return deepest


def compile_progress_regex(pattern: str):
    """The profile's `progress_regex` compiled by RE2 (linear-time matching), or
    ProgressRegexError saying what to fix."""
    shown = repr(pattern) if len(pattern) <= 60 else repr(pattern[:57]) + "..."
    if len(pattern) > MAX_REGEX_CHARS:
        raise ProgressRegexError(f"progress_regex {shown} is {len(pattern)} characters long, more than "
                                 f"{MAX_REGEX_CHARS}; write a shorter one or remove the key")
    depth = _regex_depth(pattern)
    if depth > MAX_REGEX_DEPTH:
        raise ProgressRegexError(f"progress_regex {shown} nests groups {depth} deep, more than "
                                 f"{MAX_REGEX_DEPTH}; flatten it or remove the key")
    for m in _REPEAT.finditer(pattern):
        counts = [int(g) for g in m.groups() if g and len(g) < 12] + [MAX_REGEX_REPEAT + 1] * any(
            g and len(g) >= 12 for g in m.groups())
        if counts and max(counts) > MAX_REGEX_REPEAT:
            raise ProgressRegexError(f"progress_regex {shown} repeats {m.group()}, more than "
                                     f"{MAX_REGEX_REPEAT} times; use + or * instead, or remove the key")
    try:
        rx = re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        why = inert_text(exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes)
                         else str(exc))
        if any(w in why for w in _UNBOUNDED):
            raise ProgressRegexError(
                f"progress_regex {shown} cannot be matched in linear time ({why}): backreferences, "
                f"lookarounds and possessive or atomic groups are not supported; {_FIX}") from None
        raise ProgressRegexError(f"progress_regex {shown} is not a valid regular expression ({why}); {_FIX}") from None
    if rx.programsize > MAX_REGEX_PROGRAM:
        raise ProgressRegexError(f"progress_regex {shown} compiles to {rx.programsize} RE2 instructions, more than "
                                 f"{MAX_REGEX_PROGRAM}; write a simpler one or remove the key")
    names = set(rx.groupindex)
    unknown = names - {"step", "loss", "total"}
    if unknown:
        raise ProgressRegexError(f"progress_regex {shown} has group(s) {', '.join(sorted(unknown))}; "
                                 "only (?P<step>...), (?P<loss>...) and (?P<total>...) are read")
    if not names & {"step", "loss"}:
        raise ProgressRegexError(f"progress_regex {shown} names no group; add (?P<step>\\d+) "
                                 "and/or (?P<loss>[0-9.]+)")
    return rx
