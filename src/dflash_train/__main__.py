"""The `dflash-train` command and `python -m dflash_train` (the dashboard launches it this way).

Third-party import-time warnings are filtered before torch and the trainer are imported
(dflash_tui/import_warnings.py says which and why)."""

import sys

from dflash_tui.import_warnings import quiet_third_party_imports

quiet_third_party_imports()

from dflash_train.cli import main as cli_main  # noqa: E402  (after the filters, on purpose)


def main() -> int:
    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
