"""`python -m dflash_tui`: the same as the `dflash-tui` command."""

import sys

from .cli import main

sys.exit(main())
