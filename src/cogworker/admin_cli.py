"""The admin commands, as ``cogworker.cli`` imports them: ``admin_cli.COMMANDS``.

They live in the ``cogworker.admin`` package, one module per command group.
"""

from cogworker.admin import COMMANDS

__all__ = ["COMMANDS"]
