"""What the watcher's tests share: one HTTP receiver per module for the notifications they send."""

from __future__ import annotations

import pytest

from tests.support.receivers import HttpReceiver


@pytest.fixture(scope="module")
def http():
    r = HttpReceiver()
    yield r
    r.close()
