"""The terminal driver: Textual's own, with an input thread that sleeps until there is input.

Textual's LinuxDriver reads keys on a thread that polls stdin with `select(0.1)`: ten wake-ups a
second for a dashboard nobody is typing into, each one taking the GIL from the event loop. On
the run view at 1,000 log lines a second that was about 0.4 % of a core of the dashboard's
2.5-2.9 % (benchmarks/RESULTS.md). `QuietInputDriver` blocks instead until one of three things:
stdin is readable; the key parser's own deadline is due (a lone Esc becomes the Escape key only
once no more bytes followed within the parser's timeout, so while a sequence is pending the
thread wakes as Textual's would); or the driver stops the thread (its exit event also writes
to a pipe the thread waits on). Everything else is Textual's: the same parser, the same
messages, the same start and stop.
"""

from __future__ import annotations

import os
import selectors
import threading
import time
from codecs import getincrementaldecoder

from textual._parser import ParseError
from textual._xterm_parser import XTermParser
from textual.driver import Driver

try:
    from textual.drivers.linux_driver import LinuxDriver
except ImportError:   # no termios (Windows): Textual's own driver is used as it is
    LinuxDriver = None

# Textual's poll period, kept while the parser waits for the rest of an escape sequence (and
# where this Textual's parser does not say when it will want its tick).
PARSER_POLL_S = 0.1
READ_SIZE = 4096
_UNKNOWN = object()


class _WakingEvent(threading.Event):
    """The driver's exit event: setting it also wakes the input thread from its select."""

    def __init__(self, wake_fd: int) -> None:
        super().__init__()
        self.wake_fd: int | None = wake_fd   # None once the driver closed the pipe

    def set(self) -> None:
        super().set()
        if self.wake_fd is None:
            return   # closed: the number may name another file by now
        try:
            os.write(self.wake_fd, b"\0")
        except OSError:
            pass   # the pipe is full: a wake-up is already pending


def _parser_wait(parser: XTermParser) -> float | None:
    """How long the input thread may sleep without input: until the parser's deadline for a
    pending sequence (at most Textual's poll period), or without limit when none is pending."""
    deadline = getattr(parser, "_timeout_time", _UNKNOWN)
    if deadline is None:
        return None
    if deadline is _UNKNOWN:
        return PARSER_POLL_S
    return min(PARSER_POLL_S, max(0.0, deadline - time.monotonic()))


if LinuxDriver is not None:
    class QuietInputDriver(LinuxDriver):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self._wake_read, self._wake_write = os.pipe()
            os.set_blocking(self._wake_read, False)
            os.set_blocking(self._wake_write, False)
            self.exit_event = _WakingEvent(self._wake_write)

        def run_input_thread(self) -> None:
            """Textual's input loop (LinuxDriver.run_input_thread), waiting as said above."""
            fileno, wake = self.fileno, self._wake_read
            selector = selectors.SelectSelector()   # as Textual's: stdin may be a file or a pipe
            selector.register(fileno, selectors.EVENT_READ)
            selector.register(wake, selectors.EVENT_READ)
            parser = XTermParser(self._debug)
            decode = getincrementaldecoder("utf-8")().decode
            try:
                while not self.exit_event.is_set():
                    for key, _mask in selector.select(_parser_wait(parser)):
                        if key.fd == wake:
                            self._drain_wake()
                            continue
                        data = decode(os.read(fileno, READ_SIZE))
                        if not data:
                            # stdin ended (a pipe): an end stays readable, so stop watching it
                            # rather than spin; the thread still ends with the exit event.
                            selector.unregister(fileno)
                            continue
                        for event in parser.feed(data):
                            self.process_message(event)
                    for event in parser.tick():
                        self.process_message(event)
                for event in parser.tick():   # a sequence still pending at the end, as Textual's
                    self.process_message(event)
            finally:
                selector.close()
                self._drain_wake()
                try:
                    for _event in parser.feed(""):
                        pass
                except (EOFError, ParseError):
                    pass

        def _drain_wake(self) -> None:
            try:
                while os.read(self._wake_read, READ_SIZE):
                    pass
            except OSError:
                pass   # empty (would block) or closed

        def close(self) -> None:
            super().close()
            self.exit_event.wake_fd = None   # Textual may set the event again after this
            for fd in (self._wake_read, self._wake_write):
                try:
                    os.close(fd)
                except OSError:
                    pass
else:
    QuietInputDriver = None


def quiet_driver_class(textual_choice: type[Driver]) -> type[Driver]:
    """The driver the app runs on: the quiet one where Textual chose its LinuxDriver (a real
    terminal); Textual's choice otherwise (headless tests, the web view, Windows)."""
    if QuietInputDriver is not None and textual_choice is LinuxDriver:
        return QuietInputDriver
    return textual_choice
