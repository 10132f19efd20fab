"""`python -m dflash_tui`: the same as the `dflash-tui` command."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
