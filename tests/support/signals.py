"""SIGINT as a terminal would deliver it, for tests that send it to a child process."""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """A Popen `preexec_fn`: SIGINT back to its default action in the child, whatever this test
    process inherited. A shell starts a background job with SIGINT ignored, an ignored signal
    stays ignored across exec, and Python then never turns SIGINT into KeyboardInterrupt: a
    test of what SIGINT does would test how the suite was started."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
