"""``cogworker job JID``: where a job is and why it isn't running, for humans or as JSON."""

from __future__ import annotations

import click

from cogworker import api, wire
from cogworker.admin.common import (
    NotFound,
    cell,
    echo_json,
    json_option,
    orphan_threshold_option,
    printable,
    redis_option,
    short,
    target,
    when,
)
from cogworker.api import Location, Place
from cogworker.api.waiting import span


def describe(location: Location, now: float) -> str:
    """One line saying where this copy of the job is."""
    place, queue = location.place, printable(location.queue or "?")
    process = printable(location.identity or "?")
    if place is Place.QUEUED:
        return f"queued on {queue} at position {location.position} (0 = next to run)"
    if place is Place.SCHEDULED:
        return f"scheduled for {when(location.at)}, then queue {queue}"
    if place is Place.RETRY:
        return (
            f"waiting for retry {location.retry} of {location.max_retries} at "
            f"{when(location.at)}, then queue {queue}; last error: {location.error or '-'}"
        )
    if place is Place.DEAD:
        return f"dead since {when(location.at)}: {location.error or 'no error recorded'}"
    if place is Place.RUNNING:
        started = location.at
        since = f" for {span(now - started)} (since {when(started)})" if started else ""
        return f"running on process {process}, thread {location.thread_id}{since}"
    if place is Place.TAKEN:
        return f"taken by process {process} from {queue}: about to start, or just finished"
    if place is Place.ORPHANED:
        return f"left in progress by process {process}, which is gone"
    if place is Place.LOST:
        return f"was running on process {process}, which is gone (basic fetch: no copy kept)"
    return f"parked for filing into {location.target} by the next recovery pass"


def _not_found(found: api.Explanation) -> NotFound:
    why = "; ".join(reason.text for reason in found.reasons)
    return NotFound(f"no job {printable(found.jid)!r}: {printable(why)}")


def _print(found: api.Explanation) -> None:
    job = next((loc.record for loc in found.locations if loc.record.item is not None), None)
    click.echo(f"job {printable(found.jid)}: {found.place.value}")
    if job is not None:
        args = short(wire.dumps(job.args), 80)
        click.echo(f"  class {printable(job.job_class)}, args {args}")
    elif found.locations:
        click.echo("  (unparseable): the stored entry is not a readable job")
    for location in found.locations:
        click.echo(f"  - {cell(describe(location, found.checked_at))}")
    if found.reasons:
        click.echo("why:")
        for reason in found.reasons:
            click.echo(f"  - {cell(reason.text)}")
    if found.status:
        fields = ", ".join(f"{cell(k)}={short(v, 60)}" for k, v in sorted(found.status.items()))
        click.echo(f"status: {fields}")
    if found.runs:
        click.echo("runs (newest first):")
        for run in found.runs[:10]:
            error = f"  {short(run.error, 60)}" if run.error else ""
            click.echo(cell(f"  {run.status:<8} {when(run.finished_at)}{error}"))
    scanned = ", ".join(f"{printable(key)} {count}" for key, count in found.scanned.items())
    click.echo(f"searched (entries read): {scanned}")


@click.command("job")
@click.argument("jid")
@redis_option
@json_option
@orphan_threshold_option
def job_command(jid: str, redis_url: str | None, as_json: bool, orphan_threshold: float) -> None:
    """Where a job is and why it isn't running.

    Says where job JID is now (queue and position, schedule, retry, dead, running, or
    finished according to its status and run history) and why it waits. Searches every
    queue and set once: the cost grows with their sizes (the entries read are listed)."""
    found = api.explain(target(redis_url).client, jid, orphan_threshold=orphan_threshold)
    if not found.found:
        raise _not_found(found)
    if as_json:
        echo_json(found.to_dict())
    else:
        _print(found)
