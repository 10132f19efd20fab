"""Where commands run: this machine, an SSH host, or a container on either.

`open_ops(target)` gives the RemoteOps the rest of the dashboard asks its questions through:
the persistent agent where the target has python3, one-shot sh commands where it has not.
"""

from .agent import AgentOps, AgentUnavailable, open_ops
from .base import (CommandResult, CommandTimeout, ContainerNotRunning, Process, Target,
                   TargetError, TargetUnreachable)
from .local import LocalTarget
from .shell_ops import ShellOps

__all__ = ["AgentOps", "AgentUnavailable", "CommandResult", "CommandTimeout",
           "ContainerNotRunning", "LocalTarget", "Process", "ShellOps", "Target", "TargetError",
           "TargetUnreachable", "open_ops"]
