"""`python -m dflash_train ...` is `dflash-train ...` (the dashboard launches it this way)."""

import sys

from dflash_train.cli import main

sys.exit(main())
