"""The config file as the program reads it: config.py's loader handed every launch backend's
scheduler keys (backends.SCHEDULERS) and every room's section (SECTIONS). config.py sits below
the backends and the rooms and names none of them; this module, above both, is where they meet.

A new section is one module in the room that reads it (a `config.Section`: the table's name, its
parser, its default) and one line in SECTIONS; its readers ask `SECTION.of(config)`.
"""

from __future__ import annotations

import os
from typing import Any

from . import config as _config
from .backends import SCHEDULERS
from .config import Config, Section
from .recording.notify.settings import NOTIFY_SECTION
from .recording.recovery.settings import RECOVER_SECTION
from .recording.store.settings import WATCH_SECTION

# In the order the message for an unknown top-level table names them.
SECTIONS: tuple[Section[Any], ...] = (WATCH_SECTION, NOTIFY_SECTION, RECOVER_SECTION)


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """config.load_config, every backend's scheduler keys and every room's section known."""
    return _config.load_config(path, SCHEDULERS, SECTIONS)


def parse_config(text: str, path: str) -> Config:
    """config.parse_config, every backend's scheduler keys and every room's section known."""
    return _config.parse_config(text, path, SCHEDULERS, SECTIONS)
