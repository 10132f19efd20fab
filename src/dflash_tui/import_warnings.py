"""Deprecation warnings that third-party packages raise while they are imported, kept off a
user's terminal.

A release of one dependency can start warning about how another one uses it: cryptography 51
deprecates DSA, and asyncssh imports its DSA names at import time (asyncssh issue #826), so
every command printed ten lines of `CryptographyDeprecationWarning` before its own output, and
the promise that an error is one line on stderr broke on every fresh install. Those warnings are
addressed to the dependency's authors, not to someone running `--check`.

The doors (`dflash-tui`, `python -m dflash_tui`, `dflash-train`) call `quiet_third_party_imports`
before they import anything third-party. Each filter names the warning's category and the module
it is attributed to, so a warning of ours, or a new one from a dependency, still shows (and
tests/test_doors.py fails on it before a user sees it). A developer who asks for warnings with
`-W` or `PYTHONWARNINGS` gets every one: nothing is filtered then.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from typing import NamedTuple


class KnownImportWarning(NamedTuple):
    category_module: str     # where the warning's class is defined
    category_name: str       # the class: a subclass of Warning
    raised_in: str           # regex of the module the warning is attributed to (filterwarnings' `module`)
    why: str                 # whose it is, and where it is tracked


KNOWN: tuple[KnownImportWarning, ...] = (
    KnownImportWarning("cryptography.utils", "CryptographyDeprecationWarning", r"asyncssh(\..*)?\Z",
                       "asyncssh names cryptography's deprecated DSA types at import (asyncssh #826)"),
)


def quiet_third_party_imports(known: tuple[KnownImportWarning, ...] = KNOWN) -> list[KnownImportWarning]:
    """Ignore each known import-time warning, unless warnings were asked for on the command line
    or in PYTHONWARNINGS (both fill `sys.warnoptions`). Returns the filters put in place.

    A category whose package is not installed has nothing to filter: it is skipped. The category's
    module is loaded here, before the package that warns, which is the point: the filter must be
    in place when that package is first imported."""
    if sys.warnoptions:
        return []
    placed = []
    for entry in known:
        category = _category(entry)
        if category is None:
            continue
        warnings.filterwarnings("ignore", category=category, module=entry.raised_in)
        placed.append(entry)
    return placed


def _category(entry: KnownImportWarning) -> type[Warning] | None:
    try:
        module = importlib.import_module(entry.category_module)
    except ImportError:
        return None
    category = getattr(module, entry.category_name, None)
    return category if isinstance(category, type) and issubclass(category, Warning) else None
