"""Where commands run: this machine, an SSH host, or a container on either."""

from .base import (CommandResult, CommandTimeout, ContainerNotRunning, Process, Target,
                   TargetError, TargetUnreachable)
from .local import LocalTarget

__all__ = ["CommandResult", "CommandTimeout", "ContainerNotRunning", "LocalTarget", "Process",
           "Target", "TargetError", "TargetUnreachable"]
