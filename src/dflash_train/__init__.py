"""dflash_train: the bundled thread-pooled DFlash drafter trainer.

This __init__ stays torch-free: the dashboard imports `dflash_train.schema` (the run-directory
contract) and must not pull torch in with it.
"""

__version__ = "0.1.0"
