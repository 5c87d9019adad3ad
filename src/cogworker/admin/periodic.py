"""``cogworker periodic``: the published cron entries with their last and next run."""

from __future__ import annotations

import click

from cogworker.admin.common import echo_json, json_option, redis_option, table, target, when
from cogworker.periodic import admin as periodic_admin


@click.command("periodic")
@redis_option
@json_option
def periodic_command(redis_url: str | None, as_json: bool) -> None:
    """List cron entries with their last and next run.

    Shows the entries every worker published (periodic:schedule): cron, job, queue, last
    run, next run, disabled, and the run holding an until_executed entry's lock."""
    found = periodic_admin.entries(target(redis_url).client)
    if as_json:
        echo_json([entry.to_dict() for entry in found])
        return
    rows = []
    for entry in found:
        state = "disabled" if entry.disabled else ""
        if entry.running:
            state = f"{state} running {entry.running}".strip()
        if entry.problem:
            state = f"{state} {entry.problem}".strip()
        next_run = when(entry.next_run) if entry.next_run is not None else "(unreadable cron)"
        rows.append(
            [
                entry.pjid[:12],
                entry.cron or "-",
                entry.job,
                entry.queue,
                when(entry.last_slot),
                next_run,
                state,
            ]
        )
    table(rows, ["PJID", "CRON", "CLASS", "QUEUE", "LAST RUN", "NEXT RUN", ""])
