"""The `dflash-tui` command and `python -m dflash_tui`: one door for both.

Third-party import-time warnings are filtered before the command line's module (and through it
asyncssh, Textual, ...) is imported: import_warnings.py says which and why."""

import sys

from .import_warnings import quiet_third_party_imports

quiet_third_party_imports()

from .cli import main as cli_main  # noqa: E402  (after the filters, on purpose)


def main() -> int:
    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
