"""The admin commands: ``cogworker stats | queues | processes | busy | job | retries |
scheduled | dead | locks | periodic | metrics``.

Each reads or acts through ``cogworker.api``; ``--json`` prints machine-readable output. A
command that changes something names the Redis it acted on (without credentials). An
unknown queue, process, jid or lock is a one-line error and a non-zero exit.
"""

from __future__ import annotations

import click

from cogworker.admin.job import job_command
from cogworker.admin.locks import locks_group
from cogworker.admin.overview import metrics_command, stats_command
from cogworker.admin.periodic import periodic_command
from cogworker.admin.processes import busy_command, processes_group
from cogworker.admin.queues import queues_group
from cogworker.admin.sets import dead_group, retries_group, scheduled_group

COMMANDS: list[click.Command] = [
    stats_command,
    queues_group,
    processes_group,
    busy_command,
    job_command,
    retries_group,
    scheduled_group,
    dead_group,
    locks_group,
    periodic_command,
    metrics_command,
]
