"""Find the last Python traceback in the tail of a log, for CRASHED's one-line cause."""

from __future__ import annotations

_START = "Traceback (most recent call last):"
# Lines that continue a chained traceback rather than end it.
_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")


def _is_start(line: str) -> bool:
    # Threads print "Exception in thread X:" first; loggers may prefix the line.
    return line.rstrip().endswith(_START)


def last_traceback(text: str, max_lines: int = 80) -> str | None:
    """The last traceback in `text`, with the tracebacks chained before it, or None.

    A block runs from 'Traceback (most recent call last):' to the first unindented line after
    it that is not a chaining notice: the exception line."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if _is_start(line)]
    if not starts:
        return None
    k = len(starts) - 1
    # Walk back while the line above a block (blank lines skipped) is a chaining notice.
    while k > 0:
        j = starts[k] - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        if j >= 0 and lines[j].startswith(_CHAIN):
            k -= 1
        else:
            break
    first, last = starts[k], starts[-1]
    end = len(lines)
    for i in range(last + 1, len(lines)):
        line = lines[i]
        if line.strip() and not line[0].isspace():
            end = i + 1
            break
    block = lines[first:end]
    if len(block) > max_lines:
        block = block[:2] + [f"  ... {len(block) - max_lines + 3} lines ..."] + block[-(max_lines - 3):]
    return "\n".join(block)


def exception_line(traceback: str | None) -> str:
    """The 'ValueError: boom' line that ends a traceback block ('' if none)."""
    if not traceback:
        return ""
    for line in reversed(traceback.splitlines()):
        if line and not line[0].isspace():
            return line.strip()
    return ""
