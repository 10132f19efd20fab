"""dflash_train: the bundled thread-pooled DFlash drafter trainer.

It writes its run directory through `dflash_tui.contract.rundir` (the stdlib-only contract the
dashboard owns); nothing in the dashboard imports this package.
"""

__version__ = "0.1.0"
